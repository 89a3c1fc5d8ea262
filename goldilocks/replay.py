"""Replay recorded event logs through a time policy: ``replay(paths, delay=…) -> ReplayStats``.

The logs are merged in recorded arrival order (TS §5.2) and the policy's scan step runs over
that order — no union is needed, the merge *is* the arrival order. Two interchangeable paths
write byte-identical output (TS §5.1; ``tests/replay`` proves it with hypothesis):

- the **element path**: ``policy.step`` per record; used when the output is a stream (a file
  object such as stdout), when pacing (``speed``), or when the policy has no columnar form;
- the **columnar path**: ``policy.run_columns`` over numpy columns, one merged chunk at a
  time, the policy state carried from chunk to chunk; used automatically when the policy
  offers it and the output is a path or discarded (``None``). Each chunk is parsed, decided,
  written and dropped before the next: memory O(chunk), whatever the length of the log
  (``goldilocks.columnar``).

The chunks are read ahead on a helper thread (``goldilocks.ahead``); outputs given as paths
appear whole or not at all (``goldilocks.outputs``). Output and late records are canonical JSON Lines (``docs/event-log.md``).

>>> import tempfile, os, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "a.jsonl").write_text('{"source":"A","kind":"insert","start":5}\\n'
...                                '{"source":"A","kind":"cti","start":9}\\n')
>>> stats = replay([d / "a.jsonl"], delay="2ns", out=d / "out.jsonl")
>>> (d / "out.jsonl").read_text()
'{"source":"A","kind":"insert","start":5}\\n{"kind":"cti","start":7}\\n'
>>> stats.path, stats.emitted, stats.final_cti
('columnar', 1, 7)
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Iterable, Protocol, Sequence

import numpy as np

from engine.errors import InputError, UsageError
from engine.event import ADJUSTED, CTI as CTI_KIND, Event, LateRecord
from engine.policy import Policy
from engine.times import DurationLike, format_duration_ns, readable_repr, to_duration_ns
from eventlog import (
    BAD_RECORD_MODES,
    CTI,
    JOIN,
    LEAVE,
    MERGES,
    TIME_FORMATS,
    STDIN,
    BadRecords,
    Columns,
    SourceTable,
    cti_line,
    cti_line_iso,
    encode_late,
    field_map,
    log_files,
    merge_columns,
    time_scale,
)
from eventlog.format import timed
from goldilocks.ahead import ahead
from goldilocks.columnar import Tally, run_columnar
from goldilocks.edge_rows import event_line, finish_lines, row_event
from operators.edges import EdgeStats, edge_stats, with_edges
from goldilocks.outputs import Output, check_outputs, is_path, open_sinks
from goldilocks.resume import DEFAULT_EVERY, ReplayCheckpoint
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
    "check_time_options",
    "columnar_ok",
    "COLUMNAR",
    "ELEMENT",
]

COLUMNAR = "columnar"
ELEMENT = "element"

#: the per-input counters of a ``Tally``
_COUNTS = ("received", "inserts", "ctis", "emitted", "late", "adjusted", "control", "ctis_out")


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


@dataclass(frozen=True, slots=True, repr=False)
class InputStats:
    """One input (source): inserts and CTIs received (``received``), its ``join``/``leave``
    records (``control``), inserts emitted (adjusted ones included), late (dropped +
    adjusted), adjusted, and the last CTI it sent (``final_cti``; ``None``: none). On the
    output side: the CTIs emitted on its records (``ctis_out``: its CTIs, or its leaving,
    advanced the output's time) and the last of them (``last_cti_out``). Every record of the
    replay is counted in one input's ``records``; the output's CTIs are the sum of
    ``ctis_out`` and its final CTI the latest ``last_cti_out``. Times are int ns; the repr
    shows them as RFC 3339 text."""

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

    def __repr__(self) -> str:
        return readable_repr(self, instants=("final_cti", "last_cti_out"))

    @property
    def records(self) -> int:
        """Every record of this input: inserts, CTIs, joins and leaves."""
        return self.received + self.control


@dataclass(frozen=True, slots=True)
class FileStats:
    """One log file: its format, the records read from it, the bad records skipped, and its
    order key (``"arrival"``, ``"seq"``, ``"position"`` when it has neither; ``None``: no
    record was read, or not known after a resumed run)."""

    path: str
    format: str
    records: int
    skipped: int
    order: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PlotData:
    """What ``goldilocks.plot`` draws: per record in arrival order its input code, start and
    end (a point's: start + 1), whether it was late and, of those, adjusted (the others were
    dropped); the emitted CTIs with the row after which each was emitted."""

    names: tuple[str | None, ...]
    source: np.ndarray
    start: np.ndarray
    is_cti: np.ndarray
    late: np.ndarray
    cti_rows: np.ndarray
    cti_values: np.ndarray
    adjusted: np.ndarray | None = None
    end: np.ndarray | None = None


@dataclass(frozen=True, slots=True, repr=False)
class ReplayStats:
    """The result of a replay: per-input and per-file counts, totals, and which path ran;
    ``delay`` (a duration) and ``final_cti`` (an instant) are int ns, shown readably by the
    repr."""

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
    #: the edges' accounting (TS §7.5, §7.6): open at the end, unmatched, moved, ...
    edges: EdgeStats | None = None
    #: how the logs were merged: ``"arrival"`` (their order keys, TS §5.2), ``"time"``
    #: (TS §5.8), or ``"file"`` (one log, read in its own order)
    merge: str = field(default="arrival", compare=False)
    #: the ``merge`` asked for (``"auto"`` chose ``merge``)
    merge_asked: str = field(default="auto", compare=False)

    @property
    def inserts(self) -> int:
        """The inserts (and edges) read, over every input."""
        return sum(s.inserts for s in self.inputs)

    @property
    def events_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")

    def __repr__(self) -> str:
        return readable_repr(self, instants=("final_cti",), durations=("delay",))


# -- helpers ---------------------------------------------------------------------------


def resolve(policy: str | Policy, delay: DurationLike | None = None, on_late: str = "drop",
            max_ahead: DurationLike | None = None) -> Policy:
    """The policy a replay runs: a registered name built with ``delay`` (``None``: 5 minutes
    for goldilocks, 0 for the others) and ``on_late`` — ``"quantile:K"`` is the quantile
    rule with that k, and ``max_ahead`` goes with goldilocks (TS §2.6) — or a policy object
    (``delay``, if given, must agree with it). Raises ``InputError`` naming what is wrong."""
    if isinstance(policy, str):
        if delay is None:
            delay = "5m" if policy == "goldilocks" else 0
        try:
            return resolve_policy(policy, delay=delay, on_late=on_late, max_ahead=max_ahead)
        except InputError:
            raise
        except ValueError as err:  # an unknown name
            raise InputError(str(err)) from err
    if max_ahead is not None:
        raise InputError("max_ahead goes with a policy name; give it to goldilocks(...) "
                         "when passing a policy object")
    if delay is not None and to_duration_ns(delay, what="delay") != policy.delay:
        raise InputError(f"delay={delay!r} disagrees with the given policy's delay "
                         f"{format_duration_ns(policy.delay)}; pass one or the other")
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


def check_time_options(time_unit: str | None, time_format: str) -> None:
    """``time_unit`` and ``time_format`` as replay takes them, or a ``UsageError``."""
    if time_format not in TIME_FORMATS:
        raise UsageError("time_format", f"{time_format!r}; expected one of "
                         f"{', '.join(TIME_FORMATS)}")
    try:
        time_scale(time_unit)
    except InputError as err:
        raise UsageError("time_unit", str(err)) from None


def columnar_ok(pol: Policy, by_source: bool = False) -> bool:
    """Whether ``pol`` has a columnar form (``run_columns`` that does not return ``None``;
    with ``by_source``, ``run_source_columns`` counts too: replay's columnar path runs it)."""
    if by_source and callable(getattr(pol, "run_source_columns", None)):
        return True
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

        total = sum(os.path.getsize(p) for p in paths if p != STDIN and os.path.exists(p))
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


def replay(paths: Iterable[str | os.PathLike], *, delay: DurationLike | None = None,
           policy: str | Policy = "goldilocks", on_late: str = "drop",
           out: str | os.PathLike | BinaryIO | None = None,
           late: str | os.PathLike | BinaryIO | None = None, speed: object = None,
           bad_records: str = "fail", quarantine: str | os.PathLike | BinaryIO | None = None,
           clock: Clock | None = None, progress: bool = False, plot: bool = False,
           columnar: bool | None = None, time_unit: str | None = None,
           time_format: str = "ns", merge: str = "auto",
           checkpoint: str | os.PathLike | None = None, checkpoint_every: int = DEFAULT_EVERY,
           on_checkpoint: Callable[[bytes], None] | None = None, format: str | None = None,
           fields: dict[str, str] | None = None) -> ReplayStats:
    """Replay event logs through a policy; write the output and late records; return stats.

    ``paths``: JSON Lines, CSV or Parquet logs (a path, or a list), merged by ``(order key,
    file index, line)`` (TS §5.2): a directory is its log files by name (a directory of
    parts, as Spark writes them), ``"-"`` standard input, and a log may be compressed
    (``.gz``, ``.bz2``, ``.xz``). ``format``: the logs' format when their names do not say
    it (``"jsonl"``, ``"csv"``, ``"parquet"``: every log is read so). ``fields``: the names
    the logs give a record's fields, ``{"start": "created", "source": "name", "payload":
    "message"}`` (a record without a kind is then an insert), so a log written by another
    tool is read as it is. ``delay``: a duration (``engine.times.DurationLike``: ``"5m"``,
    ``"PT5M"``, a ``timedelta``, a number of seconds, ``Nanoseconds``); ``None`` means 5
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
    ``merge``: ``"arrival"``: the logs' order keys (TS §5.2); ``"time"``: the next record
    comes from the log furthest behind in time (TS §5.8), for per-device logs recorded
    without ``seq``/``arrival``; ``"auto"`` (the default): ``"time"`` when there are several
    logs and none carries ``seq`` or ``arrival`` (their positions say nothing about one
    another), else ``"arrival"``. ``ReplayStats.merge`` says which ran.

    ``checkpoint``: a file that makes the replay resumable (TS §8.3,
    ``goldilocks.resume``): every ``checkpoint_every`` records the outputs (files, or
    ``None``) are made durable and the checkpoint replaced; run again with the same
    arguments after an interruption, the replay continues from it and ends with the bytes
    of an uninterrupted run; the checkpoint is removed when the replay completes.
    ``on_checkpoint(data)`` is called with each checkpoint's bytes once written. Not with
    ``speed``, ``plot`` or a quarantine.

    Outputs given as paths are safe: one that is an input, or the same file as another
    output, is refused before anything is opened (``UsageError``); each is written under a
    temporary name in its directory and renamed into place only when the replay succeeds,
    so a failed run leaves neither a partial file nor a temporary (``goldilocks.outputs``).

    The same logs and options always give the same bytes (TS §5.1). Memory: one chunk per file
    on either path, whatever the length of the log (``plot=True`` keeps, in addition, the
    per-record columns the picture draws: about 20 bytes per record).
    """
    began = time.perf_counter()
    path_list = log_files(paths, format=format)  # a directory's parts; each one readable
    if not path_list:
        raise InputError("replay: no event logs given; expected at least one path")
    fields = field_map(fields)
    pol = with_edges(resolve(policy, delay, on_late))  # TS §7: a log may hold edges
    factor = _speed(speed)
    check_time_options(time_unit, time_format)
    if merge not in MERGES:
        raise UsageError("merge", f"{merge!r}; expected one of {', '.join(MERGES)}")
    if bad_records not in BAD_RECORD_MODES:
        raise UsageError("bad_records", f"{bad_records!r}; expected one of "
                         f"{', '.join(BAD_RECORD_MODES)}")
    if (bad_records == "quarantine") != (quarantine is not None):
        raise UsageError("quarantine", "a quarantine file goes with bad_records='quarantine' "
                         f"(got bad_records={bad_records!r}, quarantine={quarantine!r})")
    streaming_out = out is not None and not is_path(out)
    can_columns = columnar_ok(pol, by_source=True)
    if columnar is None:
        columnar = can_columns and factor is None and not streaming_out
    elif columnar and not can_columns:
        raise InputError(f"policy {pol.name!r} has no columnar form; use the element path")
    elif columnar and factor is not None:
        raise InputError("pacing (speed) needs the element path")

    check_outputs([p for p in path_list if p != STDIN],
                  {"out": out, "late": late, "quarantine": quarantine, "checkpoint": checkpoint})
    table = SourceTable()
    ck: ReplayCheckpoint | None = None
    if checkpoint is not None:
        for option, given in (("speed", factor is not None), ("plot", plot),
                              ("quarantine", quarantine is not None),
                              ("checkpoint", STDIN in path_list)):
            if given:
                raise UsageError(option, "standard input cannot be read again to resume: "
                                 "give the log as a file" if option == "checkpoint" else
                                 "is not available with a checkpoint")
        ck = ReplayCheckpoint.open(
            checkpoint, checkpoint_every, path_list, pol,
            {"time_unit": time_unit, "time_format": time_format, "merge": merge,
             "bad_records": bad_records, **({"format": format} if format else {}),
             **({"fields": fields} if fields else {})},
            {"out": out, "late": late}, table.names, on_checkpoint)
        if ck.complete is not None:  # a run that completed but did not finish: finish it
            ck.finish_complete()
            return _stats(ck.complete, path_list, ck.skipped, pol, columnar, bad_records,
                          began, merge=_merged([], merge, path_list), merge_asked=merge)
        quarantine_out = Output(None)
        out_sink, late_sink = ck.sinks()
    else:
        quarantine_out, out_sink, late_sink = open_sinks(
            {"quarantine": quarantine, "out": out, "late": late})
    bad = BadRecords(bad_records, quarantine_out.file)
    iso = time_format == "iso"
    modes: list[Any] = []
    chosen: list[str] = []
    chunks = None
    bar = None
    ok = False
    try:
        bar = _Progress(path_list, progress)
        chunks = ahead(merge_columns(path_list, table=table, bad=bad, on_bytes=bar.advance,
                                     modes=modes, time_unit=time_unit, merge=merge,
                                     chosen=chosen, format=format, fields=fields))
        stream: Iterable[Columns] = chunks if ck is None else ck.cut(chunks)
        resume, after = (None, None) if ck is None else (ck.resume, ck.after)
        if columnar:
            tally = run_columnar(pol, stream, table, out_sink, late_sink, plot, iso,
                                 resume=resume, after=after)
        else:
            tally = _run_elements(pol, stream, table, out_sink, late_sink, plot, factor,
                                  clock or SystemClock(), modes, iso, resume=resume,
                                  after=after)
        if ck is not None:
            ck.seal(tally, bad.skipped)  # TS §8.3: complete, before the outputs are renamed
        ok = True
    finally:
        if chunks is not None:
            chunks.close()  # stops the reading thread if the replay ended early
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
    if ck is not None:
        ck.remove()  # TS §8.3: the outputs are in place; nothing is left to resume
    return _stats(tally, path_list, bad.skipped, pol, columnar, bad.mode, began,
                  merge=_merged(chosen, merge, path_list),
                  orders=[m.mode for m in modes], merge_asked=merge)


def _merged(chosen: list[str], merge: str, path_list: list[str]) -> str:
    """The merge that ran (``merge_columns`` says it), or the one asked for."""
    if chosen:
        return chosen[0]
    return "file" if len(path_list) == 1 else ("arrival" if merge == "auto" else merge)


def _stats(tally: Tally, path_list: list[str], skipped_by: dict[str, int], pol: Policy,
           columnar: bool, mode: str, began: float, *, merge: str = "arrival",
           orders: Sequence[str | None] = (), merge_asked: str = "auto") -> ReplayStats:
    files = tuple(
        FileStats(p, os.path.splitext(p)[1].lstrip(".").lower(), tally.per_file.get(i, 0),
                  skipped_by.get(p, 0), orders[i] if i < len(orders) else None)
        for i, p in enumerate(path_list))
    skipped = sum(skipped_by.values())
    return ReplayStats(
        inputs=_inputs(tally), files=files, path=COLUMNAR if columnar else ELEMENT,
        policy=pol.name, delay=pol.delay, on_late=pol.on_late, records=tally.records,
        emitted=tally.emitted_total, ctis_emitted=tally.ctis_total, late=tally.late_total,
        adjusted=tally.adjusted_total, skipped=skipped if mode == "skip" else 0,
        quarantined=skipped if mode == "quarantine" else 0, final_cti=tally.final,
        seconds=time.perf_counter() - began,
        plot=None if tally.plot is None else PlotData(tuple(tally.names), *tally.plot),
        edges=tally.edges, merge=merge, merge_asked=merge_asked)


def _inputs(t: Tally) -> tuple[InputStats, ...]:
    rows = []
    for code in [-1] + list(range(len(t.names))):
        i = code + 1
        if i >= len(t.received) or t.received[i] + t.control[i] == 0:
            continue
        rows.append(InputStats(t.names[code] if code >= 0 else None, int(t.received[i]),
                               int(t.inserts[i]), int(t.ctis[i]), int(t.emitted[i]),
                               int(t.late[i]), int(t.adjusted[i]), t.last_cti.get(code),
                               int(t.control[i]), int(t.ctis_out[i]), t.last_out.get(code)))
    rows.sort(key=lambda r: (r.name is not None, r.name or ""))  # by name, merged CTIs first
    return tuple(rows)


# -- element path ----------------------------------------------------------------------


def _run_elements(pol: Policy, chunks: Iterable[Columns], table: SourceTable, out: Output,
                  late_out: Output, plot: bool, factor: float | None, clock: Clock,
                  modes: list[Any], iso: bool = False, *,
                  resume: tuple[Any, Tally] | None = None,
                  after: Callable[[Any, Callable[[], Tally]], None] | None = None) -> Tally:
    """``policy.step`` per record, each output encoded on its own (``eventlog.format``).
    ``resume`` and ``after`` as for ``run_columnar``."""
    step, join, leave = pol.step, pol.join, pol.leave
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
    plot_rows: list[tuple[int, int, bool, int, int]] = []  # source, start, cti, late, end
    plot_ctis: list[tuple[int, int]] = []
    if resume is not None:
        state, was = resume
        lists = (received, inserts, ctis, emitted, late, adjusted, control, ctis_out)
        size = max([size] + [len(getattr(was, k)) for k in _COUNTS])
        for lst, k in zip(lists, _COUNTS):
            got = list(getattr(was, k))
            lst[:] = got + [0] * (size - len(got))
        last_cti.update(was.last_cti)
        last_out.update(was.last_out)
        per_file.update(was.per_file)
        records, n_emitted, n_ctis, n_late, n_adjusted, final = (
            was.records, was.emitted_total, was.ctis_total, was.late_total, was.adjusted_total,
            was.final)

    def now() -> Tally:
        return Tally(names, list(received), list(inserts), list(ctis), list(emitted),
                     list(late), list(adjusted), list(control), list(ctis_out),
                     dict(last_cti), dict(last_out), dict(per_file), records, n_emitted,
                     n_ctis, n_late, n_adjusted, final)

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
        for k, s, st, en, he, pl, key, id_ in zip(chunk.kind.tolist(), chunk.source.tolist(),
                                                   chunk.start.tolist(), chunk.end.tolist(),
                                                   chunk.has_end.tolist(), chunk.payload,
                                                   chunk.key.tolist(),
                                                   chunk.ids or [None] * len(chunk)):
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
            if k == CTI:
                received[i] += 1
                ctis[i] += 1
                last_cti[s] = st
                state, outs = step(state, Event(CTI_KIND, st, None, None, name))
            elif k == JOIN:
                control[i] += 1
                state, outs = join(state, names[s])  # joins and leaves name their input
            elif k == LEAVE:
                control[i] += 1
                state, outs = leave(state, names[s])
            else:  # an insert or an edge (TS §7)
                received[i] += 1
                inserts[i] += 1
                state, outs = step(state, row_event(k, st, en, he, pl, name, id_))
            if plot and timed(k):
                plot_rows.append((s, st, k == CTI, 0, en if he else st + 1))
            for o in outs:
                if isinstance(o, LateRecord):
                    late[i] += 1
                    n_late += 1
                    if o.action == ADJUSTED:
                        adjusted[i] += 1
                        n_adjusted += 1
                    if late_on:
                        lbuf.append(encode_late(o, time_format))
                    if plot:  # 1: dropped, 2: adjusted
                        row = plot_rows[-1]
                        plot_rows[-1] = (*row[:3], 2 if o.action == ADJUSTED else 1, row[4])
                elif o.kind == CTI_KIND:
                    buf.append(encode_cti(o.start))
                    n_ctis += 1
                    ctis_out[i] += 1
                    final = last_out[s] = o.start
                    if plot:
                        plot_ctis.append((len(plot_rows) - 1, o.start))
                else:
                    buf.append(event_line(o, prefixes, iso))
                    emitted[i] += 1
                    n_emitted += 1
            records += 1
        write_out(b"".join(buf))
        write_late(b"".join(lbuf))
        if after is not None:
            after(state, now)
    state, text, _ = finish_lines(pol, state, iso)  # TS §7.5: the edges never closed
    write_late(text)
    drawn = None
    if plot:
        rows = np.array(plot_rows, dtype=np.int64).reshape(-1, 5)
        cr = np.array(plot_ctis, dtype=np.int64).reshape(-1, 2)
        drawn = (rows[:, 0].astype(np.int32), rows[:, 1], rows[:, 2].astype(bool),
                 rows[:, 3] > 0, cr[:, 0], cr[:, 1], rows[:, 3] == 2, rows[:, 4])
    return Tally(names, received, inserts, ctis, emitted, late, adjusted, control, ctis_out,
                 last_cti, last_out, per_file, records, n_emitted, n_ctis, n_late, n_adjusted,
                 final, drawn, edge_stats(pol, state))
