"""ISO-8601 instants of whole columns, read with numpy (the fast scanners' reading of TS §1.4).

``iso_ns(a, w, p0)`` reads, for every row at once, the text that begins at ``a[p0[i]]`` in
the one shape that device clocks and our own RFC 3339 output write::

    YYYY-MM-DDTHH:MM:SS[.F…](Z|+HH:MM|-HH:MM)

(``T`` and ``Z`` upper case, a point before one or more fraction digits) and returns the
instants in nanoseconds and where each text ends, or ``None`` if any row is not in that shape,
names a date or time that does not exist (the 30th of February, an hour 24, a leap second,
an offset past 23:59), or lies outside the years 1678 to 2261 (near the ends of the int64
range). Fraction digits past the ninth are truncated (TS §1.4).

It decides nothing: a ``None`` sends the whole block to the object path, whose reading
(``eventlog.values``, ``engine.times.to_ns``: pendulum and ``datetime``) is the definition,
and which names any text it cannot read. Everything this reader accepts, that one reads to
the same nanosecond (``tests/replay/test_iso_scan.py`` compares them with hypothesis).

How: a row's fields sit at fixed offsets up to the fraction, so each is read from the
64-bit words at the row's offset (``eventlog.words``): the separators by comparing bytes,
the digits by checking eight at a time; the fraction's length is a run of digits; the day
number of each month's first day, and the month's length, come from a table of the years
read. A few dozen numpy operations over arrays of one element per row (about 0.1 µs a
value). ``a`` must have ``PAD`` bytes after the last text.
"""

from __future__ import annotations

import numpy as np

from eventlog.words import ASCII0, HIGH, TENS, U, digit_count, leading_value

__all__ = ["iso_ns", "YEARS"]

#: the years read here: every instant in them, with any offset, fits int64 nanoseconds
YEARS = (1678, 2261)

_NS = 1_000_000_000
#: the most fraction digits read (a longer fraction: the object path)
_MAX_FRACTION = 32


def _layout(text: bytes) -> tuple[np.uint64, np.uint64, np.uint64]:
    """A word's template: ``d`` marks a digit, other bytes must be themselves, ``.`` any
    byte. Returns the digits' byte mask, the literal bytes' mask and their value."""
    digits = literal = value = 0
    for k, c in enumerate(text):
        if c == ord("d"):
            digits |= 0xFF << 8 * k
        elif c != ord("."):
            literal |= 0xFF << 8 * k
            value |= c << 8 * k
    return U(digits), U(literal), U(value)


_DATE = _layout(b"dddd-dd-")  # YYYY-MM-
_TIME = _layout(b"ddTdd:dd")  # DDTHH:MM
_SECOND = _layout(b":dd")  # :SS
_OFFSET = _layout(b".dd:dd")  # +HH:MM (the sign checked on its own)


def _matches(x: np.ndarray, layout: tuple[np.uint64, np.uint64, np.uint64]) -> bool:
    """Does every word fit the template (its literal bytes, and digits where it has ``d``)?"""
    digits, literal, value = layout
    y = x ^ ASCII0  # digits become 0..9; a byte is a digit iff its high bit stays clear
    not_digit = (((y | HIGH) - TENS) | y) & HIGH & digits
    return bool(((x & literal) == value).all() and not not_digit.any())


def _month_tables() -> tuple[np.ndarray, np.ndarray]:
    """For each month of ``YEARS`` (index ``12 (year - YEARS[0]) + month - 1``): the day
    number of its first day since the epoch, and its length in days."""
    years = np.arange(YEARS[0], YEARS[1] + 1, dtype=np.int64)
    months = np.arange(12, dtype=np.int64)
    y = np.repeat(years, 12)
    m = np.tile(months, len(years))
    first = (y - 1970).astype("datetime64[Y]").astype("datetime64[M]") + m.astype("timedelta64[M]")
    first = first.astype("datetime64[D]").astype(np.int64)
    after = (first.astype("datetime64[D]").astype("datetime64[M]") + np.timedelta64(1, "M"))
    return first, after.astype("datetime64[D]").astype(np.int64) - first


_FIRST_DAY, _MONTH_DAYS = _month_tables()


def _byte(x: np.ndarray, k: int) -> np.ndarray:
    """Byte ``k`` of each word, as a digit's value (int32; garbage where not a digit)."""
    return ((x >> U(8 * k)) & U(0xFF)).astype(np.int32) - 48


def iso_ns(a: np.ndarray, w: np.ndarray, p0: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The instants (int64 ns) of the texts beginning at ``p0`` and the offset just past each,
    or ``None`` if one is not in the shape read here (see the module). ``w`` is
    ``words_of(a)``."""
    if not len(p0):
        return np.zeros(0, np.int64), p0
    x0, x1, x2 = w[p0], w[p0 + 8], w[p0 + 16]
    if not (_matches(x0, _DATE) and _matches(x1, _TIME) and _matches(x2, _SECOND)):
        return None
    year = (_byte(x0, 0) * 1000 + _byte(x0, 1) * 100 + _byte(x0, 2) * 10 + _byte(x0, 3))
    month = _byte(x0, 5) * 10 + _byte(x0, 6)
    day = _byte(x1, 0) * 10 + _byte(x1, 1)
    hour = _byte(x1, 3) * 10 + _byte(x1, 4)
    minute = _byte(x1, 6) * 10 + _byte(x1, 7)
    second = _byte(x2, 1) * 10 + _byte(x2, 2)

    # the fraction: a point, then a run of digits (none: the zone comes at once)
    point = ((x2 >> U(24)) & U(0xFF)) == U(ord("."))
    count = np.zeros(len(p0), np.int64)
    fraction = np.zeros(len(p0), np.int64)
    if point.any():
        rows = np.flatnonzero(point)
        f = w[p0[rows] + 20]
        d = digit_count(f).astype(np.int64)
        if not d.all():
            return None  # a point without a digit
        head = np.minimum(d, 8)
        value = leading_value(f, d.astype(np.uint8)).astype(np.int64) * 10 ** (9 - head)
        n = d.copy()
        more = d == 8
        for k in range(1, _MAX_FRACTION // 8 + 1):
            if not more.any():
                break
            if k == _MAX_FRACTION // 8:
                return None
            g = w[p0[rows] + 20 + 8 * k]
            e = np.where(more, digit_count(g), np.uint8(0)).astype(np.int64)
            if k == 1:  # the ninth digit; those after it are truncated (TS §1.4)
                value += np.where(e > 0, (g & U(0xFF)).astype(np.int64) - 48, 0)
            n += e
            more &= e == 8
        count[rows] = n
        fraction[rows] = value

    # the zone: Z, or a sign and HH:MM
    z = p0 + 19 + np.where(point, count + 1, 0)
    zone = a[z]
    utc = zone == ord("Z")
    offset = np.zeros(len(p0), np.int64)
    if not utc.all():
        rows = np.flatnonzero(~utc)
        sign = zone[rows]
        if not ((sign == ord("+")) | (sign == ord("-"))).all():
            return None
        x = w[z[rows]]
        if not _matches(x, _OFFSET):
            return None
        oh = _byte(x, 1) * 10 + _byte(x, 2)
        om = _byte(x, 4) * 10 + _byte(x, 5)
        if (oh > 23).any() or (om > 59).any():
            return None
        offset[rows] = np.where(sign == ord("-"), -1, 1) * (oh * 3600 + om * 60).astype(np.int64)
    end = z + np.where(utc, 1, 6)

    # does the date and time exist? (the day number of each month's first day: a table)
    month_index = (year - YEARS[0]) * 12 + month - 1
    if ((year < YEARS[0]) | (year > YEARS[1]) | (month < 1) | (month > 12) | (day < 1)
            | (hour > 23) | (minute > 59) | (second > 59)).any():
        return None
    if (day > _MONTH_DAYS[month_index]).any():
        return None
    days = _FIRST_DAY[month_index] + (day - 1)
    seconds = days * 86_400 + (hour * 3600 + minute * 60 + second) - offset
    return seconds * _NS + fraction, end
