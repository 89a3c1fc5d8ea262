"""Reading Parquet logs, a batch of ``PARQUET_ROWS`` rows at a time.

Each batch goes to the fast scanners (``eventlog.fast``: Arrow columns straight to numpy);
a batch they do not take is read as Python values (times of a timestamp column as
nanoseconds, payload texts decoded) and handed to the rules of a record
(``eventlog.records``). A null cell is a missing field. Memory: one batch and the row group
pyarrow decodes it from.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import orjson

from engine.errors import InputError

from eventlog.columns import Columns
from eventlog.fast import fast_columns
from eventlog.format import STDIN, compression
from eventlog.records import MISSING, Block, FileState, settle
from eventlog.values import Ns, from_fields

__all__ = ["PARQUET_ROWS", "read_parquet"]

#: rows per batch of the Parquet reader
PARQUET_ROWS = 65_536

_COLUMNS = ("seq", "source", "kind", "start", "end", "payload", "arrival", "id")


class _Rows:
    """A batch's rows as records (dicts of the fields present), built on demand: only the
    bad rows' are needed, for their messages and the quarantine."""

    def __init__(self, fields: dict[str, list[Any]]) -> None:
        self.fields = fields

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {name: v[i] for name, v in self.fields.items() if v[i] is not MISSING}

    def text(self, i: int) -> bytes:
        return orjson.dumps(self[i], default=str)


def _values(batch: Any, pa: Any, n: int) -> tuple[dict[str, list[Any]], dict[int, tuple[str, str | None]]]:
    """The batch's columns as Python values (``MISSING`` where null) and the rows whose
    payload text is not JSON."""
    fields: dict[str, list[Any]] = {}
    unreadable: dict[int, tuple[str, str | None]] = {}
    for name in batch.schema.names:
        col = batch.column(name)
        if pa.types.is_timestamp(col.type):  # nanoseconds, whatever the unit of integers
            col = col.cast(pa.timestamp("ns", tz=col.type.tz)).cast(pa.int64())
            fields[name] = [MISSING if v is None else Ns(v) for v in col.to_pylist()]
            continue
        values = [MISSING if v is None else v for v in col.to_pylist()]
        if name == "payload":
            for i, text in enumerate(values):
                if text is not MISSING:
                    try:
                        values[i] = orjson.loads(text)
                    except (orjson.JSONDecodeError, TypeError) as err:
                        unreadable[i] = (f"not valid JSON text: {err}", "payload")
        fields[name] = values
    return fields, unreadable


def read_parquet(st: FileState, on_bytes: Callable[[int], None] | None) -> Iterator[Columns]:
    """The file's records, a batch at a time."""
    if not st.span.whole:  # row groups, not lines: no byte ranges
        raise InputError(f"{st.path}: a Parquet log is read whole; expected no byte range")
    if st.path == STDIN or compression(st.path):
        raise InputError(f"{st.path}: a Parquet log is read from a file, uncompressed (it is "
                         "compressed inside already); expected a .parquet file")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:  # pragma: no cover - depends on the installed extras
        raise InputError(f"{st.path}: reading Parquet needs pyarrow (pip install "
                         "'goldilocks[parquet]')") from err
    try:
        pf = pq.ParquetFile(st.open() if st.file is not None else st.path)
    except Exception as err:
        raise st.error(1, f"not a readable Parquet file: {err}") from err
    if on_bytes is not None:
        on_bytes(st.size())
    renamed = {name: field for field, name in st.fields.items()}  # a field mapping
    names = {renamed.get(n, n) for n in pf.schema_arrow.names}
    default_kind = bool(st.fields) and "kind" not in st.fields and "kind" not in names
    # a partition folder's fields (``LogFile.fields``) stand for absent columns
    restored = {name for name, _ in st.file.fields} if st.file is not None else set()
    for required in ("source", "kind", "start"):
        if required not in names and required not in restored and not (
                required == "kind" and default_kind):
            raise st.error(1, f"no {st.fields.get(required, required)!r} column; expected at "
                           "least source, kind, start", required)
    for name in ("payload", "id"):
        if name in names:
            shown = st.fields.get(name, name)
            t = pf.schema_arrow.field(shown).type
            if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)):
                raise st.error(1, f"the {shown} column is {t}; expected JSON text (a string "
                               f"column): write it with to_json, e.g. "
                               f"df.withColumn({shown!r}, F.to_json({shown!r}))", name)
    wanted = [st.fields.get(c, c) for c in _COLUMNS if c in names]
    row = 0
    for batch in pf.iter_batches(batch_size=PARQUET_ROWS, columns=wanted):
        n = batch.num_rows
        if st.fields:  # the columns under the fields' canonical names
            columns = list(batch.columns)
            labels = [renamed.get(c, c) for c in batch.schema.names]
            if default_kind:  # a plain log's rows are readings
                columns.append(pa.array(["insert"] * n, pa.string()))
                labels.append("kind")
            batch = pa.RecordBatch.from_arrays(columns, names=labels)
        for name, value in st.file.fields if st.file is not None else ():
            if name not in names:  # a partition folder's field, as a column of the batch
                batch = batch.append_column(name, pa.array([value] * n, pa.string()))
        fast = fast_columns(Block("parquet", batch, n, row + 1, st)) if n else None
        if fast is not None:
            yield fast
        else:
            fields, unreadable = _values(batch, pa, n)
            rows = _Rows(fields)
            yield settle(from_fields(fields, np.arange(row + 1, row + n + 1, dtype=np.int64),
                                     objects=rows, text=rows.text, unreadable=unreadable,
                                     scale=st.scale), st)
        row += n
