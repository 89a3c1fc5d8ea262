"""Canonical JSON Lines text built from columns with numpy, many rows at a time.

The record encoders of ``eventlog`` (``insert_line``, ``late_line``) format one line
per call; the columnar replay path needs the same bytes for whole chunks. Here a row's text
is laid out as a few fixed-width pieces — a constant, a right-aligned decimal, a name's
prefix — each with a mask of the bytes it uses; the masked bytes of all rows, read row by
row, are the lines (one compress). Long variable pieces (an input line, a payload) are
merged in the same way, by where their bytes go. The bytes are exactly the encoders'
(``tests/replay`` compares them with hypothesis), so either path writes the same file
(TS §5.1). Memory: O(rows x line width) per call.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from eventlog.columns import RawLines, gather

__all__ = ["decimals", "iso_times", "late_text", "insert_lines", "DIGITS"]

_U = np.uint64
_ASCII0 = _U(0x3030303030303030)
_POWERS = np.array([10**k for k in range(1, 20)], np.uint64)
#: rows per slice of the decimal conversion: its temporaries then stay in the CPU's cache
_SLICE = 8192
#: digit places of a decimal piece: three 8-digit groups
DIGITS = 24


def _eight_ascii(x: np.ndarray) -> np.ndarray:
    """Values below 10**8 as eight ASCII digits, the first in the lowest byte (SWAR: the
    halves, quarters and digits are split in lanes of one 64-bit word)."""
    high = x // _U(10000)
    v = high | ((x - high * _U(10000)) << _U(32))  # 4-digit halves in 32-bit lanes
    h = ((v * _U(5243)) >> _U(19)) & _U(0x0000007F0000007F)  # // 100 in each lane
    v = h | ((v - h * _U(100)) << _U(16))  # 2-digit quarters in 16-bit lanes
    t = ((v * _U(103)) >> _U(10)) & _U(0x000F000F000F000F)  # // 10 in each lane
    return (t | ((v - t * _U(10)) << _U(8))) | _ASCII0


def _decimal_slice(values: np.ndarray, words: np.ndarray, digits: np.ndarray,
                   neg: np.ndarray) -> None:
    np.less(values, 0, out=neg)
    m = values.view(np.uint64)
    m = np.where(neg, ~m + _U(1), m)  # the magnitude; -(2**63) fits in uint64
    digits[:] = np.searchsorted(_POWERS, m, side="right") + 1
    top = m // _U(10**16)
    rest = m - top * _U(10**16)
    mid = rest // _U(10**8)
    words[:, 0] = _eight_ascii(top)
    words[:, 1] = _eight_ascii(mid)
    words[:, 2] = _eight_ascii(rest - mid * _U(10**8))


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


def decimals(values: np.ndarray) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """int64 ``values`` as pieces for ``_row_texts`` — the sign if any is negative, then the
    zero-padded digits of which each number uses the last ones — and each one's length.
    Runs of equal values are converted once."""
    n = len(values)
    distinct, run = _runs(values)
    m = len(distinct)
    words = np.empty((m, DIGITS // 8), np.uint64)
    digits = np.empty(m, np.int64)
    neg = np.empty(m, np.bool_)
    for lo in range(0, m, _SLICE):
        hi = min(m, lo + _SLICE)
        _decimal_slice(distinct[lo:hi], words[lo:hi], digits[lo:hi], neg[lo:hi])
    if run is not None:
        words, digits, neg = words[run], digits[run], neg[run]
    width = int(digits.max()) if n else 1
    text = words.view(np.uint8)[:, DIGITS - width:]
    parts = [(text, np.arange(width) >= (width - digits)[:, None])]
    if neg.any():
        parts.insert(0, _constant(b"-", neg))
    return parts, digits + neg


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


def iso_times(values: np.ndarray) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """int64 ``values`` as pieces for ``_row_texts`` in the form of ``decimals``: each as a
    JSON string of RFC 3339 UTC with a fraction only as needed, in groups of three digits —
    the bytes of ``eventlog.iso_time`` — and each one's length. Every int64 renders
    (years 1677 to 2262); runs of equal values are converted once."""
    n = len(values)
    distinct, run = _runs(values)
    m = len(distinct)
    text = np.empty((m, _ISO_WIDTH), np.uint8)
    digits = np.empty(m, np.int64)
    for lo in range(0, m, _SLICE):
        hi = min(m, lo + _SLICE)
        _iso_slice(distinct[lo:hi], text[lo:hi], digits[lo:hi])
    if run is not None:
        text, digits = text[run], digits[run]
    used = np.ones((n, _ISO_WIDTH), np.bool_)
    used[:, 20:30] = _ISO_FRACTION < (digits + (digits > 0))[:, None]
    return [(text, used)], 22 + digits + (digits > 0)


def _row_texts(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Per row, the concatenation of ``parts`` (``(bytes uint8 (n, k), used bool (n, k))``
    each): all rows' texts back to back."""
    text = np.concatenate([p[0] for p in parts], axis=1)
    used = np.concatenate([p[1] for p in parts], axis=1)
    return text[used]


def _constant(lit: bytes, used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(used)
    text = np.broadcast_to(np.frombuffer(lit, np.uint8), (n, len(lit)))
    return text, np.broadcast_to(used[:, None], (n, len(lit)))


def _interleave(pieces: Sequence[np.ndarray], lens: Sequence[np.ndarray]) -> np.ndarray:
    """Row by row, piece 0's bytes then piece 1's …: ``pieces[k]`` holds all rows' bytes of
    piece ``k`` back to back, ``lens[k]`` each row's share."""
    n = len(lens[0])
    k = len(pieces)
    share = np.empty(n * k, np.int64)
    for j in range(k):
        share[j::k] = lens[j]
    which = np.repeat(np.tile(np.arange(k, dtype=np.int8), n), share)
    out = np.empty(len(which), np.uint8)
    for j in range(k):
        out[which == j] = pieces[j]
    return out


def late_text(raw: RawLines, rows: np.ndarray, cti: np.ndarray,
              adjusted: np.ndarray, times=decimals) -> np.ndarray:
    """The late-file lines of ``rows`` (``late_line`` of their canonical lines): each input
    line without its closing ``}\\n``, then ``,"cti":C,"action":"dropped"}\\n`` or
    ``,"cti":C,"action":"adjusted","adjusted_start":C}\\n`` (``adjusted`` rows). ``times``:
    how the times are written (``decimals``, or ``iso_times`` for ``late_line_iso``)."""
    n = len(rows)
    body = raw.body[rows]
    head = raw.stop[rows] - 2 - body
    width = int(head.max())
    lines = (raw.window(body, width), np.arange(width) < head[:, None])
    number, _ = times(cti)
    parts = [lines, _constant(b',"cti":', np.ones(n, np.bool_)), *number,
             _constant(b',"action":"dropped"}\n', ~adjusted)]
    if adjusted.any():
        parts += [_constant(b',"action":"adjusted","adjusted_start":', adjusted),
                  *[(text, used & adjusted[:, None]) for text, used in number],
                  _constant(b"}\n", adjusted)]
    return _row_texts(parts)


#: payloads up to this many bytes are laid out as a piece of the row; longer ones merged
_PAYLOAD_PIECE = 64


def insert_lines(prefixes: np.ndarray, prefix_lens: np.ndarray, source: np.ndarray,
                 start: np.ndarray, end: np.ndarray, has_end: np.ndarray, buffer: np.ndarray,
                 p0: np.ndarray, p1: np.ndarray, rows: np.ndarray, n: int,
                 times=decimals) -> RawLines:
    """Canonical insert lines (``insert_line``'s bytes) for ``rows`` of a chunk of ``n``.

    ``prefixes[c, :prefix_lens[c]]`` is ``insert_prefix`` of source code ``c``; ``start``,
    ``end``, ``has_end``, ``source`` are the chunk's columns; row ``rows[j]``'s payload is the
    canonical JSON text ``buffer[p0[j]:p1[j]]`` (empty: none). The other rows of the chunk
    get empty lines (the columnar writer builds CTI lines from the decisions). ``times``:
    ``decimals``, or ``iso_times`` for ``insert_line_iso``'s bytes.
    """
    m = len(rows)
    src = source[rows]
    plen = prefix_lens[src]
    width = int(plen.max()) if m else 0
    parts = [(prefixes[src][:, :width], np.arange(width) < plen[:, None])]
    number, lens = times(start[rows])
    parts += number
    lens = lens + plen
    interval = has_end[rows]
    if interval.any():
        number, end_lens = times(end[rows])
        parts += [_constant(b',"end":', interval),
                  *[(text, used & interval[:, None]) for text, used in number]]
        lens += np.where(interval, 7 + end_lens, 0)
    pay_lens = p1 - p0
    has_payload = pay_lens > 0
    longest = int(pay_lens.max()) if m else 0
    if longest:
        parts.append(_constant(b',"payload":', has_payload))
        lens += np.where(has_payload, 11, 0)
    if longest <= _PAYLOAD_PIECE and int(p0.max(initial=0)) + longest <= len(buffer):
        if longest:
            window = np.lib.stride_tricks.sliding_window_view(buffer, longest)[p0]
            parts.append((window, np.arange(longest) < pay_lens[:, None]))
        parts.append(_constant(b"}\n", np.ones(m, np.bool_)))
        data = _row_texts(parts)
    else:  # long payloads: merged between each row's head and its closing brace
        heads = _row_texts(parts)
        tails = np.broadcast_to(np.frombuffer(b"}\n", np.uint8), (m, 2)).ravel()
        data = _interleave([heads, gather(buffer, p0, p1), tails],
                           [lens, pay_lens, np.full(m, 2)])
    line_lens = lens + pay_lens + 2
    stops = np.cumsum(line_lens)
    body = np.zeros(n, np.int64)
    stop = np.zeros(n, np.int64)
    start_at = np.zeros(n, np.int64)
    body[rows] = stops - line_lens
    stop[rows] = stops
    start_at[rows] = body[rows] + plen
    return RawLines(data, body, stop, start_at)
