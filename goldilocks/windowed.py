"""Windowed replay: a recorded log through a policy, then windows closed by its CTIs, one row
per window — ``goldilocks replay LOG --window 1m --agg mean:temperature [--key source]``.

The policy runs over the merged arrival order exactly as in ``goldilocks.replay``; its output
(inserts, adjusted ones clipped, and the CTIs it emits) goes through the windows of
``operators.windows``, and each window is written when the policy's CTI passes its end
(TS §6.1). Two paths give the same rows byte for byte (``tests/replay/test_windowed.py``):

- the **element path**: ``policy.step`` then ``Windows.step`` per record;
- the **columnar path**: ``policy.run_columns`` then ``WindowColumns.run`` per merged chunk,
  the open windows carried from chunk to chunk. Chosen when the policy has a columnar form
  and every aggregate is a built-in one (as for replay: automatically, unless forced).

With per-key clocks (``clock="key"``, TS §6.3) the arrivals of each input go through its own
copy of the policy — ``Windows(clocks=policy)`` record by record, or on columns each input's
rows of a chunk through ``run_columns`` with that input's carried state, its emitted CTIs
moving its own clock in ``WindowColumns(per_key=True)``. The columnar path evicts no idle
input (``idle_after`` runs on the element path).

Row format (``docs/replay.md``): one JSON object per line, keys in this order — ``start``,
``end`` (the window, ns or RFC 3339 as ``--time-format``), ``key`` (keyed windows only),
``count`` (inserts in the window), then each aggregate by its label (``mean_celsius``: a
float, ``null`` when no insert of the window had the field; ``count_FIELD``: an int). Rows
come in the order windows close: by end, then key. Windows still open when the log ends (no
CTI passed their end) are not written; ``WindowReplayStats.open`` counts them.

Resumable (``checkpoint=FILE``, ``--checkpoint FILE``, TS §8.3): the machinery of
``goldilocks.resume`` (partial outputs, a checkpoint every ``N`` records, cut back and
continued), of kind ``"window replay"``; besides the policy's state the checkpoint holds the
windows' state in ``Windows.snapshot``'s format — written by ``Windows`` on the element path
and by ``WindowColumns.snapshot`` on the columnar path, one codec — and the counts.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Sequence

import numpy as np
import orjson

from engine.errors import InputError, UsageError
from engine.event import CTI as CTI_KIND, Event, LateRecord
from engine.policy import CTI_EMIT, DROP_LATE, EMIT, EMIT_ADJUSTED, Policy
from engine.times import MAX_TIME, DurationLike, readable_repr, to_duration_ns
from eventlog import (CTI, INSERT, JOIN, LEAVE, STDIN, BadRecords, Columns, SourceTable,
                      encode_late, field_map, iso_time, log_files, merge_columns)
from eventlog.format import END, START, timed as timed_kind
from goldilocks.ahead import ahead
from goldilocks.edge_rows import finish_lines, row_event, step_chunk
from goldilocks.outputs import check_outputs, open_sinks
from goldilocks.replay import COLUMNAR, ELEMENT, columnar_ok, check_time_options, resolve
from goldilocks.resume import DEFAULT_EVERY, ReplayCheckpoint
from operators.checkpoint import CheckpointError
from operators.edges import with_edges
from operators.window_columns import WindowColumns
from operators.windows import (WINDOW_CLOSED, Fold, WindowResult, Windows, WindowSpec,
                               hopping_spec, parse_fold, tumbling_spec)

__all__ = ["replay_windows", "WindowReplayStats", "window_row", "CLOCKS", "KIND"]

#: what closes the windows: the policy over the merged stream, or each input's own clock
CLOCKS = ("merged", "key")
#: the ``kind`` of a windowed replay's checkpoint
KIND = "window replay"


@dataclass(frozen=True, slots=True)
class _Cut:
    """What a windowed replay's checkpoint holds besides the policy's state: the inputs'
    ``names``, the ``counts`` as the run returns them (records, inserts, late, window_late,
    windows, open, peak, final), the ``windows``' state (``Windows.snapshot``'s format;
    ``None`` once complete), and the aggregate fields still ``missing`` and ``seen``."""

    names: list[str]
    counts: tuple[Any, ...]
    windows: Any
    missing: tuple[str, ...]
    seen: tuple[str, ...]


def _encode_cut(cut: _Cut) -> dict[str, Any]:
    return {"names": list(cut.names), "counts": list(cut.counts), "windows": cut.windows,
            "missing": list(cut.missing), "seen": list(cut.seen)}


def _decode_cut(obj: Any, names: list[str], where: str) -> _Cut:
    try:
        counts = tuple(None if v is None else int(v) for v in obj["counts"])
        windows = obj["windows"]
        if len(counts) != 8 or counts[0] is None or not (windows is None
                                                          or isinstance(windows, dict)):
            raise ValueError(obj["counts"])
        return _Cut(names, counts, windows, tuple(str(f) for f in obj["missing"]),
                    tuple(str(f) for f in obj["seen"]))
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{where}: malformed counts: {err!r}") from None


#: ``after(state, cut)``: called once a chunk is written (``ReplayCheckpoint.after``)
After = Callable[[Any, Callable[[], _Cut]], None]
#: ``cut(counts, windows)``: what a checkpoint holds at this point
MakeCut = Callable[[tuple, Any], _Cut]


@dataclass(frozen=True, slots=True, repr=False)
class WindowReplayStats:
    """What a windowed replay did: ``records`` read, ``inserts`` folded into windows,
    ``late`` (the policy's late inserts; ``window_late``: inserts that found their window
    closed — none when the windows follow the policy's own CTIs), ``windows`` rows written,
    ``open`` windows left open at the end, ``peak_open`` the most open at once, ``final_cti``
    the policy's last CTI, ``missing_fields`` the aggregates' fields that no insert had as a
    number (with ``payload_fields``, those seen), and ``path`` (``"columnar"`` or
    ``"element"``)."""

    path: str
    policy: str
    delay: int
    size: int
    hop: int
    key: str | None
    aggregates: tuple[str, ...]
    records: int
    inserts: int
    late: int
    window_late: int
    windows: int
    open: int
    peak_open: int
    final_cti: int | None
    seconds: float
    #: aggregate fields that no insert held as a number (a typo, most likely), and the
    #: payload fields that were seen (at most 32, sorted) to say what was meant
    missing_fields: tuple[str, ...] = ()
    payload_fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return readable_repr(self, instants=("final_cti",), durations=("delay", "size", "hop"))

    @property
    def events_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")


def window_row(start: int, end: int, key: str | None, count: int,
               values: Sequence[tuple[str, Any]], keyed: bool, iso: bool) -> bytes:
    """One output row (the format in the module docstring), newline included."""
    row = b'{"start":%b,"end":%b' % ((iso_time(start), iso_time(end)) if iso
                                     else (b"%d" % start, b"%d" % end))
    if keyed:
        row += b',"key":%b' % orjson.dumps(key)
    row += b',"count":%d' % count
    for label, value in values:
        if label != "count":  # the plain count is the window's own count, written above
            row += b',%b:%b' % (orjson.dumps(label), orjson.dumps(value))
    return row + b"}\n"


def _folded(chunk: Columns) -> np.ndarray:
    """The rows windows fold: inserts and start edges (an end edge is passed over, TS §7.8)."""
    return (chunk.kind == INSERT) | (chunk.kind == START)


class _Keys:
    """The window key of each row folded: its input (``source``) or a payload field (a
    string, or the row is refused naming its file and line)."""

    def __init__(self, key: str | None, paths: Sequence[str], table: SourceTable) -> None:
        self.key = key
        self.paths = paths
        self.table = table
        self.found = SourceTable()  # the keys met so far, by code
        self.names = self.found.names

    def codes_of(self, chunk: Columns, ctis: bool = False) -> np.ndarray:
        """int32 codes into ``names`` per row (-1 for CTIs, and for every row unkeyed);
        ``ctis``: a CTI of an input gets its input's code too (per-key clocks)."""
        if self.key is None:
            return np.full(len(chunk), -1, np.int32)
        is_insert = _folded(chunk)
        if ctis:
            assert self.key == "source"  # a CTI names its input, never a payload field
            is_insert = is_insert | ((chunk.kind == CTI) & (chunk.source >= 0))
        out = np.full(len(chunk), -1, np.int32)
        names = self.table.names
        if self.key == "source":  # a table from the chunk's few source codes to key codes
            source = chunk.source
            lut = np.full(len(names) + 1, -1, np.int32)
            for code in np.unique(source[is_insert]).tolist():
                lut[code + 1] = self.found.add(names[code])
            return np.where(is_insert, lut[source + 1], -1).astype(np.int32)
        payload = list(chunk.payload)
        rows = np.flatnonzero(is_insert).tolist()
        for r in rows:
            p = payload[r]
            k = p.get(self.key) if p.__class__ is dict else None
            if not isinstance(k, str):
                raise InputError(
                    f"{self.paths[int(chunk.file[r])]}:{int(chunk.line[r])}: field 'payload': "
                    f"the window key {self.key!r} is {'missing' if k is None else repr(k)}; "
                    f"expected a string. {self._without(chunk, payload, rows)}")
            out[r] = self.found.add(k)
        return out

    def _without(self, chunk: Columns, payload: list, rows: list[int]) -> str:
        """Which inputs' inserts, and how many, lack the key in this block of the logs."""
        lacking: dict[str, int] = {}
        for r in rows:
            p = payload[r]
            if not isinstance(p.get(self.key) if p.__class__ is dict else None, str):
                name = self.table.name(int(chunk.source[r])) or "(no source)"
                lacking[name] = lacking.get(name, 0) + 1
        shown = ", ".join(f"{name} {n}" for name, n in sorted(lacking.items())[:8])
        more = f" and {len(lacking) - 8} more" if len(lacking) > 8 else ""
        return (f"{sum(lacking.values())} of the {len(rows)} inserts read so far lack it "
                f"(by input: {shown}{more}); a window key must be in every insert: key by an "
                "input (--key source), or give every record the field")


def _values(folds: Sequence[Fold], chunk: Columns) -> list[np.ndarray]:
    """Each fold's value per row (float64, NaN where none): what ``number`` reads, a field
    at a time — an int or float taken as its float (``-0.0`` as ``0.0``), anything else
    none (``tests/operators/test_windows.py`` holds the two equal)."""
    out = []
    payload = None
    by_field: dict[str, np.ndarray] = {}
    for f in folds:
        if f.field is None:
            out.append(np.zeros(len(chunk), np.float64))
            continue
        if payload is None:
            payload = list(chunk.payload)
        column = by_field.get(f.field)
        if column is None:
            field = f.field
            column = by_field[field] = np.array(
                [v if (v := p.get(field) if p.__class__ is dict else None).__class__ in _NUMBERS
                 else None for p in payload], np.float64) + 0.0  # None -> NaN; -0.0 -> 0.0
        out.append(column)
    return out


_NUMBERS = frozenset((int, float))


class _Fields:
    """Which aggregate fields some insert holds as a number, looked for until each is found
    (a chunk or two), and the payload fields seen meanwhile (at most 32)."""

    def __init__(self, folds: Sequence[Fold]) -> None:
        self.folds = [f for f in folds if f.field is not None]
        self.missing = {f.field for f in self.folds if f.field is not None}
        self.seen: set[str] = set()

    def watch(self, chunks: Iterable[Columns]) -> Iterator[Columns]:
        for chunk in chunks:
            if self.missing:
                self._observe(chunk)
            yield chunk

    def _observe(self, chunk: Columns) -> None:
        inserts = _folded(chunk)
        wanted = [f for f in self.folds if f.field in self.missing]
        for f, column in zip(wanted, _values(wanted, chunk)):
            if (~np.isnan(column[inserts])).any():
                self.missing.discard(f.field)
        if self.missing and len(self.seen) < 32:
            for p in chunk.payload:
                if p.__class__ is dict:
                    self.seen.update(list(p)[:32 - len(self.seen)])
                    if len(self.seen) >= 32:
                        break


def replay_windows(paths: Iterable[str | os.PathLike], *, window: DurationLike,
                   aggregates: Sequence[str | Fold] = ("count",),
                   hop: DurationLike | None = None, key: str | None = None,
                   delay: DurationLike | None = None,
                   policy: str | Policy = "goldilocks", on_late: str = "drop",
                   out: str | os.PathLike | BinaryIO | None = None,
                   late: str | os.PathLike | BinaryIO | None = None,
                   bad_records: str = "fail", time_unit: str | None = None,
                   time_format: str = "ns", columnar: bool | None = None,
                   max_open: int = 100_000, clock: str = "merged",
                   idle_after: DurationLike | None = None,
                   checkpoint: str | os.PathLike | None = None,
                   checkpoint_every: int = DEFAULT_EVERY,
                   on_checkpoint: Callable[[bytes], None] | None = None,
                   merge: str = "auto", format: str | None = None,
                   fields: dict[str, str] | None = None,
                   final_cti: bool = False) -> WindowReplayStats:
    """Replay logs through ``policy`` and write one row per window closed by its CTIs.

    ``window``: the window size (a duration, ``engine.times.DurationLike``: ``"1m"``);
    ``hop``: hopping windows, one every
    ``hop`` (``None``: tumbling). ``aggregates``: ``"count"``, ``"mean:FIELD"``, … or user
    ``Fold`` objects (those run on the element path). ``key``: ``None`` (fleet-wide),
    ``"source"`` (per input) or a payload field holding a string. ``out``: rows; ``late``:
    the policy's late records. ``clock``: ``"merged"`` (the policy's CTIs over the merged
    stream close every window) or ``"key"`` (per-key clocks, TS §6.3: each input's own CTIs
    through its own copy of the policy close its windows; needs ``key="source"``; ``late``
    gets the inserts that found their window closed; ``idle_after`` evicts idle inputs, TS
    §6.4, on the element path). ``checkpoint``, ``checkpoint_every``, ``on_checkpoint``: a
    resumable run, as ``goldilocks.replay.replay``'s (TS §8.3; the windows' state is in the
    checkpoint). ``merge``: how several logs are merged, as ``goldilocks.replay.replay``'s
    (``"auto"``, ``"arrival"``, ``"time"``); ``format``, ``fields``: what the logs are and
    what they name a record's fields, as ``replay``'s. ``final_cti``: the logs are complete —
    after the last record a CTI at +inf closes every window still open, and its row is
    written (the merged clock only; per-key clocks end as their inputs' CTIs leave them).
    Other options as
    ``goldilocks.replay.replay``.
    Memory: one chunk per file plus the open windows (at most ``max_open``).

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.jsonl").write_text(
    ...     '{"source":"A","kind":"insert","start":5,"payload":{"t":1}}\\n'
    ...     '{"source":"A","kind":"insert","start":7,"payload":{"t":2}}\\n'
    ...     '{"source":"A","kind":"cti","start":12}\\n')
    >>> s = replay_windows([d / "a.jsonl"], window="10ns", aggregates=["mean:t"], delay=0,
    ...                    out=d / "w.jsonl")
    >>> (d / "w.jsonl").read_text()
    '{"start":0,"end":10,"count":2,"mean_t":1.5}\\n'
    """
    began = time.perf_counter()
    path_list = log_files(paths, format=format)  # a directory's parts; each one readable
    if not path_list:
        raise InputError("replay: no event logs given; expected at least one path")
    names = field_map(fields)
    pol = with_edges(resolve(policy, delay, on_late))  # TS §7: a log may hold edges
    spec = (tumbling_spec(window) if hop is None else hopping_spec(window, hop))
    folds = tuple(parse_fold(a) for a in aggregates)
    Windows(spec, folds, max_open=max_open)  # the aggregates' checks, before any work
    check_time_options(time_unit, time_format)
    if clock not in CLOCKS:
        raise UsageError("clock", f"{clock!r}; expected one of {', '.join(CLOCKS)}")
    per_key = clock == "key"
    if per_key and key != "source":
        raise UsageError("clock", "per-key clocks need key='source' (--key source): a CTI "
                         "names its input, never a payload field")
    if idle_after is not None and not per_key:
        raise UsageError("idle_after", "goes with per-key clocks (clock='key')")
    if final_cti and per_key:
        raise UsageError("final_cti", "closes the windows of the merged clock; with per-key "
                         "clocks (clock='key') each input's own CTIs close its windows")
    can_columns = (columnar_ok(pol) and all(f.kind is not None for f in folds)
                   and idle_after is None)
    if columnar is None:
        columnar = can_columns
    elif columnar and not can_columns:
        raise InputError("windows: the columnar path needs a policy with a columnar form, "
                         "built-in aggregates and no idle_after; use the element path")
    check_outputs([p for p in path_list if p != STDIN],
                  {"out": out, "late": late, "checkpoint": checkpoint})
    if checkpoint is not None and STDIN in path_list:
        raise UsageError("checkpoint", "standard input cannot be read again to resume: give "
                         "the log as a file")
    table = SourceTable()
    keys = _Keys(key, path_list, table)
    agg_fields = _Fields(folds)
    path = COLUMNAR if columnar else ELEMENT
    ck: ReplayCheckpoint | None = None
    if checkpoint is not None:
        ck = ReplayCheckpoint.open(
            checkpoint, checkpoint_every, path_list, pol,
            {"time_unit": time_unit, "time_format": time_format, "bad_records": bad_records,
             "window": [spec.size, spec.hop, spec.offset],
             "aggregates": [f.label for f in folds], "key": key, "clock": clock,
             "idle_after": (None if idle_after is None
                            else to_duration_ns(idle_after, what="idle_after")),
             "merge": merge, **({"format": format} if format else {}),
             **({"fields": names} if names else {}),
             **({"final_cti": True} if final_cti else {}),
             "max_open": max_open, "path": path},
            {"out": out, "late": late}, table.names, on_checkpoint, kind=KIND,
            counts=(_encode_cut, _decode_cut))
        if ck.complete is not None:  # a run that completed but did not finish: finish it
            ck.finish_complete()
            done: Any = ck.complete
            return _window_stats(path, pol, spec, key, folds, done.counts, began,
                                 done.missing, done.seen)
        out_sink, late_sink = ck.sinks()
        if ck.resume is not None:
            was: Any = ck.resume[1]
            agg_fields.missing, agg_fields.seen = set(was.missing), set(was.seen)
    else:
        out_sink, late_sink = open_sinks({"out": out, "late": late})
    bad = BadRecords(bad_records, None)
    iso = time_format == "iso"
    run: Callable[..., tuple]
    if per_key:
        run = (_run_key_clock_columns if columnar
               else partial(_run_key_clocks, idle_after=idle_after))
    else:
        run = partial(_run_columns if columnar else _run_elements, final_cti=final_cti)

    def cut(counts: tuple, windows: Any) -> _Cut:
        return _Cut(table.names, counts, windows, tuple(sorted(agg_fields.missing)),
                    tuple(sorted(agg_fields.seen)))

    chunks = None
    ok = False
    try:
        chunks = ahead(merge_columns(path_list, table=table, bad=bad, time_unit=time_unit,
                                     merge=merge, format=format, fields=names))
        stream: Iterable[Columns] = chunks if ck is None else ck.cut(chunks)
        counts = run(pol, spec, folds, key is not None, max_open, agg_fields.watch(stream),
                     table,
                     keys, out_sink, late_sink, iso, time_format,
                     resume=None if ck is None else ck.resume,
                     after=None if ck is None else ck.after,  # type: ignore[arg-type]
                     cut=cut)
        if ck is not None:
            ck.seal(cut(counts, None), bad.skipped)  # type: ignore[arg-type]  # TS §8.3
        ok = True
    finally:
        if chunks is not None:
            chunks.close()
        failed: OSError | None = None
        for sink in (out_sink, late_sink):
            try:
                sink.close(ok and failed is None)
            except OSError as err:
                failed = failed or err
        if failed is not None:
            raise failed
    if ck is not None:
        ck.remove()  # TS §8.3: the outputs are in place; nothing is left to resume
    return _window_stats(path, pol, spec, key, folds, counts, began, agg_fields.missing,
                         agg_fields.seen)


def _window_stats(path: str, pol: Policy, spec: WindowSpec, key: str | None,
                  folds: Sequence[Fold], counts: tuple, began: float,
                  missing: Iterable[str], seen: Iterable[str]) -> WindowReplayStats:
    records, inserts, n_late, window_late, windows, open_, peak, final = counts
    return WindowReplayStats(path, pol.name, pol.delay, spec.size, spec.hop, key,
                             tuple(f.label for f in folds), records, inserts, n_late,
                             window_late, windows, open_, peak, final,
                             time.perf_counter() - began, tuple(sorted(missing)),
                             tuple(sorted(seen)))


def _key_function(key: str | None) -> Any:
    """The element path's key of an emitted insert: its input, or its payload field."""
    if key is None or key == "source":
        return key

    def field(event: Event) -> Any:
        return event.payload[key]
    return field


def _late_lines(chunk: Columns, rows: np.ndarray, cti: np.ndarray, action: np.ndarray | None,
                names: list[str], time_format: str) -> bytes:
    """The late records of ``rows`` (few: late inserts), as the element path writes them:
    the policy's (``action`` its codes), or with ``action`` None those of inserts that found
    their window closed by ``cti`` (TS §6.2)."""
    lines = []
    ids = chunk.ids
    for r in rows.tolist():
        s = int(chunk.source[r])
        name = names[s] if s >= 0 else None
        ev = row_event(int(chunk.kind[r]), int(chunk.start[r]), int(chunk.end[r]),
                       bool(chunk.has_end[r]), chunk.payload[r], name,
                       None if ids is None else ids[r])
        c = int(cti[r])
        if action is None:
            record = LateRecord(name, ev, c, WINDOW_CLOSED)
        elif action[r] == EMIT_ADJUSTED:
            record = LateRecord(name, ev, c, "adjusted", Event(ev.kind, c, ev.end, ev.payload,
                                                               name))
        else:
            record = LateRecord(name, ev, c, "dropped")
        lines.append(encode_late(record, time_format))
    return b"".join(lines)


def _run_columns(pol: Policy, spec: WindowSpec, folds: Sequence[Fold], keyed: bool,
                 max_open: int, chunks: Iterable[Columns], table: SourceTable, keys: _Keys,
                 out: Any, late_out: Any, iso: bool, time_format: str, *,
                 resume: tuple[Any, Any] | None = None, after: After | None = None,
                 cut: MakeCut | None = None, final_cti: bool = False) -> tuple:
    kernel = WindowColumns(spec, folds, keyed, max_open=max_open)
    run = pol.run_columns  # type: ignore[attr-defined]
    state = None
    records = n_late = 0
    final = None
    if resume is not None:  # TS §8.1: the windows and counts at the cut
        state, was = resume
        kernel.load(was.windows, keys.found.add)
        records, n_late, final = was.counts[0], was.counts[2], was.counts[7]

    def now() -> _Cut:
        assert cut is not None
        return cut((records, kernel.inserts, n_late, kernel.late, kernel.emitted, kernel.open,
                    kernel.peak, final), kernel.snapshot(keys.names))
    for chunk in chunks:
        records += len(chunk)
        if chunk.ids is not None and (chunk.kind >= START).any():
            # TS §7.7: the kernels know no edges; the policy's step decides this block, and
            # the windows pass over the end edges (TS §7.8)
            c = chunk
            is_cti = c.kind == CTI
            action, cti, state, _, late_text = step_chunk(pol, c, state, table.names, iso,
                                                          late_out.file is not None)
            n_late += int(((action == DROP_LATE) | (action == EMIT_ADJUSTED)).sum())
            late_out.write(late_text)
            passed = c.kind == END
        else:
            timed = timed_kind(chunk.kind)
            c = chunk if timed.all() else chunk.take(np.flatnonzero(timed))
            is_cti = c.kind == CTI
            action, cti, state = run(is_cti, c.start, c.end, state)
            action = np.asarray(action, np.int8)
            cti = np.asarray(cti, np.int64)
            late_rows = np.flatnonzero(~is_cti & (action != EMIT))
            n_late += len(late_rows)
            if late_out.file is not None and len(late_rows):
                late_out.write(_late_lines(c, late_rows, cti, action, table.names,
                                           time_format))
            passed = np.zeros(len(c), np.bool_)
        keep = np.flatnonzero(((action == EMIT) | (action == EMIT_ADJUSTED) |
                               (action == CTI_EMIT)) & ~passed)
        emitted_cti = action[keep] == CTI_EMIT
        start = np.where(action[keep] == EMIT, c.start[keep], cti[keep])
        if emitted_cti.any():
            final = int(start[emitted_cti][-1])
        closed = kernel.run(emitted_cti, start, keys.codes_of(c)[keep],
                            [v[keep] for v in _values(folds, c)], keys.names)
        out.write(_rows(closed.end.tolist(), closed.key.tolist(), closed.count.tolist(),
                        [(v.tolist(), has.tolist()) for v, has in closed.values], folds,
                        spec.size, keyed, keys.names, iso))
        if after is not None:
            after(pol.initial() if state is None else state, now)
    late_out.write(finish_lines(pol, pol.initial() if state is None else state, iso)[1])
    if final_cti:  # the logs are complete: a CTI at +inf closes every window still open
        closed = kernel.run(np.ones(1, np.bool_), np.full(1, MAX_TIME, np.int64),
                            np.full(1, -1, np.int32), [np.zeros(1) for _ in folds], keys.names)
        out.write(_rows(closed.end.tolist(), closed.key.tolist(), closed.count.tolist(),
                        [(v.tolist(), has.tolist()) for v, has in closed.values], folds,
                        spec.size, keyed, keys.names, iso))
    return (records, kernel.inserts, n_late, kernel.late, kernel.emitted, kernel.open,
            kernel.peak, final)


def _run_key_clock_columns(pol: Policy, spec: WindowSpec, folds: Sequence[Fold], keyed: bool,
                           max_open: int, chunks: Iterable[Columns], table: SourceTable,
                           keys: _Keys, out: Any, late_out: Any, iso: bool,
                           time_format: str, *, resume: tuple[Any, Any] | None = None,
                           after: After | None = None, cut: MakeCut | None = None) -> tuple:
    """Per-key clocks on columns (TS §6.3): the rows, late records and counts of
    ``_run_key_clocks``. Each input's inserts and CTIs of a chunk go through
    ``policy.run_columns`` from that input's carried state; every insert, and the CTIs the
    policy emits, go to the window kernel in arrival order, each CTI moving its input's clock
    only."""
    kernel = WindowColumns(spec, folds, True, max_open=max_open, per_key=True)
    run = pol.run_columns  # type: ignore[attr-defined]
    states: dict[str, Any] = {}  # each input's policy state, by name
    names = table.names
    records = 0
    if resume is not None:  # TS §8.1: each input's clock, policy state and windows
        states = kernel.load(resume[1].windows, keys.found.add, clocks=pol)
        records = resume[1].counts[0]

    def now() -> _Cut:
        assert cut is not None
        return cut((records, kernel.inserts, 0, kernel.late, kernel.emitted, kernel.open,
                    kernel.peak, None), kernel.snapshot(keys.names, clocks=pol, states=states))
    initial = pol.initial()
    for chunk in chunks:
        records += len(chunk)
        # the element path's rows: every insert and start edge (an edge counts by its start
        # edge, TS §7.8), and the CTIs that name an input
        timed = _folded(chunk) | ((chunk.kind == CTI) & (chunk.source >= 0))
        c = chunk if timed.all() else chunk.take(np.flatnonzero(timed))
        is_cti = c.kind == CTI
        action = np.zeros(len(c), np.int8)
        cti = np.zeros(len(c), np.int64)
        order = np.argsort(c.source, kind="stable")
        for rows in np.split(order, np.flatnonzero(np.diff(c.source[order])) + 1):
            if len(rows):
                s = names[int(c.source[rows[0]])]
                action[rows], cti[rows], states[s] = run(is_cti[rows], c.start[rows],
                                                         c.end[rows], states.get(s))
        keep = np.flatnonzero(~is_cti | (action == CTI_EMIT))
        closed = kernel.run(is_cti[keep], np.where(is_cti, cti, c.start)[keep],
                            keys.codes_of(c, ctis=True)[keep],
                            [v[keep] for v in _values(folds, c)], keys.names)
        out.write(_rows(closed.end.tolist(), closed.key.tolist(), closed.count.tolist(),
                        [(v.tolist(), has.tolist()) for v, has in closed.values], folds,
                        spec.size, True, keys.names, iso))
        late_rows = np.flatnonzero(closed.late)
        if late_out.file is not None and len(late_rows):
            clock = np.zeros(len(c), np.int64)
            clock[keep] = closed.clock
            late_out.write(_late_lines(c, keep[late_rows], clock, None, table.names,
                                       time_format))
        if after is not None:
            after(initial, now)
    return (records, kernel.inserts, 0, kernel.late, kernel.emitted, kernel.open, kernel.peak,
            None)


def _rows(ends: list, codes: list, counts: list, values: list, folds: Sequence[Fold],
          size: int, keyed: bool, names: list[str], iso: bool) -> bytes:
    labels = [f.label for f in folds]
    ints = [f.kind == "count" for f in folds]
    lines = []
    for i, end in enumerate(ends):
        vals = [(label, (int(v[i]) if is_int else v[i]) if has[i] else None)
                for label, is_int, (v, has) in zip(labels, ints, values)]
        lines.append(window_row(end - size, end, names[codes[i]] if keyed else None,
                                counts[i], vals, keyed, iso))
    return b"".join(lines)


def _records(chunk: Columns) -> Iterator[tuple]:
    """A chunk's rows as ``(kind, source code, start, end, has_end, payload, id)``."""
    return zip(chunk.kind.tolist(), chunk.source.tolist(), chunk.start.tolist(),
               chunk.end.tolist(), chunk.has_end.tolist(), chunk.payload,
               chunk.ids or [None] * len(chunk))


def _window_step(windows: Windows, event: Event, rows: list[bytes], late: list[bytes] | None,
                 keyed: bool, iso: bool, time_format: str) -> None:
    """``windows.step(event)``: each closed window as a row, each late record as a line of
    ``late`` (if kept); the CTIs it passes on are not written."""
    for r in windows.step(event):
        if isinstance(r, LateRecord):
            if late is not None:
                late.append(encode_late(r, time_format))
        elif r.kind != CTI_KIND:
            res: WindowResult = r.payload
            rows.append(window_row(res.start, res.end, res.key, res.count,
                                   list(res.values.items()), keyed, iso))


def _run_key_clocks(pol: Policy, spec: WindowSpec, folds: Sequence[Fold], keyed: bool,
                    max_open: int, chunks: Iterable[Columns], table: SourceTable, keys: _Keys,
                    out: Any, late_out: Any, iso: bool, time_format: str,
                    idle_after: DurationLike | None = None, *,
                    resume: tuple[Any, Any] | None = None,
                    after: After | None = None, cut: MakeCut | None = None) -> tuple:
    """Per-key clocks (TS §6.3): the arrivals themselves go to ``Windows(clocks=policy)``,
    each input's CTIs through its own copy of the policy; rows come out as each input's clock
    closes them; late records are the inserts that found their window closed (TS §6.2)."""
    windows = Windows(spec, folds, key="source", clocks=pol, idle_after=idle_after,
                      max_open=max_open)
    names = table.names
    records = 0
    late_on = late_out.file is not None
    if resume is not None:  # TS §8.1: each input's clock, policy state and windows
        windows.load(resume[1].windows)
        records = resume[1].counts[0]

    def now() -> _Cut:
        assert cut is not None
        st_ = windows.stats()
        return cut((records, st_.inserts, 0, st_.late, st_.emitted, st_.open, st_.peak_open,
                    None), windows.snapshot())
    initial = pol.initial()
    for chunk in chunks:
        buf: list[bytes] = []
        lbuf: list[bytes] = []
        for k, s, st, en, he, pl, id_ in _records(chunk):
            records += 1
            if k == INSERT or k == START:  # TS §7.8: an edge counts by its start edge
                event = row_event(k, st, en, he, pl, names[s], id_)
            elif k == CTI and s >= 0:
                event = Event(CTI_KIND, st, None, None, names[s])
            else:
                continue  # joins, leaves and CTIs of no input move no input's clock
            _window_step(windows, event, buf, lbuf if late_on else None, True, iso,
                         time_format)
        out.write(b"".join(buf))
        if lbuf:
            late_out.write(b"".join(lbuf))
        if after is not None:
            after(initial, now)
    st_ = windows.stats()
    return (records, st_.inserts, 0, st_.late, st_.emitted, st_.open, st_.peak_open, None)


def _run_elements(pol: Policy, spec: WindowSpec, folds: Sequence[Fold], keyed: bool,
                  max_open: int, chunks: Iterable[Columns], table: SourceTable, keys: _Keys,
                  out: Any, late_out: Any, iso: bool, time_format: str, *,
                  resume: tuple[Any, Any] | None = None, after: After | None = None,
                  cut: MakeCut | None = None, final_cti: bool = False) -> tuple:
    windows = Windows(spec, folds, key=_key_function(keys.key), max_open=max_open)
    step, join, leave = pol.step, pol.join, pol.leave
    state = pol.initial()
    names = table.names
    records = n_late = 0
    final = None
    late_on = late_out.file is not None
    if resume is not None:  # TS §8.1: the policy's state, the windows and counts at the cut
        state, was = resume
        windows.load(was.windows)
        records, n_late, final = was.counts[0], was.counts[2], was.counts[7]

    def now() -> _Cut:
        assert cut is not None
        st_ = windows.stats()
        return cut((records, st_.inserts, n_late, st_.late, st_.emitted, st_.open,
                    st_.peak_open, final), windows.snapshot())
    for chunk in chunks:
        keys.codes_of(chunk)  # a row without its key is refused here, naming file and line
        buf: list[bytes] = []
        lbuf: list[bytes] = []
        for k, s, st, en, he, pl, id_ in _records(chunk):
            records += 1
            name = names[s] if s >= 0 else None
            if k == CTI:
                state, outs = step(state, Event(CTI_KIND, st, None, None, name))
            elif k == JOIN or k == LEAVE:
                state, outs = (join if k == JOIN else leave)(state, names[s])
            else:  # an insert or an edge (TS §7)
                state, outs = step(state, row_event(k, st, en, he, pl, name, id_))
            for o in outs:
                if isinstance(o, LateRecord):
                    n_late += 1
                    if late_on:
                        lbuf.append(encode_late(o, time_format))
                    continue
                if o.kind == CTI_KIND:
                    final = o.start
                _window_step(windows, o, buf, lbuf if late_on else None, keyed, iso,
                             time_format)
        out.write(b"".join(buf))
        if lbuf:
            late_out.write(b"".join(lbuf))
        if after is not None:
            after(state, now)
    late_out.write(finish_lines(pol, state, iso)[1])  # TS §7.5: the edges never closed
    if final_cti:  # the logs are complete: a CTI at +inf closes every window still open
        buf = []
        _window_step(windows, Event(CTI_KIND, MAX_TIME, None, None, None), buf, None, keyed,
                     iso, time_format)
        out.write(b"".join(buf))
    st_ = windows.stats()
    return (records, st_.inserts, n_late, st_.late, st_.emitted, st_.open, st_.peak_open, final)
