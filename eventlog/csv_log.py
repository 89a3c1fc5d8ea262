"""Reading CSV logs: a header naming the fields, then one record per row.

Rows are read with the ``csv`` module, ``CSV_ROWS`` at a time, and handed to the rules of a
record (``eventlog.records``) as Python values: a cell that is an integer becomes one, the
``payload`` cell is JSON text, an empty cell is a missing field. A row that is not UTF-8,
has the wrong number of cells or a payload that is not JSON is unreadable, named by its line.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
from typing import Any, Callable, Iterator

import numpy as np
import orjson

from eventlog.columns import Columns
from eventlog.fast import fast_columns
from eventlog.format import open_log
from eventlog.records import MISSING, Block, FileState, settle
from eventlog.values import from_fields

__all__ = ["CSV_BYTES", "CSV_ROWS", "read_csv"]

#: bytes of CSV read per block (the memory bound of the CSV reader, with ``CSV_ROWS``)
CSV_BYTES = 4 << 20
#: rows per chunk of the CSV reader's object path
CSV_ROWS = 20_000

_CSV_INT = re.compile(r"^[+-]?\d+$")
_CSV_FIELDS = ("source", "kind", "start", "end", "payload", "seq", "arrival", "id")
_INTEGERS = ("start", "end", "arrival", "seq")


def _not_utf8(raw: bytes, err: UnicodeDecodeError) -> str:
    return (f"byte 0x{raw[err.start]:02x} at column {err.start + 1} is not valid UTF-8; "
            "expected UTF-8 text")


class _Rows:
    """The rows of one chunk as the object path wants them."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []
        self.lines: list[int] = []
        self.texts: list[bytes | list[str]] = []
        self.unreadable: dict[int, tuple[str, str | None]] = {}
        self.counted: list[bool] = []

    def add(self, obj: dict[str, Any], line: int, text: bytes | list[str],
            error: tuple[str, str | None] | None = None, counted: bool = True) -> None:
        if error is not None:
            self.unreadable[len(self.objects)] = error
        self.objects.append(obj)
        self.lines.append(line)
        self.texts.append(text)
        self.counted.append(counted)

    def text(self, i: int) -> bytes | str:
        """Row ``i`` as it was read (its cells written again as CSV), for the quarantine."""
        text = self.texts[i]
        if isinstance(text, bytes):
            return text
        buf = io.StringIO()
        csv.writer(buf).writerow(text)
        return buf.getvalue()

    def columns(self, st: FileState) -> Columns:
        objs = self.objects
        fields = {f: [o.get(f, MISSING) for o in objs] for f in _CSV_FIELDS}
        n = len(objs)
        counted = None if all(self.counted) else np.array(self.counted, np.bool_)
        return settle(from_fields(fields, np.array(self.lines, np.int64).reshape(n),
                                  objects=objs, text=self.text,
                                  unreadable=self.unreadable, counted=counted,
                                  scale=st.scale), st)


def _record(names: list[str], cells: list[str], kind: str | None = None,
            ) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """A row's cells as a record of Python values, and the payload's decoding error if any;
    ``kind``: the kind of a row without one (under a field mapping, ``"insert"``)."""
    obj: dict[str, Any] = {} if kind is None else {"kind": kind}
    row = dict(zip(names, cells))
    for name in _CSV_FIELDS:
        text = row.get(name)
        if text is None or text == "":
            continue
        if name in _INTEGERS:
            obj[name] = int(text) if _CSV_INT.match(text) else text
        elif name == "payload":
            try:
                obj[name] = orjson.loads(text)
            except orjson.JSONDecodeError as err:
                hint = ""
                if '\\"' in text or text.endswith("\\"):  # a quote escaped by a backslash
                    hint = ("; the cell holds \\\" where CSV doubles a quote (\"\"): Spark "
                            "writes CSV with backslash escapes unless told, so write it with "
                            ".option('escape', '\"')")
                return obj, (f"not valid JSON text: {err}{hint}", "payload")
        else:
            obj[name] = text
    return obj, None


class _Feed:
    """The ``csv`` module's input: the lines of the blocks the object path reads, decoded.

    Between records, with no line left, it ends (the block is done); in the middle of a
    record (a quoted cell goes on past the block) it pulls the next block in, so a record is
    always read whole. ``line``: the file's line number of the last line given; ``first``:
    that of the current record's first line (``start`` before each record). Lines end at
    ``\\n`` only, as a binary file's do."""

    def __init__(self, more: Callable[[], bytes | None]) -> None:
        self.data = b""
        self.at = 0
        self.more = more
        self.line = 0
        self.first = 0
        self.given = 0
        self.undecodable: list[tuple[int, bytes, UnicodeDecodeError]] = []

    def add(self, data: bytes) -> None:
        self.data = self.data[self.at:] + data
        self.at = 0

    def rest(self) -> bytes:
        """The bytes not given yet (and no more of them)."""
        rest = self.data[self.at:]
        self.data, self.at = b"", 0
        return rest

    def start(self) -> None:
        self.given = 0

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        if self.at >= len(self.data):
            data = self.more() if self.given else None
            if not data:
                raise StopIteration
            self.add(data)
        cut = self.data.find(b"\n", self.at)
        stop = len(self.data) if cut < 0 else cut + 1
        raw = self.data[self.at:stop]
        self.at = stop
        self.line += 1
        if not self.given:
            self.first = self.line
        self.given += 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            self.undecodable.append((self.line, raw, err))
            return "\n"  # keep line numbers; the record is reported by the reader


def _blocks(f: Any, on_bytes: Callable[[int], None] | None,
            left: int | None = None) -> Iterator[bytes]:
    """The file from where it stands in blocks of about ``CSV_BYTES`` of whole lines (the
    last may lack its newline); ``left``: at most that many bytes."""
    rest = b""
    while True:
        want = CSV_BYTES if left is None else min(CSV_BYTES, left)
        data = f.read(want) if want else b""
        if left is not None:
            left -= len(data)
        if not data:
            if rest:
                yield rest
            return
        if on_bytes is not None:
            on_bytes(len(data))
        cut = data.rfind(b"\n")
        if cut < 0:
            rest += data
            continue
        yield rest + data[:cut + 1]
        rest = data[cut + 1:]


def read_csv(st: FileState, on_bytes: Callable[[int], None] | None) -> Iterator[Columns]:
    """The file's records (those of ``st.span``): each block of whole lines by the fast
    scanners if they take it, else by the ``csv`` module, ``CSV_ROWS`` rows at a time.

    A span after the header reads the header from the file's first line, then its own bytes
    from line ``span.first_line``. A record is read whole by the span where it starts; a
    quoted cell that runs past the span's end (a newline inside quotes, where the file was
    cut) is refused with the record's line: the span after it would begin inside it."""
    span = st.span
    with st.open() as f:
        blocks = (_blocks(f, on_bytes, span.stop) if span.start == 0
                  else _blocks(f, None))  # a later span: the header only, from here

        def more() -> bytes | None:  # asked for only inside a record (``_Feed``)
            data = next(blocks, None)
            if data is None and span.stop is not None:
                raise st.error(feed.first, f"a quoted cell goes on past byte {span.stop}, "
                               "where the file is cut to be read in parallel; read the file "
                               "whole (no byte ranges)")
            return data

        feed = _Feed(more)
        reader = csv.reader(feed)
        feed.add(next(blocks, b""))
        feed.start()
        header = next(reader, None)
        if feed.undecodable:
            no, raw, err = feed.undecodable.pop()
            raise st.error(no, _not_utf8(raw, err))
        if header is None:
            return
        names = [h.strip() for h in header]
        if names and names[0].startswith("\ufeff"):  # a byte-order mark (Excel, utf-8-sig)
            names[0] = names[0][1:]
        default_kind = None
        if st.fields:  # a field mapping: the columns under the fields' canonical names
            renamed = {name: field for field, name in st.fields.items()}
            names = [renamed.get(n, n) for n in names]
            if "kind" not in st.fields and "kind" not in names:
                default_kind = "insert"  # a plain log's rows are readings
        # a partition folder's fields (``LogFile.fields``) stand for absent columns
        restored = {name for name, _ in st.file.fields} if st.file is not None else set()
        for required in ("source", "kind", "start"):
            if required not in names and required not in restored and not (
                    required == "kind" and default_kind):
                shown = st.fields.get(required, required)
                raise st.error(1, f"header has no {shown!r} column; expected at least "
                               "source, kind, start" + (f" (here {shown!r}, as --field maps it)"
                                                        if shown != required else "")
                               + f"; the header's columns are {', '.join(map(repr, names))}",
                               required)
        if span.start:  # a later span: its own bytes, numbered from its first line
            f.seek(span.start)
            blocks = _blocks(f, on_bytes, None if span.stop is None else span.stop - span.start)
            feed.rest()
            feed.line = span.first_line - 1
        # the rest of the first block, then each block: the fast scanners' if they take it
        pending = feed.rest()
        for data in itertools.chain([pending] if pending else [], blocks):
            if not data.endswith(b"\n"):
                data += b"\n"  # the file's last line (its record ends with the file)
            scanned = (None if st.fields else  # the scanners read the canonical names
                       fast_columns(Block("csv", data, len(data), feed.line + 1, st,
                                          tuple(names))))
            if scanned is not None:
                yield scanned
                feed.line += len(scanned)
                continue
            feed.add(data)
            yield from _object_rows(reader, feed, names, st, default_kind)


def _object_rows(reader: Any, feed: _Feed, names: list[str], st: FileState,
                 kind: str | None = None) -> Iterator[Columns]:
    """The records of the lines in ``feed`` (and of any block a record runs into) by the
    ``csv`` module, ``CSV_ROWS`` at a time."""
    rows = _Rows()
    while True:
        feed.start()
        cells = next(reader, None)
        if cells is None:
            break
        line = feed.first
        if feed.undecodable:
            no, raw, err = feed.undecodable.pop()
            rows.add({}, no, raw, (_not_utf8(raw, err), None), counted=False)
            continue
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(names):
            rows.add({}, line, cells, (f"{len(cells)} cells for {len(names)} header "
                                       "columns (truncated or unquoted comma?)", None))
        else:
            obj, error = _record(names, cells, kind)
            rows.add(obj, line, cells, error)
        if len(rows.lines) >= CSV_ROWS:
            yield rows.columns(st)
            rows = _Rows()
    if rows.lines:
        yield rows.columns(st)
