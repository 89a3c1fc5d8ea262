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
the digits by checking and converting eight at a time; the fraction's length is a run of
digits; the day number is Howard Hinnant's ``days_from_civil``. A few dozen numpy operations
over arrays of one element per row. ``a`` must have ``PAD`` bytes after the last text.
"""

from __future__ import annotations

import numpy as np

from eventlog.words import ASCII0, HIGH, TENS, U, digit_count, eight_digits, leading_value

__all__ = ["iso_ns", "YEARS"]

#: the years read here: every instant in them, with any offset, fits int64 nanoseconds
YEARS = (1678, 2261)

_NS = 1_000_000_000
#: the most fraction digits read (a longer fraction: the object path)
_MAX_FRACTION = 32
_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


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


def _value(x: np.ndarray, digits: np.uint64) -> np.ndarray:
    """The eight bytes as a decimal number, the non-digit bytes read as ``0``."""
    return eight_digits((x & digits) | (ASCII0 & ~digits)).astype(np.int64)


def iso_ns(a: np.ndarray, w: np.ndarray, p0: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The instants (int64 ns) of the texts beginning at ``p0`` and the offset just past each,
    or ``None`` if one is not in the shape read here (see the module). ``w`` is
    ``words_of(a)``."""
    if not len(p0):
        return np.zeros(0, np.int64), p0
    x0, x1, x2 = w[p0], w[p0 + 8], w[p0 + 16]
    if not (_matches(x0, _DATE) and _matches(x1, _TIME) and _matches(x2, _SECOND)):
        return None
    ymd = _value(x0, _DATE[0])  # YYYY0MM0
    dhm = _value(x1, _TIME[0])  # DD0HH0MM
    year, month = ymd // 10_000, ymd // 10 % 100
    day, hour, minute = dhm // 1_000_000, dhm // 1000 % 100, dhm % 100
    second = ((x2 >> U(8)) & U(0xFF)).astype(np.int64) * 10 + ((x2 >> U(16)) & U(0xFF)).astype(
        np.int64) - 11 * 48

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
        hm = _value(x, _OFFSET[0]) // 100  # +HH0MM (sign read as 0): HH0MM
        oh, om = hm // 1000 % 100, hm % 100
        if (oh > 23).any() or (om > 59).any():
            return None
        offset[rows] = np.where(sign == ord("-"), -1, 1) * (oh * 3600 + om * 60)
    end = z + np.where(utc, 1, 6)

    # does the date and time exist?
    if ((year < YEARS[0]) | (year > YEARS[1]) | (month < 1) | (month > 12) | (day < 1)
            | (hour > 23) | (minute > 59) | (second > 59)).any():
        return None
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    if (day > _DAYS[month] + (leap & (month == 2))).any():
        return None

    # days since the epoch (days_from_civil: the year starting in March, eras of 400 years)
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    days = era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
    return seconds * _NS + fraction, end
