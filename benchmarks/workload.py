"""The one fixed workload every implementation runs (defined in ``benchmarks/README.md``).

K inputs ``in0 … in{K-1}``, N records interleaved round-robin in arrival order (record ``m``
comes from input ``m % K``; it is that input's ``j = m // K``-th record). Input ``i``'s clock
reads ``T0 + j + i * SKEW`` at its ``j``-th record: one tick per record, each input ``SKEW``
ticks ahead of the one before. Every ``CTI_EVERY``-th record of an input (``j % CTI_EVERY ==
CTI_EVERY - 1``) is a CTI at that input's current time; the others are point inserts. About
``LATE_FRACTION`` of the inserts (a seeded draw) start ``LATE_BY`` ticks early. The policy is
Goldilocks with delay ``DELAY``.

The same records are offered in the forms the implementations consume: ``Event`` objects in
arrival order (``merged``) or per input (``per_input``), numpy columns (``columns``), and
event-log files (``write_jsonl``, ``write_parquet``). ``reference_counts`` runs the product's
policy step over the merged order: every deterministic implementation must reproduce it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import Iterable, Iterator, NamedTuple

import numpy as np

from engine.event import CTI, POINT, Event
from engine.times import Nanoseconds

__all__ = ["Workload", "Counts", "Columns", "T0", "DELAY", "K", "SKEW", "CTI_EVERY",
           "LATE_FRACTION", "LATE_BY", "SEED"]

K = 4                        # inputs
SKEW = 50                    # input i's clock runs i * SKEW ticks ahead of input 0's
CTI_EVERY = 100              # every 100th record of an input is a CTI
LATE_FRACTION = 0.01         # share of inserts drawn to be late
LATE_BY = 500                # how early a drawn insert starts
DELAY = Nanoseconds(100)     # Goldilocks delay
SEED = 20_26_11_22
T0 = 1_795_334_400_000_000_000  # 2026-11-22T08:00:00Z in ns: realistic epoch times
_START = attrgetter("start")


class Counts(NamedTuple):
    """What an implementation must agree on: emitted inserts, emitted CTIs, late inserts."""

    inserts: int
    ctis: int
    late: int


class Columns(NamedTuple):
    is_cti: np.ndarray   # bool per record
    start: np.ndarray    # int64 ns
    end: np.ndarray      # int64 ns (start + 1 for points; unused on CTIs)
    source: np.ndarray   # int8 input index


@dataclass(frozen=True)
class Workload:
    """``n`` records of the fixed workload; everything derived from it is cached."""

    n: int
    seed: int = SEED
    k: int = K

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"in{i}" for i in range(self.k))

    def iter_columns(self, chunk: int = 65_536) -> Iterator[Columns]:
        """The records as numpy columns, ``chunk`` rows at a time (memory O(chunk))."""
        rng = np.random.default_rng(self.seed)  # drawn in order: chunking changes nothing
        for lo in range(0, self.n, chunk):
            hi = min(lo + chunk, self.n)
            m = np.arange(lo, hi, dtype=np.int64)
            source = (m % self.k).astype(np.int8)
            j = m // self.k
            t = T0 + j + source.astype(np.int64) * SKEW
            is_cti = j % CTI_EVERY == CTI_EVERY - 1
            late = (rng.random(hi - lo) < LATE_FRACTION) & ~is_cti
            start = t - LATE_BY * late.astype(np.int64)
            yield Columns(is_cti, start, start + 1, source)

    @cached_property
    def columns(self) -> Columns:
        """All records as numpy columns (about 18 bytes per record)."""
        parts = list(self.iter_columns(1 << 20))
        if not parts:
            empty = np.zeros(0, np.int64)
            return Columns(np.zeros(0, bool), empty, empty, np.zeros(0, np.int8))
        return Columns(*(np.concatenate(c) for c in zip(*parts)))

    @cached_property
    def inserts(self) -> int:
        """Inserts in the workload (records that are not CTIs), from the definition."""
        ctis = 0
        for i in range(self.k):
            records = (self.n - i + self.k - 1) // self.k  # input i's records
            ctis += records // CTI_EVERY
        return self.n - ctis

    def iter_events(self, chunk: int = 65_536) -> Iterator[Event]:
        """The records as ``Event``s in arrival order, built ``chunk`` at a time (the memory
        benchmark streams 10 million of them this way)."""
        names = self.names
        for cols in self.iter_columns(chunk):
            for c, s, i in zip(cols.is_cti.tolist(), cols.start.tolist(), cols.source.tolist()):
                if c:
                    yield Event(CTI, s, None, None, names[i])
                else:
                    yield Event(POINT, s, s + 1, None, names[i])

    @cached_property
    def merged(self) -> list[Event]:
        """All records as ``Event``s in arrival order (round-robin over the inputs)."""
        return list(self.iter_events())

    @cached_property
    def source_index(self) -> list[int]:
        """Per record, the index of its input (what a round-robin driver needs)."""
        return self.columns.source.tolist()

    @cached_property
    def per_input(self) -> list[list[Event]]:
        """Each input's records, in its own order."""
        merged = self.merged
        return [merged[i::self.k] for i in range(self.k)]

    def reference_counts(self) -> Counts:
        """The product's Goldilocks step over the merged order: the counts to reproduce."""
        return self._counts(self.iter_events())

    @staticmethod
    def _counts(events: Iterable[Event]) -> Counts:
        from operators.policies import goldilocks

        policy = goldilocks(DELAY)
        step = policy.step
        state = policy.initial()
        inserts = ctis = late = 0
        for event in events:
            state, outputs = step(state, event)
            for out in outputs:
                if out.__class__ is not Event:
                    late += 1
                elif out.kind == CTI:
                    ctis += 1
                else:
                    inserts += 1
        return Counts(inserts, ctis, late)

    def time_order_counts(self) -> Counts:
        """The same step over the inputs read in time order (the next record from the input
        whose next record is earliest): the late inserts are then the drawn ones only — the
        workload's true late fraction, which an aligned union (TS §4.6) should come close to
        whatever order its producers run in."""
        import heapq

        return self._counts(heapq.merge(*self.per_input, key=_START))

    # -- event-log files (docs/event-log.md): one combined file, arrival order = position ---
    @cached_property
    def folder(self) -> str:
        """A temporary folder for this workload's log files (removed by ``cleanup``)."""
        return tempfile.mkdtemp(prefix="goldilocks-bench-")

    def log_file(self, fmt: str) -> str:
        """The workload as a ``jsonl`` or ``parquet`` log in ``folder``, written once."""
        path = os.path.join(self.folder, f"workload.{fmt}")
        if not os.path.exists(path):
            writer = {"jsonl": self.write_jsonl, "parquet": self.write_parquet}[fmt]
            writer(path + ".part")
            os.replace(path + ".part", path)
        return path

    def cleanup(self) -> None:
        if "folder" in self.__dict__:
            shutil.rmtree(self.__dict__.pop("folder"), ignore_errors=True)

    def write_jsonl(self, path: str | os.PathLike) -> None:
        """Canonical JSON Lines, one record per line, in arrival order."""
        cols = self.columns
        prefixes = [(b'{"source":"%b","kind":"insert","start":' % n.encode(),
                     b'{"source":"%b","kind":"cti","start":' % n.encode()) for n in self.names]
        chunk = 65_536
        with open(path, "wb") as f:
            for lo in range(0, self.n, chunk):
                hi = min(lo + chunk, self.n)
                f.write(b"".join(
                    b"%b%d}\n" % (prefixes[i][c], s)
                    for c, s, i in zip(cols.is_cti[lo:hi].tolist(), cols.start[lo:hi].tolist(),
                                       cols.source[lo:hi].tolist())))

    def write_parquet(self, path: str | os.PathLike) -> None:
        """The documented Parquet schema; points have a null ``end``."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = self.columns
        names = np.array(self.names, dtype=object)
        table = pa.table({
            "source": pa.array(names[cols.source.astype(np.intp)], pa.string()),
            "kind": pa.array(np.where(cols.is_cti, "cti", "insert").astype(object), pa.string()),
            "start": pa.array(cols.start, pa.int64()),
            "end": pa.nulls(self.n, pa.int64()),
            "payload": pa.nulls(self.n, pa.string()),
        })
        pq.write_table(table, path)
