"""Canonical JSON Lines text built from columns with numpy, many rows at a time.

The record encoders of ``engine.eventlog`` (``insert_line``, ``late_line``) format one line
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

from engine.jsonl_scan import PAD, RawLines, gather

__all__ = ["decimals", "late_text", "insert_lines", "DIGITS"]

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


def _decimal_slice(values: np.ndarray, words: np.ndarray, used: np.ndarray,
                   neg: np.ndarray) -> None:
    np.less(values, 0, out=neg)
    m = values.view(np.uint64)
    m = np.where(neg, ~m + _U(1), m)  # the magnitude; -(2**63) fits in uint64
    digits = np.searchsorted(_POWERS, m, side="right") + 1
    top = m // _U(10**16)
    rest = m - top * _U(10**16)
    mid = rest // _U(10**8)
    words[:, 0] = _eight_ascii(top)
    words[:, 1] = _eight_ascii(mid)
    words[:, 2] = _eight_ascii(rest - mid * _U(10**8))
    np.greater_equal(np.arange(DIGITS), (DIGITS - digits)[:, None], out=used)


def decimals(values: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """int64 ``values`` as two pieces for ``row_texts``: the sign, then ``DIGITS``
    zero-padded digits of which the number uses the last ones. Runs of equal values (the
    CTI in force repeats from row to row) are converted once."""
    n = len(values)
    if n:
        first = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    else:
        first = np.zeros(0, np.intp)
    distinct = values[first] if len(first) < n else values
    m = len(distinct)
    words = np.empty((m, DIGITS // 8), np.uint64)
    used = np.empty((m, DIGITS), np.bool_)
    neg = np.empty(m, np.bool_)
    for lo in range(0, m, _SLICE):
        hi = min(m, lo + _SLICE)
        _decimal_slice(distinct[lo:hi], words[lo:hi], used[lo:hi], neg[lo:hi])
    text = words.view(np.uint8)
    if m < n:
        run = np.repeat(np.arange(m), np.diff(np.append(first, n)))
        text, used, neg = text[run], used[run], neg[run]
    return [_constant(b"-", neg), (text, used)]


def _row_texts(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the concatenation of ``parts`` (``(bytes uint8 (n, k), used bool (n, k))``
    each): all rows' texts back to back, and each row's length."""
    text = np.concatenate([p[0] for p in parts], axis=1)
    used = np.concatenate([p[1] for p in parts], axis=1)
    return text[used], np.count_nonzero(used, axis=1)


def _constant(lit: bytes, used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(used)
    text = np.broadcast_to(np.frombuffer(lit, np.uint8), (n, len(lit)))
    return text, np.broadcast_to(used[:, None], (n, len(lit)))


def _interleave(pieces: Sequence[np.ndarray], lens: Sequence[np.ndarray],
                pad: int = 0) -> np.ndarray:
    """Row by row, piece 0's bytes then piece 1's …: ``pieces[k]`` holds all rows' bytes of
    piece ``k`` back to back, ``lens[k]`` each row's share. ``pad`` zero bytes follow."""
    n = len(lens[0])
    k = len(pieces)
    share = np.empty(n * k, np.int64)
    for j in range(k):
        share[j::k] = lens[j]
    which = np.repeat(np.tile(np.arange(k, dtype=np.int8), n), share)
    out = np.zeros(len(which) + pad, np.uint8)
    for j in range(k):
        out[:len(which)][which == j] = pieces[j]
    return out


def late_text(raw: RawLines, rows: np.ndarray, cti: np.ndarray,
              adjusted: np.ndarray) -> np.ndarray:
    """The late-file lines of ``rows`` (``late_line`` of their canonical lines): each input
    line without its closing ``}\\n``, then ``,"cti":C,"action":"dropped"}\\n`` or
    ``,"cti":C,"action":"adjusted","adjusted_start":C}\\n`` (``adjusted`` rows)."""
    n = len(rows)
    body = raw.body[rows]
    head = raw.stop[rows] - 2 - body
    width = int(head.max())
    lines = (raw.window(body, width), np.arange(width) < head[:, None])
    number = decimals(cti)
    parts = [lines, _constant(b',"cti":', np.ones(n, np.bool_)), *number,
             _constant(b',"action":"dropped"}\n', ~adjusted)]
    if adjusted.any():
        parts += [_constant(b',"action":"adjusted","adjusted_start":', adjusted),
                  *[(text, used & adjusted[:, None]) for text, used in number],
                  _constant(b"}\n", adjusted)]
    return _row_texts(parts)[0]


def insert_lines(prefixes: np.ndarray, prefix_lens: np.ndarray, source: np.ndarray,
                 start: np.ndarray, end: np.ndarray, has_end: np.ndarray, buffer: np.ndarray,
                 p0: np.ndarray, p1: np.ndarray, rows: np.ndarray, n: int) -> RawLines:
    """Canonical insert lines (``insert_line``'s bytes) for ``rows`` of a chunk of ``n``.

    ``prefixes[c, :prefix_lens[c]]`` is ``insert_prefix`` of source code ``c``; ``start``,
    ``end``, ``has_end``, ``source`` are the rows' columns; row ``rows[j]``'s payload is the
    canonical JSON text ``buffer[p0[j]:p1[j]]`` (empty: none). The other rows of the chunk
    get empty lines (the columnar writer builds CTI lines from the decisions).
    """
    m = len(rows)
    src = source[rows]
    plen = prefix_lens[src]
    width = int(plen.max()) if m else 0
    interval = has_end[rows]
    has_payload = p1 > p0
    heads, head_lens = _row_texts(
        [(prefixes[src][:, :width], np.arange(width) < plen[:, None]), *decimals(start[rows]),
         _constant(b',"end":', interval),
         *[(text, used & interval[:, None]) for text, used in decimals(end[rows])],
         _constant(b',"payload":', has_payload)])
    pay_lens = p1 - p0
    tails = np.broadcast_to(np.frombuffer(b"}\n", np.uint8), (m, 2)).ravel()
    padded = _interleave([heads, gather(buffer, p0, p1), tails],
                         [head_lens, pay_lens, np.full(m, 2)], PAD)
    line_lens = head_lens + pay_lens + 2
    stops = np.cumsum(line_lens)
    body = np.zeros(n, np.int64)
    stop = np.zeros(n, np.int64)
    start_at = np.zeros(n, np.int64)
    body[rows] = stops - line_lens
    stop[rows] = stops
    start_at[rows] = body[rows] + plen
    return RawLines(padded[:len(padded) - PAD], body, stop, start_at, padded)
