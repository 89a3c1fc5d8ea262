"""The column form of an event log: what every reader produces and replay consumes.

- ``SourceTable``: input names <-> small int codes, shared by every file of one replay.
- ``Columns``: a batch of valid records in arrival order, one numpy column per field.
- ``Payloads``: a payload column kept as canonical JSON text in one buffer, decoded on use.
- ``RawLines``: the canonical output line of each row, as bytes in one buffer (the input
  lines themselves when a scanner proved them canonical, or lines built for a whole chunk
  by ``eventlog.write_columns``).

Nothing here reads a file or decides whether a record is valid (``eventlog.records`` does).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
import orjson

__all__ = ["PAD", "SourceTable", "Columns", "Payloads", "RawLines", "gather", "json_array",
           "words_of"]

#: spare bytes after a buffer that is read as 64-bit words or fixed-width windows (the
#: scanner's blocks, payload buffers): every such read stays inside the buffer
PAD = 256


class SourceTable:
    """Input names <-> small int codes, shared by every file of one replay (``None`` is -1)."""

    __slots__ = ("names", "codes", "scan_words")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.codes: dict[str | None, int] = {None: -1}
        #: the JSON Lines scanner's cache of short names by their bytes: sorted words and
        #: the codes of names already in this table (``eventlog.scan``), ``None`` until used
        self.scan_words: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, name: str) -> int:
        code = self.codes.get(name)
        if code is None:
            code = self.codes[name] = len(self.names)
            self.names.append(name)
        return code

    def name(self, code: int) -> str | None:
        return None if code < 0 else self.names[code]


def words_of(buffer: np.ndarray) -> np.ndarray:
    """A little-endian uint64 read at every byte offset of ``buffer`` (unaligned, no copy)."""
    return np.ndarray((len(buffer) - 7,), "<u8", buffer, strides=(1,))


def gather(a: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """The bytes ``a[p0[i]:p1[i]]`` of all rows, concatenated (ranges ascending, disjoint)."""
    lens = p1 - p0
    total = int(lens.sum())
    if total * 4 < len(a):  # few bytes: gather them by index
        ends = np.cumsum(lens)
        index = np.arange(total, dtype=np.int64)
        index += np.repeat(p0 - (ends - lens), lens)
        return a[index]
    bounds = np.empty(2 * len(p0) + 2, np.int64)  # many: keep runs of a mask
    bounds[0] = 0
    bounds[1:-1:2] = p0
    bounds[2:-1:2] = p1
    bounds[-1] = len(a)
    keep = np.zeros(len(bounds) - 1, np.bool_)
    keep[1::2] = True
    return a[np.repeat(keep, np.diff(bounds))]


def json_array(a: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> bytes:
    """``[P0,P1,…]`` of the JSON texts ``a[p0[j]:p1[j]]`` (ascending, not overlapping)."""
    k = len(p0)
    if not k:
        return b"[]"
    lens = p1 - p0
    out = np.empty(int(lens.sum()) + k + 1, np.uint8)
    after = np.cumsum(lens) + np.arange(1, k + 1)  # the byte after each text
    text = np.ones(len(out), np.bool_)
    text[0] = False
    text[after] = False
    out[text] = gather(a, p0, p1)
    out[0] = ord("[")
    out[after] = ord(",")
    out[-1] = ord("]")
    return out.tobytes()


class Payloads(Sequence[Any]):
    """A payload column: ``None`` except at ``rows``, decoded on first use.

    Row ``rows[j]``'s payload is the canonical JSON text ``buffer[p0[j]:p1[j]]`` (checked
    by whoever built it: ``eventlog.scan.canonical_json``). The values are only needed when
    a row is re-encoded (the merge of several files, the element path), so the common
    columnar replay of one file never builds them. A read-only sequence; equal to a list
    with the same items.
    """

    __slots__ = ("n", "rows", "buffer", "p0", "p1", "_items")

    def __init__(self, n: int, rows: np.ndarray, buffer: np.ndarray, p0: np.ndarray,
                 p1: np.ndarray) -> None:
        self.n = n
        self.rows = rows
        self.buffer = buffer
        self.p0 = p0
        self.p1 = p1
        self._items: list[Any] | None = None

    def take(self, keep: np.ndarray) -> Payloads:
        """The payloads of the rows where ``keep`` (bool, one per row) is true."""
        kept = keep[self.rows]
        renumber = np.cumsum(keep) - 1
        return Payloads(int(keep.sum()), renumber[self.rows[kept]], self.buffer,
                        self.p0[kept], self.p1[kept])

    def texts(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(p0, p1)`` of ``rows`` (ascending) into ``buffer``: ascending, disjoint ranges
        (``gather``), empty where no payload (at the end of the payload before)."""
        p1 = np.zeros(self.n, np.int64)
        p1[self.rows] = self.p1
        p1 = np.maximum.accumulate(p1) if self.n else p1
        p0 = p1.copy()
        p0[self.rows] = self.p0
        return p0[rows], p1[rows]

    def _list(self) -> list[Any]:
        items = self._items
        if items is None:
            values = orjson.loads(json_array(self.buffer, self.p0, self.p1))
            if len(values) == self.n:
                items = values
            else:
                items = [None] * self.n
                for i, v in zip(self.rows.tolist(), values):
                    items[i] = v
            self._items = items
        return items

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        return self._list()[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        try:
            return self._list() == list(other)  # type: ignore[call-overload]
        except TypeError:
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Payloads({self._list()!r})"


class RawLines:
    """The canonical output line of each row, for writing without encoding.

    Row ``i``'s line (newline included) is ``data[body[i]:stop[i]]``; ``start_at`` is where
    its start value's text begins. ``braces``: positions in ``data`` that must hold ``{``
    before the lines are used (a scanned line's canonical part begins after its order key,
    at a comma); ``seal`` writes them, once the rows are accepted.
    """

    __slots__ = ("data", "body", "stop", "start_at", "braces")

    def __init__(self, data: np.ndarray, body: np.ndarray, stop: np.ndarray,
                 start_at: np.ndarray, braces: np.ndarray | None = None) -> None:
        self.data = data
        self.body = body
        self.stop = stop
        self.start_at = start_at
        self.braces = braces

    def seal(self) -> RawLines:
        if self.braces is not None:
            self.data[self.braces] = ord("{")
            self.braces = None
        return self

    def line(self, i: int) -> bytes:
        return self.data[self.body[i]:self.stop[i]].tobytes()


class Columns:
    """A batch of valid records in arrival order, as columns (one row per record).

    ``kind`` int8 (``INSERT``/``CTI``/``JOIN``/``LEAVE``/``START``/``END``); ``source`` int32 codes into the
    replay's ``SourceTable``; ``start``/``end`` int64 ns (``end = start + 1`` for points,
    ``start`` for CTIs, ``MAX_TIME`` for a start edge, 0 for join/leave); ``has_end`` bool
    (an interval); ``ids`` the edges' ids (``None`` when the batch has none); ``payload`` a
    sequence of JSON values (a list or ``Payloads``); ``key`` int64 order key; ``file`` int32
    file index; ``line`` int64 line number; ``raw`` the rows' canonical lines when a scanner
    proved the input lines canonical (``RawLines``), else ``None``.
    """

    __slots__ = ("kind", "source", "start", "end", "has_end", "payload", "key", "file", "line",
                 "raw", "ids")

    def __init__(self, kind: np.ndarray, source: np.ndarray, start: np.ndarray,
                 end: np.ndarray, has_end: np.ndarray, payload: Sequence[Any], key: np.ndarray,
                 file: np.ndarray, line: np.ndarray, raw: RawLines | None = None,
                 ids: list[Any] | None = None) -> None:
        self.kind = kind
        self.source = source
        self.start = start
        self.end = end
        self.has_end = has_end
        self.payload = payload
        self.key = key
        self.file = file
        self.line = line
        #: rows picked or merged drop it
        self.raw = raw
        #: the edges' ids (TS §7.1), one per row (``None`` but on edges); ``None``: no edges
        self.ids = ids

    def __len__(self) -> int:
        return len(self.kind)

    def take(self, index: np.ndarray) -> Columns:
        payload = self.payload
        return Columns(self.kind[index], self.source[index], self.start[index], self.end[index],
                       self.has_end[index], [payload[i] for i in index.tolist()],
                       self.key[index], self.file[index], self.line[index], None,
                       None if self.ids is None else [self.ids[i] for i in index.tolist()])

    @staticmethod
    def concat(parts: Sequence[Columns]) -> Columns:
        if len(parts) == 1:
            return parts[0]
        payload: list[Any] = []
        for p in parts:
            payload.extend(p.payload)
        cat = np.concatenate
        return Columns(cat([p.kind for p in parts]), cat([p.source for p in parts]),
                       cat([p.start for p in parts]), cat([p.end for p in parts]),
                       cat([p.has_end for p in parts]), payload, cat([p.key for p in parts]),
                       cat([p.file for p in parts]), cat([p.line for p in parts]), None,
                       _ids(parts))


def _ids(parts: Sequence[Columns]) -> list[Any] | None:
    """The ids of concatenated parts: ``None`` when none has edges."""
    if all(p.ids is None for p in parts):
        return None
    ids: list[Any] = []
    for p in parts:
        ids.extend([None] * len(p) if p.ids is None else p.ids)
    return ids
