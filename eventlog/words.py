"""Reading many short texts at once: 64-bit words of a byte buffer, one per row (SWAR: SIMD
within a register), for the fast scanners (``eventlog.scan``, ``eventlog.iso``).

A word is read at any byte offset (``eventlog.columns.words_of``), little-endian, so its first
byte is the text's first. A literal is one or two word comparisons; the length of a run of
digits, or the place of a quote, is the first flagged byte of a word; eight ASCII digits
convert with three multiplications. Every function works on arrays of words, one per row.
"""

from __future__ import annotations

import numpy as np

__all__ = ["U", "ONES", "HIGH", "TENS", "QUOTES", "ASCII0", "ALL", "INT64_MAX", "POW10",
           "spells", "first_flagged", "digit_count", "quote_at", "eight_digits",
           "leading_value", "power10"]

U = np.uint64
ONES = U(0x0101010101010101)
HIGH = U(0x8080808080808080)
TENS = U(0x0A0A0A0A0A0A0A0A)
QUOTES = U(0x2222222222222222)
ASCII0 = U(0x3030303030303030)
ALL = U(2**64 - 1)
INT64_MAX = U(2**63 - 1)
POW10 = np.array([10**d for d in range(9)], np.uint64)


def _lit(lit: bytes) -> tuple[np.uint64, np.uint64]:
    assert 0 < len(lit) <= 8
    return U((1 << 8 * len(lit)) - 1), U(int.from_bytes(lit, "little"))


_LITS: dict[bytes, tuple[np.uint64, np.uint64]] = {}


def spells(x: np.ndarray, lit: bytes) -> np.ndarray:
    """Per word: do its first ``len(lit)`` (<= 8) bytes spell ``lit``?"""
    found = _LITS.get(lit)
    if found is None:
        found = _LITS[lit] = _lit(lit)
    mask, value = found
    if len(lit) == 8:
        return x == value
    return (x & mask) == value


if hasattr(np, "bitwise_count"):
    def first_flagged(m: np.ndarray) -> np.ndarray:
        """The index (0..7, uint8) of the first byte whose high bit is set in ``m``, 8 if
        none; ``m`` has no other bits set."""
        return np.bitwise_count((m - U(1)) & ~m) >> np.uint8(3)  # trailing zero bits / 8
else:  # pragma: no cover - numpy < 2
    def first_flagged(m: np.ndarray) -> np.ndarray:
        low = m & (~m + U(1))
        exp = np.frexp(low.astype(np.float64))[1].astype(np.int64)  # 8 k + 8 for byte k
        return np.where(low == 0, 8, (exp >> 3) - 1).astype(np.uint8)


def digit_count(x: np.ndarray) -> np.ndarray:
    """How many of the word's bytes, from the first, are ASCII digits (0..8)."""
    y = x ^ ASCII0  # digits become 0..9
    # per byte: the high bit is set unless 0 <= y < 10 (no borrow crosses bytes: each
    # byte of y | HIGH is >= 0x80)
    return first_flagged((((y | HIGH) - TENS) | y) & HIGH)


def quote_at(x: np.ndarray) -> np.ndarray:
    """The index of the word's first ``"`` byte (0..7), 8 if none."""
    t = x ^ QUOTES  # quotes become 0
    # a zero byte sets its high bit; a borrow only reaches bytes after the first zero
    return first_flagged((t - ONES) & ~t & HIGH)


def eight_digits(word: np.ndarray) -> np.ndarray:
    """The value of eight ASCII digits read little-endian (first digit in the lowest byte)."""
    v = word - ASCII0
    v = ((v & U(0x0F0F0F0F0F0F0F0F)) * U(2561)) >> U(8)
    v = ((v & U(0x00FF00FF00FF00FF)) * U(6553601)) >> U(16)
    return ((v & U(0x0000FFFF0000FFFF)) * U(42949672960001)) >> U(32)


def leading_value(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The value of the first ``d`` (0..8) digit bytes of each word: shifted to the word's
    high end (the bytes after them fall off; numpy shifts by 64 give 0), ``'0'`` below."""
    if d.min() == 8:
        return eight_digits(x)
    shift = (np.uint8(8) - d) << np.uint8(3)
    return eight_digits((x << shift) | (ASCII0 & ~(ALL << shift)))


def power10(d: np.ndarray) -> np.ndarray | np.uint64:
    """10 ** d for digit counts 0..8 (one number when they are all the same)."""
    low = int(d.min())
    return POW10[low] if low == d.max() else POW10[d]
