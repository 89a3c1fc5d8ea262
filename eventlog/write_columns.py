"""Canonical JSON Lines text of whole columns, many rows at a time (replay's columnar path).

The record encoders of ``eventlog.format`` (``insert_line``, ``late_line``) format one line
per call; the columnar path needs the same bytes for whole chunks. Here pyarrow's compute
functions make them: integers become text with ``cast``, each line is the join of its pieces
(``binary_join_element_wise``: a name's prefix, the times, ``,"end":…``, ``,"payload":…``,
the closing brace; a piece that is null is left out), and the joined array's one data buffer
*is* the lines, back to back. Texts already in a buffer (the payloads, the input lines) are
taken by Arrow from the buffer as it is. RFC 3339 times are written here, as 64-bit words of
ASCII digits (SWAR): no library renders them with the fraction only as needed. The bytes are
exactly the encoders' (``tests/replay`` compares them with hypothesis), so either path writes
the same file (TS §5.1). Memory: O(rows x line width) per call.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from eventlog.arrays import bools, int64s, strings, text
from eventlog.columns import RawLines
from eventlog.format import reason_field

__all__ = ["decimals", "iso_times", "texts", "late_text", "insert_lines"]

_U = np.uint64
_ASCII0 = _U(0x3030303030303030)
#: rows per slice of the RFC 3339 conversion: its temporaries then stay in the CPU's cache
_SLICE = 8192


def _arrow() -> tuple[Any, Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


def decimals(values: np.ndarray) -> Any:
    """int64 ``values`` as decimal text (an Arrow ``large_string`` array)."""
    pa, pc = _arrow()
    return pc.cast(int64s(pa, values), pa.large_string())


def texts(buffer: np.ndarray, p0: np.ndarray, p1: np.ndarray,
          valid: np.ndarray | None = None) -> Any:
    """The texts ``buffer[p0[j]:p1[j]]`` (ranges ascending, disjoint) as an Arrow array, null
    where not ``valid``: the buffer cut at every ``p0`` and ``p1`` is an array whose elements
    ``3 j + 1`` are the texts, which Arrow takes without a copy of the rest."""
    pa, pc = _arrow()
    k = len(p0)
    offsets = np.empty(3 * k + 1, np.int64)
    offsets[0] = 0
    offsets[1::3] = p0
    offsets[2::3] = p1
    offsets[3::3] = p1
    whole = pa.LargeStringArray.from_buffers(3 * k, pa.py_buffer(offsets), pa.py_buffer(buffer))
    return pc.take(whole, int64s(pa, np.arange(1, 3 * k, 3), valid))


def _spread(pa: Any, pc: Any, values: Any, where: np.ndarray) -> Any:
    """``values`` (one per true row of ``where``) placed at those rows, null elsewhere."""
    index = np.cumsum(where) - 1
    return pc.take(values, int64s(pa, index, where))


def _lines(joined: Any) -> tuple[np.ndarray, np.ndarray]:
    """A joined array's bytes (no copy, read-only) and its rows' offsets into them."""
    n = len(joined)
    if not n:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    _, offsets, data = joined.buffers()[:3]
    at = np.frombuffer(offsets, np.int64, count=joined.offset + n + 1)[joined.offset:]
    if data is None:
        return np.zeros(0, np.uint8), at - at[0]
    return np.frombuffer(data, np.uint8, count=int(at[-1]))[at[0]:], at - at[0]


def _eight_ascii(x: np.ndarray) -> np.ndarray:
    """Values below 10**8 as eight ASCII digits, the first in the lowest byte (SWAR: the
    halves, quarters and digits are split in lanes of one 64-bit word)."""
    high = x // _U(10000)
    v = high | ((x - high * _U(10000)) << _U(32))  # 4-digit halves in 32-bit lanes
    h = ((v * _U(5243)) >> _U(19)) & _U(0x0000007F0000007F)  # // 100 in each lane
    v = h | ((v - h * _U(100)) << _U(16))  # 2-digit quarters in 16-bit lanes
    t = ((v * _U(103)) >> _U(10)) & _U(0x000F000F000F000F)  # // 10 in each lane
    return (t | ((v - t * _U(10)) << _U(8))) | _ASCII0


def _runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The first value of each run of equal ``values`` (the CTI in force repeats from row
    to row) and the index that spreads per-run results back over the rows (``None``: every
    value is its own run)."""
    n = len(values)
    if not n:
        return values, None
    first = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    if len(first) == n:
        return values, None
    return values[first], np.repeat(np.arange(len(first)), np.diff(np.append(first, n)))


_NS_PER_DAY = 86400 * 10**9
#: an RFC 3339 time in quotes, ``"YYYY-MM-DDTHH:MM:SS.fffffffffZ"``: 32 bytes, 4 words
_ISO_WIDTH = 32
#: fraction digits (groups of three) -> bytes of the fraction used ('.' and the digits)
_ISO_FRACTION = np.arange(10)


def _lit(c: str, at: int) -> np.uint64:
    return _U(ord(c) << 8 * at)


def _civil_ascii(days: np.ndarray) -> np.ndarray:
    """Day numbers since the epoch as the eight ASCII digits ``YYYYMMDD`` of their civil date
    (H. Hinnant's algorithm, proleptic Gregorian; years 1677 to 2262 have four digits)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return _eight_ascii((year * 10000 + month * 100 + day).astype(np.uint64))


def _bytes_of(word: np.ndarray, first: int, count: int, at: int) -> np.ndarray:
    """Bytes ``first .. first + count`` of each word, moved to byte ``at``."""
    return ((word >> _U(8 * first)) & _U((1 << 8 * count) - 1)) << _U(8 * at)


def _iso_slice(values: np.ndarray, text: np.ndarray, digits: np.ndarray) -> None:
    """``values`` (int64 ns) as RFC 3339 in ``text`` (n x 32 bytes, nine fraction digits)
    and each one's fraction digits (0, 3, 6 or 9) in ``digits``. The text is put together
    as four little-endian words per row from the ASCII digit words of the date (once per
    run of equal days: a log's times mostly share their day), the time of day and the
    fraction."""
    days = values // _NS_PER_DAY  # floor: a time before the epoch is in the day before
    in_day = values - days * _NS_PER_DAY  # int64 wrap-around cancels at MIN_TIME
    second = in_day // 10**9
    frac = (in_day - second * 10**9).astype(np.uint64)
    second = second.astype(np.uint64)
    clock = _eight_ascii(second // _U(3600) * _U(10000) + second // _U(60) % _U(60) * _U(100)
                         + second % _U(60))  # 00HHMMSS
    fraction = _eight_ascii(frac // _U(10))  # the first eight of nine digits
    runs, spread = _runs(days)
    date = _civil_ascii(runs)  # YYYYMMDD
    #  '"YYYY-MM'  '-DDThh:m'  'm:ss.fff'  'ffffffZ"'
    head = (_lit('"', 0) | _bytes_of(date, 0, 4, 1) | _lit("-", 5) | _bytes_of(date, 4, 2, 6))
    day = _lit("-", 0) | _bytes_of(date, 6, 2, 1) | _lit("T", 3) | _lit(":", 6)
    if spread is not None:
        head, day = head[spread], day[spread]
    out = text.view(np.uint64)  # (n, 4)
    out[:, 0] = head
    out[:, 1] = day | _bytes_of(clock, 2, 2, 4) | _bytes_of(clock, 4, 1, 7)
    out[:, 2] = (_bytes_of(clock, 5, 1, 0) | _lit(":", 1) | _bytes_of(clock, 6, 2, 2)
                 | _lit(".", 4) | _bytes_of(fraction, 0, 3, 5))
    out[:, 3] = (_bytes_of(fraction, 3, 5, 0) | ((frac % _U(10) + _U(ord("0"))) << _U(40))
                 | _lit("Z", 6) | _lit('"', 7))
    digits[:] = np.where(frac == 0, 0, np.where(frac % _U(10**6) == 0, 3,
                                                 np.where(frac % _U(10**3) == 0, 6, 9)))


def iso_times(values: np.ndarray) -> Any:
    """int64 ``values`` as JSON strings of RFC 3339 UTC with a fraction only as needed, in
    groups of three digits — the bytes of ``eventlog.iso_time`` — as an Arrow
    ``large_string`` array. Every int64 renders (years 1677 to 2262); runs of equal values
    are converted once."""
    pa, pc = _arrow()
    distinct, run = _runs(values)
    m = len(distinct)
    text = np.empty((m, _ISO_WIDTH), np.uint8)
    digits = np.empty(m, np.int64)
    for lo in range(0, m, _SLICE):
        hi = min(m, lo + _SLICE)
        _iso_slice(distinct[lo:hi], text[lo:hi], digits[lo:hi])
    used = np.ones((m, _ISO_WIDTH), np.bool_)
    used[:, 20:30] = _ISO_FRACTION < (digits + (digits > 0))[:, None]
    offsets = np.zeros(m + 1, np.int64)
    np.cumsum(22 + digits + (digits > 0), out=offsets[1:])
    found = pa.LargeStringArray.from_buffers(m, pa.py_buffer(offsets),
                                             pa.py_buffer(text[used]))
    return found if run is None else pc.take(found, int64s(pa, run))


def insert_lines(prefixes: Sequence[bytes], source: np.ndarray, start: np.ndarray,
                 end: np.ndarray, has_end: np.ndarray, buffer: np.ndarray, p0: np.ndarray,
                 p1: np.ndarray, rows: np.ndarray, n: int,
                 times: Callable[[np.ndarray], Any] = decimals) -> RawLines:
    """Canonical insert lines (``insert_line``'s bytes) for ``rows`` of a chunk of ``n``.

    ``prefixes[c]`` is ``insert_prefix`` of source code ``c``; ``start``, ``end``,
    ``has_end``, ``source`` are the chunk's columns; row ``rows[j]``'s payload is the
    canonical JSON text ``buffer[p0[j]:p1[j]]`` (empty: none; ranges ascending, disjoint).
    The other rows of the chunk get empty lines (the columnar writer builds CTI lines from
    the decisions). ``times``: ``decimals``, or ``iso_times`` for ``insert_line_iso``'s
    bytes.
    """
    pa, pc = _arrow()
    join = pc.binary_join_element_wise
    src = source[rows]
    pieces = [pc.take(strings(pa, prefixes), int64s(pa, src)),
              times(start[rows])]
    interval = has_end[rows]
    if interval.any():
        pieces.append(join(text(pa, ',"end":'),
                           _spread(pa, pc, times(end[rows][interval]), interval), text(pa, "")))
    given = p1 > p0
    if given.any():
        pieces.append(join(text(pa, ',"payload":'), texts(buffer, p0, p1, given),
                           text(pa, "")))
    data, at = _lines(join(*pieces, text(pa, "}\n"), text(pa, ""), null_handling="skip"))
    prefix_lens = np.array([len(p) for p in prefixes] or [0], np.int64)
    body = np.zeros(n, np.int64)
    stop = np.zeros(n, np.int64)
    start_at = np.zeros(n, np.int64)
    body[rows] = at[:-1]
    stop[rows] = at[1:]
    start_at[rows] = at[:-1] + prefix_lens[src]
    return RawLines(data, body, stop, start_at)


def late_text(raw: RawLines, rows: np.ndarray, cti: np.ndarray, adjusted: np.ndarray,
              times: Callable[[np.ndarray], Any] = decimals, reason: np.ndarray | None = None,
              reasons: Sequence[str | None] = ()) -> np.ndarray:
    """The late-file lines of ``rows`` (``late_line`` of their canonical lines): each input
    line without its closing ``}\\n``, then ``,"cti":C,"action":"dropped"`` or
    ``,"cti":C,"action":"adjusted","adjusted_start":C`` (``adjusted`` rows), then the
    reason's field (``reason_field``) and ``}\\n``. ``reason``: per row of ``rows`` a code
    into ``reasons`` (``None``: no row has a reason; a ``None`` in ``reasons`` writes no
    field). ``times``: how the times are written (``decimals``, or ``iso_times`` for
    ``late_line_iso``)."""
    pa, pc = _arrow()
    join = pc.binary_join_element_wise
    c = times(cti)
    action = pc.coalesce(
        join(text(pa, ',"action":"adjusted","adjusted_start":'),
             pc.if_else(bools(pa, adjusted), c, text(pa, None)),
             text(pa, "")),
        text(pa, ',"action":"dropped"'))
    body = raw.body[rows]
    lines = texts(raw.data, body, raw.stop[rows] - 2)  # without the closing }\n
    pieces = [lines, text(pa, ',"cti":'), c, action]
    if reason is not None and any(r is not None for r in reasons):
        fields = strings(pa, [reason_field(r) for r in reasons])
        pieces.append(fields.take(int64s(pa, reason)))
    return _lines(join(*pieces, text(pa, "}\n"), text(pa, "")))[0]
