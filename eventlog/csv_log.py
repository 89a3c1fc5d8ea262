"""Reading CSV logs: a header naming the fields, then one record per row.

Rows are read with the ``csv`` module, ``CSV_ROWS`` at a time, and handed to the rules of a
record (``eventlog.records``) as Python values: a cell that is an integer becomes one, the
``payload`` cell is JSON text, an empty cell is a missing field. A row that is not UTF-8,
has the wrong number of cells or a payload that is not JSON is unreadable, named by its line.
"""

from __future__ import annotations

import csv
import io
import os
import re
from typing import Any, Callable, Iterator

import numpy as np
import orjson

from eventlog.columns import Columns
from eventlog.records import MISSING, FileState, settle
from eventlog.values import from_fields

__all__ = ["CSV_ROWS", "read_csv"]

#: rows per chunk of the CSV reader
CSV_ROWS = 20_000

_CSV_INT = re.compile(r"^[+-]?\d+$")
_CSV_FIELDS = ("source", "kind", "start", "end", "payload", "seq", "arrival")
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
                                  unreadable=self.unreadable, counted=counted), st)


def _record(names: list[str], cells: list[str]) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """A row's cells as a record of Python values, and the payload's decoding error if any."""
    obj: dict[str, Any] = {}
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
                return obj, (f"not valid JSON text: {err}", "payload")
        else:
            obj[name] = text
    return obj, None


def read_csv(st: FileState, on_bytes: Callable[[int], None] | None) -> Iterator[Columns]:
    """The file's records, ``CSV_ROWS`` rows at a time."""
    with open(st.path, "rb") as f:
        if on_bytes is not None:
            on_bytes(os.fstat(f.fileno()).st_size)
        physical = [0]
        undecodable: list[tuple[int, bytes, UnicodeDecodeError]] = []

        def text_lines() -> Iterator[str]:
            for raw in f:
                physical[0] += 1
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    undecodable.append((physical[0], raw, err))
                    yield "\n"  # keep line numbers; the record is reported below

        reader = csv.reader(text_lines())
        header = next(reader, None)
        if undecodable:
            no, raw, err = undecodable.pop()
            raise st.error(no, _not_utf8(raw, err))
        if header is None:
            return
        names = [h.strip() for h in header]
        for required in ("source", "kind", "start"):
            if required not in names:
                raise st.error(1, f"header has no {required!r} column; expected at least "
                               "source, kind, start", required)
        rows = _Rows()
        line_before = reader.line_num
        for cells in reader:
            line = line_before + 1
            line_before = reader.line_num
            if undecodable:
                no, raw, err = undecodable.pop()
                rows.add({}, no, raw, (_not_utf8(raw, err), None), counted=False)
                continue
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(names):
                rows.add({}, line, cells, (f"{len(cells)} cells for {len(names)} header "
                                           "columns (truncated or unquoted comma?)", None))
            else:
                obj, error = _record(names, cells)
                rows.add(obj, line, cells, error)
            if len(rows.lines) >= CSV_ROWS:
                yield rows.columns(st)
                rows = _Rows()
        if rows.lines:
            yield rows.columns(st)
