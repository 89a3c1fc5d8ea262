"""Goldilocks event logs: the recorded form of streams (``docs/event-log.md``).

Floor 1, beside ``operators``: it builds on ``engine`` (events, time) and nothing above.

- ``eventlog.format``: the leaf — kind codes, modes, the canonical line encoders.
- ``eventlog.read``: JSON Lines, CSV and Parquet into numpy columns, and their merge in
  arrival order (TS §5.2); bad records named by file and line (TS §5.3).
- ``eventlog.scan`` / ``eventlog.write_columns``: the vectorised JSON Lines scanner and the
  columnar line writer behind replay's fast path.
- ``eventlog.write``: ``EventLogWriter``, ``write_log`` and ``RollingFileSink``.
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
from eventlog.read import (
    BadRecords,
    Columns,
    SourceTable,
    log_format,
    merge_columns,
    read_columns,
    read_records,
    time_scale,
)
from eventlog.write import EventLogWriter, RollingFileSink, write_log

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
    "Columns",
    "SourceTable",
    "log_format",
    "merge_columns",
    "read_columns",
    "read_records",
    "time_scale",
    "EventLogWriter",
    "RollingFileSink",
    "write_log",
]
