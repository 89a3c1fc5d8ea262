"""The Arrow scanners: a Parquet record batch's columns, or a CSV block parsed by pyarrow.csv,
straight to ``RawColumns`` (fast scanners of ``eventlog.fast``).

No Python object per row: kinds by ``index_in``, names by ``dictionary_encode`` (in order of
first appearance), integer or timestamp times as int64 (a timestamp column is nanoseconds
whatever the file's unit), payload texts kept in one buffer and checked to be canonical JSON
(``eventlog.scan.canonical_json``), so that the writer can use them as they are; in CSV,
payload cells as people write them (``{"v": 1}``) are decoded and written again by orjson
instead, each distinct text once, as the object path would. A column of another type (a
non-string kind), or a payload that is not one JSON value (in Parquet: not canonical JSON):
``None``, and the batch is read as Python values.

Times as text: ISO-8601 in ``eventlog.iso``'s shape (nanoseconds), and in CSV also integers
(the cells the object path reads as ``int``); any other text, and the block goes to the
object path, which names it. A CSV block is parsed with ``pyarrow.csv`` (every column a
string, an empty cell null, no newline inside a quoted cell) only if it has one row per line:
a blank line, a quoted newline, a lone carriage return, or a row with another number of
cells than the header, and the block is the object path's (the ``csv`` module's), so line
numbers are the file's either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eventlog.arrays import filled, int64s, numbers, strings
from eventlog.arrays import valid as valid_rows
from eventlog.columns import PAD, Payloads, words_of
from eventlog.format import KIND_NAMES
from eventlog.iso import iso_ns
from eventlog.records import (ABSENT, BAD_KIND, INT, NO_KIND, NO_SOURCE, NS, Block, RawColumns,
                              Times)
from eventlog.scan import payload_texts

__all__ = ["arrow_columns", "csv_columns"]

#: the columns a CSV log's object path reads (``eventlog.csv_log``)
_CSV_FIELDS = ("source", "kind", "start", "end", "payload", "seq", "arrival")

class _Other(Exception):
    """A column the scanner does not read."""


def _texts(col: Any, pa: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A string column as ``(buffer, p0, p1, valid)``: row ``i``'s text is
    ``buffer[p0[i]:p1[i]]`` (empty where null); ``buffer`` is a copy with ``PAD`` zero bytes
    after the texts."""
    if pa.types.is_string(col.type):
        offset_type: Any = np.int32
    elif pa.types.is_large_string(col.type):
        offset_type = np.int64
    else:
        raise _Other
    n = len(col)
    valid = (valid_rows(col) if col.null_count
             else np.ones(n, np.bool_))
    _, offsets, data = col.buffers()
    at = np.frombuffer(offsets, offset_type, count=col.offset + n + 1)[col.offset:]
    at = at.astype(np.int64)
    lo, hi = int(at[0]), int(at[-1])
    buffer = np.zeros(hi - lo + PAD, np.uint8)
    if hi > lo:
        buffer[:hi - lo] = np.frombuffer(data, np.uint8, count=hi)[lo:]
    p0, p1 = at[:-1] - lo, at[1:] - lo
    return buffer, p0, np.where(valid, p1, p0), valid


def _text_times(col: Any, pa: Any, n: int, instant: bool, ints: bool) -> Times:
    """A string column of times: ISO-8601 text (``instant``) in ``eventlog.iso``'s shape,
    and (``ints``) integers; absent where null. Any other text raises ``_Other``."""
    buffer, p0, p1, valid = _texts(col, pa)
    value = np.zeros(n, np.int64)
    state = np.where(valid, INT, ABSENT).astype(np.int8)
    iso = valid & (p1 - p0 >= 20) & (buffer[np.minimum(p0 + 4, len(buffer) - 1)] == ord("-"))
    if iso.any():
        if not instant:
            raise _Other
        rows = np.flatnonzero(iso)
        found = iso_ns(buffer, words_of(buffer), p0[rows])
        if found is None or (found[1] != p1[rows]).any():
            raise _Other
        value[rows] = found[0]
        state[rows] = NS
    rest = valid & ~iso
    if rest.any():
        if not ints:
            raise _Other
        import pyarrow.compute as pc

        rows = np.flatnonzero(rest)
        try:  # digits with an optional minus, within int64 (what int() reads in them)
            value[rows] = numbers(pa, pc.cast(col.take(int64s(pa, rows)), pa.int64()))
        except pa.ArrowInvalid:
            raise _Other from None
    return Times(value, state)


def _times(col: Any, pa: Any, n: int, instant: bool = True, ints: bool = False) -> Times:
    """An integer or (``instant``) timestamp column, or a string column of times
    (``_text_times``; ``ints``: integer text too); absent where null or missing."""
    if col is None:
        return Times.absent(n)
    t = col.type
    state = INT
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _text_times(col, pa, n, instant, ints)
    try:
        if pa.types.is_timestamp(t) and instant:
            col = col.cast(pa.timestamp("ns", tz=t.tz)).cast(pa.int64())
            state = NS  # typed: nanoseconds whatever the unit of integers
        elif not pa.types.is_integer(t):
            raise _Other
        elif t != pa.int64():
            col = col.cast(pa.int64())  # raises beyond int64
    except pa.ArrowInvalid:
        raise _Other from None
    if not col.null_count:
        return Times(numbers(pa, col), np.full(n, state, np.int8))
    present = valid_rows(col)
    return Times(numbers(pa, filled(pa, col, 0)),
                 np.where(present, state, ABSENT).astype(np.int8))


def arrow_columns(block: Block) -> RawColumns | None:
    """``RawColumns`` of the batch ``block.data``, or ``None`` if a column is not of a type
    read here or a payload is not canonical JSON."""
    return _batch_columns(block.data, block.first_line, False)


def csv_columns(block: Block) -> RawColumns | None:
    """``RawColumns`` of a CSV block (``block.data``: whole lines after the header, whose
    names are ``block.header``), or ``None`` if pyarrow.csv does not read it as one row per
    line or a cell is not read here (see the module)."""
    import pyarrow as pa
    import pyarrow.csv as pv

    names = list(block.header)
    data = block.data
    if len(set(names)) < len(names) or "" in names:
        return None  # the object path keeps the last of equal names
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n") or b"\0" in data:
        return None  # a carriage return that does not end a line, a NUL
    if data.count(b'"') % 2:
        return None  # a quoted cell left open: its record goes on past the block's end
    if not data.isascii():
        try:  # every cell, read or not: the object path decodes whole lines
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    lines = data.count(b"\n")
    wanted = [c for c in _CSV_FIELDS if c in names]
    try:
        table = pv.read_csv(
            pa.py_buffer(data),
            read_options=pv.ReadOptions(column_names=names, use_threads=False,
                                        block_size=max(1 << 20, block.size + 1)),
            parse_options=pv.ParseOptions(newlines_in_values=False, ignore_empty_lines=False),
            convert_options=pv.ConvertOptions(
                column_types={c: pa.string() for c in names}, include_columns=wanted,
                strings_can_be_null=True, quoted_strings_can_be_null=True, null_values=[""]))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if table.num_rows != lines:
        return None
    batch = table.combine_chunks().to_batches()
    if len(batch) != 1:
        return None
    return _batch_columns(batch[0], block.first_line, True)


def _batch_columns(batch: Any, first_line: int, text_ints: bool) -> RawColumns | None:
    """The columns of a batch; ``text_ints``: a CSV block's (integer text in time cells,
    payload JSON re-encoded when not canonical)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> Any:
        return batch.column(name) if name in names else None

    try:
        kind_col = column("kind")
        if kind_col is None:  # a partition folder may give it (eventlog.logfile)
            kind = np.full(n, NO_KIND, np.int8)
        elif not (pa.types.is_string(kind_col.type) or pa.types.is_large_string(kind_col.type)):
            return None
        else:
            kind_code = pc.index_in(kind_col,
                                   value_set=strings(pa, [k.encode() for k in KIND_NAMES]))
            kind = numbers(pa, filled(pa, kind_code, BAD_KIND)).astype(np.int8)

        source_col = column("source")
        if source_col is None:  # likewise
            source = np.full(n, NO_SOURCE, np.int32)
            dictionary: list = []
        elif not (pa.types.is_string(source_col.type)
                  or pa.types.is_large_string(source_col.type)):
            return None
        else:
            encoded = pc.dictionary_encode(source_col)  # codes in order of first appearance
            source = numbers(pa, filled(pa, encoded.indices, NO_SOURCE)).astype(np.int32)
            try:
                dictionary = encoded.dictionary.to_pylist()
            except UnicodeDecodeError:
                return None

        payload_col = column("payload")
        if payload_col is None or payload_col.null_count == n:
            payload = Payloads(n, np.zeros(0, np.intp), np.zeros(PAD, np.uint8),
                               np.zeros(0, np.int64), np.zeros(0, np.int64))
            given = np.zeros(n, np.bool_)
        else:
            # CSV: JSON text as people write it, re-encoded; Parquet: as the output writes it
            found = payload_texts(*_texts(payload_col, pa), reencode=text_ints)
            if found is None:
                return None  # not one JSON value each (or, in Parquet, not canonical)
            payload, given = found
        return RawColumns(np.arange(first_line, first_line + n, dtype=np.int64),
                          kind, source, dictionary, _times(column("start"), pa, n, True, text_ints),
                          _times(column("end"), pa, n, True, text_ints),
                          _times(column("seq"), pa, n, False, text_ints),
                          _times(column("arrival"), pa, n, True, text_ints), payload, given)
    except _Other:
        return None
