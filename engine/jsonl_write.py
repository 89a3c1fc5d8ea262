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

from engine.jsonl_scan import RawLines, gather

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


def decimals(values: np.ndarray) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """int64 ``values`` as pieces for ``_row_texts`` — the sign if any is negative, then the
    zero-padded digits of which each number uses the last ones — and each one's length.
    Runs of equal values (the CTI in force repeats from row to row) are converted once."""
    n = len(values)
    if n:
        first = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    else:
        first = np.zeros(0, np.intp)
    distinct = values[first] if len(first) < n else values
    m = len(distinct)
    words = np.empty((m, DIGITS // 8), np.uint64)
    digits = np.empty(m, np.int64)
    neg = np.empty(m, np.bool_)
    for lo in range(0, m, _SLICE):
        hi = min(m, lo + _SLICE)
        _decimal_slice(distinct[lo:hi], words[lo:hi], digits[lo:hi], neg[lo:hi])
    if m < n:
        run = np.repeat(np.arange(m), np.diff(np.append(first, n)))
        words, digits, neg = words[run], digits[run], neg[run]
    width = int(digits.max()) if n else 1
    text = words.view(np.uint8)[:, DIGITS - width:]
    parts = [(text, np.arange(width) >= (width - digits)[:, None])]
    if neg.any():
        parts.insert(0, _constant(b"-", neg))
    return parts, digits + neg


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
              adjusted: np.ndarray) -> np.ndarray:
    """The late-file lines of ``rows`` (``late_line`` of their canonical lines): each input
    line without its closing ``}\\n``, then ``,"cti":C,"action":"dropped"}\\n`` or
    ``,"cti":C,"action":"adjusted","adjusted_start":C}\\n`` (``adjusted`` rows)."""
    n = len(rows)
    body = raw.body[rows]
    head = raw.stop[rows] - 2 - body
    width = int(head.max())
    lines = (raw.window(body, width), np.arange(width) < head[:, None])
    number, _ = decimals(cti)
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
                 p0: np.ndarray, p1: np.ndarray, rows: np.ndarray, n: int) -> RawLines:
    """Canonical insert lines (``insert_line``'s bytes) for ``rows`` of a chunk of ``n``.

    ``prefixes[c, :prefix_lens[c]]`` is ``insert_prefix`` of source code ``c``; ``start``,
    ``end``, ``has_end``, ``source`` are the chunk's columns; row ``rows[j]``'s payload is the
    canonical JSON text ``buffer[p0[j]:p1[j]]`` (empty: none). The other rows of the chunk
    get empty lines (the columnar writer builds CTI lines from the decisions).
    """
    m = len(rows)
    src = source[rows]
    plen = prefix_lens[src]
    width = int(plen.max()) if m else 0
    parts = [(prefixes[src][:, :width], np.arange(width) < plen[:, None])]
    number, lens = decimals(start[rows])
    parts += number
    lens = lens + plen
    interval = has_end[rows]
    if interval.any():
        number, end_lens = decimals(end[rows])
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
