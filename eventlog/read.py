"""Event-log readers: JSON Lines, CSV and Parquet into numpy columns, and the k-way merge.

Everything here streams: a reader holds one chunk (``CHUNK_BYTES`` of JSON Lines, ``CSV_ROWS``
rows of CSV, one Parquet row group batch) of Python objects at a time, and the merge holds at
most a chunk per file plus the rows of runs of equal order keys. The format is in
``docs/event-log.md``; bad records follow TS §5.3 (file:line, skip/quarantine counted).

Two parsers per format, with the same result: a fast one that works on whole columns and
assumes the chunk is clean, and an exact one, record by record, that is used when the fast one
finds anything unusual (a bad record, an ISO time, a blank line) and that produces the error
messages. ``tests/replay`` checks they agree.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, BinaryIO, Callable, Generator, Iterable, Iterator, Sequence

import numpy as np
import orjson

from engine.errors import BadRecordError, InputError, TimeFormatError
from engine.times import (MAX_TIME, NS_PER_S, TIME_UNITS, UNSCALED_RANGES, format_rfc3339,
                          looks_unscaled, to_ns)

from eventlog.format import (BAD_RECORD_MODES, CTI, INSERT, JOIN, KIND_CODES, KIND_NAMES, LEAVE,
                             insert_prefix)
from eventlog.scan import PAD, scan_block

__all__ = [
    "time_scale",
    "SourceTable",
    "Columns",
    "BadRecords",
    "log_format",
    "read_columns",
    "merge_columns",
    "read_records",
]

_KINDS = KIND_CODES

#: bytes of JSON Lines parsed per chunk (memory bound of the JSON Lines reader)
CHUNK_BYTES = 4 << 20
#: rows per chunk of the CSV reader
CSV_ROWS = 20_000
#: rows per batch of the Parquet reader
PARQUET_ROWS = 65_536

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_NONE_TYPE = type(None)
_INT_ONLY = {int}
_INT_OR_NONE = {int, _NONE_TYPE}


class SourceTable:
    """Input names <-> small int codes, shared by every file of one replay (``None`` is -1)."""

    __slots__ = ("names", "codes", "scan_words")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.codes: dict[Any, int] = {None: -1}
        #: the JSON Lines scanner's lookup of short names by their bytes: sorted words and
        #: their codes (``eventlog.scan``), ``None`` until it has seen one
        self.scan_words: tuple | None = None

    def add(self, name: Any) -> int:
        if type(name) is not str:
            raise _Slow
        code = self.codes.get(name)
        if code is None:
            code = self.codes[name] = len(self.names)
            self.names.append(name)
        return code

    def name(self, code: int) -> str | None:
        return None if code < 0 else self.names[code]


class Columns:
    """A batch of records in arrival order, as columns (one row per record).

    ``kind`` int8 (``INSERT``/``CTI``/``JOIN``/``LEAVE``); ``source`` int32 codes into the
    replay's ``SourceTable``; ``start``/``end`` int64 ns (``end = start + 1`` for points, ``start``
    for CTIs, 0 for join/leave); ``has_end`` bool (an interval); ``payload`` a list of JSON
    values; ``key`` int64 order key; ``file`` int32 file index; ``line`` int64 line number;
    ``raw`` the input lines when they are canonical (``eventlog.scan``), else ``None``.
    """

    __slots__ = ("kind", "source", "start", "end", "has_end", "payload", "key", "file", "line",
                 "raw")

    def __init__(self, kind, source, start, end, has_end, payload, key, file, line,
                 raw=None) -> None:
        self.kind = kind
        self.source = source
        self.start = start
        self.end = end
        self.has_end = has_end
        self.payload = payload
        self.key = key
        self.file = file
        self.line = line
        #: ``eventlog.scan.RawLines`` when every row's input line is canonical (a JSON
        #: Lines block in the flat shape), else ``None``; rows picked or merged drop it
        self.raw = raw

    def __len__(self) -> int:
        return len(self.kind)

    def take(self, index: np.ndarray) -> Columns:
        payload = self.payload
        return Columns(self.kind[index], self.source[index], self.start[index], self.end[index],
                       self.has_end[index], [payload[i] for i in index.tolist()],
                       self.key[index], self.file[index], self.line[index])

    @staticmethod
    def concat(parts: Sequence[Columns]) -> Columns:
        if len(parts) == 1:
            return parts[0]
        payload: list = []
        for p in parts:
            payload.extend(p.payload)
        cat = np.concatenate
        return Columns(cat([p.kind for p in parts]), cat([p.source for p in parts]),
                       cat([p.start for p in parts]), cat([p.end for p in parts]),
                       cat([p.has_end for p in parts]), payload, cat([p.key for p in parts]),
                       cat([p.file for p in parts]), cat([p.line for p in parts]))

    @staticmethod
    def from_rows(rows: list[tuple], file: int) -> Columns:
        """From exact-parser rows ``(kind, source, start, end, has_end, payload, key, line)``."""
        n = len(rows)
        if n == 0:
            return _empty(file)
        kind, source, start, end, has_end, payload, key, line = zip(*rows)
        return Columns(np.array(kind, np.int8), np.array(source, np.int32),
                       np.array(start, np.int64), np.array(end, np.int64),
                       np.array(has_end, np.bool_), list(payload), np.array(key, np.int64),
                       np.full(n, file, np.int32), np.array(line, np.int64))


def _empty(file: int) -> Columns:
    z = np.zeros(0, np.int64)
    return Columns(np.zeros(0, np.int8), np.zeros(0, np.int32), z, z, np.zeros(0, np.bool_),
                   [], z, np.zeros(0, np.int32), z)


class _Slow(Exception):
    """The fast parser met something it does not handle; the exact parser takes the chunk."""


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


class _FileState:
    """Per-file reading state: order-key mode, last key, record position, and the unit of
    integer times (``scale``: see ``time_scale``)."""

    __slots__ = ("path", "index", "table", "bad", "mode", "last_key", "position", "scale")

    def __init__(self, path: str, index: int, table: SourceTable, bad: BadRecords,
                 scale: int | None = None) -> None:
        self.path = path
        self.index = index
        self.table = table
        self.bad = bad
        self.scale = scale
        self.mode: str | None = None  # "arrival" | "seq" | "position"
        self.last_key = -(2**63)
        self.position = 0

    def error(self, line: int, message: str, field: str | None = None) -> BadRecordError:
        return BadRecordError(self.path, line, message, field=field)


# -- instants --------------------------------------------------------------------------

#: more than six fractional digits: ``datetime`` would keep microseconds only, so ``to_ns``
#: reads them (nanoseconds kept, digits past the ninth truncated: one rule for every reader)
_FRACTION_DIGITS = re.compile(r"[.,]\d{7}")


@lru_cache(maxsize=65_536)
def _iso_ns(text: str) -> int:
    """ISO-8601 instant with an offset -> ns; the common forms without pendulum (cached)."""
    try:
        value = _dt.datetime.fromisoformat(text)
    except ValueError:
        return to_ns(text, what="instant")
    if value.tzinfo is None or value.utcoffset() is None or "T" not in text.upper():
        return to_ns(text, what="instant")
    delta = value - _EPOCH
    ns = (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    return ns


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class _Ns(int):
    """An integer that is nanoseconds whatever the file's unit: a typed timestamp column's."""

    __slots__ = ()


_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def _instant(value: Any, st: _FileState, line: int, name: str) -> int:
    if type(value) is int:
        scale = st.scale
        if scale is None:
            unit = looks_unscaled(value)
            if unit is not None:  # TS §5.4: never a silent instant in 1970
                raise st.error(line, _unscaled_message(value, unit), name)
            scale = 1
        if -(2**63 // scale) <= value <= (2**63 - 1) // scale:
            return value * scale
        raise st.error(line, f"{value} {_UNIT_WORDS[_unit_of(scale)]} is outside the int64 "
                       "nanosecond range (years 1677 to 2262)", name)
    if type(value) is _Ns:
        return int(value)
    if type(value) is str:
        if _FRACTION_DIGITS.search(value):  # sub-microsecond digits: to_ns's rule (TS §1.4)
            try:
                return to_ns(value, what="instant")
            except TimeFormatError as err:
                raise st.error(line, _time_message(value), name) from err
        try:
            return _iso_ns(value)
        except TimeFormatError as err:
            raise st.error(line, _time_message(value), name) from err
    raise st.error(line, f"{orjson.dumps(value).decode()} is a {_json_type(value)}; expected "
                   "int nanoseconds since the epoch or an ISO-8601 string with an offset", name)


def _unit_of(scale: int) -> str:
    return next(unit for unit, s in TIME_UNITS.items() if s == scale)


def _unscaled_message(value: int, unit: str) -> str:
    return (f"{value} looks like {_UNIT_WORDS[unit]} since the epoch "
            f"({format_rfc3339(value * TIME_UNITS[unit])}), not nanoseconds "
            f"({format_rfc3339(value)}); integer times are nanoseconds unless the unit is "
            f"given: --time-unit {unit} (replay(..., time_unit={unit!r})), or --time-unit ns "
            "if they really are nanoseconds")


#: the span of the integers ``looks_unscaled`` refuses: a column's minimum (or maximum)
#: mostly shows that it holds none of them
_UNSCALED_LO = UNSCALED_RANGES[0][1]
_UNSCALED_HI = UNSCALED_RANGES[-1][2]


def _scaled(scale: int | None, values: np.ndarray) -> np.ndarray:
    """An int64 column of times in the file's unit as nanoseconds; ``_Slow`` if a value is
    implausible as nanoseconds (no unit given) or does not fit in nanoseconds: the record
    parser then names the record. Rows without a time hold 0, which passes both."""
    if scale == 1 or not len(values):
        return values
    if scale is None:  # TS §5.4
        if values.min() >= _UNSCALED_HI or values.max() < _UNSCALED_LO:
            return values  # one pass for a log of today's nanoseconds
        v = values[(values >= _UNSCALED_LO) & (values < _UNSCALED_HI)]
        v = v[v % NS_PER_S != 0]  # whole seconds: a relative clock (looks_unscaled)
        for _, lo, hi in UNSCALED_RANGES:
            if ((v >= lo) & (v < hi)).any():
                raise _Slow
        return values
    if (values < -(2**63 // scale)).any() or (values > (2**63 - 1) // scale).any():
        raise _Slow
    return values * scale


def _time_message(value: str) -> str:
    return (f"cannot parse {value!r} as an instant; expected int nanoseconds or ISO-8601 with an "
            "offset, e.g. '2026-11-22T08:00:00Z'")


def _json_type(value: Any) -> str:
    return {bool: "boolean", float: "number with a fraction", str: "string", list: "array",
            dict: "object", _NONE_TYPE: "null", int: "integer"}.get(type(value), type(value).__name__)


# -- the exact, record-by-record parser ------------------------------------------------


def _record(obj: Any, st: _FileState, line: int) -> tuple:
    """Validate one decoded record; return its row or raise ``BadRecordError`` (TS §5.3)."""
    if type(obj) is not dict:
        raise st.error(line, f"a JSON {_json_type(obj)} is not a record; expected an object "
                       "with source, kind and start")
    if "kind" not in obj:
        raise st.error(line, "missing; expected one of insert, cti, join, leave", "kind")
    kind_name = obj["kind"]
    kind = _KINDS.get(kind_name) if type(kind_name) is str else None
    if kind is None:
        raise st.error(line, f"unknown kind {orjson.dumps(kind_name).decode()}; expected one of "
                       "insert, cti, join, leave", "kind")
    source = obj.get("source")
    if source is None:
        if kind != CTI:
            raise st.error(line, f"missing on a {kind_name} record; expected the input's name",
                           "source")
        code = -1
    elif type(source) is not str:
        raise st.error(line, f"{orjson.dumps(source).decode()} is a {_json_type(source)}; "
                       "expected a string", "source")
    else:
        code = st.table.add(source)
    payload = obj.get("payload")
    if kind <= CTI:
        if "start" not in obj or obj["start"] is None:
            raise st.error(line, f"missing on a {kind_name} record; expected an instant", "start")
        start = _instant(obj["start"], st, line, "start")
        end_value = obj.get("end")
        if kind == CTI:
            if end_value is not None:
                raise st.error(line, "a cti is an instant and has no end; remove it", "end")
            if payload is not None:
                raise st.error(line, "a cti carries no payload; remove it or make it null",
                               "payload")
            end, has_end = start, False
        elif end_value is None:
            if start >= MAX_TIME:  # TS §1.3: a point lives one tick, and none is left
                raise st.error(line, f"a point at {start}, the latest instant, has no room for "
                               "its one-tick lifetime; expected a start before it", "start")
            end, has_end = start + 1, False
        else:
            end = _instant(end_value, st, line, "end")
            if end <= start:
                raise st.error(line, f"interval end {end} is not after start {start}; expected "
                               "end > start", "end")
            has_end = True
    else:
        start = end = 0
        has_end = False
        payload = None
    if st.mode is None:
        st.mode = "arrival" if "arrival" in obj else "seq" if "seq" in obj else "position"
    mode = st.mode
    if mode == "position":
        key = st.position - 1
    else:
        value = obj.get(mode)
        if value is None:
            raise st.error(line, f"missing; the file's first record has {mode!r}, so every "
                           "record must (TS §5.2)", mode)
        if mode == "arrival":
            key = _instant(value, st, line, "arrival")
        elif type(value) is int and -(2**63) <= value < 2**63:
            key = value
        else:
            raise st.error(line, f"{orjson.dumps(value).decode()} is not an int64; expected an "
                           "integer sequence number", "seq")
        if key < st.last_key:
            raise st.error(line, f"{key} is before the previous record's {st.last_key}; a file "
                           "must be in arrival order (TS §5.2)", mode)
    st.last_key = key
    return (kind, code, start, end, has_end, payload, key, line)


def _decode_error(raw: bytes, err: Exception, last: bool) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return (f"byte 0x{raw[bad.start]:02x} at column {bad.start + 1} is not valid UTF-8; "
                "expected UTF-8 text")
    hint = " (truncated last line: the file ends without a newline mid-record)" if last else ""
    return f"not valid JSON: {err}{hint}"


def _jsonl_exact(lines: list[bytes], first_line: int, st: _FileState, last: bool) -> Columns:
    rows = []
    handle = st.bad.handle
    final = len(lines) - 1
    for i, raw in enumerate(lines):
        line = first_line + i
        if not raw.strip():
            continue  # a blank line holds no record
        st.position += 1
        try:
            try:
                obj = _loads(raw)
            except _JSONDecodeError as err:
                raise st.error(line, _decode_error(raw, err, last and i == final)) from err
            rows.append(_record(obj, st, line))
        except BadRecordError as err:
            handle(err, raw)
    return Columns.from_rows(rows, st.index)


# -- the fast, whole-column parser -----------------------------------------------------


def _ints(values: list, allow_none: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """int64 column from a list of ints (and ``None`` if allowed); anything else -> ``_Slow``."""
    types = set(map(type, values))
    if types == _INT_ONLY:
        return np.array(values, np.int64), None
    if allow_none and types <= _INT_OR_NONE:
        if types == {_NONE_TYPE}:
            return np.zeros(len(values), np.int64), np.ones(len(values), np.bool_)
        missing = np.array([v is None for v in values], np.bool_)
        return np.array([0 if v is None else v for v in values], np.int64), missing
    raise _Slow


def _fast(kind_l: list, src_l: list, start_l: list, end_l: list, payload_l: list,
          key_l: list | None, st: _FileState, lines: np.ndarray) -> Columns:
    """Whole-column parse; raises ``_Slow`` on anything the exact parser must look at."""
    n = len(kind_l)
    kinds = _KINDS
    kind = np.array([kinds[k] for k in kind_l], np.int8)
    codes = st.table.codes
    add = st.table.add
    source = np.array([codes[s] if s in codes else add(s) for s in src_l], np.int32)
    is_cti = kind == CTI
    timed = kind <= CTI
    if ((source < 0) & ~is_cti).any():
        raise _Slow
    start, missing = _ints(start_l, True)
    if missing is not None and (missing & timed).any():
        raise _Slow
    start = _scaled(st.scale, start)
    end, no_end = _ints(end_l, True)
    end = _scaled(st.scale, end)
    if no_end is None:
        has_end = np.ones(n, np.bool_)
    else:
        has_end = ~no_end
    if (has_end & is_cti).any():
        raise _Slow
    has_end &= timed
    if (has_end & (end <= start)).any():
        raise _Slow
    if (~has_end & ~is_cti & timed & (start == MAX_TIME)).any():
        raise _Slow  # start + 1 would wrap: the exact parser names the record
    end = np.where(has_end, end, np.where(is_cti, start, start + 1))
    if not timed.all():
        start = np.where(timed, start, 0)
        end = np.where(timed, end, 0)
        payload_l = [None if k > CTI else p for k, p in zip(kind.tolist(), payload_l)]
    for i in np.flatnonzero(is_cti).tolist():
        if payload_l[i] is not None:
            raise _Slow
    if st.mode is None:
        raise _Slow
    if st.mode == "position":
        key = np.arange(st.position, st.position + n, dtype=np.int64)
    else:
        assert key_l is not None
        key, _ = _ints(key_l, False)
        if st.mode == "arrival":
            key = _scaled(st.scale, key)
        if n and (key[0] < st.last_key or (key[1:] < key[:-1]).any()):
            raise _Slow
    if n:
        st.last_key = int(key[-1])
    st.position += n
    return Columns(kind, source, start, end, has_end, payload_l, key,
                   np.full(n, st.index, np.int32), lines)


def _jsonl_fast(lines: list[bytes], first_line: int, st: _FileState) -> Columns:
    recs = _loads(b"[" + b",".join(lines) + b"]")
    if len(recs) != len(lines):
        raise _Slow
    if st.mode is None and recs and type(recs[0]) is dict:
        r0 = recs[0]
        st.mode = "arrival" if "arrival" in r0 else "seq" if "seq" in r0 else "position"
    kind_l = [r["kind"] for r in recs]
    src_l = [r.get("source") for r in recs]
    start_l = [r.get("start") for r in recs]
    end_l = [r.get("end") for r in recs]
    payload_l = [r.get("payload") for r in recs]
    mode = st.mode
    key_l = None if mode == "position" else [r.get(mode) for r in recs]
    return _fast(kind_l, src_l, start_l, end_l, payload_l, key_l, st,
                 np.arange(first_line, first_line + len(lines), dtype=np.int64))


def _jsonl_scanned(buf: bytearray, size: int, first_line: int, st: _FileState) -> Columns | None:
    """The block ``buf[:size]`` of whole lines read by the vectorised scanner (in place:
    ``buf`` has ``PAD`` spare bytes after it), or ``None`` if it is not all in the flat shape
    (or its order keys go backwards): the record parsers then take it."""
    scale = st.scale
    converting = scale is not None and scale != 1
    # converted arrival keys are compared with the previous one by _scan_times
    last = -(2**63) if converting and st.mode == "arrival" else st.last_key
    found = scan_block(buf, st.mode, st.table, last, size,
                       times=None if scale == 1 else partial(_scan_times, scale, st.last_key))
    if found is None:
        return None
    mode, kind, source, start, end, has_end, key, payload, raw = found
    if converting:
        raw = None  # the times were converted: the input lines are not the output lines
    n = len(kind)
    if mode == "position":
        key = np.arange(st.position, st.position + n, dtype=np.int64)
    st.mode = mode
    st.last_key = int(key[-1])
    st.position += n
    return Columns(kind, source, start, end, has_end, payload, key,
                   np.full(n, st.index, np.int32),
                   np.arange(first_line, first_line + n, dtype=np.int64), raw)


def _scan_times(scale: int | None, last_key: int, mode: str, kind: np.ndarray,
                start: np.ndarray, end: np.ndarray, has_end: np.ndarray,
                key: np.ndarray | None) -> tuple | None:
    """The scanner's times in the file's unit as nanoseconds (``_scaled``), or ``None``: the
    record parsers must read the block."""
    try:
        start = _scaled(scale, start)
        if key is not None and mode == "arrival":
            key = _scaled(scale, key)
            if key[0] < last_key:
                return None  # TS §5.2: the record parsers name the line
        if scale is not None and scale != 1:
            end = np.where(has_end, _scaled(scale, np.where(has_end, end, 0)),
                           np.where(kind == CTI, start, start + 1))
            if ((kind == INSERT) & ~has_end & (start == MAX_TIME)).any():
                return None  # a point's end would not fit
            end[kind > CTI] = 0
        elif has_end.any():
            _scaled(scale, end[has_end])
    except _Slow:
        return None
    return start, end, key


def _jsonl_chunk(lines: list[bytes], first_line: int, st: _FileState, last: bool) -> Columns:
    saved = (st.mode, st.last_key, st.position)
    try:
        return _jsonl_fast(lines, first_line, st)
    except (_Slow, _JSONDecodeError, KeyError, TypeError, ValueError, OverflowError):
        st.mode, st.last_key, st.position = saved
        return _jsonl_exact(lines, first_line, st, last)


def _read_jsonl(st: _FileState, on_bytes: Callable[[int], None] | None) -> Iterator[Columns]:
    # Each block is read into a fresh buffer after the previous block's unfinished line, with
    # room for the scanner's padding, so the scanner works on it in place: no copies.
    with open(st.path, "rb", buffering=0) as f:
        rest = b""
        line = 1
        while True:
            held = len(rest)
            buf = bytearray(held + CHUNK_BYTES + PAD)
            buf[:held] = rest
            with memoryview(buf) as view:
                got = f.readinto(view[held:held + CHUNK_BYTES])
            if not got:
                break
            if on_bytes is not None:
                on_bytes(got)
            end = held + got
            cut = buf.rfind(b"\n", 0, end)
            if cut < 0:
                rest = bytes(buf[:end])
                continue
            rest = bytes(buf[cut + 1:end])
            scanned = _jsonl_scanned(buf, cut + 1, line, st)
            if scanned is not None:
                yield scanned
                line += len(scanned)
                continue
            lines = bytes(buf[:cut]).split(b"\n")
            del buf
            yield _jsonl_chunk(lines, line, st, False)
            line += len(lines)
        if rest.strip():
            yield _jsonl_chunk([rest], line, st, True)


# -- CSV -------------------------------------------------------------------------------

_CSV_INT = re.compile(r"^[+-]?\d+$")
_CSV_FIELDS = ("source", "kind", "start", "end", "payload", "seq", "arrival")


def _csv_obj(row: dict, st: _FileState, line: int) -> dict:
    obj: dict[str, Any] = {}
    for name in _CSV_FIELDS:
        text = row.get(name)
        if text is None or text == "":
            continue
        if name in ("start", "end", "arrival", "seq"):
            obj[name] = int(text) if _CSV_INT.match(text) else text
        elif name == "payload":
            try:
                obj[name] = _loads(text)
            except _JSONDecodeError as err:
                raise st.error(line, f"not valid JSON text: {err}", "payload") from err
        else:
            obj[name] = text
    return obj


def _read_csv(st: _FileState, on_bytes: Callable[[int], None] | None) -> Iterator[Columns]:
    handle = st.bad.handle
    with open(st.path, "rb") as f:
        if on_bytes is not None:
            on_bytes(os.fstat(f.fileno()).st_size)
        physical = [0]
        undecodable: list[tuple[int, bytes, UnicodeDecodeError]] = []

        def text_lines() -> Iterator[str]:
            for raw in f:
                physical[0] += 1
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    undecodable.append((physical[0], raw, err))
                    yield "\n"  # keep line numbers; the record is reported below

        reader = csv.reader(text_lines())
        header = next(reader, None)
        if undecodable:
            no, raw, err = undecodable.pop()
            raise st.error(no, f"byte 0x{raw[err.start]:02x} at column {err.start + 1} is not "
                           "valid UTF-8; expected UTF-8 text")
        if header is None:
            return
        names = [h.strip() for h in header]
        for required in ("source", "kind", "start"):
            if required not in names:
                raise st.error(1, f"header has no {required!r} column; expected at least "
                               "source, kind, start", required)
        rows: list[tuple] = []
        line_before = reader.line_num
        for cells in reader:
            line = line_before + 1
            line_before = reader.line_num
            if undecodable:
                no, raw, err = undecodable.pop()
                handle(st.error(no, f"byte 0x{raw[err.start]:02x} at column {err.start + 1} is "
                                "not valid UTF-8; expected UTF-8 text"), raw)
                continue
            if not cells or all(not c.strip() for c in cells):
                continue
            st.position += 1
            try:
                if len(cells) != len(names):
                    raise st.error(line, f"{len(cells)} cells for {len(names)} header columns "
                                   "(truncated or unquoted comma?)")
                rows.append(_record(_csv_obj(dict(zip(names, cells)), st, line), st, line))
            except BadRecordError as err:
                buf = io.StringIO()
                csv.writer(buf).writerow(cells)
                handle(err, buf.getvalue())
            if len(rows) >= CSV_ROWS:
                yield Columns.from_rows(rows, st.index)
                rows = []
        if rows:
            yield Columns.from_rows(rows, st.index)


# -- Parquet ---------------------------------------------------------------------------


def _arrow_ints(col: Any, pa: Any, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """int64 values (0 where null) and the null mask (``None``: no nulls) of an integer or
    timestamp column; anything else -> ``_Slow``."""
    t = col.type
    try:
        if pa.types.is_timestamp(t):
            if what == "seq":
                raise _Slow  # a sequence number is an integer
            col = col.cast(pa.timestamp("ns", tz=t.tz)).cast(pa.int64())
        elif not pa.types.is_integer(t):
            raise _Slow
        elif t != pa.int64():
            col = col.cast(pa.int64())  # raises beyond int64
    except pa.ArrowInvalid:
        raise _Slow from None
    if not col.null_count:
        return col.to_numpy(), None
    missing = col.is_null().to_numpy(zero_copy_only=False)
    return col.fill_null(0).to_numpy(), missing


def _arrow_texts(col: Any, pa: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A string column as ``(buffer, p0, p1, valid)``: row ``i``'s text is
    ``buffer[p0[i]:p1[i]]`` (empty where null); ``buffer`` is a copy with ``PAD`` zero bytes
    after the texts."""
    if pa.types.is_string(col.type):
        offset_type = np.int32
    elif pa.types.is_large_string(col.type):
        offset_type = np.int64
    else:
        raise _Slow
    n = len(col)
    valid = (col.is_valid().to_numpy(zero_copy_only=False) if col.null_count
             else np.ones(n, np.bool_))
    _, offsets, data = col.buffers()
    at = np.frombuffer(offsets, offset_type, count=col.offset + n + 1)[col.offset:]
    at = at.astype(np.int64)
    lo, hi = int(at[0]), int(at[-1])
    buffer = np.zeros(hi - lo + PAD, np.uint8)
    if hi > lo:
        buffer[:hi - lo] = np.frombuffer(data, np.uint8, count=hi)[lo:]
    p0, p1 = at[:-1] - lo, at[1:] - lo
    return buffer, p0, np.where(valid, p1, p0), valid


def _words_of(buffer: np.ndarray) -> np.ndarray:
    """A little-endian uint64 read at every byte offset of ``buffer`` (no copy)."""
    return np.ndarray((len(buffer) - 7,), "<u8", buffer, strides=(1,))


def _parquet_columns(batch: Any, st: _FileState, lines: np.ndarray) -> Columns:
    """A Parquet batch straight from its Arrow columns: no Python object per row, and the
    inserts' canonical lines built with numpy (``Columns.raw``, as for scanned JSON Lines).
    Raises ``_Slow`` on anything the record parser must look at (the same checks as
    ``_fast``); names enter the table only when the batch is accepted."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from eventlog.scan import Payloads, canonical_json
    from eventlog.write_columns import insert_lines

    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> Any:
        return batch.column(name) if name in names else None

    kind_col = column("kind")
    if not (pa.types.is_string(kind_col.type) or pa.types.is_large_string(kind_col.type)):
        raise _Slow
    kind_code = pc.index_in(kind_col, value_set=pa.array(KIND_NAMES))
    if kind_code.null_count:
        raise _Slow  # an unknown or missing kind
    kind = kind_code.to_numpy().astype(np.int8)
    is_cti = kind == CTI
    insert = kind == INSERT
    timed = kind <= CTI

    source_col = column("source")
    if not (pa.types.is_string(source_col.type) or pa.types.is_large_string(source_col.type)):
        raise _Slow
    encoded = pc.dictionary_encode(source_col)  # codes in order of first appearance
    local = encoded.indices.fill_null(-1).to_numpy().astype(np.int32)
    if ((local < 0) & ~is_cti).any():
        raise _Slow
    try:
        dictionary = encoded.dictionary.to_pylist()
    except UnicodeDecodeError:
        raise _Slow from None

    def times(name: str) -> tuple[np.ndarray, np.ndarray | None]:
        col = column(name)
        values, missing = _arrow_ints(col, pa, name)
        if pa.types.is_timestamp(col.type):
            return values, missing  # typed: nanoseconds whatever the unit of integers
        return _scaled(st.scale, values), missing

    start, missing = times("start")
    if missing is not None and (missing & timed).any():
        raise _Slow
    end_col = column("end")
    if end_col is not None:
        end, no_end = times("end")
        has_end = np.ones(n, np.bool_) if no_end is None else ~no_end
    else:
        end, has_end = np.zeros(n, np.int64), np.zeros(n, np.bool_)
    if (has_end & is_cti).any():
        raise _Slow
    has_end &= insert
    if (has_end & (end <= start)).any():
        raise _Slow
    if (insert & ~has_end & (start == MAX_TIME)).any():
        raise _Slow  # start + 1 would wrap: the record parser names the record
    end = np.where(has_end, end, np.where(is_cti, start, start + 1))
    if not timed.all():
        start = np.where(timed, start, 0)
        end = np.where(timed, end, 0)

    payload_col = column("payload")
    if payload_col is None or payload_col.null_count == n:
        buffer, p0, p1 = np.zeros(PAD, np.uint8), np.zeros(n, np.int64), np.zeros(n, np.int64)
        with_payload = np.zeros(0, np.intp)
    else:
        buffer, p0, p1, given = _arrow_texts(payload_col, pa)
        if (given & ~insert).any():
            raise _Slow  # on a CTI, join or leave: the record parser decides
        null = given & (p1 - p0 == 4)  # the text null: no payload
        null[null] = _words_of(buffer)[p0[null]] == np.uint64(int.from_bytes(b"null", "little"))
        given &= ~null
        with_payload = np.flatnonzero(given)
        if not canonical_json(buffer, p0[with_payload], p1[with_payload]):
            raise _Slow  # not one JSON value each, or not in the form the output writes
        p1 = np.where(given, p1, p0)

    if st.mode is None:
        first = {name: column(name) for name in ("arrival", "seq")}
        st.mode = ("arrival" if first["arrival"] is not None and first["arrival"][0].is_valid
                   else "seq" if first["seq"] is not None and first["seq"][0].is_valid
                   else "position")
    if st.mode == "position":
        key = np.arange(st.position, st.position + n, dtype=np.int64)
    else:
        key_col = column(st.mode)
        if key_col is None:
            raise _Slow
        key, missing = times(st.mode) if st.mode == "arrival" else _arrow_ints(key_col, pa,
                                                                               st.mode)
        if missing is not None or key[0] < st.last_key or (key[1:] < key[:-1]).any():
            raise _Slow

    # accepted: the names enter the table in order of first appearance
    codes = np.array([st.table.add(name) for name in dictionary] or [0], np.int32)
    source = np.where(local >= 0, codes[np.maximum(local, 0)], -1).astype(np.int32)
    prefixes = [insert_prefix(name) for name in dictionary] or [b""]
    prefix_lens = np.array([len(p) for p in prefixes], np.int64)
    matrix = np.zeros((len(prefixes), int(prefix_lens.max())), np.uint8)
    for i, p in enumerate(prefixes):
        matrix[i, :len(p)] = np.frombuffer(p, np.uint8)
    rows = np.flatnonzero(insert)
    raw = insert_lines(matrix, prefix_lens, local, start, end, has_end, buffer, p0[rows],
                       p1[rows], rows, n)
    st.last_key = int(key[-1])
    st.position += n
    return Columns(kind, source, start, end, has_end,
                   Payloads(n, with_payload, buffer, p0[with_payload], p1[with_payload]),
                   key, np.full(n, st.index, np.int32), lines, raw)


def _read_parquet(st: _FileState, on_bytes: Callable[[int], None] | None) -> Iterator[Columns]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:  # pragma: no cover - depends on the installed extras
        raise InputError(f"{st.path}: reading Parquet needs pyarrow (pip install "
                         "'goldilocks[parquet]')") from err
    try:
        pf = pq.ParquetFile(st.path)
    except Exception as err:
        raise st.error(1, f"not a readable Parquet file: {err}") from err
    if on_bytes is not None:
        on_bytes(os.path.getsize(st.path))
    names = set(pf.schema_arrow.names)
    for required in ("source", "kind", "start"):
        if required not in names:
            raise st.error(1, f"no {required!r} column; expected at least source, kind, start",
                           required)
    wanted = [c for c in ("seq", "source", "kind", "start", "end", "payload", "arrival")
              if c in names]
    row = 0
    for batch in pf.iter_batches(batch_size=PARQUET_ROWS, columns=wanted):
        n = batch.num_rows
        lines = np.arange(row + 1, row + n + 1, dtype=np.int64)
        saved = (st.mode, st.last_key, st.position)
        if n:
            try:
                fast = _parquet_columns(batch, st, lines)
            except _Slow:
                st.mode, st.last_key, st.position = saved
            else:
                yield fast
                row += n
                continue
        cols: dict[str, list] = {}
        for name in wanted:
            col = batch.column(name)
            if pa.types.is_timestamp(col.type):
                col = col.cast(pa.timestamp("ns", tz=col.type.tz)).cast(pa.int64())
                if st.scale != 1:  # nanoseconds, not subject to the unit of integer times
                    cols[name] = [None if v is None else _Ns(v) for v in col.to_pylist()]
                    continue
            cols[name] = col.to_pylist()
        lines = np.arange(row + 1, row + n + 1, dtype=np.int64)
        none = [None] * n
        payload_text = cols.get("payload", none)
        saved = (st.mode, st.last_key, st.position)
        try:
            if st.mode is None and n:
                st.mode = ("arrival" if cols.get("arrival", none)[0] is not None else
                           "seq" if cols.get("seq", none)[0] is not None else "position")
            payload_l = [None if p is None else _loads(p) for p in payload_text]
            key_l = None if st.mode == "position" else cols.get(st.mode, none)
            yield _fast(cols["kind"], cols["source"], cols["start"], cols.get("end", none),
                        payload_l, key_l, st, lines)
        except (_Slow, _JSONDecodeError, KeyError, TypeError, ValueError, OverflowError):
            st.mode, st.last_key, st.position = saved
            rows = []
            for i in range(n):
                line = row + i + 1
                obj = {name: cols[name][i] for name in wanted if cols[name][i] is not None}
                st.position += 1
                try:
                    if "payload" in obj:
                        try:
                            obj["payload"] = _loads(obj["payload"])
                        except _JSONDecodeError as err:
                            raise st.error(line, f"not valid JSON text: {err}", "payload") from err
                    rows.append(_record(obj, st, line))
                except BadRecordError as err:
                    st.bad.handle(err, orjson.dumps(obj, default=str))
            yield Columns.from_rows(rows, st.index)
        row += n


# -- files and the merge ---------------------------------------------------------------

_READERS = {"jsonl": _read_jsonl, "csv": _read_csv, "parquet": _read_parquet}
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
               ".parquet": "parquet", ".pq": "parquet"}


def log_format(path: str | os.PathLike) -> str:
    """``"jsonl"``, ``"csv"`` or ``"parquet"``, from the file name (``.gz`` is not supported)."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    try:
        return _EXTENSIONS[ext]
    except KeyError:
        raise InputError(f"{os.fspath(path)}: unknown event-log extension {ext!r}; expected one "
                         f"of {', '.join(sorted(_EXTENSIONS))}") from None


class _FileReader:
    __slots__ = ("state", "chunks")

    def __init__(self, state: _FileState, chunks: Iterator[Columns]) -> None:
        self.state = state
        self.chunks = chunks

    def next_chunk(self) -> Columns | None:
        for chunk in self.chunks:
            if len(chunk):
                return chunk
        return None


def read_columns(path: str, *, index: int = 0, table: SourceTable | None = None,
                 bad: BadRecords | None = None,
                 on_bytes: Callable[[int], None] | None = None,
                 time_unit: str | None = None) -> Iterator[Columns]:
    """Stream one log file as ``Columns`` chunks in file order (memory: one chunk).
    ``time_unit``: the unit of integer times (``time_scale``)."""
    state = _FileState(os.fspath(path), index, table or SourceTable(), bad or BadRecords(),
                       time_scale(time_unit))
    if not os.path.exists(state.path):
        raise InputError(f"{state.path}: no such file")
    return _READERS[log_format(state.path)](state, on_bytes)


def merge_columns(paths: Sequence[str], *, table: SourceTable, bad: BadRecords,
                  on_bytes: Callable[[int], None] | None = None,
                  modes: list | None = None,
                  time_unit: str | None = None) -> Generator[Columns, None, None]:
    """Merge files by ``(order key, file index, line)`` (TS §5.2), streaming, in chunks.

    A row is released once no unread row of another file can sort before it: every file's
    rows are non-decreasing in key, so rows with key below the smallest "last read key" of the
    unfinished files are final. Memory: one chunk per file plus runs of equal keys.
    ``modes`` (if given) is filled with each file's reading state; ``.mode`` is its order key
    (``"arrival"``, ``"seq"``, ``"position"``, or ``None`` until its first record).
    ``time_unit``: the unit of the logs' integer times (``time_scale``; ``None``:
    nanoseconds, implausible values refused).
    """
    scale = time_scale(time_unit)
    readers = []
    for i, p in enumerate(paths):
        state = _FileState(os.fspath(p), i, table, bad, scale)
        if not os.path.exists(state.path):
            raise InputError(f"{state.path}: no such file")
        readers.append(_FileReader(state, _READERS[log_format(state.path)](state, on_bytes)))
    if modes is not None:
        modes[:] = [r.state for r in readers]
    try:
        if len(readers) == 1:
            for chunk in readers[0].chunks:
                if len(chunk):
                    yield chunk
            return
        yield from _merge(readers)
    finally:
        for r in readers:
            close = getattr(r.chunks, "close", None)
            if close is not None:
                close()


def _check_modes(readers: list[_FileReader]) -> None:
    seen = {}
    for r in readers:
        if r.state.mode is not None:
            seen.setdefault(r.state.mode, r.state.path)
    if len(seen) > 1:
        (m1, p1), (m2, p2) = list(seen.items())[:2]
        raise InputError(f"{p1} is ordered by {m1!r} but {p2} by {m2!r}; all files of one replay "
                         "must use the same order key (TS §5.2)")


def _merge(readers: list[_FileReader]) -> Iterator[Columns]:
    pending: list[Columns | None] = [None] * len(readers)
    done = [False] * len(readers)

    def refill(i: int) -> None:
        chunk = readers[i].next_chunk()
        if chunk is None:
            done[i] = True
        else:
            pending[i] = chunk if pending[i] is None else Columns.concat([pending[i], chunk])

    for i in range(len(readers)):
        refill(i)
    while True:
        _check_modes(readers)
        live = [i for i in range(len(readers)) if not done[i]]
        if live:
            bound = min(int(pending[i].key[-1]) for i in live)  # type: ignore[union-attr]
        parts = []
        for i, p in enumerate(pending):
            if p is None or not len(p):
                continue
            if not live:
                parts.append(p)
                pending[i] = None
                continue
            cut = int(np.searchsorted(p.key, bound, side="left"))
            if cut:
                parts.append(p.take(np.arange(cut)) if cut < len(p) else p)
                pending[i] = p.take(np.arange(cut, len(p))) if cut < len(p) else None
        if parts:
            merged = Columns.concat(parts)
            order = np.lexsort((merged.line, merged.file, merged.key))  # TS §5.2 tie-break
            yield merged.take(order)
        if not live:
            return
        for i in live:
            if pending[i] is None or int(pending[i].key[-1]) <= bound:
                refill(i)


def read_records(paths: Iterable[str | os.PathLike], *, bad_records: str = "fail",
                 quarantine: BinaryIO | None = None,
                 time_unit: str | None = None) -> Iterable[dict]:
    """Merged records as plain dicts (``source, kind, start, end, payload, file, line``).

    A convenience for tests and small tools: one dict per record, in replay order (TS §5.2);
    memory is one chunk per file. Replay itself works on the columns. ``time_unit``: the
    unit of integer times (``replay``'s).
    """
    table = SourceTable()
    bad = BadRecords(bad_records, quarantine)
    for chunk in merge_columns([os.fspath(p) for p in paths], table=table, bad=bad,
                               time_unit=time_unit):
        for k, s, st, en, he, pl, f, ln in zip(chunk.kind.tolist(), chunk.source.tolist(),
                                               chunk.start.tolist(), chunk.end.tolist(),
                                               chunk.has_end.tolist(), chunk.payload,
                                               chunk.file.tolist(), chunk.line.tolist()):
            rec: dict[str, Any] = {"source": table.name(s), "kind": KIND_NAMES[k]}
            if k <= CTI:
                rec["start"] = st
                rec["end"] = en if he else None
            rec["payload"] = pl
            rec["file"] = f
            rec["line"] = ln
            yield rec
