"""The validity rules of a record, written once (``docs/event-log.md``, TS §5.2-5.4).

Every parser of every format — the vectorised scanners (``eventlog.fast``) and the object path
(JSON decoded by orjson, CSV cells, Parquet rows as Python values) — hands its block to this
module as ``RawColumns``: one row per record, each value as found, and for each time *what*
was found (absent, null, an integer in the file's unit, nanoseconds, an integer beyond int64,
not an instant). Parsers decide nothing about validity; ``_verdict`` applies every rule below
to all rows at once with numpy and gives each row the first rule it breaks, in the order the
rules are listed (a record breaking several is reported for the first):

==================  ===============================================================
rule                a row breaks it when
==================  ===============================================================
``UNREADABLE``      its text is not one value of the format (not JSON, not UTF-8, …)
``NOT_RECORD``      it is not an object
``KIND_MISSING``    it has no ``kind``
``KIND_UNKNOWN``    its kind is not insert, cti, join or leave
``SOURCE_MISSING``  an insert, join or leave without a ``source``
``SOURCE_TYPE``     a ``source`` that is not a string
``START_*``         an insert or CTI whose ``start`` is missing or not an instant (TS §5.4)
``CTI_END``         a CTI with an ``end``
``CTI_PAYLOAD``     a CTI with a payload
``POINT_AT_MAX``    a point at the latest instant (its one-tick lifetime does not fit)
``END_*``           an interval whose ``end`` is not an instant, or not after its start
``KEY_*``           the file's order key (TS §5.2): missing, not an instant or an int64,
                    or before the previous good record's
``EDGE_END``        a start edge with an ``end`` (its end edge closes it, TS §7.1)
``EDGE_NO_END``     an end edge without an ``end``
``EDGE_ID``         an edge whose ``id`` is missing or not a string or an integer
==================  ===============================================================

(The edge rules are checked where they belong in that order: ``EDGE_END`` with the CTI's,
``EDGE_NO_END`` before ``END_*``, ``EDGE_ID`` after them.)

The order key is the first good record's ``arrival``, else its ``seq``, else its position.

The object path builds its raw columns from Python values with ``eventlog.values``.
``accept`` (the fast scanners) takes a block only if every row is good; ``settle`` (the
object path) keeps the good rows and hands each bad one, in order, to ``BadRecords`` with
``explain``'s error: file:line, field and what was expected (TS §5.3). Both build the same
``Columns`` from the same rules, so which parser read a block never changes the records, the
names' codes or the errors.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, BinaryIO, Callable, NamedTuple, Sequence

import numpy as np
import orjson

from engine.errors import BadRecordError, InputError
from engine.times import (MAX_TIME, NS_PER_S, TIME_UNITS, UNSCALED_RANGES, format_instant,
                          format_rfc3339, looks_unscaled)

from eventlog.columns import Columns, Payloads, RawLines, SourceTable
from eventlog.format import (ALL_KIND_CODES, BAD_RECORD_MODES, CTI, END, INSERT, JOIN, LEAVE,
                             START, open_log)
from eventlog.logfile import LogFile

__all__ = [
    "ABSENT", "NULL", "INT", "NS", "BIG", "BAD",
    "NO_KIND", "BAD_KIND", "NOT_RECORD", "NO_SOURCE", "BAD_SOURCE",
    "MISSING",
    "Times",
    "Block",
    "RawColumns",
    "FileState",
    "RECORD_FIELDS",
    "field_map",
    "Span",
    "BadRecords",
    "time_scale",
    "accept",
    "settle",
]

# what a time cell held (``Times.state``)
ABSENT, NULL, INT, NS, BIG, BAD = 0, 1, 2, 3, 4, 5
# kind codes beside INSERT, CTI, JOIN, LEAVE
NO_KIND, BAD_KIND, NOT_RECORD = -1, -2, -3
# source codes beside an index into the names
NO_SOURCE, BAD_SOURCE = -1, -2

#: a field the record does not have (beside ``None``: it has it, as null)
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


class Times(NamedTuple):
    """A time column as found: ``value`` int64 (the integer in the file's unit where ``state``
    is ``INT``, nanoseconds where ``NS``, 0 elsewhere) and ``state`` int8 per row."""

    value: np.ndarray
    state: np.ndarray

    @staticmethod
    def absent(n: int) -> Times:
        return Times(np.zeros(n, np.int64), np.zeros(n, np.int8))

    @staticmethod
    def ints(values: np.ndarray, present: np.ndarray | None = None) -> Times:
        """Integers in the file's unit (``present``: where there is one; the rest absent)."""
        if present is None:
            return Times(values, np.full(len(values), INT, np.int8))
        return Times(values, np.where(present, INT, ABSENT).astype(np.int8))


@dataclass(frozen=True, eq=False)
class Block:
    """A piece of one log as a reader hands it to the fast scanners (``eventlog.fast``).

    ``format``: ``"jsonl"`` (``data`` a bytearray whose first ``size`` bytes are whole
    lines, followed by at least ``PAD`` spare bytes), ``"csv"`` (``data`` the ``size`` bytes
    of whole rows after the header, whose column names are ``header``) or ``"parquet"``
    (``data`` a pyarrow ``RecordBatch``; ``size`` its rows). ``first_line``: the line (row) number of its first
    record; ``state``: the file's reading state (order key, unit, source table).
    """

    format: str
    data: Any
    size: int
    first_line: int
    state: FileState
    header: tuple[str, ...] = ()


@dataclass(eq=False)
class RawColumns:
    """One block as a parser found it, before any rule (one row per record).

    ``kind`` int8 (a kind code, or ``NO_KIND``/``BAD_KIND``/``NOT_RECORD``); ``source``
    int32 (an index into ``names``, or ``NO_SOURCE``/``BAD_SOURCE``; with ``names`` ``None``
    the codes are already the ``SourceTable``'s); ``payload`` a list (``None``: none) or
    ``Payloads``, and ``has_payload`` where there is one; ``unreadable``: rows whose text is
    not a value at all, with their message and field. ``objects[i]`` is row ``i``'s record
    as Python values, for messages (``None``: a fast scanner's block, taken whole or not at
    all); ``text(i)`` its input text, for the quarantine. ``counted``: rows that take a
    position (``None``: all). ``raw``: the rows' canonical lines, if the parser proved them.
    """

    lines: np.ndarray
    kind: np.ndarray
    source: np.ndarray
    names: list[str] | None
    start: Times
    end: Times
    seq: Times
    arrival: Times
    payload: Sequence[Any]
    has_payload: np.ndarray
    objects: Any = None
    text: Callable[[int], bytes | str] | None = None
    unreadable: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    counted: np.ndarray | None = None
    raw: RawLines | None = None
    #: the ``id`` of each record as found (``MISSING`` where none; ``None``: no such field)
    ids: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.kind)


@dataclass
class BadRecords:
    """What to do with a bad record (TS §5.3): ``fail`` (raise), ``skip`` or ``quarantine``.

    Counts per file are kept in ``skipped``; with ``quarantine`` each bad record is also
    appended to ``sink`` (a binary file) as ``{"file","line","error","raw"}``.
    """

    mode: str = "fail"
    sink: Any = None
    skipped: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in BAD_RECORD_MODES:
            raise InputError(f"bad_records={self.mode!r}; expected one of {', '.join(BAD_RECORD_MODES)}")
        if self.mode == "quarantine" and self.sink is None:
            raise InputError("bad_records='quarantine' needs a quarantine file")

    def handle(self, err: BadRecordError, raw: bytes | str) -> None:
        if self.mode == "fail":
            raise err
        self.skipped[err.path] = self.skipped.get(err.path, 0) + 1  # TS §5.3: counted
        if self.sink is not None:
            text = raw if isinstance(raw, str) else raw.decode("utf-8", "backslashreplace")
            self.sink.write(orjson.dumps({"file": err.path, "line": err.line,
                                          "error": str(err), "raw": text.rstrip("\r\n")}) + b"\n")


def time_scale(time_unit: str | None) -> int | None:
    """Nanoseconds per unit of a log's integer times: ``None`` (no unit given: nanoseconds,
    refusing integers implausible as such, ``engine.times.looks_unscaled``) or a
    ``TIME_UNITS`` name (``"s"``, ``"ms"``, ``"us"``, ``"ns"``: taken in that unit, unchecked)."""
    if time_unit is None:
        return None
    try:
        return TIME_UNITS[time_unit]
    except (KeyError, TypeError):
        raise InputError(f"time_unit={time_unit!r}; expected one of "
                         f"{', '.join(TIME_UNITS)} or None") from None


@dataclass(frozen=True)
class Span:
    """A piece of a JSON Lines or CSV log read by itself: the bytes ``[start, stop)``
    (``stop`` ``None``: to the end of the file), which begin at a line start, line number
    ``first_line``. ``mode``: the file's order key (its first good record's; ``None``: found
    from the span's own first good record, as for a whole file). ``last_key``: the largest
    order key of the good records before the span (the order check starts from it). A CSV
    span after the header reads the header from the file's first line. The whole file is
    ``Span()``."""

    start: int = 0
    stop: int | None = None
    first_line: int = 1
    mode: str | None = None
    last_key: int = -(2**63)

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop is None


#: the fields of a record a field mapping may name (``--field start=created``)
RECORD_FIELDS = ("source", "kind", "start", "end", "payload", "id", "seq", "arrival")


def field_map(fields: dict[str, str] | None) -> dict[str, str]:
    """``fields`` (a record's field -> the name it has in the logs) checked: ``{}`` for
    ``None``; an ``InputError`` for a name that is not a record's field or two fields read
    from one name."""
    if not fields:
        return {}
    for target, name in fields.items():
        if target not in RECORD_FIELDS:
            raise InputError(f"field {target!r}={name!r}: {target!r} is not a field of a "
                             f"record; expected one of {', '.join(RECORD_FIELDS)}")
        if not isinstance(name, str) or not name:
            raise InputError(f"field {target}={name!r}: expected the name of a field of the "
                             "logs' records")
    names = list(fields.values())
    if len(set(names)) != len(names):
        raise InputError(f"fields {fields!r}: two fields read from one name")
    return dict(fields)


class FileState:
    """Per-file reading state: order-key mode, last key, record position, and the unit of
    integer times (``scale``: see ``time_scale``); ``span``: the part of the file read;
    ``fields``: the names the file's records give the fields (``field_map``; a record
    without a kind is then an insert)."""

    __slots__ = ("path", "index", "table", "bad", "mode", "last_key", "position", "scale",
                 "span", "fields", "file")

    def __init__(self, path: str, index: int, table: SourceTable, bad: BadRecords,
                 scale: int | None = None, span: Span = Span(),
                 fields: dict[str, str] | None = None, file: LogFile | None = None) -> None:
        self.file = file  # how to open it when it is not a plain local path (``LogFile``)
        self.path = path
        self.index = index
        self.table = table
        self.bad = bad
        self.scale = scale
        self.span = span
        self.fields = fields or {}
        self.mode: str | None = span.mode  # "arrival" | "seq" | "position"
        self.last_key = span.last_key
        self.position = 0

    def error(self, line: int, message: str, field: str | None = None) -> BadRecordError:
        """The bad record error at ``line``; a field is named as the file names it."""
        if field is not None and field in self.fields:
            field = self.fields[field]
        return BadRecordError(self.path, line, message, field=field)

    def open(self, raw: bool = False) -> BinaryIO:
        """The file's bytes, from its start: a ``LogFile``'s opener, else the local file,
        standard input or a compressed file (``eventlog.format.open_log``; unbuffered with
        ``raw``)."""
        if self.file is not None:
            return self.file.open()
        opened: BinaryIO = open_log(self.path, raw=raw)
        return opened

    def size(self) -> int:
        return self.file.size() if self.file is not None else os.path.getsize(self.path)


# -- the rules ---------------------------------------------------------------------------

(UNREADABLE, NOT_A_RECORD, KIND_MISSING, KIND_UNKNOWN, SOURCE_MISSING, SOURCE_TYPE,
 START_MISSING, START_BAD, START_UNSCALED, START_RANGE, CTI_END, CTI_PAYLOAD, POINT_AT_MAX,
 END_BAD, END_UNSCALED, END_RANGE, END_ORDER, KEY_MISSING, KEY_BAD, KEY_UNSCALED, KEY_RANGE,
 KEY_ORDER, EDGE_END, EDGE_NO_END, EDGE_ID) = range(1, 26)

#: the span of the integers ``looks_unscaled`` refuses: a column's minimum (or maximum)
#: mostly shows that it holds none of them
_UNSCALED_LO = UNSCALED_RANGES[0][1]
_UNSCALED_HI = UNSCALED_RANGES[-1][2]


def _unscaled(values: np.ndarray) -> np.ndarray | None:
    """Where integers taken as nanoseconds look like another unit (``looks_unscaled``);
    ``None``: nowhere (one pass for a column of today's nanoseconds)."""
    if not len(values) or values.min() >= _UNSCALED_HI or values.max() < _UNSCALED_LO:
        return None
    found = np.zeros(len(values), np.bool_)
    for _, lo, hi in UNSCALED_RANGES:
        found |= (values >= lo) & (values < hi)
    found &= values % NS_PER_S != 0  # whole seconds: a relative clock
    return found


class _Rules:
    """The first rule each row breaks (0: none), filled rule by rule in their order."""

    __slots__ = ("code",)

    def __init__(self, n: int) -> None:
        self.code = np.zeros(n, np.int8)

    def add(self, rule: int, where: np.ndarray | None) -> None:
        if where is not None and where.any():
            code = self.code
            code[where & (code == 0)] = rule

    def instant(self, t: Times, applies: np.ndarray, scale: int | None,
                first: int) -> np.ndarray:
        """The rules of an instant (``first``: its BAD rule, then UNSCALED and RANGE), for
        the rows where it ``applies``; returns the column in nanoseconds."""
        state, value = t.state, t.value
        if not applies.any():
            return value
        top = int(state.max())  # a scanner's column holds integers only: most checks go
        out = None
        if top >= BIG:
            self.add(first, applies & (state == BAD))
            out = state == BIG
        if scale is None:  # TS §5.4: never a silent instant in 1970
            ns = value
            unscaled = _unscaled(np.where(state == INT, value, 0) if top >= NS else value)
            if unscaled is not None:
                self.add(first + 1, applies & unscaled)
        elif scale == 1:
            ns = value
        else:
            is_int = state == INT
            beyond = is_int & ((value < -(2**63 // scale)) | (value > (2**63 - 1) // scale))
            out = beyond if out is None else out | beyond
            ns = np.where(is_int & ~beyond, value * scale, value)
        if out is not None:
            self.add(first + 2, applies & out)
        return ns


@dataclass
class _Verdict:
    rule: np.ndarray  # int8, 0 where the row is good
    mode: str | None
    start: np.ndarray
    end: np.ndarray
    has_end: np.ndarray
    key: np.ndarray
    before: np.ndarray | None  # per row: the previous good key (KEY_ORDER's message)


def _restore(raw: RawColumns, st: FileState) -> None:
    """Give the records of a file the fields its folder names (``LogFile.fields``: Spark's
    ``partitionBy`` takes them out of the records) where they lack them."""
    assert st.file is not None
    for name, value in st.file.fields:
        if name == "source" and value is not None:
            absent = raw.source == NO_SOURCE
            if absent.any():
                if raw.names is not None:
                    if value not in raw.names:
                        raw.names = [*raw.names, value]
                    code = raw.names.index(value)
                else:
                    code = st.table.add(value)
                raw.source = np.where(absent, np.int32(code), raw.source).astype(np.int32)
                raw.raw = None  # the lines no longer say the whole record
        elif name == "kind" and value is not None:
            absent = raw.kind == NO_KIND
            if absent.any():
                code = ALL_KIND_CODES.get(value, BAD_KIND)
                raw.kind = np.where(absent, np.int8(code), raw.kind).astype(np.int8)
                raw.raw = None


def _verdict(raw: RawColumns, st: FileState) -> _Verdict:
    if st.file is not None and st.file.fields:
        _restore(raw, st)
    n = len(raw)
    kind = raw.kind
    rules = _Rules(n)
    if raw.unreadable:
        where = np.zeros(n, np.bool_)
        where[list(raw.unreadable)] = True
        rules.add(UNREADABLE, where)
    if (kind < 0).any():
        rules.add(NOT_A_RECORD, kind == NOT_RECORD)
        rules.add(KIND_MISSING, kind == NO_KIND)
        rules.add(KIND_UNKNOWN, kind == BAD_KIND)
    is_cti = kind == CTI
    insert = kind == INSERT
    start_edge = kind == START
    end_edge = kind == END
    edge = start_edge | end_edge
    timed = insert | is_cti | edge
    source = raw.source
    if (source < 0).any():
        rules.add(SOURCE_MISSING, (source == NO_SOURCE) & ~is_cti)
        rules.add(SOURCE_TYPE, source == BAD_SOURCE)
    scale = st.scale
    rules.add(START_MISSING, timed & (raw.start.state <= NULL))
    start = rules.instant(raw.start, timed, scale, START_BAD)
    given_end = raw.end.state > NULL
    rules.add(CTI_END, is_cti & given_end)
    rules.add(CTI_PAYLOAD, is_cti & raw.has_payload)
    rules.add(EDGE_END, start_edge & given_end)  # TS §7.1: its end edge says when it ends
    point = insert & ~given_end
    rules.add(POINT_AT_MAX, (point | start_edge) & (start == MAX_TIME))
    rules.add(EDGE_NO_END, end_edge & ~given_end)
    interval = insert & given_end
    ended = interval | end_edge
    end = rules.instant(raw.end, ended, scale, END_BAD)
    rules.add(END_ORDER, ended & (end <= start))
    if edge.any():
        rules.add(EDGE_ID, edge & ~_ids_ok(raw.ids, edge))

    mode = st.mode
    if mode is None:
        good = np.flatnonzero(rules.code == 0)
        if len(good):
            i = good[0]
            mode = ("arrival" if raw.arrival.state[i] != ABSENT else
                    "seq" if raw.seq.state[i] != ABSENT else "position")
    before = None
    if mode == "position" or mode is None:
        counted = raw.counted
        key = st.position + (np.arange(n, dtype=np.int64) if counted is None
                             else np.cumsum(counted) - 1)
    else:
        found = raw.arrival if mode == "arrival" else raw.seq
        every = np.ones(n, np.bool_)
        rules.add(KEY_MISSING, found.state <= NULL)
        if mode == "arrival":
            key = rules.instant(found, every, scale, KEY_BAD)
        else:
            rules.add(KEY_BAD, found.state > INT)
            key = found.value
        good_so_far = rules.code == 0
        running = np.maximum.accumulate(np.where(good_so_far, key, st.last_key))
        before = np.empty(n, np.int64)
        before[:1] = st.last_key
        before[1:] = np.maximum(running[:-1], st.last_key)
        rules.add(KEY_ORDER, good_so_far & (key < before))  # TS §5.2
    has_end = interval
    end = np.where(ended, end, np.where(is_cti, start, np.where(start_edge, MAX_TIME, start + 1)))
    if not timed.all():
        start = np.where(timed, start, 0)
        end = np.where(timed, end, 0)
    return _Verdict(rules.code, mode, start, end, has_end, key, before)


def _ids_ok(ids: list[Any] | None, edge: np.ndarray) -> np.ndarray:
    """Where an edge's id is a string or an integer (TS §7.1); rows that are no edge pass."""
    ok = np.ones(len(edge), np.bool_)
    if ids is None:
        ok[edge] = False
        return ok
    for i in np.flatnonzero(edge).tolist():
        value = ids[i]
        ok[i] = type(value) is str or type(value) is int
    return ok


def _columns(raw: RawColumns, v: _Verdict, st: FileState, good: np.ndarray | None) -> Columns:
    """The good rows (``good``: ``None`` when all are) as ``Columns``; the file's state moves
    past the block and new names enter the table in order of first appearance."""
    table = st.table
    source = raw.source
    payload = raw.payload
    kind, start, end, has_end, key, lines = raw.kind, v.start, v.end, v.has_end, v.key, raw.lines
    if good is not None:
        source, kind, start, end, has_end, key, lines = (
            a[good] for a in (source, kind, start, end, has_end, key, lines))
        payload = (payload.take(good) if isinstance(payload, Payloads)
                   else [p for p, g in zip(payload, good.tolist()) if g])
    if raw.names is not None:
        lookup = np.array([table.codes.get(name, -1) for name in raw.names] or [0], np.int32)
        new = np.flatnonzero(lookup[:len(raw.names)] < 0)
        if len(new):
            named = source >= 0
            local, first = np.unique(source[named], return_index=True)
            for code in local[np.argsort(first, kind="stable")].tolist():
                if lookup[code] < 0:
                    lookup[code] = table.add(raw.names[code])
        source = np.where(source >= 0, lookup[np.maximum(source, 0)], -1).astype(np.int32)
    ids = None
    if raw.ids is not None and ((kind == START) | (kind == END)).any():
        is_edge = ((raw.kind == START) | (raw.kind == END)).tolist()
        found = [i if e else None for i, e in zip(raw.ids, is_edge)]
        ids = found if good is None else [i for i, g in zip(found, good.tolist()) if g]
    control = (kind == JOIN) | (kind == LEAVE)  # join and leave carry no payload
    if control.any():
        if isinstance(payload, Payloads):
            payload = _drop_payloads(payload, control)
        else:
            payload = [None if c else p for p, c in zip(payload, control.tolist())]
    n = len(kind)
    counted = raw.counted
    st.position += len(raw) if counted is None else int(counted.sum())
    st.mode = v.mode
    if n:
        st.last_key = int(key[-1])
    keep_raw = (raw.raw is not None and good is None
                and (st.scale is None or st.scale == 1))
    return Columns(kind, source, start, end, has_end, payload, key,
                   np.full(n, st.index, np.int32), lines,
                   raw.raw.seal() if keep_raw and raw.raw is not None else None, ids)


def _drop_payloads(payload: Payloads, rows: np.ndarray) -> Payloads:
    """``payload`` without the payloads of ``rows`` (bool): join and leave carry none."""
    keep = ~rows[payload.rows]
    return Payloads(payload.n, payload.rows[keep], payload.buffer, payload.p0[keep],
                    payload.p1[keep])


def accept(raw: RawColumns, st: FileState) -> Columns | None:
    """The block as ``Columns`` if every row is good, else ``None`` (nothing changed)."""
    v = _verdict(raw, st)
    if v.rule.any():
        return None
    return _columns(raw, v, st, None)


def settle(raw: RawColumns, st: FileState) -> Columns:
    """The good rows as ``Columns``; each bad row, in order, goes to the file's
    ``BadRecords`` with ``explain``'s error (which raises under ``fail``)."""
    v = _verdict(raw, st)
    bad = np.flatnonzero(v.rule)
    if not len(bad):
        return _columns(raw, v, st, None)
    assert raw.objects is not None and raw.text is not None
    for i in bad.tolist():
        st.bad.handle(explain(raw, v, st, i), raw.text(i))
    return _columns(raw, v, st, v.rule == 0)


# -- the messages ------------------------------------------------------------------------

_NONE_TYPE = type(None)
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
_KIND_LIST = "expected one of insert, cti, join, leave, start, end"


def _json_type(value: Any) -> str:
    return {bool: "boolean", float: "number with a fraction", str: "string", list: "array",
            dict: "object", _NONE_TYPE: "null", int: "integer"}.get(type(value), type(value).__name__)


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # an integer beyond 64 bits (CSV text)
        return repr(value)


def _unscaled_message(value: int, unit: str) -> str:
    return (f"{value} looks like {_UNIT_WORDS[unit]} since the epoch "
            f"({format_rfc3339(value * TIME_UNITS[unit])}), not nanoseconds "
            f"({format_rfc3339(value)}); integer times are nanoseconds unless the unit is "
            f"given: --time-unit {unit} (replay(..., time_unit={unit!r})), or --time-unit ns "
            "if they really are nanoseconds")


def _instant_message(value: Any, rule: int, scale: int | None) -> str:
    """The message of an instant's BAD (0), UNSCALED (1) or RANGE (2) rule."""
    if rule == 1:
        return _unscaled_message(value, looks_unscaled(value) or "s")
    if rule == 2:
        if type(value) is str:
            return f"{value!r} is outside the int64 nanosecond range (years 1677 to 2262)"
        unit = next(u for u, s in TIME_UNITS.items() if s == (scale or 1))
        return (f"{value} {_UNIT_WORDS[unit]} is outside the int64 nanosecond range "
                "(years 1677 to 2262)")
    if type(value) is str and _FRACTION.fullmatch(value.strip()):
        return _fraction_message(value.strip(), float(value), scale)
    if type(value) is str:
        return (f"cannot parse {value!r} as an instant; expected int nanoseconds or ISO-8601 "
                "with an offset, e.g. '2026-11-22T08:00:00Z'")
    if type(value) is float:
        return _fraction_message(_dumps(value), value, scale)
    return (f"{_dumps(value)} is a {_json_type(value)}; expected int nanoseconds since the "
            "epoch or an ISO-8601 string with an offset")


#: a number with a fraction, as CSV text
_FRACTION = re.compile(r"[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?")


def _fraction_message(shown: str, value: float, scale: int | None) -> str:
    """Why a number with a fraction is not an instant here, and the unit it looks like."""
    if scale == 1:
        return (f"{shown} is a number with a fraction, and the unit given (--time-unit ns) "
                "has none; expected a whole number of nanoseconds")
    unit = None
    if value == value and abs(value) < 2**63:
        whole = int(value)
        unit = looks_unscaled(whole if whole % NS_PER_S else whole + 1)
    hint = (f"; it looks like {_UNIT_WORDS[unit]} since the epoch "
            f"({format_rfc3339(int(Decimal(repr(value)) * TIME_UNITS[unit]))}): "
            f"--time-unit {unit} "
            f"(replay(..., time_unit={unit!r}))" if unit else
            "; give the unit of the numbers: --time-unit s|ms|us")
    return (f"{shown} is a number with a fraction; expected int nanoseconds since the epoch, "
            f"an ISO-8601 string with an offset, or a number in the unit given with "
            f"--time-unit{hint}")


def explain(raw: RawColumns, v: _Verdict, st: FileState, i: int) -> BadRecordError:
    """The error of bad row ``i``: where, which field, what was expected (TS §5.3)."""
    rule = int(v.rule[i])
    line = int(raw.lines[i])
    if rule == UNREADABLE:
        message, name = raw.unreadable[i]
        return st.error(line, message, name)
    assert raw.objects is not None
    obj = raw.objects[i]
    if rule == NOT_A_RECORD:
        return st.error(line, f"a JSON {_json_type(obj)} is not a record; expected an object "
                        "with source, kind and start")
    kind = obj.get("kind")
    if rule == KIND_MISSING:
        return st.error(line, f"missing; {_KIND_LIST}", "kind")
    if rule == KIND_UNKNOWN:
        return st.error(line, f"unknown kind {_dumps(kind)}; {_KIND_LIST}", "kind")
    if rule == SOURCE_MISSING:
        return st.error(line, f"missing on {_a(kind)} record; expected the input's name",
                        "source")
    if rule == SOURCE_TYPE:
        source = obj.get("source")
        return st.error(line, f"{_dumps(source)} is a {_json_type(source)}; expected a string",
                        "source")
    if rule == START_MISSING:
        return st.error(line, f"missing on {_a(kind)} record; expected an instant", "start")
    if START_BAD <= rule <= START_RANGE:
        return st.error(line, _instant_message(obj["start"], rule - START_BAD, st.scale), "start")
    if rule == CTI_END:
        return st.error(line, "a cti is an instant and has no end; remove it", "end")
    if rule == CTI_PAYLOAD:
        return st.error(line, "a cti carries no payload; remove it or make it null", "payload")
    if rule == POINT_AT_MAX:  # TS §1.3: a point lives one tick, and none is left
        return st.error(line, f"a point at {int(v.start[i])}, the latest instant, has no room "
                        "for its one-tick lifetime; expected a start before it", "start")
    if rule == EDGE_END:
        return st.error(line, "a start edge has no end: its end edge closes it (kind \"end\" "
                        "with the same id); remove it", "end")
    if rule == EDGE_NO_END:
        return st.error(line, "missing on an end edge; expected the instant the edge's event "
                        "ends", "end")
    if END_BAD <= rule <= END_RANGE:
        return st.error(line, _instant_message(obj["end"], rule - END_BAD, st.scale), "end")
    if rule == END_ORDER:
        return st.error(line, f"interval end {format_instant(int(v.end[i]))} is not after "
                        f"start {format_instant(int(v.start[i]))}; expected end > start", "end")
    if rule == EDGE_ID:
        value = obj.get("id", MISSING)
        found = "missing" if value is MISSING else f"{_dumps(value)} is a {_json_type(value)}"
        return st.error(line, f"{found} on {'an end' if kind == 'end' else 'a start'} edge; expected a string or an integer "
                        "naming the edge (its start and end edges share it)", "id")
    mode = v.mode
    assert mode is not None
    if rule == KEY_MISSING:
        return st.error(line, f"missing; the file's first record has {mode!r}, so every "
                        "record must (TS §5.2)", mode)
    if rule == KEY_BAD and mode == "seq":
        return st.error(line, f"{_dumps(obj['seq'])} is not an int64; expected an integer "
                        "sequence number", "seq")
    if KEY_BAD <= rule <= KEY_RANGE:
        return st.error(line, _instant_message(obj["arrival"], rule - KEY_BAD, st.scale),
                        "arrival")
    assert rule == KEY_ORDER and v.before is not None
    key, before = int(v.key[i]), int(v.before[i])
    if mode == "arrival":
        shown = f"{format_instant(key)} is before the previous record's {format_instant(before)}"
    else:
        shown = f"{key} is before the previous record's {before}"
    return st.error(line, f"{shown}; a file must be in arrival order (TS §5.2)", mode)


def _a(word: Any) -> str:
    """``word`` with its article: "an insert", "a cti"."""
    return f"{'an' if str(word)[:1] in 'aeiou' else 'a'} {word}"
