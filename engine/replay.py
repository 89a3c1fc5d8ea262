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

from engine.errors import InputError
from engine.event import ADJUSTED, CTI as CTI_KIND, INTERVAL, POINT, Event, LateRecord
from engine.eventlog import (
    CTI,
    INSERT,
    JOIN,
    BadRecords,
    SourceTable,
    cti_line,
    encode_late,
    insert_line,
    insert_prefix,
    late_line,
    merge_columns,
)
from engine.jsonl_scan import gather
from engine.jsonl_write import late_text
from engine.policy import (CTI_EMIT, CTI_SUPPRESS, DROP_LATE, EMIT, EMIT_ADJUSTED, Policy,
                           resolve_policy)
from engine.times import to_duration_ns

__all__ = [
    "replay",
    "ReplayStats",
    "InputStats",
    "FileStats",
    "PlotData",
    "Clock",
    "SystemClock",
    "VirtualClock",
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
    """One input (source): records received (inserts + CTIs), inserts emitted (adjusted ones
    included), late (dropped + adjusted), adjusted, and the last CTI it sent (``None``: none)."""

    name: str | None
    received: int
    inserts: int
    ctis: int
    emitted: int
    late: int
    adjusted: int
    final_cti: int | None

    @property
    def dropped(self) -> int:
        return self.late - self.adjusted


@dataclass(frozen=True)
class FileStats:
    """One log file: its format, the records read from it, the bad records skipped."""

    path: str
    format: str
    records: int
    skipped: int


@dataclass(frozen=True)
class PlotData:
    """What ``engine.plot`` draws: per record in arrival order its input code and start, and
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
    """A binary sink: a path (opened and closed here), a file object, or ``None`` (discard)."""

    def __init__(self, target: Any, what: str) -> None:
        self.owned = False
        if target is None:
            self.file: BinaryIO | None = None
        elif isinstance(target, (str, os.PathLike)):
            self.file = open(target, "wb", buffering=1 << 20)
            self.owned = True
        elif hasattr(target, "write"):
            self.file = getattr(target, "buffer", target)  # a text stream's binary buffer
        else:
            raise InputError(f"{what}={target!r}; expected a path, a binary file or None")

    def write(self, data: bytes) -> None:
        if self.file is not None and data:
            self.file.write(data)

    def close(self) -> None:
        if self.file is None:
            return
        if self.owned:
            self.file.close()
        else:
            self.file.flush()


def _resolve(policy: str | Policy, delay: object, on_late: str) -> Policy:
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
           columnar: bool | None = None) -> ReplayStats:
    """Replay event logs through a policy; write the output and late records; return stats.

    ``paths``: JSON Lines, CSV or Parquet logs, merged by ``(order key, file index, line)``
    (TS §5.2). ``delay``: a duration (``"5m"``, int ns, ``timedelta``); ``None`` means 5
    minutes for goldilocks and 0 for the others. ``policy``: a registered name
    (``goldilocks``, ``min``, ``max``) or a policy object. ``out``/``late``: a path, a binary
    file, or ``None`` to discard (late records are counted either way). ``speed``: ``None`` or
    ``"max"`` for as fast as possible, or a factor pacing records by their recorded ``arrival``
    times through ``clock`` (default the system clock). ``bad_records``: ``fail`` (raise
    ``BadRecordError`` naming file and line), ``skip`` or ``quarantine`` (skip and append to
    ``quarantine``); skipped records are counted (TS §5.3). ``columnar``: ``None`` chooses
    automatically; ``True``/``False`` force a path (``True`` fails if it cannot apply).

    The same logs and options always give the same bytes (TS §5.1). Memory: one chunk per file
    on either path, whatever the length of the log (``plot=True`` keeps, in addition, the
    per-record columns the picture draws: about 20 bytes per record).
    """
    began = time.perf_counter()
    path_list = [os.fspath(p) for p in paths]
    if not path_list:
        raise InputError("replay: no event logs given; expected at least one path")
    pol = _resolve(policy, delay, on_late)
    factor = _speed(speed)
    streaming_out = out is not None and not isinstance(out, (str, os.PathLike))
    can_columns = _columnar_ok(pol)
    if columnar is None:
        columnar = can_columns and factor is None and not streaming_out
    elif columnar and not can_columns:
        raise InputError(f"policy {pol.name!r} has no columnar form; use the element path")
    elif columnar and factor is not None:
        raise InputError("pacing (speed) needs the element path")

    quarantine_out = _Output(quarantine, "quarantine") if quarantine is not None else None
    if bad_records == "quarantine" and quarantine_out is None:
        raise InputError("bad_records='quarantine' needs a quarantine file")
    bad = BadRecords(bad_records, quarantine_out.file if quarantine_out else None)
    table = SourceTable()
    out_sink = _Output(out, "out")
    late_sink = _Output(late, "late")
    bar = _Progress(path_list, progress)
    modes: list = []
    # Parsing a chunk makes ~10^5 acyclic JSON objects; reference counting frees them, the
    # cyclic collector only rescans them. Off during the replay (about 20% faster), restored.
    collecting = gc.isenabled()
    gc.disable()
    chunks = None
    try:
        chunks = _ahead(merge_columns(path_list, table=table, bad=bad, on_bytes=bar.advance,
                                      modes=modes))
        if columnar:
            result = _run_columnar(pol, chunks, table, out_sink, late_sink, plot)
        else:
            result = _run_elements(pol, chunks, table, out_sink, late_sink, plot, factor,
                                   clock or SystemClock(), modes)
    finally:
        if chunks is not None:
            chunks.close()  # stops the reading thread if the replay ended early
        if collecting:
            gc.enable()
        bar.close()
        out_sink.close()
        late_sink.close()
        if quarantine_out is not None:
            quarantine_out.close()
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
            last_cti: dict[int, int]) -> tuple[InputStats, ...]:
    rows = []
    for code in [-1] + list(range(len(names))):
        i = code + 1
        if i >= len(received) or received[i] == 0:
            continue
        rows.append(InputStats(names[code] if code >= 0 else None, int(received[i]),
                               int(inserts[i]), int(ctis[i]), int(emitted[i]), int(late[i]),
                               int(adjusted[i]), last_cti.get(code)))
    rows.sort(key=lambda r: (r.name is not None, r.name or ""))  # by name, merged CTIs first
    return tuple(rows)


# -- element path ----------------------------------------------------------------------


def _run_elements(pol: Policy, chunks, table: SourceTable, out: _Output, late_out: _Output,
                  plot: bool, factor: float | None, clock: Clock, modes: list):
    step, join, leave = pol.step, pol.join, pol.leave
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
    last_cti: dict[int, int] = {}
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
            for lst in (received, inserts, ctis, emitted, late, adjusted):
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
                state, outs = join(state, name)
            else:
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
                        lbuf.append(encode_late(o))
                    if plot_rows is not None:
                        plot_rows[-1] = plot_rows[-1][:3] + (True,)
                elif o.kind == CTI_KIND:
                    buf.append(cti_line(o.start))
                    n_ctis += 1
                    final = o.start
                    if plot_ctis is not None:
                        plot_ctis.append((len(plot_rows) - 1, o.start))
                else:
                    src = o.source
                    pre = prefixes.get(src)
                    if pre is None:
                        pre = prefixes[src] = insert_prefix(src)
                    buf.append(insert_line(pre, o.start, o.end if o.kind == INTERVAL else None,
                                           o.payload))
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
    stats = _inputs(names, received, inserts, ctis, emitted, late, adjusted, last_cti)
    return stats, per_file, totals, plot_data


# -- columnar path ---------------------------------------------------------------------


class _Counts:
    """Per-input counters as int64 columns indexed by source code + 1, grown as inputs appear."""

    __slots__ = ("received", "inserts", "ctis", "emitted", "late", "adjusted")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, np.zeros(0, np.int64))

    def add(self, name: str, counts: np.ndarray) -> None:
        have = getattr(self, name)
        if len(counts) > len(have):
            have = np.concatenate([have, np.zeros(len(counts) - len(have), np.int64)])
        have[:len(counts)] += counts
        setattr(self, name, have)


def _run_columnar(pol: Policy, chunks, table: SourceTable, out: _Output, late_out: _Output,
                  plot: bool):
    """One pass, chunk by chunk: the policy state (``run_columns``'s third value) is carried
    from chunk to chunk, so nothing of a chunk outlives it. Memory: O(chunk) (TS §5.1: the
    decisions do not depend on where the chunks are cut), plus the plot columns if asked."""
    names = table.names
    run = pol.run_columns  # type: ignore[attr-defined]
    state = None
    counts = _Counts()
    last_cti: dict[int, int] = {}
    per_file: dict[int, int] = {}
    records = n_emitted = n_ctis = n_late = n_adjusted = 0
    final = None
    late_on = late_out.file is not None
    prefixes: dict[int, bytes] = {}
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
        cti_rows = np.flatnonzero(is_cti)
        if len(cti_rows):
            rev_codes = source[cti_rows][::-1]
            uniq, first = np.unique(rev_codes, return_index=True)
            last_vals = start[cti_rows][::-1][first]
            last_cti.update(zip(uniq.tolist(), last_vals.tolist()))
        emit_cti_rows = np.flatnonzero(action == CTI_EMIT)
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
                    last_cti)
    return stats, per_file, totals, plot_data


def _write_raw(raw, action: np.ndarray, cti: np.ndarray, out: _Output,
               late_out: _Output) -> None:
    """Write a chunk whose input lines are canonical (``engine.jsonl_scan``): emitted inserts
    are copied from the input bytes and late lines assembled from them with numpy; only CTIs
    and adjusted lines are built one by one. The bytes are those ``insert_line`` and
    ``late_line`` would write (TS §5.1)."""
    data, body, stop = raw.data, raw.body, raw.stop
    emit = action == EMIT
    rows = np.flatnonzero(emit)
    # the kept bytes: runs [body, stop) of the emitted rows, the rest skipped
    kept = memoryview(gather(data, body[rows], stop[rows]))
    if late_out.file is not None:
        late = np.flatnonzero((action == DROP_LATE) | (action == EMIT_ADJUSTED))
        if len(late):
            late_out.write(memoryview(late_text(raw, late, cti[late],
                                                action[late] == EMIT_ADJUSTED)))
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
            parts.append(cti_line(c))
            continue
        # EMIT_ADJUSTED: an interval, so a comma follows its start's digits
        line = data[body[i]:stop[i]].tobytes()
        p = int(raw.start_at[i] - body[i])
        q = line.find(b",", p)
        parts.append(b"%b%d%b" % (line[:p], c, line[q:]))
    parts.append(kept[pos:])
    out.write(b"".join(parts))
