"""The harness: every implementation, the same workload, interleaved rounds, checked counts.

``run(n=…, rounds=…)`` returns one ``Row`` per name in ``NAMES``; ``python -m benchmarks``
prints them as a table and writes them as JSON. See ``benchmarks/README.md`` for the method.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, NamedTuple

from benchmarks import ours, peers
from benchmarks.workload import Counts, Workload

__all__ = ["Impl", "IMPLS", "NAMES", "ALL_NAMES", "EXTRA", "UNORDERED", "Row", "CountMismatch", "run",
           "rows_to_json",
           "measure_rss", "machine", "TARGETS", "check_targets"]


class CountMismatch(AssertionError):
    """An implementation disagreed with the reference counts (or broke its accounting)."""


class Impl(NamedTuple):
    name: str
    run: Callable[[Workload], tuple[Counts, int]]
    group: str            # "peer" or "ours"
    deterministic: bool   # arrival order fixed: counts must equal the reference exactly
    needs: tuple[str, ...]  # workload inputs to build before timing


IMPLS: tuple[Impl, ...] = (
    Impl("plain_loop", peers.plain_loop, "peer", True, ("merged",)),
    Impl("step_loop", peers.step_loop, "ref", True, ("merged",)),
    Impl("rxpy", peers.rxpy, "peer", True, ("merged", "source_index")),
    Impl("asyncio_queues", peers.asyncio_queues, "peer", True, ("per_input",)),
    Impl("thread_queues", peers.thread_queues, "peer", True, ("per_input",)),
    Impl("numpy", peers.numpy_vectorised, "peer", True, ("columns",)),
    Impl("union_inline", ours.union_inline, "ours", True, ("merged", "source_index")),
    Impl("union_feed", ours.union_feed, "ours", True, ("merged", "source_index")),
    Impl("union_batches", ours.union_batches, "ours", True, ("merged",)),
    Impl("union_threads", ours.union_threads, "ours", False, ("per_input",)),
    Impl("union_threads_batches", ours.union_threads_batches, "ours", False, ("per_input",)),
    Impl("union_threads_aligned", ours.union_threads_aligned, "ours", False, ("per_input",)),
    Impl("union_threads_batches_aligned", ours.union_threads_batches_aligned, "ours", False,
         ("per_input",)),
    Impl("union_asyncio", ours.union_asyncio, "ours", False, ("per_input",)),
    Impl("cti_sync", ours.cti_sync, "ours", True, ("merged",)),
    Impl("columnar", ours.columnar, "ours", True, ("columns",)),
    Impl("replay_jsonl", ours.replay_jsonl, "ours", True, ("log:jsonl",)),
    Impl("replay_parquet", ours.replay_parquet, "ours", True, ("log:parquet",)),
)
MEMORY = "slow_subscriber_memory"
#: Rows printed but not written to JSON, whose names are fixed (``NAMES``).
EXTRA: tuple[str, ...] = ("step_loop", "union_feed", "union_batches", "union_threads_batches",
                          "union_threads_aligned", "union_threads_batches_aligned")
ALL_NAMES: tuple[str, ...] = tuple(i.name for i in IMPLS) + (MEMORY,)
#: Rows whose arrival order is up to the scheduler (their late count varies from run to run)
UNORDERED: tuple[str, ...] = tuple(i.name for i in IMPLS if not i.deterministic)
NAMES: tuple[str, ...] = tuple(name for name in ALL_NAMES if name not in EXTRA)
_BY_NAME = {i.name: i for i in IMPLS}

#: (name, versus, minimum ratio of name to versus, within each round) and the memory bound.
TARGETS = (
    ("union_inline", "rxpy", 3.0),       # the per-event paths: try_send, send_blocking, send
    ("union_threads", "thread_queues", 1.0),
    ("union_asyncio", "asyncio_queues", 1.0),
    ("columnar", "numpy", 0.5),
    ("union_feed", "rxpy", 10.0),        # the batch paths: the higher targets they were built for
    ("union_feed", "plain_loop", 0.2),
    ("union_batches", "rxpy", 10.0),
    ("union_batches", "plain_loop", 0.2),
    ("union_threads_batches", "thread_queues", 2.0),
)
MEMORY_TARGET_MIB = 16.0
#: Within a round, an implementation whose run takes less than this (s) is run again, up to
#: MAX_REPEATS times, and the median of its runs is its time for the round.
SHORT_RUN = 0.25
MAX_REPEATS = 25
MIB = 1 << 20


@dataclass
class Row:
    name: str
    group: str
    rates: list[float] = field(default_factory=list)      # events/s per round
    ratio_plain: list[float] = field(default_factory=list)
    ratio_rxpy: list[float] = field(default_factory=list)
    counts: Counts | None = None
    peak_rss_mib: float | None = None
    rss_growth_mib: float | None = None
    note: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None

    def json(self) -> dict[str, Any]:
        med = lambda xs: round(statistics.median(xs), 4) if xs else None  # noqa: E731
        return {
            "name": self.name,
            "events_per_s": round(self.median) if self.rates else None,
            "ratio_plain": med(self.ratio_plain),
            "ratio_rxpy": med(self.ratio_rxpy),
            "peak_rss_mib": None if self.peak_rss_mib is None else round(self.peak_rss_mib, 1),
            "events_per_s_min": round(min(self.rates)) if self.rates else None,
            "events_per_s_max": round(max(self.rates)) if self.rates else None,
            "rss_growth_mib": (None if self.rss_growth_mib is None
                               else round(self.rss_growth_mib, 1)),
        }


def rows_to_json(rows: list[Row]) -> list[dict[str, Any]]:
    """One object per name of ``NAMES`` (the extra rows are left out: the names are fixed)."""
    return [row.json() for row in rows if row.name not in EXTRA]


# -- checking -------------------------------------------------------------------------------

def check(impl: Impl, counts: Counts, received: int, expected: Counts, inserts: int) -> None:
    """Deterministic implementations must equal the reference; concurrent ones (whose arrival
    order is up to the scheduler) must account for every insert: received = emitted + late."""
    if received != inserts:
        raise CountMismatch(f"{impl.name}: received {received} inserts, the workload has "
                            f"{inserts}")
    if impl.deterministic:
        if counts != expected:
            raise CountMismatch(f"{impl.name}: counts {counts} differ from the reference "
                                f"{expected} (emitted inserts, emitted CTIs, late)")
    elif counts.inserts + counts.late != received or counts.ctis <= 0:
        raise CountMismatch(f"{impl.name}: {received} inserts received but {counts.inserts} "
                            f"emitted + {counts.late} late, {counts.ctis} CTIs emitted")


def prepare(w: Workload, impl: Impl) -> None:
    for need in impl.needs:
        if need.startswith("log:"):
            w.log_file(need[4:])
        else:
            getattr(w, need)


def _timed(impl: Impl, w: Workload) -> tuple[float, Counts, int]:
    gc.collect()
    began = time.perf_counter()
    counts, received = impl.run(w)
    return time.perf_counter() - began, counts, received


# -- the rounds -----------------------------------------------------------------------------

def run(n: int = 1_000_000, rounds: int = 5, *, warmup: int = 1,
        names: tuple[str, ...] = ALL_NAMES,
        memory_events: int = 10_000_000, rss: bool = True, seed: int | None = None,
        short_run: float = SHORT_RUN,
        log: Callable[[str], None] = lambda s: None) -> list[Row]:
    """Run ``warmup`` discarded rounds and ``rounds`` timed rounds; each round runs every
    implementation once, in an order rotated every round, and checks its counts.

    ``rss``: also measure each implementation's peak RSS in a fresh subprocess, and run the
    slow-subscriber memory benchmark in one (else in this process, without RSS figures).
    ``short_run``: runs shorter than this (s) are repeated within their round (0: never).
    """
    kwargs = {} if seed is None else {"seed": seed}
    w = Workload(n, **kwargs)
    impls = [_BY_NAME[name] for name in names if name in _BY_NAME]
    rows = {impl.name: Row(impl.name, impl.group) for impl in impls}
    try:
        log(f"building the workload: {n:,} records")
        expected = w.reference_counts()
        inserts = w.inserts
        for impl in impls:
            prepare(w, impl)
        gc.collect()
        gc.freeze()  # the workload lives for the whole run: keep it out of collections
        for r in range(warmup + rounds):
            timed = r >= warmup
            order = impls[r % len(impls):] + impls[:r % len(impls)] if impls else []
            seconds: dict[str, float] = {}
            for impl in order:
                times = []
                while True:  # a run shorter than SHORT_RUN is repeated: one time is noise
                    dt, counts, received = _timed(impl, w)
                    check(impl, counts, received, expected, inserts)
                    times.append(dt)
                    if sum(times) >= short_run or len(times) >= MAX_REPEATS:
                        break
                rows[impl.name].counts = counts
                seconds[impl.name] = statistics.median(times)
            label = f"round {r - warmup + 1}/{rounds}" if timed else f"warm-up {r + 1}/{warmup}"
            log(label + ": " + ", ".join(f"{k} {n / v:,.0f}/s" for k, v in seconds.items()))
            if not timed:
                continue
            for name, dt in seconds.items():
                row = rows[name]
                row.rates.append(n / dt)
                if "plain_loop" in seconds:
                    row.ratio_plain.append(seconds["plain_loop"] / dt)
                if "rxpy" in seconds:
                    row.ratio_rxpy.append(seconds["rxpy"] / dt)
        gc.unfreeze()
    finally:
        w.cleanup()
    result = [rows[impl.name] for impl in impls]
    if rss:
        for row in result:
            log(f"peak RSS of {row.name} in a fresh process")
            row.peak_rss_mib, row.rss_growth_mib = measure_rss(row.name, n, seed)
    if MEMORY in names:
        log(f"slow subscriber: {memory_events:,} events")
        result.append(memory_row(memory_events, seed, subprocess_=rss))
    return result


def pair_ratio(rows: list[Row], name: str, versus: str) -> float | None:
    """Median over rounds of rate(name) / rate(versus), each ratio taken within one round."""
    by = {row.name: row for row in rows}
    if name not in by or versus not in by or not by[name].rates:
        return None
    ratios = [a / b for a, b in zip(by[name].rates, by[versus].rates)]
    return statistics.median(ratios)


def check_targets(rows: list[Row], memory_events: int) -> list[tuple[str, bool | None, str]]:
    """(target, met?, measured) for each target; ``None`` when it was not measured."""
    out = []
    for name, versus, minimum in TARGETS:
        ratio = pair_ratio(rows, name, versus)
        target = f"{name} >= {minimum:g}x {versus}"
        if ratio is None:
            out.append((target, None, "not measured"))
        else:
            out.append((target, ratio >= minimum, f"{ratio:.3g}x"
                        + ("" if ratio >= minimum else f" ({minimum / ratio:.1f}x short)")))
    mem = next((row for row in rows if row.name == MEMORY), None)
    target = f"{MEMORY} growth < {MEMORY_TARGET_MIB:g} MiB for 10M events"
    if mem is None or mem.rss_growth_mib is None:
        out.append((target, None, "not measured"))
    else:
        met = mem.rss_growth_mib < MEMORY_TARGET_MIB
        note = f"{mem.rss_growth_mib:.1f} MiB over {memory_events:,} events"
        out.append((target, met if memory_events >= 10_000_000 else None, note))
    return out


# -- memory: fresh processes ----------------------------------------------------------------

def memory_row(events: int, seed: int | None, *, subprocess_: bool) -> Row:
    row = Row(MEMORY, "ours")
    if subprocess_:
        result = _child(MEMORY, events, seed)
        row.rates.append(result["events_per_s"])
        row.peak_rss_mib = result["peak_rss_mib"]
        row.rss_growth_mib = result["rss_growth_mib"]
    else:
        result = run_memory(events, seed)
        row.rates.append(result["events_per_s"])
        row.note = "measured in-process (RSS not reported)"
    return row


def run_memory(events: int, seed: int | None) -> dict[str, Any]:
    kwargs = {} if seed is None else {"seed": seed}
    w = Workload(events, **kwargs)
    counts, sent, seconds, rss = ours.slow_subscriber_memory(w)
    if counts.inserts + counts.late != sent:
        raise CountMismatch(f"{MEMORY}: {sent} inserts sent but {counts.inserts} emitted + "
                            f"{counts.late} late")
    return {"events_per_s": events / seconds, "rss_growth_mib": rss.growth / MIB,
            "peak_rss_mib": rss.peak / MIB, "counts": list(counts)}


def measure_rss(name: str, n: int, seed: int | None) -> tuple[float, float]:
    """Peak RSS (MiB) of one run of ``name`` in a fresh interpreter, and its growth during
    the run over the RSS just before it (the input already built, in the form it consumes)."""
    result = _child(name, n, seed)
    return result["peak_rss_mib"], result["rss_growth_mib"]


def _child(name: str, n: int, seed: int | None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks", "--child", name, "-n", str(n)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"measuring {name} in a fresh process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_main(name: str, n: int, seed: int | None) -> dict[str, Any]:
    """In a fresh process: build the input ``name`` consumes, then run it once, sampling RSS."""
    if name == MEMORY:
        return run_memory(n, seed)
    kwargs = {} if seed is None else {"seed": seed}
    impl = _BY_NAME[name]
    w = Workload(n, **kwargs)
    try:
        inserts = w.inserts
        prepare(w, impl)
        if "columns" not in impl.needs:
            w.__dict__.pop("columns", None)  # built only to derive the others
        gc.collect()
        with ours.RSSSampler(interval=0.001) as rss:
            counts, received = impl.run(w)
        if received != inserts:
            raise CountMismatch(f"{name}: received {received} inserts of {inserts}")
    finally:
        w.cleanup()
    return {"peak_rss_mib": rss.peak / MIB, "rss_growth_mib": rss.growth / MIB,
            "counts": list(counts)}


# -- the machine ----------------------------------------------------------------------------

def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {}
    for dist in ("goldilocks", "numpy", "pyarrow", "reactivex", "orjson", "psutil"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "-"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": f"{platform.system()} {platform.release()}",
        "libraries": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg")
        else "-",
    }
