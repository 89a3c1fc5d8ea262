"""Writing event logs: ``EventLogWriter`` (canonical JSON Lines), ``write_log`` (records as
given, in any of the formats), and ``RollingFileSink``, a Reactive Streams subscriber that
writes what it receives as numbered parts, each made visible by an atomic rename, for another
process (Spark) to consume. The canonical line encoders are in ``eventlog.format``.
"""

from __future__ import annotations

import csv
import os
import re
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Mapping

import orjson

from engine.event import Event, LateRecord
from engine.subscription import refuse_subscription
from engine.times import to_ns

from eventlog.format import encode_event, encode_late, log_format

__all__ = ["EventLogWriter", "write_log", "RollingFileSink", "SinkStats"]

_dumps = orjson.dumps


class EventLogWriter:
    """Write events, CTIs, joins, leaves and late records as a canonical JSON Lines log.

    ``target`` is a path or a binary file (not closed by ``close`` if passed in). With
    ``seq=True`` each line starts with ``"seq":N`` (0, 1, …) so that several writers' files
    can be merged in arrival order. Memory: O(1).
    """

    def __init__(self, target: str | os.PathLike | BinaryIO, *, seq: bool = False,
                 first_seq: int = 0) -> None:
        if target is None:
            raise TypeError("EventLogWriter: target is None; expected a path or a binary file")
        if isinstance(target, (str, os.PathLike)):
            self._file: BinaryIO = open(target, "wb")
            self._owned = True
        else:
            self._file = target
            self._owned = False
        self._seq = first_seq if seq else None
        self.count = 0

    def _put(self, line: bytes) -> None:
        if self._seq is not None:
            line = b'{"seq":%d,%b' % (self._seq, line[1:])
            self._seq += 1
        self._file.write(line)
        self.count += 1

    def write(self, item: Event | LateRecord) -> None:
        """An ``Event`` (insert or CTI) or a ``LateRecord`` (written as its late insert)."""
        if item is None:
            raise TypeError("EventLogWriter.write(None); expected an Event or a LateRecord")
        self._put(encode_late(item) if isinstance(item, LateRecord) else encode_event(item))

    def join(self, source: str) -> None:
        self._put(b'{"source":%b,"kind":"join"}\n' % _dumps(source))

    def leave(self, source: str) -> None:
        self._put(b'{"source":%b,"kind":"leave"}\n' % _dumps(source))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if self._owned:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> EventLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_FIELD_ORDER = ("seq", "arrival", "source", "kind", "start", "end", "id", "payload")


def write_log(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> int:
    """Write records (dicts of the documented fields) as given, in the format of ``path``.

    Not canonicalised: JSON Lines keeps each record's keys and values (ISO strings stay
    strings); CSV writes the header of the fields present; Parquet converts times to int64 ns
    (the documented schema). Returns the number of records. Used for samples and tests.
    """
    fmt = log_format(path)
    rows = list(records)
    if fmt == "jsonl":
        with open(path, "wb") as f:
            for r in rows:
                f.write(_dumps(dict(r)) + b"\n")
    elif fmt == "csv":
        names = [n for n in _FIELD_ORDER if any(n in r for r in rows)] or ["source", "kind", "start"]
        with open(path, "w", newline="", encoding="utf-8") as text:
            w = csv.writer(text)
            w.writerow(names)
            for r in rows:
                w.writerow(["" if r.get(n) is None else
                            (_dumps(r[n]).decode() if n == "payload" else r[n]) for n in names])
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        def times(name: str) -> list:
            return [None if r.get(name) is None else to_ns(r[name], what=name) for r in rows]

        columns = {
            "seq": pa.array([r.get("seq") for r in rows], pa.int64()),
            "source": pa.array([r.get("source") for r in rows], pa.string()),
            "kind": pa.array([r.get("kind") for r in rows], pa.string()),
            "start": pa.array(times("start"), pa.int64()),
            "end": pa.array(times("end"), pa.int64()),
            "payload": pa.array([None if r.get("payload") is None else _dumps(r["payload"]).decode()
                                 for r in rows], pa.string()),
            "arrival": pa.array(times("arrival"), pa.int64()),
        }
        ids = [r.get("id") for r in rows]  # an edge's id (TS §7.1): text if any is text
        text_ids = any(isinstance(i, str) for i in ids)
        columns["id"] = pa.array([None if i is None else str(i) if text_ids else i for i in ids],
                                 pa.string() if text_ids else pa.int64())
        for optional in ("seq", "arrival", "id"):
            if not any(optional in r for r in rows):
                del columns[optional]
        pq.write_table(pa.table(columns), path)
    return len(rows)


# -- the rolling file sink -------------------------------------------------------------

_PART = re.compile(r"-(\d+)\.jsonl$")


@dataclass(frozen=True, slots=True)
class SinkStats:
    """A ``RollingFileSink``'s counts: items written (``count``), parts published, items in
    the part still open, and the demand it has outstanding (at most ``batch``, its bound)."""

    count: int
    parts: int
    in_open_part: int
    outstanding: int
    batch: int
    done: bool


class RollingFileSink:
    """A Reactive Streams subscriber writing event-log parts with atomic publication.

    Items (``Event`` or ``LateRecord``) are written, canonical, to a hidden temporary file
    ``.<prefix>-<n>.jsonl.tmp`` in ``directory``; a part is closed after ``max_events`` items
    or, if ``max_seconds`` is set, at the first item after it has been open that long (by the
    injected ``clock``, seconds), and on completion or error — then published with
    ``os.replace`` as ``<prefix>-<n:06d>.jsonl``. A reader of the directory therefore never
    sees a partial part. Numbering continues after the parts already in ``directory``.

    Every line carries ``"seq"``, from ``first_seq`` and continuing across this sink's parts,
    so they read together merge back into the order received (TS §5.2). The part numbers
    continue after an earlier run's parts by themselves; ``seq`` does not: a sink writing
    into a directory that holds an earlier run's parts must be given that run's next ``seq``
    as ``first_seq``, else the two runs' parts interleave when read together.

    Demand: ``request(batch)`` at subscription, topped up to ``batch`` when half is used.
    Memory: O(1) (one open file). Errors writing a part cancel the subscription and are kept in
    ``error`` (never thrown at the publisher, RS §2.13). ``published`` lists the parts.
    """

    def __init__(self, directory: str | os.PathLike, *, max_events: int = 100_000,
                 max_seconds: float | None = None, prefix: str = "events", batch: int = 1024,
                 clock: Callable[[], float] = time.monotonic, first_seq: int = 0) -> None:
        if directory is None or max_events is None or prefix is None or clock is None:
            raise TypeError("RollingFileSink: directory, max_events, prefix and clock must not "
                            "be None")
        if max_events <= 0 or batch <= 0:
            raise ValueError(f"RollingFileSink: max_events={max_events} and batch={batch}; "
                             "expected both > 0")
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.max_events = max_events
        self.max_seconds = max_seconds
        self.prefix = prefix
        self._batch = batch
        self._clock = clock
        self._subscription: Any = None
        self._outstanding = 0
        self._file: BinaryIO | None = None
        self._tmp = ""
        self._in_part = 0
        self._opened_at = 0.0
        self._next = 1 + max((int(m.group(1)) for name in os.listdir(self.directory)
                              if name.startswith(prefix + "-") and (m := _PART.search(name))),
                             default=-1)
        self.published: list[str] = []
        self._seq = first_seq
        self.count = 0
        self.error: BaseException | None = None
        self.done = False

    # -- Reactive Streams ---------------------------------------------------------------
    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe(None)")
        if self._subscription is not None:
            refuse_subscription(subscription, repr(self))
            return
        if self.done:  # finished: nothing more is wanted (RS §2.6)
            subscription.cancel()
            return
        self._subscription = subscription
        self._outstanding = self._batch
        subscription.request(self._batch)

    def on_next(self, item: Any) -> None:
        if item is None:
            raise TypeError("RS §2.13: on_next(None)")
        if self.done:
            return
        try:
            if self._file is None:
                self._open()
            elif (self._in_part >= self.max_events or self.max_seconds is not None
                  and self._clock() - self._opened_at >= self.max_seconds):
                self._publish()
                self._open()
            line = encode_late(item) if isinstance(item, LateRecord) else encode_event(item)
            assert self._file is not None
            self._file.write(b'{"seq":%d,%b' % (self._seq, line[1:]))
            self._seq += 1
            self._in_part += 1
            self.count += 1
        except OSError as err:
            self.error = err
            self.done = True
            self._discard()
            self._subscription.cancel()
            return
        self._outstanding -= 1
        if self._outstanding <= self._batch // 2:
            more = self._batch - self._outstanding
            self._outstanding += more
            self._subscription.request(more)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error(None)")
        self.error = error
        self._finish()

    def on_complete(self) -> None:
        self._finish()

    # -- parts --------------------------------------------------------------------------
    def part_name(self, n: int) -> str:
        return os.path.join(self.directory, f"{self.prefix}-{n:06d}.jsonl")

    def _open(self) -> None:
        self._tmp = os.path.join(self.directory, f".{self.prefix}-{self._next:06d}.jsonl.tmp")
        self._file = open(self._tmp, "wb")
        self._in_part = 0
        self._opened_at = self._clock()

    def _publish(self) -> None:
        assert self._file is not None
        self._file.close()
        self._file = None
        final = self.part_name(self._next)
        os.replace(self._tmp, final)  # atomic: readers see no part or the whole part
        self.published.append(final)
        self._next += 1

    def _discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            try:
                os.unlink(self._tmp)
            except OSError:
                pass

    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        if self._file is not None and self._in_part:
            try:
                self._publish()
            except OSError as err:
                self.error = self.error or err
                self._discard()
        else:
            self._discard()

    def stats(self) -> SinkStats:
        return SinkStats(self.count, len(self.published), self._in_part, self._outstanding,
                         self._batch, self.done)


