"""Replay recorded event logs through a time policy: ``replay(paths, delay=…) -> ReplayStats``.

The logs are merged in recorded arrival order (TS §5.2) and the policy's scan step runs over
that order — no union is needed, the merge *is* the arrival order. Two interchangeable paths
write byte-identical output (TS §5.1; ``tests/replay`` proves it with hypothesis):

- the **element path**: ``policy.step`` per record; used when the output is a stream (a file
  object such as stdout), when pacing (``speed``), or when the policy has no columnar form;
- the **columnar path**: ``policy.run_columns`` over numpy columns, one merged chunk at a
  time, the policy state carried from chunk to chunk; used automatically when the policy
  offers it and the output is a path or discarded (``None``). Each chunk is parsed, decided,
  written and dropped before the next: memory O(chunk), whatever the length of the log.

Output and late records are canonical JSON Lines (``docs/event-log.md``).

>>> import tempfile, os, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "a.jsonl").write_text('{"source":"A","kind":"insert","start":5}\\n'
...                                '{"source":"A","kind":"cti","start":9}\\n')
>>> stats = replay([d / "a.jsonl"], delay=2, out=d / "out.jsonl")
>>> (d / "out.jsonl").read_text()
'{"source":"A","kind":"insert","start":5}\\n{"kind":"cti","start":7}\\n'
>>> stats.path, stats.emitted, stats.final_cti
('columnar', 1, 7)
"""

from __future__ import annotations

import gc
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterable, Protocol, Sequence

import numpy as np
import orjson

from engine.errors import InputError, UsageError
from engine.event import ADJUSTED, CTI as CTI_KIND, INTERVAL, POINT, Event, LateRecord
from eventlog import (
    BAD_RECORD_MODES,
    CTI,
    INSERT,
    JOIN,
    LEAVE,
    TIME_FORMATS,
    BadRecords,
    SourceTable,
    cti_line,
    cti_line_iso,
    encode_late,
    insert_line,
    insert_line_iso,
    insert_prefix,
    iso_time,
    late_line,
    merge_columns,
)
from eventlog.read import time_scale
from eventlog.scan import PAD, Payloads, gather
from eventlog.write_columns import decimals, insert_lines, iso_times, late_text
from goldilocks.outputs import AtomicOutput, check_outputs, is_path
from engine.policy import CTI_EMIT, CTI_SUPPRESS, DROP_LATE, EMIT, EMIT_ADJUSTED, Policy
from engine.times import to_duration_ns
from operators.policies import resolve_policy

__all__ = [
    "replay",
    "ReplayStats",
    "InputStats",
    "FileStats",
    "PlotData",
    "Clock",
    "SystemClock",
    "VirtualClock",
    "resolve",
    "COLUMNAR",
    "ELEMENT",
]

COLUMNAR = "columnar"
ELEMENT = "element"
_NO_ACTION = 9  # join/leave rows in the columnar decision column


class Clock(Protocol):
    """What pacing needs: a monotonic time in seconds and a way to wait."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock (``time.monotonic``, ``time.sleep``)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class VirtualClock:
    """Virtual time for tests: ``sleep`` advances ``now`` at once and records the wait."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass(frozen=True)
class InputStats:
    """One input (source): inserts and CTIs received (``received``), its ``join``/``leave``
    records (``control``), inserts emitted (adjusted ones included), late (dropped +
    adjusted), adjusted, and the last CTI it sent (``final_cti``; ``None``: none). On the
    output side: the CTIs emitted on its records (``ctis_out``: its CTIs, or its leaving,
    advanced the output's time) and the last of them (``last_cti_out``). Every record of the
    replay is counted in one input's ``records``; the output's CTIs are the sum of
    ``ctis_out`` and its final CTI the latest ``last_cti_out``."""

    name: str | None
    received: int
    inserts: int
    ctis: int
    emitted: int
    late: int
    adjusted: int
    final_cti: int | None
    control: int = 0
    ctis_out: int = 0
    last_cti_out: int | None = None

    @property
    def dropped(self) -> int:
        return self.late - self.adjusted

    @property
    def records(self) -> int:
        """Every record of this input: inserts, CTIs, joins and leaves."""
        return self.received + self.control


@dataclass(frozen=True)
class FileStats:
    """One log file: its format, the records read from it, the bad records skipped."""

    path: str
    format: str
    records: int
    skipped: int


@dataclass(frozen=True)
class PlotData:
    """What ``goldilocks.plot`` draws: per record in arrival order its input code and start, and
    whether it was late; the emitted CTIs with the row after which each was emitted."""

    names: tuple[str | None, ...]
    source: np.ndarray
    start: np.ndarray
    is_cti: np.ndarray
    late: np.ndarray
    cti_rows: np.ndarray
    cti_values: np.ndarray


@dataclass(frozen=True)
class ReplayStats:
    """The result of a replay: per-input and per-file counts, totals, and which path ran."""

    inputs: tuple[InputStats, ...]
    files: tuple[FileStats, ...]
    path: str
    policy: str
    delay: int
    on_late: str
    records: int
    emitted: int
    ctis_emitted: int
    late: int
    adjusted: int
    skipped: int
    quarantined: int
    final_cti: int | None
    seconds: float = field(compare=False)
    plot: PlotData | None = field(default=None, compare=False, repr=False)

    @property
    def events_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")


# -- helpers ---------------------------------------------------------------------------


class _Output:
    """A binary sink: a path (written under a temporary name, put in place by ``close(True)``,
    removed by ``close(False)``: ``goldilocks.outputs``), a file object, or ``None`` (discard)."""

    def __init__(self, target: Any, what: str) -> None:
        self.atomic: AtomicOutput | None = None
        if target is None:
            self.file: BinaryIO | None = None
        elif is_path(target):
            self.atomic = AtomicOutput(target, what)
            self.file = self.atomic.file
        elif hasattr(target, "write"):
            self.file = getattr(target, "buffer", target)  # a text stream's binary buffer
        else:
            raise UsageError(what, f"{target!r}; expected a path, a binary file or None")

    def write(self, data: bytes) -> None:
        if self.file is not None and data:
            self.file.write(data)

    def close(self, ok: bool) -> None:
        if self.atomic is not None:
            if ok:
                self.atomic.commit()
            else:
                self.atomic.discard()
        elif self.file is not None:
            self.file.flush()


def _open_sinks(targets: dict[str, Any]) -> list[_Output]:
    """A ``_Output`` per target, all or none (a failure discards those already created)."""
    sinks: list[_Output] = []
    try:
        for what, target in targets.items():
            sinks.append(_Output(target, what))
    except BaseException:
        for sink in sinks:
            sink.close(False)
        raise
    return sinks


def resolve(policy: str | Policy, delay: object = None, on_late: str = "drop") -> Policy:
    """The policy a replay runs: a registered name built with ``delay`` (``None``: 5 minutes
    for goldilocks, 0 for the others) and ``on_late``, or a policy object (``delay``, if
    given, must agree with it). Raises ``InputError`` naming what is wrong."""
    if isinstance(policy, str):
        if delay is None:
            delay = "5m" if policy == "goldilocks" else 0
        try:
            return resolve_policy(policy, delay=delay, on_late=on_late)
        except InputError:
            raise
        except ValueError as err:  # an unknown name
            raise InputError(str(err)) from err
    if delay is not None and to_duration_ns(delay) != policy.delay:
        raise InputError(f"delay={delay!r} disagrees with the given policy's delay "
                         f"{policy.delay} ns; pass one or the other")
    return policy


def _speed(speed: object) -> float | None:
    if speed is None or speed == "max":
        return None
    try:
        factor = float(speed)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"speed={speed!r}; expected 'max' or a positive factor such as 1 "
                         "or 10") from None
    if not factor > 0 or factor == float("inf"):
        raise InputError(f"speed={speed!r}; expected 'max' or a positive finite factor")
    return factor


def _columnar_ok(pol: Policy) -> bool:
    run = getattr(pol, "run_columns", None)
    if run is None:
        return False
    empty = np.zeros(0, np.int64)
    return run(np.zeros(0, np.bool_), empty, empty) is not None


class _Progress:
    def __init__(self, paths: Sequence[str], enabled: bool) -> None:
        self.bar = None
        if not enabled or not sys.stderr.isatty():
            return
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        total = sum(os.path.getsize(p) for p in paths if os.path.exists(p))
        self.bar = Progress("replay", BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                            transient=True)
        self.task = self.bar.add_task("replay", total=total)
        self.bar.start()

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# -- the API ---------------------------------------------------------------------------


def replay(paths: Iterable[str | os.PathLike], *, delay: object = None,
           policy: str | Policy = "goldilocks", on_late: str = "drop",
           out: str | os.PathLike | BinaryIO | None = None,
           late: str | os.PathLike | BinaryIO | None = None, speed: object = None,
           bad_records: str = "fail", quarantine: str | os.PathLike | BinaryIO | None = None,
           clock: Clock | None = None, progress: bool = False, plot: bool = False,
           columnar: bool | None = None, time_unit: str | None = None,
           time_format: str = "ns") -> ReplayStats:
    """Replay event logs through a policy; write the output and late records; return stats.

    ``paths``: JSON Lines, CSV or Parquet logs, merged by ``(order key, file index, line)``
    (TS §5.2). ``delay``: a duration (``"5m"``, int ns, ``timedelta``); ``None`` means 5
    minutes for goldilocks and 0 for the others. ``policy``: a registered name
    (``goldilocks``, ``min``, ``max``) or a policy object. ``out``/``late``: a path, a binary
    file, or ``None`` to discard (late records are counted either way). ``speed``: ``None`` or
    ``"max"`` for as fast as possible, or a factor pacing records by their recorded ``arrival``
    times through ``clock`` (default the system clock). ``bad_records``: ``fail`` (raise
    ``BadRecordError`` naming file and line), ``skip`` or ``quarantine`` (skip and write to
    ``quarantine``); skipped records are counted (TS §5.3). ``columnar``: ``None`` chooses
    automatically; ``True``/``False`` force a path (``True`` fails if it cannot apply).
    ``time_unit``: the unit of the logs' integer times, ``"s"``, ``"ms"``, ``"us"`` or
    ``"ns"``; ``None`` takes nanoseconds and refuses integers implausible as such
    (``docs/event-log.md``). ``time_format``: ``"ns"`` writes integer nanoseconds (the
    canonical log), ``"iso"`` RFC 3339 UTC text; either replays back to the same events.

    Outputs given as paths are safe: one that is an input, or the same file as another
    output, is refused before anything is opened (``UsageError``); each is written under a
    temporary name in its directory and renamed into place only when the replay succeeds,
    so a failed run leaves neither a partial file nor a temporary (``goldilocks.outputs``).

    The same logs and options always give the same bytes (TS §5.1). Memory: one chunk per file
    on either path, whatever the length of the log (``plot=True`` keeps, in addition, the
    per-record columns the picture draws: about 20 bytes per record).
    """
    began = time.perf_counter()
    path_list = [os.fspath(p) for p in paths]
    if not path_list:
        raise InputError("replay: no event logs given; expected at least one path")
    pol = resolve(policy, delay, on_late)
    factor = _speed(speed)
    if time_format not in TIME_FORMATS:
        raise UsageError("time_format", f"{time_format!r}; expected one of "
                         f"{', '.join(TIME_FORMATS)}")
    try:
        time_scale(time_unit)
    except InputError as err:
        raise UsageError("time_unit", str(err)) from None
    if bad_records not in BAD_RECORD_MODES:
        raise UsageError("bad_records", f"{bad_records!r}; expected one of "
                         f"{', '.join(BAD_RECORD_MODES)}")
    if (bad_records == "quarantine") != (quarantine is not None):
        raise UsageError("quarantine", "a quarantine file goes with bad_records='quarantine' "
                         f"(got bad_records={bad_records!r}, quarantine={quarantine!r})")
    streaming_out = out is not None and not is_path(out)
    can_columns = _columnar_ok(pol)
    if columnar is None:
        columnar = can_columns and factor is None and not streaming_out
    elif columnar and not can_columns:
        raise InputError(f"policy {pol.name!r} has no columnar form; use the element path")
    elif columnar and factor is not None:
        raise InputError("pacing (speed) needs the element path")

    check_outputs(path_list, {"out": out, "late": late, "quarantine": quarantine})
    for p in path_list:  # before an output is created
        if not os.path.exists(p):
            raise InputError(f"{p}: no such file")
    quarantine_out, out_sink, late_sink = _open_sinks(
        {"quarantine": quarantine, "out": out, "late": late})
    bad = BadRecords(bad_records, quarantine_out.file)
    table = SourceTable()
    iso = time_format == "iso"
    modes: list = []
    # Parsing a chunk makes ~10^5 acyclic JSON objects; reference counting frees them, the
    # cyclic collector only rescans them. Off during the replay (about 20% faster), restored.
    collecting = gc.isenabled()
    chunks = None
    bar = None
    ok = False
    try:
        bar = _Progress(path_list, progress)
        gc.disable()
        chunks = _ahead(merge_columns(path_list, table=table, bad=bad, on_bytes=bar.advance,
                                      modes=modes, time_unit=time_unit))
        if columnar:
            result = _run_columnar(pol, chunks, table, out_sink, late_sink, plot, iso)
        else:
            result = _run_elements(pol, chunks, table, out_sink, late_sink, plot, factor,
                                   clock or SystemClock(), modes, iso)
        ok = True
    finally:
        if chunks is not None:
            chunks.close()  # stops the reading thread if the replay ended early
        if collecting:
            gc.enable()
        if bar is not None:
            bar.close()
        # put every output in place only if the whole replay succeeded; else remove them all
        # (TS §5.5)
        failed: OSError | None = None
        for sink in (out_sink, late_sink, quarantine_out):
            try:
                sink.close(ok and failed is None)
            except OSError as err:  # a rename that failed: the rest are removed too
                failed = failed or err
        if failed is not None:
            raise failed
    per_input, records_per_file, totals, plot_data = result
    files = tuple(
        FileStats(p, os.path.splitext(p)[1].lstrip(".").lower(), records_per_file.get(i, 0),
                  bad.skipped.get(p, 0))
        for i, p in enumerate(path_list))
    skipped = sum(bad.skipped.values())
    return ReplayStats(
        inputs=per_input, files=files, path=COLUMNAR if columnar else ELEMENT,
        policy=pol.name, delay=pol.delay, on_late=pol.on_late, records=totals["records"],
        emitted=totals["emitted"], ctis_emitted=totals["ctis"], late=totals["late"],
        adjusted=totals["adjusted"], skipped=skipped if bad.mode == "skip" else 0,
        quarantined=skipped if bad.mode == "quarantine" else 0, final_cti=totals["final"],
        seconds=time.perf_counter() - began, plot=plot_data)


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


def _ahead(chunks, depth: int = 2):
    """Iterate ``chunks`` while a helper thread reads and parses the next ones.

    Reading, scanning and merging (mostly file reads and numpy, which release the GIL) then
    overlap the policy and the writing on a second core. The chunks, their order and any error
    are exactly those of ``chunks`` (an error is raised here after the chunks before it), so
    the output does not change (TS §5.1). Memory: at most ``depth`` chunks waiting plus the
    one being read. Closing this generator stops the helper, which closes ``chunks``.
    """
    waiting: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        last: object = _DONE
        try:
            for chunk in chunks:
                if stop.is_set():
                    break
                waiting.put(chunk)
        except BaseException as err:  # handed to the consumer and raised there, in order
            last = _Raised(err)
        finally:
            try:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
            finally:
                waiting.put(last)  # always the helper's final item

    helper = threading.Thread(target=produce, name="goldilocks-replay-read", daemon=True)
    helper.start()
    item: object = None
    try:
        while True:
            item = waiting.get()
            if item is _DONE:
                return
            if item.__class__ is _Raised:
                raise item.error  # type: ignore[attr-defined]
            yield item
            item = None
    finally:
        stop.set()
        while item is not _DONE and item.__class__ is not _Raised:
            item = waiting.get()  # room for the helper until its final item
        helper.join()


def _inputs(names: list[str | None], received, inserts, ctis, emitted, late, adjusted,
            control, ctis_out, last_cti: dict[int, int],
            last_out: dict[int, int]) -> tuple[InputStats, ...]:
    rows = []
    for code in [-1] + list(range(len(names))):
        i = code + 1
        if i >= len(received) or received[i] + control[i] == 0:
            continue
        rows.append(InputStats(names[code] if code >= 0 else None, int(received[i]),
                               int(inserts[i]), int(ctis[i]), int(emitted[i]), int(late[i]),
                               int(adjusted[i]), last_cti.get(code), int(control[i]),
                               int(ctis_out[i]), last_out.get(code)))
    rows.sort(key=lambda r: (r.name is not None, r.name or ""))  # by name, merged CTIs first
    return tuple(rows)


# -- element path ----------------------------------------------------------------------


def _run_elements(pol: Policy, chunks, table: SourceTable, out: _Output, late_out: _Output,
                  plot: bool, factor: float | None, clock: Clock, modes: list,
                  iso: bool = False):
    step, join, leave = pol.step, pol.join, pol.leave
    encode_insert = insert_line_iso if iso else insert_line
    encode_cti = cti_line_iso if iso else cti_line
    time_format = "iso" if iso else "ns"
    state = pol.initial()
    names = table.names
    prefixes: dict[str | None, bytes] = {}
    # counters indexed by source code + 1 (index 0: CTIs without a source)
    size = 64
    received = [0] * size
    inserts = [0] * size
    ctis = [0] * size
    emitted = [0] * size
    late = [0] * size
    adjusted = [0] * size
    control = [0] * size
    ctis_out = [0] * size
    last_cti: dict[int, int] = {}
    last_out: dict[int, int] = {}
    per_file: dict[int, int] = {}
    n_ctis = n_emitted = n_late = n_adjusted = 0
    final = None
    records = 0
    plot_rows: list = [] if plot else None  # type: ignore[assignment]
    plot_ctis: list = [] if plot else None  # type: ignore[assignment]
    paced = factor is not None
    origin: tuple[float, int] | None = None
    write_out = out.write
    write_late = late_out.write
    late_on = late_out.file is not None
    for chunk in chunks:
        if paced and any(m.mode not in (None, "arrival") for m in modes):
            raise InputError("speed: pacing needs 'arrival' times in the logs; these are "
                             "ordered by " + ", ".join(sorted({m.mode for m in modes if m.mode})))
        buf: list[bytes] = []
        lbuf: list[bytes] = []
        for f in np.unique(chunk.file).tolist():
            per_file[f] = per_file.get(f, 0) + int((chunk.file == f).sum())
        while len(names) + 1 >= size:
            for lst in (received, inserts, ctis, emitted, late, adjusted, control, ctis_out):
                lst.extend([0] * size)
            size *= 2
        for k, s, st, en, he, pl, key in zip(chunk.kind.tolist(), chunk.source.tolist(),
                                              chunk.start.tolist(), chunk.end.tolist(),
                                              chunk.has_end.tolist(), chunk.payload,
                                              chunk.key.tolist()):
            name = names[s] if s >= 0 else None
            if paced:
                if origin is None:
                    origin = (clock.monotonic(), key)
                target = origin[0] + (key - origin[1]) / 1e9 / factor
                wait = target - clock.monotonic()
                if wait > 0:
                    write_out(b"".join(buf))
                    buf.clear()
                    if out.file is not None:
                        out.file.flush()
                    clock.sleep(wait)
            i = s + 1
            if k == INSERT:
                ev = Event(INTERVAL if he else POINT, st, en, pl, name)
                received[i] += 1
                inserts[i] += 1
                state, outs = step(state, ev)
            elif k == CTI:
                received[i] += 1
                ctis[i] += 1
                last_cti[s] = st
                state, outs = step(state, Event(CTI_KIND, st, None, None, name))
            elif k == JOIN:
                control[i] += 1
                state, outs = join(state, name)
            else:
                control[i] += 1
                state, outs = leave(state, name)
            if plot_rows is not None and k <= CTI:
                plot_rows.append((s, st, k == CTI, False))
            for o in outs:
                if o.__class__ is LateRecord:
                    late[i] += 1
                    n_late += 1
                    if o.action == ADJUSTED:
                        adjusted[i] += 1
                        n_adjusted += 1
                    if late_on:
                        lbuf.append(encode_late(o, time_format))
                    if plot_rows is not None:
                        plot_rows[-1] = plot_rows[-1][:3] + (True,)
                elif o.kind == CTI_KIND:
                    buf.append(encode_cti(o.start))
                    n_ctis += 1
                    ctis_out[i] += 1
                    final = last_out[s] = o.start
                    if plot_ctis is not None:
                        plot_ctis.append((len(plot_rows) - 1, o.start))
                else:
                    src = o.source
                    pre = prefixes.get(src)
                    if pre is None:
                        pre = prefixes[src] = insert_prefix(src)
                    buf.append(encode_insert(pre, o.start,
                                             o.end if o.kind == INTERVAL else None, o.payload))
                    emitted[i] += 1
                    n_emitted += 1
            records += 1
        write_out(b"".join(buf))
        write_late(b"".join(lbuf))
    plot_data = None
    if plot:
        rows = np.array(plot_rows, dtype=np.int64).reshape(-1, 4)
        cr = np.array(plot_ctis, dtype=np.int64).reshape(-1, 2)
        plot_data = PlotData(tuple(names), rows[:, 0].astype(np.int32), rows[:, 1],
                             rows[:, 2].astype(bool), rows[:, 3].astype(bool), cr[:, 0], cr[:, 1])
    totals = {"records": records, "emitted": n_emitted, "ctis": n_ctis, "late": n_late,
              "adjusted": n_adjusted, "final": final}
    stats = _inputs(names, received, inserts, ctis, emitted, late, adjusted, control, ctis_out,
                    last_cti, last_out)
    return stats, per_file, totals, plot_data


# -- columnar path ---------------------------------------------------------------------


class _Counts:
    """Per-input counters as int64 columns indexed by source code + 1, grown as inputs appear."""

    __slots__ = ("received", "inserts", "ctis", "emitted", "late", "adjusted", "control",
                 "ctis_out")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, np.zeros(0, np.int64))

    def add(self, name: str, counts: np.ndarray) -> None:
        have = getattr(self, name)
        if len(counts) > len(have):
            have = np.concatenate([have, np.zeros(len(counts) - len(have), np.int64)])
        have[:len(counts)] += counts
        setattr(self, name, have)


def _last_by_source(source: np.ndarray, values: np.ndarray, into: dict[int, int]) -> None:
    """Record in ``into`` each source code's last value (rows in order)."""
    if len(source):
        codes, first = np.unique(source[::-1], return_index=True)
        into.update(zip(codes.tolist(), values[::-1][first].tolist()))


def _run_columnar(pol: Policy, chunks, table: SourceTable, out: _Output, late_out: _Output,
                  plot: bool, iso: bool = False):
    """One pass, chunk by chunk: the policy state (``run_columns``'s third value) is carried
    from chunk to chunk, so nothing of a chunk outlives it. Memory: O(chunk) (TS §5.1: the
    decisions do not depend on where the chunks are cut), plus the plot columns if asked."""
    names = table.names
    run = pol.run_columns  # type: ignore[attr-defined]
    state = None
    counts = _Counts()
    last_cti: dict[int, int] = {}
    last_out: dict[int, int] = {}
    per_file: dict[int, int] = {}
    records = n_emitted = n_ctis = n_late = n_adjusted = 0
    final = None
    late_on = late_out.file is not None
    prefixes: dict[int, bytes] = {}
    prefixes_iso = _Prefixes(names)
    plot_parts: list[tuple] = []
    timed_before = 0
    for chunk in chunks:
        n = len(chunk)
        kind = chunk.kind
        source = chunk.source
        start = chunk.start
        is_cti = kind == CTI
        timed = kind <= CTI
        if timed.all():
            action, cti, state = run(is_cti, start, chunk.end, state)
        else:  # join/leave rows are no-ops for a policy with a columnar form
            a, c, state = run(is_cti[timed], start[timed], chunk.end[timed], state)
            action = np.full(n, _NO_ACTION, np.int8)
            cti = np.zeros(n, np.int64)
            action[timed] = a
            cti[timed] = c
        action = np.asarray(action, np.int8)
        cti = np.asarray(cti, np.int64)

        # statistics, vectorised: rows counted per (source code + 1, kind, action)
        width = len(names) + 1
        cells = np.bincount((source.astype(np.int64) + 1) * 64 + kind * 16 + action,
                            minlength=width * 64).reshape(-1, 4, 16)
        by_kind = cells.sum(axis=2)
        by_action = cells.sum(axis=1)
        counts.add("received", by_kind[:, INSERT] + by_kind[:, CTI])
        counts.add("inserts", by_kind[:, INSERT])
        counts.add("ctis", by_kind[:, CTI])
        counts.add("emitted", by_action[:, EMIT] + by_action[:, EMIT_ADJUSTED])
        counts.add("late", by_action[:, DROP_LATE] + by_action[:, EMIT_ADJUSTED])
        counts.add("adjusted", by_action[:, EMIT_ADJUSTED])
        counts.add("control", by_kind[:, JOIN] + by_kind[:, LEAVE])
        counts.add("ctis_out", by_action[:, CTI_EMIT])
        cti_rows = np.flatnonzero(is_cti)
        _last_by_source(source[cti_rows], start[cti_rows], last_cti)
        emit_cti_rows = np.flatnonzero(action == CTI_EMIT)
        _last_by_source(source[emit_cti_rows], cti[emit_cti_rows], last_out)
        records += n
        totals_by_action = by_action.sum(axis=0)
        n_emitted += int(totals_by_action[EMIT] + totals_by_action[EMIT_ADJUSTED])
        n_ctis += len(emit_cti_rows)
        n_late += int(totals_by_action[DROP_LATE] + totals_by_action[EMIT_ADJUSTED])
        n_adjusted += int(totals_by_action[EMIT_ADJUSTED])
        if len(emit_cti_rows):
            final = int(cti[emit_cti_rows[-1]])
        for f, c in enumerate(np.bincount(chunk.file).tolist()):
            if c:
                per_file[f] = per_file.get(f, 0) + c
        if plot:
            is_late = (action == DROP_LATE) | (action == EMIT_ADJUSTED)
            rows_index = np.cumsum(timed) - 1 + timed_before
            plot_parts.append((source[timed], start[timed], is_cti[timed], is_late[timed],
                               rows_index[emit_cti_rows], cti[emit_cti_rows]))
            timed_before += int(timed.sum())

        if iso:  # RFC 3339 times: every insert's line built with numpy (TS §5.6)
            _write_raw(_iso_lines(chunk, prefixes_iso), action, cti, out, late_out, True)
            continue
        if chunk.raw is not None:
            _write_raw(chunk.raw, action, cti, out, late_out)
            continue

        # output: per row the insert's canonical line, a CTI, an adjusted line or nothing
        parts: list[bytes] = []
        lparts: list[bytes] = []
        wanted = action != CTI_SUPPRESS
        wanted &= action != _NO_ACTION
        if not late_on:
            wanted &= action != DROP_LATE
        rows = np.flatnonzero(wanted)
        payload = chunk.payload
        none_prefix = insert_prefix(None)
        for i, a, s, st, en, he, c in zip(rows.tolist(), action[rows].tolist(),
                                          source[rows].tolist(), start[rows].tolist(),
                                          chunk.end[rows].tolist(), chunk.has_end[rows].tolist(),
                                          cti[rows].tolist()):
            if a == CTI_EMIT:
                parts.append(cti_line(c))
                continue
            pre = prefixes.get(s)
            if pre is None:
                pre = prefixes[s] = insert_prefix(names[s]) if s >= 0 else none_prefix
            line = insert_line(pre, st, en if he else None, payload[i])
            if a == EMIT:
                parts.append(line)
            elif a == DROP_LATE:
                lparts.append(late_line(line, c, "dropped", None))
            else:  # EMIT_ADJUSTED: the clipped line out, the original to the late file
                parts.append(insert_line(pre, c, en if he else None, payload[i]))
                if late_on:
                    lparts.append(late_line(line, c, "adjusted", c))
        out.write(b"".join(parts))
        late_out.write(b"".join(lparts))
        del chunk, parts, lparts

    plot_data = None
    if plot:
        def cat(k: int, dtype: Any) -> np.ndarray:
            return np.concatenate([p[k] for p in plot_parts]) if plot_parts else np.zeros(0, dtype)

        plot_data = PlotData(tuple(names), cat(0, np.int32), cat(1, np.int64), cat(2, bool),
                             cat(3, bool), cat(4, np.int64), cat(5, np.int64))
    totals = {"records": records, "emitted": n_emitted, "ctis": n_ctis, "late": n_late,
              "adjusted": n_adjusted, "final": final}
    c = counts
    stats = _inputs(names, c.received, c.inserts, c.ctis, c.emitted, c.late, c.adjusted,
                    c.control, c.ctis_out, last_cti, last_out)
    return stats, per_file, totals, plot_data


def _write_raw(raw, action: np.ndarray, cti: np.ndarray, out: _Output,
               late_out: _Output, iso: bool = False) -> None:
    """Write a chunk whose input lines are canonical (``eventlog.scan``): emitted inserts
    are copied from the input bytes and late lines assembled from them with numpy; only CTIs
    and adjusted lines are built one by one. The bytes are those ``insert_line`` and
    ``late_line`` would write (TS §5.1); with ``iso``, the lines are ``_iso_lines`` and the
    bytes those of ``insert_line_iso`` and ``late_line_iso``."""
    data, body, stop = raw.data, raw.body, raw.stop
    emit = action == EMIT
    rows = np.flatnonzero(emit)
    # the kept bytes: runs [body, stop) of the emitted rows, the rest skipped
    kept = memoryview(gather(data, body[rows], stop[rows]))
    if late_out.file is not None:
        late = np.flatnonzero((action == DROP_LATE) | (action == EMIT_ADJUSTED))
        if len(late):
            late_out.write(memoryview(late_text(raw, late, cti[late],
                                                action[late] == EMIT_ADJUSTED,
                                                iso_times if iso else decimals)))
    rows = np.flatnonzero((action == CTI_EMIT) | (action == EMIT_ADJUSTED))
    if not len(rows):
        out.write(kept)
        return
    lens = np.where(emit, stop - body, 0)
    at = (np.cumsum(lens) - lens)[rows]  # where each special row goes in ``kept``
    parts: list = []
    pos = 0
    for i, a, o, c in zip(rows.tolist(), action[rows].tolist(), at.tolist(),
                          cti[rows].tolist()):
        if o > pos:
            parts.append(kept[pos:o])
            pos = o
        if a == CTI_EMIT:
            parts.append(cti_line_iso(c) if iso else cti_line(c))
            continue
        # EMIT_ADJUSTED: an interval, so a comma follows its start's digits (or its RFC 3339
        # text, which holds no comma)
        line = data[body[i]:stop[i]].tobytes()
        p = int(raw.start_at[i] - body[i])
        q = line.find(b",", p)
        parts.append(b"%b%b%b" % (line[:p], iso_time(c) if iso else b"%d" % c, line[q:]))
    parts.append(kept[pos:])
    out.write(b"".join(parts))


class _Prefixes:
    """The ``insert_prefix`` of every input name so far as a byte matrix (one row per source
    code, ``lens`` bytes used), rebuilt when new names appear."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.count = -1
        self.matrix = np.zeros((1, 1), np.uint8)
        self.lens = np.zeros(1, np.int64)

    def get(self) -> tuple[np.ndarray, np.ndarray]:
        if self.count != len(self.names):
            prefixes = [insert_prefix(name) for name in self.names] or [b""]
            self.lens = np.array([len(p) for p in prefixes], np.int64)
            self.matrix = np.zeros((len(prefixes), int(self.lens.max())), np.uint8)
            for i, p in enumerate(prefixes):
                self.matrix[i, :len(p)] = np.frombuffer(p, np.uint8)
            self.count = len(self.names)
        return self.matrix, self.lens


def _iso_lines(chunk, prefixes: _Prefixes):
    """The chunk's insert lines with RFC 3339 times (``insert_line_iso``'s bytes), built with
    numpy (``eventlog.write_columns.insert_lines``) as ``RawLines`` for ``_write_raw``. Payload
    texts come from the scanner's or the Parquet reader's buffer when the chunk has one, else
    each payload is encoded once."""
    n = len(chunk)
    rows = np.flatnonzero(chunk.kind == INSERT)
    payload = chunk.payload
    if isinstance(payload, Payloads):
        buffer = payload.buffer
        p0 = np.zeros(n, np.int64)
        p1 = np.zeros(n, np.int64)
        p0[payload.rows] = payload.p0
        p1[payload.rows] = payload.p1
        p0, p1 = p0[rows], p1[rows]
    else:
        texts = [b"" if (v := payload[i]) is None else orjson.dumps(v) for i in rows.tolist()]
        lens = np.fromiter(map(len, texts), np.int64, len(texts))
        p1 = np.cumsum(lens)
        p0 = p1 - lens
        buffer = np.frombuffer(b"".join(texts) + bytes(PAD), np.uint8)
    matrix, lens = prefixes.get()
    return insert_lines(matrix, lens, chunk.source, chunk.start, chunk.end, chunk.has_end,
                        buffer, p0, p1, rows, n, iso_times)
