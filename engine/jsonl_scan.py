"""A vectorised JSON Lines scanner for blocks of records in the flat shape the engine writes.

The orjson parsers of ``engine.eventlog_read`` build a Python dict per record; this scanner
reads a whole block of lines with numpy instead, when every line has the *flat shape*::

    {["seq":INT, | "arrival":INT,]["source":"NAME",]"kind":"KIND"[,"start":INT][,"end":INT][,"payload":P]}

with the keys in exactly that order, no spaces, integers in canonical form (no leading zeros,
no ``-0``), a name without quotes, backslashes or control characters, and ``P`` a JSON value
that orjson re-encodes to the same bytes (checked for the whole block in one round trip).
Every byte of such a line is accounted for, so the values found are those orjson would
decode, and the line from ``"source"`` on *is* the canonical output line (``docs/event-log.md``):
replay writes those input bytes instead of re-encoding the record.

Anything else — a space, an escape, an ISO time, a key out of order, a blank line, an invalid
record — makes ``scan_block`` return ``None`` and the caller parses the block with the exact
parsers, which give the bad-record errors (TS §5.3). The scanner therefore never decides that
a record is bad; it only recognises blocks that are certainly good. Memory: O(block).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

__all__ = ["RawLines", "scan_block", "MAX_NAME"]

#: names longer than this many bytes are looked up one by one instead of vectorised
MAX_NAME = 32

_PAD = 32



class RawLines:
    """The input bytes behind a block's rows, for writing canonical lines without encoding.

    ``data``: the block as a writable uint8 array in which the byte before each row's
    canonical part has been set to ``{``; row ``i``'s canonical line (newline included) is
    ``data[body[i]:stop[i]]``; ``start_at`` is where its start value's digits begin.
    """

    __slots__ = ("data", "body", "stop", "start_at")

    def __init__(self, data: np.ndarray, body: np.ndarray, stop: np.ndarray,
                 start_at: np.ndarray) -> None:
        self.data = data
        self.body = body
        self.stop = stop
        self.start_at = start_at

    def line(self, i: int) -> bytes:
        return self.data[self.body[i]:self.stop[i]].tobytes()


class _NotFlat(Exception):
    pass


def _words(a: np.ndarray) -> np.ndarray:
    """A little-endian uint64 read at every byte offset of ``a`` (unaligned, no copy)."""
    return np.ndarray((len(a) - 7,), dtype="<u8", buffer=a, strides=(1,))


def _literal(w: np.ndarray, at: np.ndarray, lit: bytes) -> np.ndarray:
    """Per row: do the bytes at ``at`` spell ``lit``? Eight bytes per comparison; ``w`` is
    ``_words`` of the padded block, so reads past a line's end see padding, never a match."""
    ok = None
    last = len(w) - 1
    for off in range(0, len(lit), 8):
        part = lit[off:off + 8]
        x = w[np.minimum(at + off, last)]
        if len(part) < 8:
            x = x & np.uint64((1 << (8 * len(part))) - 1)
        hit = x == np.uint64(int.from_bytes(part, "little"))
        ok = hit if ok is None else ok & hit
    return ok


_U = np.uint64
_ASCII0 = _U(0x3030303030303030)
_HIGH_NIBBLES = _U(0xF0F0F0F0F0F0F0F0)
_SIXES = _U(0x0606060606060606)
_ALL = _U(2**64 - 1)
_INT64_MAX = _U(2**63 - 1)


def _eight_digits(word: np.ndarray) -> np.ndarray:
    """The value of eight ASCII digits read little-endian (first digit in the lowest byte)."""
    v = word - _ASCII0
    v = ((v & _U(0x0F0F0F0F0F0F0F0F)) * _U(2561)) >> _U(8)
    v = ((v & _U(0x00FF00FF00FF00FF)) * _U(6553601)) >> _U(16)
    return ((v & _U(0x0000FFFF0000FFFF)) * _U(42949672960001)) >> _U(32)


def _ints(a: np.ndarray, w: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """int64 values of the canonical JSON integers in ``a[p:q]`` per row, else ``_NotFlat``.

    Eight digits at a time, from the right: each word ending at ``q - 8 j`` has its bytes
    before ``p`` replaced by ``'0'``, is checked to be all digits, and converted with three
    multiplications."""
    if not len(p):
        return np.zeros(0, np.int64)
    neg = a[p] == ord("-")
    p = p + neg
    length = q - p
    if (length < 1).any() or (length > 19).any():
        raise _NotFlat
    if ((a[p] == ord("0")) & (length > 1)).any():  # a leading zero: not a JSON number
        raise _NotFlat
    value = np.zeros(len(p), np.uint64)
    for j in range(3):
        digits = np.clip(length - 8 * j, 0, 8)
        if not digits.any():
            break
        word = w[np.maximum(q - 8 * (j + 1), 0)]
        fill = (8 - digits).astype(np.uint64)  # low bytes that precede the number
        low = np.where(fill >= 8, _ALL, (_U(1) << (np.minimum(fill, 7) * _U(8))) - _U(1))
        word = (word & ~low) | (_ASCII0 & low)
        if ((word & _HIGH_NIBBLES) != _ASCII0).any() or \
                (((word + _SIXES) & _HIGH_NIBBLES) != _ASCII0).any():
            raise _NotFlat  # a byte that is not a digit
        value += _eight_digits(word) * _U(10 ** (8 * j))
    # 19 digits can exceed int64 (but not uint64); -0 is not canonical
    too_big = np.where(neg, value > _INT64_MAX + _U(1), value > _INT64_MAX)
    if too_big.any() or (neg & (value == 0)).any():
        raise _NotFlat
    out = value.view(np.int64).copy()
    np.negative(out, out=out, where=neg)  # -(2**63) wraps onto itself, as it should
    return out


def _names(raw: bytes, s0: np.ndarray, s1: np.ndarray, table: Any,
           padded: np.ndarray | None = None) -> np.ndarray:
    """Source codes for the names ``raw[s0:s1]`` (``s0 < 0``: no source, code -1).

    ``padded``: ``_words`` of the padded block, for names of at most 8 bytes."""
    n = len(s0)
    codes = np.full(n, -1, np.int32)
    has = s0 >= 0
    if not has.any():
        return codes
    rows = np.flatnonzero(has)
    a0, a1 = s0[rows], s1[rows]
    width = int((a1 - a0).max())
    if width > MAX_NAME:
        names = [raw[i:j] for i, j in zip(a0.tolist(), a1.tolist())]
        uniq: dict[bytes, int] = {}
        inverse = np.array([uniq.setdefault(x, len(uniq)) for x in names], np.int64)
        keys = list(uniq)
    else:
        a = np.frombuffer(raw, np.uint8)
        width8 = (width + 7) // 8 * 8 or 8
        if width8 == 8 and padded is not None:  # one word per name, masked to its length
            length = (a1 - a0).astype(np.uint64)
            mask = np.where(length >= 8, np.uint64(2**64 - 1),
                            (np.uint64(1) << (length * np.uint64(8))) - np.uint64(1))
            word = padded[a0] & mask
            # tag with the length: an 8-byte name would need a control character as its last
            # byte to equal a shorter name's tagged word, and control characters are refused
            word ^= length << np.uint64(56)
            _, first, inverse = np.unique(word, return_index=True, return_inverse=True)
            return _codes(raw, codes, rows, a0, a1, first, inverse, table)
        packed = np.zeros((len(rows), width8), np.uint8)
        length = a1 - a0
        for k in range(width):
            has_k = length > k
            packed[:, k] = np.where(has_k, a[np.where(has_k, a0 + k, 0)], 0)
        flat = packed.view(np.dtype((np.void, width8))).ravel()
        _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
        return _codes(raw, codes, rows, a0, a1, first, inverse, table)
    add = table.add
    try:
        lookup = np.array([add(k.decode("utf-8")) for k in keys], np.int32)
    except UnicodeDecodeError:
        raise _NotFlat from None
    codes[rows] = lookup[inverse]
    return codes


def _codes(raw: bytes, codes: np.ndarray, rows: np.ndarray, a0: np.ndarray, a1: np.ndarray,
           first: np.ndarray, inverse: np.ndarray, table: Any) -> np.ndarray:
    # names enter the table in order of first appearance, as the record parsers add them
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    inverse = rank[inverse.ravel()]
    add = table.add
    try:
        lookup = np.array([add(raw[a0[i]:a1[i]].decode("utf-8"))
                           for i in first[order].tolist()], np.int32)
    except UnicodeDecodeError:
        raise _NotFlat from None
    codes[rows] = lookup[inverse]
    return codes


def scan_block(raw: bytes, mode: str | None, table: Any, last_key: int) -> tuple | None:
    """Scan a block of whole lines (``raw`` ends with a newline). ``None``: not all flat.

    ``mode`` is the file's order key (``None``: decided by the first line here); ``last_key``
    the previous record's key, which the block's keys must not go below (TS §5.2). Returns
    ``(mode, kind, source, start, end, has_end, key, payload, raw_lines)`` with the columns of
    ``engine.eventlog_read.Columns`` (``key``: the order key values, ``None`` for position);
    source names are added to ``table`` only when the whole block is flat.
    """
    try:
        return _scan(raw, mode, table, last_key)
    except _NotFlat:
        return None


def _scan(raw: bytes, mode: str | None, table: Any, last_key: int) -> tuple:
    if not raw or raw[-1:] != b"\n" or b"\r" in raw:
        raise _NotFlat
    size = len(raw)
    padded = bytearray(raw)
    padded += bytes(_PAD)  # so that every literal read stays inside the buffer
    a = np.frombuffer(padded, np.uint8)
    w = _words(a)
    text = a[:size]
    if b"\\" in raw:  # an escape: the exact parsers decide what it means
        raise _NotFlat
    if not raw.isascii():
        try:
            raw.decode("utf-8")  # fine if the block is valid UTF-8
        except UnicodeDecodeError:
            raise _NotFlat from None
    nl = np.flatnonzero(text == ord("\n"))
    if np.count_nonzero(text < 0x20) != len(nl):  # control characters are never valid here
        raise _NotFlat
    quotes = np.flatnonzero(text == ord('"'))
    terms = np.flatnonzero((text == ord(",")) | (text == ord("\n")))
    n = len(nl)
    ls = np.empty(n, np.int64)
    ls[0] = 0
    ls[1:] = nl[:-1] + 1
    if not _literal(w, ls, b'{"').all():  # also rules out blank lines
        raise _NotFlat
    if mode is None:
        mode = ("seq" if raw.startswith(b'{"seq":') else
                "arrival" if raw.startswith(b'{"arrival":') else "position")

    # the order key, then the byte where the canonical line begins
    if mode == "position":
        key = None
        body = ls
        at = ls + 1
    else:
        lit = b'{"seq":' if mode == "seq" else b'{"arrival":'
        if not _literal(w, ls, lit).all():
            raise _NotFlat
        p = ls + len(lit)
        q = terms[np.searchsorted(terms, p)]
        if (a[q] != ord(",")).any():
            raise _NotFlat
        key = _ints(a, w, p, q)
        if key[0] < last_key or (key[1:] < key[:-1]).any():
            raise _NotFlat  # TS §5.2: the record parsers name the line
        body = q
        at = q + 1

    # "source":"NAME", (absent only on a CTI)
    has_source = _literal(w, at, b'"source":"')
    s0 = np.where(has_source, at + 10, -1)
    close = quotes[np.minimum(np.searchsorted(quotes, np.where(has_source, s0, 0)),
                              len(quotes) - 1)]
    s1 = np.where(has_source, close, -1)
    if not (_literal(w, np.where(has_source, s1, 0), b'",') | ~has_source).all():
        raise _NotFlat
    at = np.where(has_source, s1 + 2, at)

    # "kind":"KIND"
    if not _literal(w, at, b'"kind":"').all():
        raise _NotFlat
    at = at + 8
    kind = np.full(n, -1, np.int8)
    for code, lit in enumerate((b'insert"', b'cti"', b'join"', b'leave"')):
        hit = _literal(w, at, lit)
        hit &= kind < 0
        kind[hit] = code
        at = np.where(hit, at + len(lit), at)
    if (kind < 0).any():
        raise _NotFlat
    is_cti = kind == 1
    timed = kind <= 1
    if (~has_source & ~is_cti).any():
        raise _NotFlat

    # ,"start":INT on inserts and CTIs (join/leave: nothing more)
    start = np.zeros(n, np.int64)
    start_at = np.zeros(n, np.int64)
    rows = np.flatnonzero(timed)
    if not _literal(w, at[rows], b',"start":').all():
        raise _NotFlat
    p = at[rows] + 9
    q = terms[np.searchsorted(terms, p)]
    q = np.where(a[q] == ord("\n"), q - 1, q)  # the record's closing brace
    start[rows] = _ints(a, w, p, q)
    start_at[rows] = p
    at[rows] = q

    # ,"end":INT on inserts
    has_end = _literal(w, at, b',"end":') & (kind == 0)
    rows = np.flatnonzero(has_end)
    point = (kind == 0) & ~has_end
    if (point & (start == np.iinfo(np.int64).max)).any():
        raise _NotFlat  # a point's end, start + 1, would not fit: the record parsers decide
    end = np.where(is_cti, start, start + 1)
    if len(rows):
        p = at[rows] + 7
        q = terms[np.searchsorted(terms, p)]
        q = np.where(a[q] == ord("\n"), q - 1, q)
        e = _ints(a, w, p, q)
        if (e <= start[rows]).any():
            raise _NotFlat
        end[rows] = e
        at[rows] = q

    # ,"payload":P} on inserts; everything else must end here
    has_payload = _literal(w, at, b',"payload":') & (kind == 0)
    if not (_literal(w, np.where(has_payload, nl - 1, at), b"}\n")).all():
        raise _NotFlat
    payload: list = [None] * n
    rows = np.flatnonzero(has_payload)
    if len(rows):
        p0, p1 = at[rows] + 11, nl[rows] - 1
        if ((p1 - p0 == 4) & _literal(w, p0, b"null")).any():
            raise _NotFlat  # a null payload is omitted from the canonical line
        p0, p1 = p0.tolist(), p1.tolist()
        joined = b"[" + b",".join([raw[i:j] for i, j in zip(p0, p1)]) + b"]"
        try:
            values = orjson.loads(joined)
        except orjson.JSONDecodeError:
            raise _NotFlat from None
        # one value per row, each re-encoded to its own bytes: canonical
        if len(values) != len(rows) or orjson.dumps(values) != joined:
            raise _NotFlat
        for i, v in zip(rows.tolist(), values):
            payload[i] = v
    if not timed.all():
        start[~timed] = 0
        end[~timed] = 0

    source = _names(raw, s0, s1, table, w)
    data = a[:size]
    data[body] = ord("{")
    lines = RawLines(data, body, nl + 1, start_at)
    return mode, kind, source, start, end, has_end, key, payload, lines
