"""Replay's columnar path: the policy over whole columns, the output written from columns.

``run_columnar`` takes the merged chunks one at a time: ``policy.run_columns`` decides every
row at once (emit, drop, adjust, a CTI or nothing) with the state the previous chunk left
(``policy.run_source_columns`` for a rule that reads which input sent each row, joins and
leaves included: ``quantile``, ``goldilocks(max_ahead=…)``; its late rows carry a reason),
the statistics are counted with ``bincount``, and the chunk is written and dropped before the
next one. Writing never encodes a record one by one: each insert's canonical line is either
the input's own bytes (``Columns.raw``: a scanner proved them canonical) or built for the
whole chunk at once (``eventlog.write_columns``, on pyarrow); ``write_lines`` copies the
emitted lines out, joins the late lines from them, and writes only CTIs and adjusted lines
one at a time. The bytes are those of the record encoders (TS §5.1; ``tests/replay``).
Memory: O(chunk), plus the plot's columns if asked.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import orjson

from engine.policy import CTI_EMIT, DROP_LATE, EMIT, EMIT_ADJUSTED, Policy
from eventlog import CTI, INSERT, JOIN, LEAVE, Columns, SourceTable, insert_prefix
from eventlog.columns import PAD, Payloads, RawLines, gather
from eventlog.format import cti_line, cti_line_iso, iso_time
from eventlog.format import START, timed as timed_kind
from eventlog.write_columns import decimals, insert_lines, iso_times, late_text
from goldilocks.edge_rows import NO_ACTION, finish_lines, step_chunk
from goldilocks.outputs import Output
from operators.robust_columns import REASONS
from operators.edges import edge_stats

__all__ = ["Tally", "run_columnar", "write_lines", "chunk_lines"]

_NO_ACTION = NO_ACTION  # join/leave rows in the columnar decision column


@dataclass
class Tally:
    """What a replay counted: per input, indexed by source code + 1 (0: CTIs without a
    source), the last CTI in and out by source code, records per file, the totals, and the
    plot's columns (source, start, is_cti, late, rows of the output CTIs, their values)."""

    names: list[str]
    received: Sequence[int] = ()
    inserts: Sequence[int] = ()
    ctis: Sequence[int] = ()
    emitted: Sequence[int] = ()
    late: Sequence[int] = ()
    adjusted: Sequence[int] = ()
    control: Sequence[int] = ()
    ctis_out: Sequence[int] = ()
    last_cti: dict[int, int] = field(default_factory=dict)
    last_out: dict[int, int] = field(default_factory=dict)
    per_file: dict[int, int] = field(default_factory=dict)
    records: int = 0
    emitted_total: int = 0
    ctis_total: int = 0
    late_total: int = 0
    adjusted_total: int = 0
    final: int | None = None
    plot: tuple[np.ndarray, ...] | None = None
    edges: Any = None  # the edges' accounting (operators.edges.EdgeStats), if any


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


def run_columnar(pol: Policy, chunks: Iterable[Columns], table: SourceTable, out: Output,
                 late_out: Output, plot: bool, iso: bool = False, *,
                 resume: tuple[Any, Tally] | None = None,
                 after: Callable[[Any, Callable[[], Tally]], None] | None = None) -> Tally:
    """One pass, chunk by chunk: the policy state (``run_columns``'s third value) is carried
    from chunk to chunk, so nothing of a chunk outlives it (TS §5.1: the decisions do not
    depend on where the chunks are cut). ``resume``: the policy state and the counts to
    start from (a checkpoint's, ``goldilocks.resume``); ``after(state, tally)`` is called
    once each chunk is written, ``tally()`` giving the counts so far."""
    names = table.names
    run = pol.run_columns  # type: ignore[attr-defined]
    by_source = getattr(pol, "run_source_columns", None)  # a rule that reads the inputs
    state = None
    counts = _Counts()
    tally = Tally(names)
    if resume is not None:
        state, tally = resume[0], replace(resume[1], names=names)
        for name in _Counts.__slots__:
            counts.add(name, np.asarray(getattr(tally, name), np.int64))

    def now() -> Tally:
        return replace(tally, last_cti=dict(tally.last_cti), last_out=dict(tally.last_out),
                       per_file=dict(tally.per_file),
                       **{k: getattr(counts, k).tolist() for k in _Counts.__slots__})
    prefixes = _Prefixes(names)
    plot_parts: list[tuple[np.ndarray, ...]] = []
    timed_before = 0
    for chunk in chunks:
        n = len(chunk)
        kind = chunk.kind
        source = chunk.source
        start = chunk.start
        is_cti = kind == CTI
        timed = timed_kind(kind)
        why = None
        edges = chunk.ids is not None and bool((kind >= START).any())
        if edges:  # TS §7.7: the kernels know no edges; the policy's step decides the block
            action, cti, state, text, late_text_ = step_chunk(pol, chunk, state, names, iso,
                                                              late_out.file is not None)
            kind = np.where(kind >= START, INSERT, kind)  # counted as the inserts they are
        elif by_source is not None:  # every row, joins and leaves included
            change = (kind == JOIN).astype(np.int8) - (kind == LEAVE).astype(np.int8)
            action, cti, why, state = by_source(is_cti, change, source, start, chunk.end,
                                                names, state)
        elif timed.all():
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
        _last_by_source(source[cti_rows], start[cti_rows], tally.last_cti)
        emit_cti_rows = np.flatnonzero(action == CTI_EMIT)
        _last_by_source(source[emit_cti_rows], cti[emit_cti_rows], tally.last_out)
        tally.records += n
        totals = by_action.sum(axis=0)
        tally.emitted_total += int(totals[EMIT] + totals[EMIT_ADJUSTED])
        tally.ctis_total += len(emit_cti_rows)
        tally.late_total += int(totals[DROP_LATE] + totals[EMIT_ADJUSTED])
        tally.adjusted_total += int(totals[EMIT_ADJUSTED])
        if len(emit_cti_rows):
            tally.final = int(cti[emit_cti_rows[-1]])
        for f, c in enumerate(np.bincount(chunk.file).tolist()):
            if c:
                tally.per_file[f] = tally.per_file.get(f, 0) + c
        if plot:
            is_late = (action == DROP_LATE) | (action == EMIT_ADJUSTED)
            rows_index = np.cumsum(timed) - 1 + timed_before
            ends = np.where(chunk.has_end, chunk.end, start + 1)
            plot_parts.append((source[timed], start[timed], is_cti[timed], is_late[timed],
                               rows_index[emit_cti_rows], cti[emit_cti_rows],
                               (action == EMIT_ADJUSTED)[timed], ends[timed]))
            timed_before += int(timed.sum())
        if edges:
            out.write(text)
            late_out.write(late_text_)
        else:
            write_lines(chunk_lines(chunk, prefixes, iso), action, cti, out, late_out, iso, why)
        del chunk
        if after is not None:
            after(state, now)
    if state is None:  # no rows at all
        state = pol.initial()
    state, text, _ = finish_lines(pol, state, iso)  # TS §7.5: the edges never closed
    late_out.write(text)
    tally.edges = edge_stats(pol, state)

    if plot:
        dtypes = (np.int32, np.int64, np.bool_, np.bool_, np.int64, np.int64, np.bool_,
                  np.int64)
        tally.plot = tuple(np.concatenate([p[k] for p in plot_parts]) if plot_parts
                           else np.zeros(0, dtype) for k, dtype in enumerate(dtypes))
    for name in _Counts.__slots__:
        setattr(tally, name, getattr(counts, name).tolist())
    return tally


def write_lines(raw: RawLines, action: np.ndarray, cti: np.ndarray, out: Output,
                late_out: Output, iso: bool = False, why: np.ndarray | None = None) -> None:
    """Write a chunk from its inserts' canonical lines (``chunk_lines``): emitted inserts are
    copied out of them and late lines joined from them for the whole chunk; only CTIs and
    adjusted lines are built one by one. The bytes are those ``insert_line`` and ``late_line`` would
    write (TS §5.1); with ``iso``, those of ``insert_line_iso`` and ``late_line_iso``.
    ``why``: per row a code into ``operators.robust_columns.REASONS`` (the late lines'
    ``reason``), or ``None`` when no row has one."""
    data, body, stop = raw.data, raw.body, raw.stop
    emit = action == EMIT
    rows = np.flatnonzero(emit)
    # the kept bytes: runs [body, stop) of the emitted rows, the rest skipped
    kept = memoryview(gather(data, body[rows], stop[rows]))  # type: ignore[arg-type]
    if late_out.file is not None:
        late = np.flatnonzero((action == DROP_LATE) | (action == EMIT_ADJUSTED))
        if len(late):
            late_out.write(memoryview(late_text(  # type: ignore[arg-type]
                raw, late, cti[late], action[late] == EMIT_ADJUSTED,
                iso_times if iso else decimals, None if why is None else why[late], REASONS)))
    rows = np.flatnonzero((action == CTI_EMIT) | (action == EMIT_ADJUSTED))
    if not len(rows):
        out.write(kept)
        return
    lens = np.where(emit, stop - body, 0)
    at = (np.cumsum(lens) - lens)[rows]  # where each special row goes in ``kept``
    parts: list[Any] = []
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
    """The ``insert_prefix`` of every input name so far, by source code, extended as new
    names appear."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.prefixes: list[bytes] = []

    def get(self) -> list[bytes]:
        for name in self.names[len(self.prefixes):]:
            self.prefixes.append(insert_prefix(name))
        return self.prefixes


def chunk_lines(chunk: Columns, prefixes: _Prefixes, iso: bool = False) -> RawLines:
    """The canonical line of each insert of the chunk (``insert_line``'s bytes, or with
    ``iso`` ``insert_line_iso``'s): the input lines if the chunk has them and the times are
    integers, else built for the whole chunk (``eventlog.write_columns.insert_lines``) from
    the payload texts of a ``Payloads`` column, or from each payload encoded once."""
    if chunk.raw is not None and not iso:
        return chunk.raw
    n = len(chunk)
    rows = np.flatnonzero(chunk.kind == INSERT)
    payload = chunk.payload
    if isinstance(payload, Payloads):
        buffer = payload.buffer
        p0, p1 = payload.texts(rows)
    else:  # each payload encoded into one buffer (orjson's own results are not kept:
        # holding thousands of them costs several times the encoding)
        texts = io.BytesIO()
        write, dumps = texts.write, orjson.dumps
        lens = np.fromiter((0 if (v := payload[i]) is None else write(dumps(v))
                            for i in rows.tolist()), np.int64, len(rows))
        p1 = np.cumsum(lens)
        p0 = p1 - lens
        texts.write(bytes(PAD))
        buffer = np.frombuffer(texts.getbuffer(), np.uint8)
    return insert_lines(prefixes.get(), chunk.source, chunk.start, chunk.end, chunk.has_end,
                        buffer, p0, p1, rows, n, iso_times if iso else decimals)
