"""JSON Lines with whitespace between tokens — what ``json.dumps`` writes by default
(``{"source": "dev-0", "kind": "insert", ...}``), indented fields, CRLF line ends — read by
the flat scanner (``eventlog.scan``) after one numpy pass that removes that whitespace (a fast
scanner of ``eventlog.fast``).

Why this is exact: with no backslash in the block, every ``"`` byte delimits a string, so a
byte is inside a string exactly when an odd number of quotes precede it on its line. Spaces,
tabs and carriage returns outside strings are JSON's insignificant whitespace and are
removed; those inside strings are kept. Two cases where removing whitespace could change
what a line says are refused, and the block is then read by the object path, which names
the bad record as before:

- a line with an odd number of quotes (not JSON; its parity would reach the next lines):
  compaction removes no quote, and the flat scanner accounts for every byte of a line it
  reads, so it refuses such a line and with it the block;
- whitespace between two bytes of literal tokens (``1 2``, ``tr ue``), which would join
  them into one: checked on the compacted bytes at every place something was removed.

Everything else — whether the compacted lines are in the flat shape, whether their records
are good — is decided by ``eventlog.scan.flat_columns`` and the rules of a record, as for a
compact log. The compacted bytes are the canonical form of the lines the flat scanner
proves them to be, so replay writes them as it writes a compact log's (``RawLines``).

How: a byte is outside a string when the quotes before it are even; the quotes are counted
eight bytes at a time (one multiplication per 64-bit word gives each byte the count up to
it within its word, a running XOR over words the parity before each word). Cost: a few
numpy passes over the block's bytes and words, one boolean gather into the new buffer
(about a fifth of a compact block's scan). Memory: one more block, and work arrays of about
three blocks per reading thread, kept between blocks.
"""

from __future__ import annotations

import threading

import numpy as np

from eventlog.columns import PAD
from eventlog.records import Block, RawColumns
from eventlog.scan import flat_columns

__all__ = ["compacted", "spaced_columns", "mixed_columns"]

#: bytes that belong to a literal token (number, true, false, null): whitespace between two
#: of them separates tokens and must not be removed
_TOKEN = np.zeros(256, np.bool_)
_TOKEN[np.frombuffer(b"0123456789+-.eEtrufalsn", np.uint8)] = True
_TOKEN[np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", np.uint8)] = True

_ONES = np.uint64(0x0101010101010101)
_TOP = np.uint64(56)
_U1 = np.uint64(1)
_LOCAL = threading.local()


def _scratch(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This thread's work arrays for a block of ``m`` bytes (``m`` a multiple of 8), kept
    from block to block: fresh block-sized arrays cost more in page faults than the
    arithmetic done in them."""
    have = getattr(_LOCAL, "arrays", None)
    if have is None or len(have[0]) < m:
        have = _LOCAL.arrays = (np.empty(m, np.bool_), np.empty(m, np.bool_),
                                np.empty(m // 8 + 1, np.uint64))
    quote, white, words = have
    return quote[:m], white[:m], words[:m // 8 + 1]


def compacted(block: Block) -> Block | None:
    """``block`` (a JSON Lines block, as ``flat_columns`` takes it) with the whitespace
    outside strings removed, in a new buffer with ``PAD`` spare bytes; ``None`` when there is
    none to remove, or the block holds a backslash (an escaped quote would break the quote
    parity: the object path reads it), or removing it would join two tokens.

    The scanners tried one after another on a block (``eventlog.fast``) ask for it in turn:
    the thread's last answer is kept with its block (one block and its compaction, at most),
    so a block is compacted once."""
    last = getattr(_LOCAL, "last", None)
    if last is not None and last[0] is block:
        return last[1]
    squeezed = _compacted(block)
    _LOCAL.last = (block, squeezed)
    return squeezed


def _compacted(block: Block) -> Block | None:
    raw, size = block.data, block.size
    if not size or raw.find(b"\\", 0, size) >= 0:
        return None
    m = (size + 7) // 8 * 8  # whole words: the buffer has PAD (>= 8) bytes after the block
    b = np.frombuffer(raw, np.uint8, count=m)
    quote, white, words = _scratch(m)
    # Per byte, is it outside a string: the quotes before it, counted eight bytes at a time.
    np.equal(b, 0x22, out=quote)
    quote[size:] = False
    q = quote.view(np.uint64)
    np.multiply(q, _ONES, out=q)  # byte k of a word: the quotes in bytes 0..k (<= 8)
    before = words[1:]
    np.right_shift(q, _TOP, out=before)  # each word's count ...
    np.bitwise_and(before, _U1, out=before)
    np.bitwise_xor.accumulate(before, out=before)  # ... as the parity up to its end
    words[0] = 0
    before = words[:-1]  # the parity before each word
    np.multiply(before, _ONES, out=before)
    np.add(q, before, out=q)
    np.bitwise_and(q, _ONES, out=q)
    np.bitwise_xor(q, _ONES, out=q)  # per byte 1: outside a string
    np.equal(b, 0x20, out=white)
    for other, byte in ((b"\t", 0x09), (b"\r", 0x0D)):
        if raw.find(other, 0, size) >= 0:
            white |= b == byte
    white[size:] = False
    w = white.view(np.uint64)
    np.bitwise_and(w, q, out=w)  # whitespace outside strings
    drop = np.flatnonzero(white)
    if not len(drop):
        return None
    a = b[:size]
    # whitespace after a token's byte may separate it from the next: look at what the
    # compacted bytes join there (json.dumps never writes such whitespace)
    after_token = drop[_TOKEN[a[drop - 1]] & (drop > 0)]
    if len(after_token):
        joined = (drop - np.arange(len(drop)))[np.isin(drop, after_token)]
        keep = np.ones(size, np.bool_)
        keep[drop] = False
        out = a[keep]
        if (_TOKEN[out[joined - 1]] & _TOKEN[out[np.minimum(joined, len(out) - 1)]]).any():
            return None  # "1 2" would read as 12
    else:
        out = a[np.logical_not(white[:size], out=quote[:size])]
    n = len(out)
    buf = bytearray(n + PAD)
    memoryview(buf)[:n] = out.data  # one copy, no page-faulting temporary
    return Block(block.format, buf, n, block.first_line, block.state, block.header)


def _spaced_first_line(block: Block) -> bool:
    """Is there whitespace between the tokens of the block's first line?"""
    raw = block.data
    first = raw.find(b"\n", 0, block.size)
    outside = bytes(raw[:first if first >= 0 else block.size]).split(b'"')[::2]
    return any(b" " in s or b"\t" in s or b"\r" in s for s in outside)


def spaced_columns(block: Block) -> RawColumns | None:
    """A JSON Lines block whose first line has whitespace between tokens, read by the flat
    scanner once ``compacted``; ``None`` if its first line has none (the flat scanner's
    turn: a compact log pays nothing here) or it is not in the flat shape then."""
    if not _spaced_first_line(block):
        return None
    squeezed = compacted(block)
    return None if squeezed is None else flat_columns(squeezed)


def mixed_columns(block: Block) -> RawColumns | None:
    """The last try for a block the flat scanner refused whose first line is compact:
    whitespace between tokens further on (a log written by more than one producer)."""
    if _spaced_first_line(block):
        return None  # ``spaced_columns`` tried it
    squeezed = compacted(block)
    return None if squeezed is None else flat_columns(squeezed)
