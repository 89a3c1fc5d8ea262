"""Python values into ``RawColumns``: the object path's half of reading (``eventlog.records``).

JSON decoded by orjson, CSV cells and Parquet rows all come here as lists of Python values per
field, ``MISSING`` where a record has no such field. Each time is classified once — an
integer (in the file's unit, or beyond int64), nanoseconds (ISO-8601 text with an offset, or
a typed timestamp: ``Ns``), null, or not an instant — and names get block-local codes. What
the values mean is decided by the rules, not here. A column's ISO-8601 strings are read all
at once by ``eventlog.iso`` when every one is in its shape (the same nanoseconds), else one
by one.
"""

from __future__ import annotations

import datetime as _dt
import re
from decimal import Decimal
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from engine.errors import TimeFormatError
from engine.times import to_ns

from eventlog.columns import PAD, words_of
from eventlog.format import ALL_KIND_CODES
from eventlog.iso import iso_ns
from eventlog.records import (ABSENT, BAD, BAD_KIND, BAD_SOURCE, BIG, INT, MISSING, NO_KIND,
                              NO_SOURCE, NOT_RECORD, NS, NULL, RawColumns, Times)

__all__ = ["Ns", "times_of", "from_fields"]

#: more than six fractional digits: ``datetime`` would keep microseconds only, so ``to_ns``
#: reads them (nanoseconds kept, digits past the ninth truncated: one rule for every reader)
_FRACTION_DIGITS = re.compile(r"[.,]\d{7}")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_INT64 = range(-(2**63), 2**63)


@lru_cache(maxsize=65_536)
def _iso_ns(text: str) -> int:
    """ISO-8601 instant with an offset -> ns; the common forms without pendulum (cached)."""
    if text[-1:] == "z":  # RFC 3339 allows a lower-case 'z' (and 't': fromisoformat reads it)
        return to_ns(text, what="instant")
    if _FRACTION_DIGITS.search(text):  # sub-microsecond digits: to_ns's rule (TS §1.4)
        return to_ns(text, what="instant")
    try:
        value = _dt.datetime.fromisoformat(text)
    except ValueError:
        return to_ns(text, what="instant")
    if value.tzinfo is None or value.utcoffset() is None or "T" not in text.upper():
        return to_ns(text, what="instant")
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


class Ns(int):
    """An integer that is nanoseconds whatever the file's unit: a typed timestamp column's."""

    __slots__ = ()


#: a number with a fraction, as CSV text (``1795334460000.0``)
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?")


def _scaled(value: float, scale: int) -> tuple[int, int]:
    """A number with a fraction in the unit ``scale`` (ns per unit) as whole nanoseconds,
    rounded to the nearest (``time.time()``'s float seconds, a pandas float column): the
    number as written (its shortest decimal form), not the binary float's digits."""
    if value != value or value in (float("inf"), float("-inf")):
        return 0, BAD
    ns = int((Decimal(repr(value)) * scale).to_integral_value())
    return (ns, NS) if ns in _INT64 else (0, BIG)


def _cell(value: Any, instant: bool, scale: int | None = None) -> tuple[int, int]:
    """``(value, state)`` of one time cell (see ``Times``); ``scale``: the unit of numbers
    (ns per unit, from ``--time-unit``), which a number with a fraction needs."""
    t = type(value)
    if t is int:
        return (value, INT) if value in _INT64 else (0, BIG)
    if value is MISSING:
        return 0, ABSENT
    if value is None:
        return 0, NULL
    if instant:
        if t is Ns:
            return int(value), NS
        if t is float and scale is not None and scale > 1:  # TS §5.4: in the unit given
            return _scaled(value, scale)
        if t is str:
            if scale is not None and scale > 1 and _DECIMAL.fullmatch(value.strip()):
                return _scaled(float(value), scale)
            try:
                ns = _iso_ns(value)
            except TimeFormatError:
                return 0, BAD
            return (ns, NS) if ns in _INT64 else (0, BIG)
    return 0, BAD


def times_of(values: list[Any], instant: bool = True, scale: int | None = None) -> Times:
    """A time column from Python values (``MISSING`` where a record has no such field):
    ``instant`` for start, end and arrival (integers, ISO-8601 text, or, with the unit of
    numbers given as ``scale``, numbers with a fraction), else an integer (seq)."""
    n = len(values)
    types = set(map(type, values))
    if types == {int}:
        try:
            return Times(np.array(values, np.int64), np.full(n, INT, np.int8))
        except OverflowError:
            pass
    elif len(types) == 1 and values and values[0] is MISSING:
        return Times.absent(n)
    elif instant and str in types and not (scale is not None and scale > 1):
        found = _iso_column(values, n)
        if found is not None:
            return found
    cells = [_cell(v, instant, scale) for v in values]
    value = np.fromiter((c[0] for c in cells), np.int64, n)
    state = np.fromiter((c[1] for c in cells), np.int8, n)
    return Times(value, state)


def _iso_column(values: list[Any], n: int) -> Times | None:
    """The column with its strings read by ``eventlog.iso`` all at once (the same nanosecond
    as ``_iso_ns``: ``tests/replay/test_iso_scan.py``), the other values one by one;
    ``None`` if a string is not in that reader's shape (each is then read by ``_iso_ns``)."""
    rows = [i for i, v in enumerate(values) if type(v) is str]
    texts = [values[i] for i in rows]
    joined = '"'.join(texts) + '"'
    if not joined.isascii():
        return None
    lens = np.fromiter(map(len, texts), np.int64, len(texts)) + 1
    a = np.frombuffer(joined.encode() + bytes(PAD), np.uint8)
    found = iso_ns(a, words_of(a), np.cumsum(lens) - lens)
    if found is None or (found[1] != np.cumsum(lens) - 1).any():
        return None
    value = np.zeros(n, np.int64)
    state = np.zeros(n, np.int8)
    at = np.array(rows, np.int64)
    value[at] = found[0]
    state[at] = NS
    if len(rows) < n:
        for i, v in enumerate(values):
            if type(v) is not str:
                value[i], state[i] = _cell(v, True)
    return Times(value, state)


_KIND_OF: dict[Any, int] = {**ALL_KIND_CODES, MISSING: NO_KIND}


def _kinds(values: list[Any]) -> np.ndarray:
    try:
        codes = [_KIND_OF.get(k, BAD_KIND) for k in values]
    except TypeError:  # an unhashable kind (an object or an array)
        codes = [BAD_KIND if type(k) in (dict, list) else _KIND_OF.get(k, BAD_KIND)
                 for k in values]
    return np.array(codes, np.int8).reshape(len(values))


def _sources(values: list[Any]) -> tuple[np.ndarray, list[str]]:
    """Local codes (indices into the names, in order of first appearance) of a source column."""
    n = len(values)
    if set(map(type, values)) == {str}:
        index = {name: i for i, name in enumerate(dict.fromkeys(values))}
        return np.fromiter(map(index.__getitem__, values), np.int32, n), list(index)
    index = {}
    codes = []
    for v in values:
        if type(v) is str:
            c = index.get(v)
            if c is None:
                c = index[v] = len(index)
        else:
            c = NO_SOURCE if v is None or v is MISSING else BAD_SOURCE
        codes.append(c)
    return np.array(codes, np.int32).reshape(n), list(index)


def from_fields(fields: dict[str, list[Any]], lines: np.ndarray, *,
                objects: Any, text: Callable[[int], bytes | str],
                unreadable: dict[int, tuple[str, str | None]] | None = None,
                not_record: np.ndarray | None = None,
                counted: np.ndarray | None = None, scale: int | None = None) -> RawColumns:
    """``RawColumns`` from Python values per field (``source``, ``kind``, ``start``, ``end``,
    ``payload``, ``seq``, ``arrival``, ``id``; ``MISSING`` where a record has no such field): the
    object path of every format. ``not_record``: rows that are not objects. ``scale``: the
    unit of numbers in times (``time_scale``), which numbers with a fraction are read in."""
    n = len(lines)
    none = [MISSING] * n
    kind = _kinds(fields.get("kind", none))
    if unreadable:
        kind[list(unreadable)] = NOT_RECORD  # no fields: the unreadable rule comes first
    if not_record is not None:
        kind[not_record] = NOT_RECORD
    source, names = _sources(fields.get("source", none))
    payload = [None if p is MISSING else p for p in fields.get("payload", [None] * n)]
    has_payload = np.fromiter((p is not None for p in payload), np.bool_, n)
    return RawColumns(lines, kind, source, names, times_of(fields.get("start", none), True, scale),
                      times_of(fields.get("end", none), True, scale),
                      times_of(fields.get("seq", none), False),
                      times_of(fields.get("arrival", none), True, scale), payload, has_payload,
                      objects=objects, text=text, unreadable=dict(unreadable or {}),
                      counted=counted, ids=fields.get("id"))
