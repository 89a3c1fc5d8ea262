"""The Parquet fast scanner: a record batch's Arrow columns straight to ``RawColumns``.

No Python object per row: kinds by ``index_in``, names by ``dictionary_encode`` (in order of
first appearance), integer or timestamp times as int64 (a timestamp column is nanoseconds
whatever the file's unit), payload texts kept in one buffer and checked to be canonical JSON
(``eventlog.scan.canonical_json``), so that the writer can use them as they are. A column of
another type (times as text, a non-string kind), or a payload that is not canonical JSON:
``None``, and the batch is read as Python values. Registered in ``eventlog.fast``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eventlog.columns import PAD, Payloads
from eventlog.format import KIND_NAMES
from eventlog.records import (ABSENT, BAD_KIND, INT, NO_SOURCE, NS, Block, RawColumns,
                              Times)
from eventlog.scan import payload_texts

__all__ = ["arrow_columns"]

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
    valid = (col.is_valid().to_numpy(zero_copy_only=False) if col.null_count
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


def _times(col: Any, pa: Any, n: int, instant: bool = True) -> Times:
    """An integer or (``instant``) timestamp column; absent where null or missing."""
    if col is None:
        return Times.absent(n)
    t = col.type
    state = INT
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
        return Times(col.to_numpy(), np.full(n, state, np.int8))
    present = col.is_valid().to_numpy(zero_copy_only=False)
    return Times(col.fill_null(0).to_numpy(),
                 np.where(present, state, ABSENT).astype(np.int8))


def arrow_columns(block: Block) -> RawColumns | None:
    """``RawColumns`` of the batch ``block.data``, or ``None`` if a column is not of a type
    read here or a payload is not canonical JSON."""
    import pyarrow as pa
    import pyarrow.compute as pc

    batch = block.data
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> Any:
        return batch.column(name) if name in names else None

    try:
        kind_col = column("kind")
        if not (pa.types.is_string(kind_col.type) or pa.types.is_large_string(kind_col.type)):
            return None
        kind_code = pc.index_in(kind_col, value_set=pa.array(KIND_NAMES))
        kind = kind_code.fill_null(BAD_KIND).to_numpy().astype(np.int8)

        source_col = column("source")
        if not (pa.types.is_string(source_col.type)
                or pa.types.is_large_string(source_col.type)):
            return None
        encoded = pc.dictionary_encode(source_col)  # codes in order of first appearance
        source = encoded.indices.fill_null(NO_SOURCE).to_numpy().astype(np.int32)
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
            found = payload_texts(*_texts(payload_col, pa))
            if found is None:
                return None  # not one JSON value each, or not in the form the output writes
            payload, given = found
        return RawColumns(np.arange(block.first_line, block.first_line + n, dtype=np.int64),
                          kind, source, dictionary, _times(column("start"), pa, n),
                          _times(column("end"), pa, n), _times(column("seq"), pa, n, False),
                          _times(column("arrival"), pa, n), payload, given)
    except _Other:
        return None
