"""A log to read that is not a plain local path: a file on another file system, a compressed
file, a file whose folder names fields of its records (Spark's ``partitionBy``).

The readers (``eventlog.merge.read_columns``) take a path or a ``LogFile``. A ``LogFile``
says what messages call the file (``name``: its path or URI, so that errors still read
``FILE:LINE``), its format, and how to open it; whoever lists the files builds them
(``spark_adapter.files``, over ``pyarrow.fs``). Nothing here knows a file system.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, BinaryIO, Callable

__all__ = ["LogFile", "RESTORED_FIELDS"]

#: the record fields a folder name may give every record of its files (``key=value``, as
#: Spark's ``partitionBy`` writes them): the ones a log's records may leave out for it
RESTORED_FIELDS = ("source", "kind")


@dataclass(frozen=True)
class LogFile:
    """One log file to read.

    ``name``: what messages call it. ``format``: ``"jsonl"``, ``"csv"`` or ``"parquet"``.
    ``open()``: a binary file object over its records' bytes (decompressed), read from its
    start; seekable when ``seekable`` (then it can be read in spans, and ``size()`` is its
    length in bytes). ``fields``: ``(field, value)`` that every record has although the
    file may leave them out (``RESTORED_FIELDS`` only; a record's own value stands).
    """

    name: str
    format: str
    open: Callable[[], BinaryIO]
    size: Callable[[], int]
    seekable: bool = True
    fields: tuple[tuple[str, Any], ...] = ()
