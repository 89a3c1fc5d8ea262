"""Goldilocks event logs: the recorded form of streams (``docs/event-log.md``).

Floor 1, beside ``operators``: it builds on ``engine`` (events, time) and nothing above.

- ``eventlog.format``: the leaf — kind codes, modes, the canonical line encoders.
- ``eventlog.columns``: the column form every reader produces (``Columns``, ``SourceTable``).
- ``eventlog.records``: the validity rules of a record, written once, for every parser;
  bad records named by file and line (TS §5.3).
- ``eventlog.fast``: the fast scanners behind ``fast_columns(block)`` — ``eventlog.scan``
  (JSON Lines in the flat shape) and ``eventlog.arrow`` (Parquet batches).
- ``eventlog.jsonl``, ``eventlog.csv_log``, ``eventlog.parquet``: the readers of each format;
  ``eventlog.merge``: files into one stream in arrival order (TS §5.2); ``eventlog.logfile``:
  a log that is not a plain local path (another file system, compressed, partitioned).
- ``eventlog.write_columns``: canonical lines of whole columns, for replay's columnar path.
- ``eventlog.write``: ``EventLogWriter``, ``write_log`` and ``RollingFileSink``.

How a line is read: ``docs/replay.md``.
"""

from eventlog.format import (
    BAD_RECORD_MODES,
    CTI,
    INSERT,
    JOIN,
    KIND_NAMES,
    LEAVE,
    TIME_FORMATS,
    cti_line,
    cti_line_iso,
    encode_event,
    encode_late,
    insert_line,
    insert_line_iso,
    insert_prefix,
    iso_time,
    late_line,
    late_line_iso,
)
from eventlog.columns import Columns, SourceTable
from eventlog.files import log_files
from eventlog.format import FORMATS, STDIN, log_format
from eventlog.logfile import LogFile
from eventlog.merge import MERGES, by_time, merge_columns, read_columns, read_records
from eventlog.records import RECORD_FIELDS, BadRecords, Span, field_map, time_scale
from eventlog.write import EventLogWriter, RollingFileSink, SinkStats, write_log

__all__ = [
    "BAD_RECORD_MODES",
    "TIME_FORMATS",
    "INSERT",
    "CTI",
    "JOIN",
    "LEAVE",
    "KIND_NAMES",
    "insert_prefix",
    "insert_line",
    "cti_line",
    "late_line",
    "iso_time",
    "insert_line_iso",
    "cti_line_iso",
    "late_line_iso",
    "encode_event",
    "encode_late",
    "BadRecords",
    "Span",
    "Columns",
    "SourceTable",
    "log_format",
    "LogFile",
    "log_files",
    "FORMATS",
    "STDIN",
    "RECORD_FIELDS",
    "field_map",
    "merge_columns",
    "MERGES",
    "by_time",
    "read_columns",
    "read_records",
    "time_scale",
    "EventLogWriter",
    "RollingFileSink",
    "SinkStats",
    "write_log",
]
