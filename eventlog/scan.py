"""The flat JSON Lines scanner: a whole block of lines in the shape the engine writes, read
with numpy, no Python object per record (a fast scanner of ``eventlog.fast``).

The *flat shape*::

    {["seq":INT, | "arrival":T,]["source":"NAME",]"kind":"KIND"[,"start":T][,"end":T][,"payload":P]}

with the keys in exactly that order, no spaces, integers in canonical form (no leading zeros,
no ``-0``), each time ``T`` such an integer or an ISO-8601 string in ``eventlog.iso``'s
shape (``"2026-11-22T08:00:00.250+01:00"``), a name without quotes, backslashes or control
characters, and ``P`` a JSON value that orjson re-encodes to the same bytes (each distinct
payload of the block checked, all in one round trip). Every byte of such a line is accounted
for, so the values found are those orjson would decode; with integer times the line from
``"source"`` on *is* the canonical output line (``docs/event-log.md``): replay writes those
input bytes instead of re-encoding the record.

How: one pass over the block finds the newlines (and proves there is no other control
character); everything after that works per line, not per byte. Each field is read as
little-endian 64-bit words at the line's offsets: a literal key is one or two word
comparisons, the length of a digit run or a name is the first flagged byte of a word (SWAR:
SIMD within a register), and eight digits convert with three multiplications. So the cost is
a few dozen numpy operations over arrays of one element per line, plus the payload round trip.
The scanner reads the reader's buffer in place, which has ``PAD`` spare bytes after the block.

It only reads: a line of any other shape (a space, an escape, an ISO time in another form,
a key out of order, a blank line) makes it return ``None``, and whether the values it read make good
records — kinds, sources, times, order keys — is decided by the rules (``eventlog.records``).
Memory: O(block).
"""

from __future__ import annotations

import numpy as np
import orjson

from eventlog.columns import PAD, Payloads, RawLines, SourceTable, json_array, words_of
from eventlog.iso import iso_ns
from eventlog.records import INT, NO_SOURCE, NS, Block, RawColumns, Times
from eventlog.words import (ALL as _ALL, ASCII0 as _ASCII0, INT64_MAX as _INT64_MAX,
                            U as _U, digit_count as _digit_count, leading_value as _leading_value,
                            power10 as _power, quote_at as _quote_at, spells as _is)

__all__ = ["flat_columns", "canonical_json", "payload_texts", "MAX_NAME"]

#: names longer than this many bytes are looked up one by one instead of vectorised
MAX_NAME = 32


class _NotFlat(Exception):
    pass


def _number(a: np.ndarray, w: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The canonical JSON integers starting at ``p`` (int64) and where each ends; a
    non-integer, a leading zero, ``-0`` or a value beyond int64 raises ``_NotFlat``."""
    if not len(p):
        return np.zeros(0, np.int64), p
    x = w[p]
    neg = (x & _U(0xFF)) == _U(ord("-"))
    if neg.any():
        p = p + neg
        x = np.where(neg, w[p], x)
    first = x & _U(0xFF)
    d = _digit_count(x)
    length = d
    value = _leading_value(x, d)
    more = d == 8
    if more.any():  # up to 19 digits: two more words (a shorter number adds 0 digits)
        x = w[p + 8]
        d = _digit_count(x)
        if not more.all():
            d = np.where(more, d, np.uint8(0))
        length = length + d
        value = value * _power(d) + _leading_value(x, d)
        more &= d == 8
        if more.any():
            x = w[p + 16]
            d = np.where(more, _digit_count(x), np.uint8(0))
            if (d > 3).any():
                raise _NotFlat  # more than 19 digits
            length = length + d
            value = value * _power(d) + _leading_value(x, d)
    if not length.all():
        raise _NotFlat  # no digit
    if ((first == _U(ord("0"))) & (length > 1)).any():
        raise _NotFlat  # a leading zero: not a JSON number
    # 19 digits can exceed int64 (but not uint64); -0 is not canonical
    if neg.any():
        if (value > _INT64_MAX + neg.astype(np.uint64)).any() or (neg & (value == 0)).any():
            raise _NotFlat
        out = value.view(np.int64)
        np.negative(out, out=out, where=neg)  # -(2**63) wraps onto itself, as it should
        return out, p + length
    if (value > _INT64_MAX).any():
        raise _NotFlat
    return value.view(np.int64), p + length


def _instant(a: np.ndarray, w: np.ndarray, p: np.ndarray) -> tuple[Times, np.ndarray]:
    """The instants starting at ``p``: canonical JSON integers (``INT``) or JSON strings of
    ISO-8601 text in ``eventlog.iso``'s shape (``NS``), and where each ends; anything else
    raises ``_NotFlat``."""
    quoted = a[p] == ord('"')
    if not quoted.any():
        value, q = _number(a, w, p)
        return Times.ints(value), q
    rows = np.flatnonzero(quoted)
    found = iso_ns(a, w, p[rows] + 1)
    if found is None:
        raise _NotFlat
    ns, stop = found
    if (a[stop] != ord('"')).any():
        raise _NotFlat  # more after the zone
    t = Times(np.empty(len(p), np.int64), np.full(len(p), NS, np.int8))
    q = np.empty(len(p), np.int64)
    t.value[rows], q[rows] = ns, stop + 1
    if len(rows) < len(p):
        other = np.flatnonzero(~quoted)
        t.value[other], q[other] = _number(a, w, p[other])
        t.state[other] = INT
    return t, q


# -- names -----------------------------------------------------------------------------


def _name_ends(raw: bytes | bytearray, w: np.ndarray, s0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each name starting at ``s0`` ends (its closing quote: names hold no escape),
    and the name's first word."""
    head = w[s0]
    length = _quote_at(head)
    rows = np.flatnonzero(length == 8)
    for k in range(1, MAX_NAME // 8):
        if not len(rows):
            break
        found = _quote_at(w[s0[rows] + 8 * k])
        length[rows] = 8 * k + found
        rows = rows[found == 8]
    for i in rows.tolist():  # longer than MAX_NAME bytes: one by one
        end = raw.find(b'"', s0[i])
        if end < 0:
            raise _NotFlat
        length[i] = end - s0[i]
    return s0 + length, head


def _short_names(raw: bytes | bytearray, words: np.ndarray, rows: np.ndarray, s0: np.ndarray,
                 s1: np.ndarray, table: SourceTable) -> tuple[np.ndarray, list[str] | None]:
    """Codes for names of at most 8 bytes, by their words (tagged with the length): the
    table's codes if the table's cache knows every word (names ``None``), else indices into
    the block's names in order of first appearance. The cache learns the words of names
    that are in the table already; a new name is added by ``records`` once its block is
    accepted, and learnt when it is next seen."""
    cache = table.scan_words
    if cache is not None and len(cache[0]):
        known, known_codes = cache
        at = np.minimum(np.searchsorted(known, words), len(known) - 1)
        if (known[at] == words).all():
            return known_codes[at], None
    new, first, inverse = np.unique(words, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    try:
        names = [raw[s0[rows[j]]:s1[rows[j]]].decode("utf-8") for j in first[order].tolist()]
    except UnicodeDecodeError:
        raise _NotFlat from None
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    codes = table.codes
    found = [(w, codes[name]) for w, name in zip(new[order].tolist(), names) if name in codes]
    if found:
        keys = np.array([w for w, _ in found], np.uint64)
        values = np.array([c for _, c in found], np.int32)
        if cache is not None and len(cache[0]):
            keys = np.concatenate([cache[0], keys])
            values = np.concatenate([cache[1], values])
        keys, index = np.unique(keys, return_index=True)
        table.scan_words = (keys, values[index])
    return rank[np.asarray(inverse).ravel()], names


def _names(raw: bytes | bytearray, head: np.ndarray, s0: np.ndarray, s1: np.ndarray, table: SourceTable,
           n: int, has: np.ndarray) -> tuple[np.ndarray, list[str] | None]:
    """Source codes for the names ``raw[s0:s1]`` of the rows ``has`` (others: ``NO_SOURCE``)
    and the names they index (``None``: the codes are the table's); ``head``: each name's
    first word."""
    codes = np.full(n, NO_SOURCE, np.int32)
    if not has.any():
        return codes, []
    rows = np.flatnonzero(has)
    a0, a1 = s0[rows], s1[rows]
    length = (a1 - a0).astype(np.uint64)
    width = int(length.max())
    if width <= 8:
        # one word per name, masked to its length and tagged with it: an 8-byte name would
        # need a control character as its last byte to equal a shorter name's tagged word,
        # and control characters are refused
        words = (head[rows] & ~(_ALL << (length << _U(3)))) ^ (length << _U(56))
        codes[rows], names = _short_names(raw, words, rows, s0, s1, table)
        return codes, names
    if width > MAX_NAME:
        uniq: dict[bytes, int] = {}
        firsts: list[int] = []
        index: list[int] = []
        for i, x in enumerate([bytes(raw[i:j]) for i, j in zip(a0.tolist(), a1.tolist())]):
            c = uniq.get(x)
            if c is None:
                c = uniq[x] = len(firsts)
                firsts.append(i)
            index.append(c)
        first, inverse = np.array(firsts, np.int64), np.array(index, np.int64)
    else:
        a = np.frombuffer(raw, np.uint8)
        width8 = (width + 7) // 8 * 8
        packed = np.zeros((len(rows), width8), np.uint8)
        span = a1 - a0
        for k in range(width):
            has_k = span > k
            packed[:, k] = np.where(has_k, a[np.where(has_k, a0 + k, 0)], 0)
        flat = packed.view(np.dtype((np.void, width8))).ravel()
        _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    # the block's names in order of first appearance
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    try:
        names = [raw[a0[i]:a1[i]].decode("utf-8") for i in np.asarray(first)[order].tolist()]
    except UnicodeDecodeError:
        raise _NotFlat from None
    codes[rows] = rank[np.asarray(inverse).ravel()]
    return codes, names


# -- payloads --------------------------------------------------------------------------


#: payloads longer than this many bytes are all checked, without looking for repeats
_REPEAT_WIDTH = 64
_HASH_BITS = 16
_SAMPLE = 1024
_MIX = _U(0x9E3779B97F4A7C15)


def _firsts(a: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """Indices ``j`` such that every payload ``a[p0:p1]`` is byte for byte one of them.

    Device payloads repeat (status words, small readings): each payload is hashed from its
    bytes into a table of slots; a payload equal to the one that holds its slot need not be
    checked again. Whichever payload a slot ends up with, it holds its own slot and is
    returned; a payload that differs from its slot's holder is returned too, so nothing is
    left unchecked. O(payloads), no sort. When the first ``_SAMPLE`` payloads hardly repeat,
    looking for repeats would not pay and all are returned."""
    n = len(p0)
    every = np.arange(n)
    lens = p1 - p0
    width = int(lens.max())
    if n < 256 or width > _REPEAT_WIDTH:
        return every
    if n >= 4 * _SAMPLE and 2 * len(_firsts(a, p0[:_SAMPLE], p1[:_SAMPLE])) > _SAMPLE:
        return every
    width = (width + 7) // 8 * 8
    rows = np.lib.stride_tricks.sliding_window_view(a, width)[p0]
    rows = np.where(np.arange(width) < lens[:, None], rows, 0).astype(np.uint8)
    words = rows.view("<u8")
    h = lens.astype(np.uint64)
    for j in range(words.shape[1]):
        h = (h ^ words[:, j]) * _MIX
    slot = (h >> _U(64 - _HASH_BITS)).astype(np.intp)
    holder = np.empty(1 << _HASH_BITS, np.intp)
    holder[slot] = every
    first = holder[slot]
    same = (lens == lens[first]) & (words == words[first]).all(axis=1)
    return np.flatnonzero((first == every) | ~same)


def canonical_json(a: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> bool:
    """Is each text ``a[p0[j]:p1[j]]`` one JSON value, not ``null``, in the form orjson
    writes (the distinct texts re-encoded in one round trip)? ``a`` has at least
    ``_REPEAT_WIDTH`` bytes after the last text."""
    if not len(p0):
        return True
    if ((p1 - p0 == 4) & _is(words_of(a)[p0], b"null")).any():
        return False  # a null payload is omitted from the canonical line
    check = _firsts(a, p0, p1)
    joined = json_array(a, p0[check], p1[check])
    try:
        values = orjson.loads(joined)
        # one value per payload, each re-encoded to its own bytes: canonical; the same
        # bytes could also be pieces of fewer values cut elsewhere ("[1", "2]", "3,4"), so
        # each value's text must also be as long as its payload's
        if len(values) != len(check) or orjson.dumps(values) != joined:
            return False
        lens = np.fromiter(map(len, map(orjson.dumps, values)), np.int64, len(values))
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return False
    return bool((lens == (p1 - p0)[check]).all())


def _payloads(a: np.ndarray, n: int, rows: np.ndarray, p0: np.ndarray,
              p1: np.ndarray) -> Payloads:
    """The payloads ``a[p0:p1]`` of ``rows``, once ``canonical_json``."""
    if not canonical_json(a, p0, p1):
        raise _NotFlat
    return Payloads(n, rows, a, p0, p1)


_NULL_WORD = np.uint64(int.from_bytes(b"null", "little"))


def payload_texts(buffer: np.ndarray, p0: np.ndarray, p1: np.ndarray, given: np.ndarray,
                  reencode: bool = False) -> tuple[Payloads, np.ndarray] | None:
    """A payload column from its JSON texts — row ``i``'s is ``buffer[p0[i]:p1[i]]`` where
    ``given`` (``buffer`` padded with ``PAD`` bytes) — and where there is one: the text
    ``null`` is none; ``None`` if a text is not canonical JSON (``canonical_json``) — or,
    with ``reencode``, not one JSON value: texts that are, but not canonical (``{"v": 1}``),
    are then decoded and written again by orjson, each distinct text once, as the object
    path does."""
    null = given & (p1 - p0 == 4)
    null[null] = words_of(buffer)[p0[null]] == _NULL_WORD
    given = given & ~null
    rows = np.flatnonzero(given)
    if canonical_json(buffer, p0[rows], p1[rows]):
        return Payloads(len(given), rows, buffer, p0[rows], p1[rows]), given
    if not reencode:
        return None
    return _reencoded(buffer, p0[rows], p1[rows], rows, len(given))


def _reencoded(buffer: np.ndarray, p0: np.ndarray, p1: np.ndarray, rows: np.ndarray,
               n: int) -> tuple[Payloads, np.ndarray] | None:
    """The payload texts of ``rows``, each decoded by itself and encoded again (``None`` if
    one is not one JSON value); a text that decodes to ``null`` is none."""
    data = buffer.tobytes()
    loads, dumps = orjson.loads, orjson.dumps
    seen: dict[bytes, bytes | None] = {}
    parts: list[bytes] = []
    kept: list[bool] = []
    try:
        for a, b in zip(p0.tolist(), p1.tolist()):
            text = data[a:b]
            out = seen.get(text, b"")
            if out == b"":
                value = loads(text)
                out = seen[text] = None if value is None else dumps(value)
            kept.append(out is not None)
            if out is not None:
                parts.append(out)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None
    keep = np.array(kept, np.bool_).reshape(len(rows))
    lens = np.fromiter(map(len, parts), np.int64, len(parts))
    ends = np.cumsum(lens)
    texts = np.frombuffer(b"".join(parts) + bytes(PAD), np.uint8)
    given = np.zeros(n, np.bool_)
    given[rows[keep]] = True
    return Payloads(n, rows[keep], texts, ends - lens, ends), given


# -- the scan --------------------------------------------------------------------------


def flat_columns(block: Block) -> RawColumns | None:
    """A JSON Lines block read as ``RawColumns`` if every line is in the flat shape, else
    ``None``. Registered in ``eventlog.fast``; ``eventlog.records`` decides validity.

    ``block.data`` is a bytearray whose first ``block.size`` bytes are whole lines, with at
    least ``PAD`` more bytes after them (any bytes: never read as part of a record); it is
    read in place. The file's order key (``block.state.mode``, or the first line's) is read
    on every line. Source names come back as the table's codes when the table's cache knows
    them all, else as the block's own names (``RawColumns.names``).
    """
    try:
        return _scan(block.data, block.size, block.state.mode, block.state.table,
                     block.first_line)
    except _NotFlat:
        return None


def _scan(raw: bytearray, size: int, mode: str | None, table: SourceTable,
          first_line: int) -> RawColumns:
    if len(raw) < size + PAD:
        raise ValueError(f"flat_columns: {len(raw) - size} bytes after the block; "
                         f"expected at least {PAD}")
    if not size or raw[size - 1] != 0x0A or raw.find(b"\\", 0, size) >= 0:
        raise _NotFlat  # an escape: the record parsers decide
    if not raw.isascii():  # the bytes after the block too: if not, decide here
        try:
            str(memoryview(raw)[:size], "utf-8")  # fine if the block is valid UTF-8
        except UnicodeDecodeError:
            raise _NotFlat from None
    a = np.frombuffer(raw, np.uint8, count=size + PAD)
    w = words_of(a)
    nl = np.flatnonzero(a[:size] < 0x20)
    if (a[nl] != 0x0A).any():  # control characters are never valid here (\r included)
        raise _NotFlat
    n = len(nl)
    ls = np.empty(n, np.int64)
    ls[0] = 0
    ls[1:] = nl[:-1] + 1
    if mode is None:
        mode = ("seq" if raw.startswith(b'{"seq":') else
                "arrival" if raw.startswith(b'{"arrival":') else "position")

    # the order key, then the byte where the canonical line begins
    x = w[ls]
    key: Times | None = None
    if mode == "position":
        if not _is(x, b'{"').all():  # also rules out blank lines
            raise _NotFlat
        body = ls
    else:
        if mode == "seq":
            ok = _is(x, b'{"seq":')
            p = ls + 7
        else:
            ok = _is(x, b'{"arriva') & _is(w[ls + 8], b'l":')
            p = ls + 11
        if not ok.all():
            raise _NotFlat
        if mode == "seq":
            seq, body = _number(a, w, p)
            key = Times.ints(seq)
        else:
            key, body = _instant(a, w, p)
        if (a[body] != ord(",")).any():
            raise _NotFlat
    at = body + 1

    # "source":"NAME", then "kind":"
    has_source = _is(w[at], b'"source"') & _is(w[at + 8], b':"')
    s0 = at + 10
    s1, head = _name_ends(raw, w, np.where(has_source, s0, at))
    k = np.where(has_source, s1 + 2, at)
    # a name ends on its own line; each field then starts where the one before ended, none
    # crosses a newline, so the newline a literal ends with is the line's own
    if not (_is(w[k], b'"kind":"') & (~has_source | ((a[s1 + 1] == ord(",")) & (s1 < nl)))
            ).all():
        raise _NotFlat
    k += 8

    # the kind, and with it the start's key: insert",  "start":  or  cti","st  art":
    x, y = w[k], w[k + 8]
    is_insert = _is(x, b'insert",') & _is(y, b'"start":')
    is_cti = _is(x, b'cti","st') & _is(y, b'art":')
    is_join = _is(x, b'join"}\n')
    is_leave = _is(x, b'leave"}\n')
    if not (is_insert | is_cti | is_join | is_leave).all():
        raise _NotFlat
    kind = np.where(is_insert, 0, np.where(is_cti, 1, np.where(is_join, 2, 3))).astype(np.int8)
    timed = is_insert | is_cti

    # the start on inserts and CTIs
    start_at = np.where(is_insert, k + 16, k + 13)
    if timed.all():
        start, q = _instant(a, w, start_at)
    else:  # join/leave rows end with their kind
        rows = np.flatnonzero(timed)
        found, q_timed = _instant(a, w, start_at[rows])
        start = Times.absent(n)
        start.value[rows], start.state[rows] = found
        q = np.zeros(n, np.int64)
        q[rows] = q_timed
        start_at = np.where(timed, start_at, 0)

    # then }  or ,"end":INT  or ,"payload":P  (the last two on inserts only)
    x = w[q]
    closed = _is(x, b"}\n") & timed
    has_end = _is(x, b',"end":') & is_insert
    end = Times.absent(n)
    if has_end.any():
        rows = np.flatnonzero(has_end)
        found, q[rows] = _instant(a, w, q[rows] + 7)
        end.value[rows], end.state[rows] = found
        x = np.where(has_end, w[q], x)
        closed |= has_end & _is(x, b"}\n")
    has_payload = is_insert & _is(x, b',"payloa') & ~closed
    rows = np.flatnonzero(has_payload)
    p0 = q[rows] + 11
    p1 = nl[rows] - 1  # the record's closing brace
    if len(rows) and not (_is(w[q[rows] + 8], b'd":') & (a[p1] == ord("}")) & (p0 < p1)).all():
        raise _NotFlat
    if not (closed | has_payload | ~timed).all():
        raise _NotFlat
    payload = _payloads(a, n, rows, p0, p1)

    source, names = _names(raw, head, s0, s1, table, n, has_source)
    keys = Times.absent(n) if key is None else key
    # the input line is the canonical output line only if its times are integers
    iso = (start.state == NS).any() or (end.state == NS).any()
    return RawColumns(np.arange(first_line, first_line + n, dtype=np.int64), kind, source,
                      names, start, end,
                      keys if mode == "seq" else Times.absent(n),
                      keys if mode == "arrival" else Times.absent(n), payload, has_payload,
                      raw=None if iso else RawLines(a[:size], body, nl + 1, start_at,
                                                    braces=body))
