"""The ``"goldilocks"`` data source: event logs as a batch or a streaming DataFrame.

Where the code runs. No method here runs in the user's driver process: Spark pickles the
``DataSource`` (with its string options) to a Python process the JVM spawns on the driver
machine, which plans (``partitions``, ``latestOffset``, ``initialOffset``), and to Python
workers on the executors, which ``read``. So every class here is a small picklable value,
the readers keep no state between calls that matters for correctness, and the planning side
relists the directory on every call. Parsing is the engine's own (``eventlog``): the
same validation, the same ``BadRecordError`` text naming file and line (TS §5.3).

Batch (``read_event_log``, or ``spark.read.format("goldilocks")``; the files listed and
opened through ``spark_adapter.files``, on any file system ``pyarrow.fs`` reaches): a task
per file, or per span of bytes of a large JSON Lines or CSV file (``plan_splits``,
``eventlog.spans``; each span read from its own first line, so errors name ``FILE:LINE`` as
a whole-file read does);
rows carry the engine's merge key ``(order_key, file_index, line)``. ``read_event_log``
plans the spans on the driver and passes them as the option ``splits``; a direct
``spark.read.format("goldilocks")`` read takes ``split_bytes`` (default 0: a task per file)
and plans them in the planning process, at every planning.

Streaming (``spark.readStream.format("goldilocks").load(directory)``): a directory of parts
``<prefix>-<n>.jsonl`` as ``eventlog.RollingFileSink`` publishes them (atomically, so a
part is either absent or complete; hidden ``.…tmp`` files are ignored). The parts are
consecutive pieces of one stream, so the source orders rows by part, then line:
``file_index`` is the part number ``n`` and ``order_key = n * 2**32 + line``. The offset is
``PartOffset(part=n)``, the last part included (-1 before the first): frozen, ordered,
serialised as ``{"part": n}``. A micro-batch reads the parts in ``(start, end]``, one task per
part; parts are immutable, so re-reading a range after a restart gives the same rows
(exactly-once with a checkpoint and an idempotent sink). Options: ``prefix`` (default
``events``), ``maxFilesPerTrigger``, ``bad_records`` (``fail``, ``skip``, ``quarantine``),
``quarantine`` (a directory) and ``time_unit`` (of integer times: ``s``, ``ms``, ``us``,
``ns``). ``trigger(availableNow=True)`` reads the parts present when the query starts, then
stops.
"""

from __future__ import annotations

import json
import os
import re
import weakref
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxFiles,
                                              SupportsTriggerAvailableNow)

from engine.errors import InputError
from eventlog.logfile import LogFile
from eventlog.records import Span
from spark_adapter.files import LogPath, list_directory, list_logs, open_log
from spark_adapter.schema import (EVENT_LOG_COLUMNS, EVENT_LOG_SCHEMA, KIND_END, KIND_START,
                                  SOURCE_NAME)
from spark_adapter.session import (default_parallelism, is_connect, use_driver_python,
                                   worker_python_error)

__all__ = [
    "GoldilocksDataSource",
    "EventLogReader",
    "EventLogStreamReader",
    "FilePartition",
    "PartOffset",
    "register",
    "read_event_log",
    "plan_splits",
    "list_log_files",
    "list_parts",
]

_PART_SHIFT = 32  # order_key = part << 32 | line: parts hold fewer than 2**32 lines


# -- values that cross process boundaries (picklable, frozen) ------------------------------

@dataclass(frozen=True, order=True)
class PartOffset:
    """A streaming position: every part up to and including ``part`` has been read.

    Frozen and ordered; serialised to Spark's offset log as ``{"part": n}``.
    """

    part: int = -1

    def to_dict(self) -> dict:
        return {"part": self.part}

    @classmethod
    def from_dict(cls, value: dict) -> PartOffset:
        try:
            part = value["part"]
        except (TypeError, KeyError):
            raise InputError(f"goldilocks source: offset {value!r}; expected {{'part': n}}") from None
        if type(part) is not int:
            raise InputError(f"goldilocks source: offset part {part!r}; expected an integer")
        return cls(part)


class FilePartition(InputPartition):
    """One file, or one span of a file, to read: created by the planner, pickled to an
    executor.

    ``log``: the file (``spark_adapter.files.LogPath``: where it is, its format,
    compression and partition folders' fields). ``index`` becomes ``file_index``; ``part``
    is set for streaming parts (then ``order_key`` is ``part << 32 | line``) and ``None``
    for batch files (``order_key`` is the file's key). ``span``: the bytes to read
    (``eventlog.Span``: the whole file by default) and ``next_line``: the line after them,
    where the next span begins (its first record is checked against this span's last key,
    TS §5.2).
    """

    def __init__(self, log: LogPath, index: int, part: int | None = None,
                 span: Span | None = None, next_line: int | None = None) -> None:
        span = span or Span()
        super().__init__((log.uri, index, part, span.start))
        self.log = log
        self.path = log.uri
        self.index = index
        self.part = part
        self.span = span
        self.next_line = next_line

    def to_list(self) -> list:
        """The partition as JSON values (``from_list`` reads them back)."""
        s = self.span
        return [self.log.to_list(), self.index, s.start, s.stop, s.first_line, s.mode,
                self.next_line]

    @classmethod
    def from_list(cls, value: list) -> FilePartition:
        log, index, start, stop, first_line, mode, next_line = value
        return cls(LogPath.from_list(log), index, None, Span(start, stop, first_line, mode),
                   next_line)

    def __repr__(self) -> str:
        span = "" if self.span.whole else f", bytes={self.span.start}:{self.span.stop}"
        return f"FilePartition({self.path!r}, index={self.index}, part={self.part}{span})"


# -- listing (planning side) ----------------------------------------------------------------

def list_log_files(path: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The log files ``path`` names (``spark_adapter.files.list_logs``), as paths or URIs,
    in replay order (their file indexes). Runs where it is called (the driver)."""
    return [log.uri for log in list_logs(path)]


def list_parts(directory: str, prefix: str) -> list[tuple[int, str]]:
    """``(n, path or URI)`` of the published parts ``<prefix>-<n>.jsonl`` in ``directory``
    (a path or a URI), by ``n``; none when the directory does not exist yet."""
    pattern = re.compile(re.escape(prefix) + r"-(\d+)\.jsonl$")
    parts = [(int(m.group(1)), path) for name, path in list_directory(directory)
             if (m := pattern.fullmatch(name))]
    parts.sort()
    return parts


# -- reading one file (executor side) --------------------------------------------------------

def _arrow_schema():
    import pyarrow as pa

    types = {"BIGINT": pa.int64(), "STRING": pa.string(), "INT": pa.int32()}
    return pa.schema([(name, types[sql]) for name, sql in EVENT_LOG_COLUMNS])


def _bad_records(options: dict, path: str, index: int, span: Span) -> Any:
    """The engine's ``BadRecords`` for one task; quarantine goes to a file per input file
    (per span of a file read in spans: ``-<first line>`` before the extension)."""
    from eventlog import BadRecords

    mode = options.get("bad_records", "fail")
    if mode != "quarantine":
        return BadRecords(mode), None
    directory = options.get("quarantine")
    if not directory:
        raise InputError("bad_records='quarantine' needs a quarantine directory (option "
                         "'quarantine')")
    os.makedirs(directory, exist_ok=True)
    piece = "" if span.whole else f"-{span.first_line}"
    name = f"{index:06d}-{os.path.basename(path)}{piece}.bad.jsonl"
    sink = open(os.path.join(directory, name), "wb")  # a retried task rewrites it whole
    return BadRecords(mode, sink), sink


def read_file_batches(log: LogPath, index: int, part: int | None, options: dict,
                      span: Span = Span(), next_line: int | None = None) -> Iterator[Any]:
    """Arrow record batches of one file, or of its ``span``, in ``EVENT_LOG_SCHEMA``. Runs
    on an executor.

    Raises the engine's ``BadRecordError`` (``FILE:LINE: …``) unless ``bad_records`` says
    otherwise. After a span that ends before the file does, the first good record after it
    (line ``next_line`` on) is checked against the span's last key (TS §5.2), since the
    span after it was read without this one: a record out of order there fails the task
    with the engine's error for it, in every ``bad_records`` mode.
    """
    import numpy as np
    import orjson
    import pyarrow as pa

    from eventlog import JOIN, KIND_NAMES, LEAVE, SourceTable, read_columns
    from eventlog.format import END, START
    from eventlog.merge import time_keys

    schema = _arrow_schema()
    by_time = options.get("merge") == "time"  # a whole file (``plan_splits`` keeps it so)
    high = np.iinfo(np.int64).min
    table = SourceTable()
    time_unit = options.get("time_unit")
    path = log.uri
    source = open_log(log)
    bad, sink = _bad_records(options, path, index, span)
    kinds = np.empty(max(START, END) + 1, dtype=object)
    kinds[:len(KIND_NAMES)] = KIND_NAMES
    kinds[START], kinds[END] = KIND_START, KIND_END
    dumps = orjson.dumps
    try:
        states: list = []
        for chunk in read_columns(source, table=table, bad=bad, modes=states,
                                  time_unit=time_unit, span=span):
            n = len(chunk)
            if not n:
                continue
            mode = states[0].mode  # fixed by the file's first record (TS §5.2)
            names = np.array([*table.names, None], dtype=object)  # code -1 -> None
            no_time = (chunk.kind == JOIN) | (chunk.kind == LEAVE)
            key = chunk.key
            if part is not None:
                order_key = (np.int64(part) << np.int64(_PART_SHIFT)) + chunk.line
            elif by_time:  # TS §5.8: the latest time the file has shown up to the row
                order_key, high = time_keys(chunk, high)
            else:
                order_key = key
            if chunk.ids is None:
                ids = pa.nulls(n, pa.string())
            else:  # TS §7.1: as JSON text, the ids 7 and "7" stay two ids
                ids = pa.array([None if i is None else dumps(i).decode() for i in chunk.ids],
                               pa.string())
            columns = [
                pa.array(key, pa.int64(), mask=np.full(n, mode != "seq")),
                pa.array(names[chunk.source], pa.string()),
                pa.array(kinds[chunk.kind], pa.string()),
                pa.array(chunk.start, pa.int64(), mask=no_time),
                pa.array(chunk.end, pa.int64(), mask=~chunk.has_end & (chunk.kind != END)),
                pa.array([None if p is None else dumps(p).decode() for p in chunk.payload],
                         pa.string()),
                ids,
                pa.array(key, pa.int64(), mask=np.full(n, mode != "arrival")),
                pa.array(order_key, pa.int64()),
                pa.array(np.full(n, index, np.int32), pa.int32()),
                pa.array(chunk.line, pa.int64()),
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)
        if span.stop is not None and states[0].mode is not None and next_line is not None:
            _check_order_after(source, span.stop, next_line, states[0].mode,
                               states[0].last_key, time_unit, bad.mode)
    finally:
        if sink is not None:
            sink.close()


def _check_order_after(path: str | LogFile, stop: int, next_line: int, mode: str,
                       last_key: int, time_unit: str | None, bad_mode: str) -> None:
    """Raise if the first good record after byte ``stop`` is before ``last_key`` (TS §5.2):
    the engine's error under ``fail``; under ``skip`` or ``quarantine`` the span after
    ``stop`` has already kept the record, so the read is refused, naming it."""
    from eventlog.spans import order_after

    err = order_after(path, stop, next_line, mode, last_key, time_unit)
    if err is None:
        return
    if bad_mode == "fail":
        raise err
    raise InputError(
        f"{err} — the file was read in spans of bytes and this record begins a span, which "
        f"kept it for good; bad_records={bad_mode!r} cannot leave it out. Read the file "
        "whole: read_event_log(..., split_bytes=0)")


def _lower(options: Any) -> dict:
    """Spark's options are case-insensitive; a plain dict with lower-case keys pickles simply."""
    return {str(k).lower(): v for k, v in options.items()}


# -- the data source ---------------------------------------------------------------------------

class GoldilocksDataSource(DataSource):
    """``spark.read[Stream].format("goldilocks")``: event logs with ``EVENT_LOG_SCHEMA``.

    Constructed and pickled by Spark with the string ``options``; never runs in the user's
    driver process (see the module docstring).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return EVENT_LOG_SCHEMA

    def reader(self, schema: Any) -> EventLogReader:
        return EventLogReader(_lower(self.options))

    def streamReader(self, schema: Any) -> EventLogStreamReader:
        return EventLogStreamReader(_lower(self.options))


class EventLogReader(DataSourceReader):
    """Batch: one partition per file. ``partitions`` runs in the planning process;
    ``read`` on executors. Options: ``paths`` (a JSON list of files, as ``read_event_log``
    passes) or ``path`` (a file or directory), ``bad_records``, ``quarantine``."""

    def __init__(self, options: dict) -> None:
        self.options = options

    def _files(self) -> list[LogPath]:
        if "paths" in self.options:
            return [LogPath.from_list(v) for v in json.loads(self.options["paths"])]
        if "path" in self.options:
            return list_logs(self.options["path"])
        raise InputError("goldilocks source: no path; expected .load(path) or option 'paths'")

    def partitions(self) -> list[FilePartition]:
        if "splits" in self.options:  # planned by read_event_log on the driver
            return [FilePartition.from_list(v) for v in json.loads(self.options["splits"])]
        merge = self.options.get("merge", "arrival")
        if merge == "auto":  # decided where the files are listed: read() sees the options only
            raise InputError("goldilocks source: option merge='auto' is read_event_log's; "
                             "expected 'arrival' or 'time' (or use read_event_log)")
        return plan_splits(self._files(), int(self.options.get("split_bytes", "0")),
                           self.options.get("time_unit"), merge)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, FilePartition)  # ours: made by partitions() above
        yield from read_file_batches(partition.log, partition.index, None, self.options,
                                     partition.span, partition.next_line)


class EventLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming over a directory of parts. Offsets are ``PartOffset`` dicts.

    ``initialOffset``, ``latestOffset``, ``partitions``, ``prepareForTriggerAvailableNow`` run
    in the planning process (each call relists the directory; only ``_target`` is remembered,
    for ``availableNow``); ``read`` runs on executors and uses only its partition and options.
    """

    def __init__(self, options: dict) -> None:
        self.options = options
        self.directory = options.get("path") or ""
        if not self.directory:
            raise InputError("goldilocks stream: no directory; expected .load(directory)")
        self.prefix = options.get("prefix", "events")
        self._target: PartOffset | None = None
        limit = options.get("maxfilespertrigger")
        self._max_files = int(limit) if limit else None
        if self._max_files is not None and self._max_files < 1:
            raise InputError(f"maxFilesPerTrigger={limit!r}; expected an integer >= 1")

    def initialOffset(self) -> dict:
        return PartOffset().to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._max_files is not None:
            return ReadMaxFiles(self._max_files)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        parts = list_parts(self.directory, self.prefix)
        self._target = PartOffset(parts[-1][0] if parts else -1)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = PartOffset.from_dict(start)
        newer = [n for n, _ in list_parts(self.directory, self.prefix) if n > begin.part]
        if self._target is not None:
            newer = [n for n in newer if n <= self._target.part]
        if isinstance(limit, ReadMaxFiles):
            newer = newer[:limit.max_files]
        return (PartOffset(newer[-1]) if newer else begin).to_dict()

    def reportLatestOffset(self) -> dict | None:
        parts = list_parts(self.directory, self.prefix)
        return PartOffset(parts[-1][0]).to_dict() if parts else None

    def partitions(self, start: dict, end: dict) -> list[FilePartition]:
        lo, hi = PartOffset.from_dict(start), PartOffset.from_dict(end)
        return [FilePartition(LogPath(path, "jsonl"), n, part=n)
                for n, path in list_parts(self.directory, self.prefix) if lo.part < n <= hi.part]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, FilePartition)  # ours: made by partitions() above
        yield from read_file_batches(partition.log, partition.index, partition.part,
                                     self.options)

    def commit(self, end: dict) -> None:
        """Nothing to release: parts are left in place (the sink's directory is the log)."""


# -- planning a batch read -------------------------------------------------------------------

def plan_splits(files: list[LogPath], split_bytes: int, time_unit: str | None = None,
                merge: str = "arrival", chosen: list[str] | None = None,
                ) -> list[FilePartition]:
    """The partitions of a batch read: an uncompressed JSON Lines or CSV file larger than
    ``split_bytes`` (``> 0``) as spans of about that many bytes, each starting at a line
    start, one task each (``eventlog.spans.split_spans``: one sequential read of the file,
    counting newlines); any other file whole. Refuses files with different kinds of order
    key (TS §5.2). ``merge``: as the engine's (``eventlog.merge_columns``): ``"auto"`` is
    ``"time"`` when there are several files and none carries an order key (TS §5.8), and
    under ``"time"`` each file is read whole (its rows' key is the latest time the file has
    shown, which a span cannot know); ``chosen`` (if given) gets the merge that runs. Runs
    where the files are listed (the driver)."""
    from eventlog import MERGES
    from eventlog.spans import file_mode, split_spans

    if merge not in MERGES:
        raise InputError(f"read_event_log: merge={merge!r}; expected one of "
                         f"{', '.join(MERGES)}")
    modes: dict[str, str | None] = {}
    if len(files) > 1 or split_bytes > 0:
        modes = {f.uri: file_mode(open_log(f), time_unit) for f in files}
    if merge == "auto":
        keyed = [m for m in modes.values() if m is not None]
        merge = ("time" if len(files) > 1 and keyed and all(m == "position" for m in keyed)
                 else "arrival")
    if len(files) > 1 and merge == "arrival":
        seen: dict[str, str] = {}
        for uri, mode in modes.items():
            if mode is not None:
                seen.setdefault(mode, uri)
        if len(seen) > 1:  # TS §5.2: one kind of order key across the files of a replay
            (m1, p1), (m2, p2) = list(seen.items())[:2]
            raise InputError(f"{p1} is ordered by {m1!r} but {p2} by {m2!r}; all files of "
                             "one replay must use the same order key (TS §5.2)")
    if chosen is not None:
        chosen.append("file" if len(files) == 1 else merge)
    whole = merge == "time" and len(files) > 1
    splits = [split_bytes > 0 and not whole and f.format != "parquet"
              and f.compression is None and f.size > split_bytes for f in files]
    out: list[FilePartition] = []
    for i, (f, split) in enumerate(zip(files, splits)):
        spans = (split_spans(open_log(f), split_bytes, mode=modes[f.uri], time_unit=time_unit)
                 if split else [Span()])
        nexts = [s.first_line for s in spans[1:]] + [None]
        out.extend(FilePartition(f, i, None, s, n) for s, n in zip(spans, nexts))
    return out


def _split_bytes(spark: Any, files: list[LogPath]) -> int:
    """The span size of a read: about Spark's own file split size (``min(maxPartitionBytes,
    max(openCostInBytes, total bytes / default parallelism))``), adjusted so that the count
    of spans is a multiple of the cores (three equal spans on two cores take two rounds)."""
    conf = spark.conf
    most = _bytes(conf.get("spark.sql.files.maxPartitionBytes", "128m"))
    least = _bytes(conf.get("spark.sql.files.openCostInBytes", "4m"))
    total = sum(f.size for f in files)
    cores = default_parallelism(spark)
    size = min(most, max(least, -(-total // cores)))
    spans = max(1, -(-total // size))  # empty files: one
    spans = -(-spans // cores) * cores
    return max(least, -(-total // spans))


def _bytes(text: str) -> int:
    """A Spark size (``"128m"``, ``"4194304"``, ``"1g"``) in bytes."""
    text = str(text).strip().lower().rstrip("b")
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


# -- driver-side helpers ---------------------------------------------------------------------

def register(spark: Any) -> None:
    """Register the data source under ``"goldilocks"`` in ``spark``, once per session (Spark
    warns each time a name is registered again). Driver.

    First makes sure the Python workers that will run it can import Goldilocks
    (``spark_adapter.session.use_driver_python``: a local session's workers run the driver's
    interpreter unless the user chose one)."""
    # before shipping: the class is sent with the interpreter to run it, so a session whose
    # workers' interpreter changed since gets it again
    python = use_driver_python(spark)
    if python is None and is_connect(spark):  # the server's choice, per Connect session
        python = "connect:" + str(spark.conf.get(_CONNECT_PYTHON, "") or "")
    if python is not None and _registered(spark) == python:
        return
    spark.dataSource.register(GoldilocksDataSource)
    try:
        _REGISTERED[spark] = python
    except TypeError:  # a session object that cannot be held weakly: register each time
        pass


#: the SQL conf that chooses a Spark Connect session's Python workers' interpreter
_CONNECT_PYTHON = "spark.sql.execution.pyspark.python"

#: the sessions the data source is registered in, with the workers' interpreter it was
#: registered with (held weakly: a stopped session goes)
_REGISTERED: Any = weakref.WeakKeyDictionary()


def _registered(spark: Any) -> str | None:
    try:
        return _REGISTERED.get(spark)
    except TypeError:
        return None


def read_event_log(spark: Any, path: str | os.PathLike | Sequence[str | os.PathLike], *,
                   bad_records: str = "fail", quarantine: str | os.PathLike | None = None,
                   time_unit: str | None = None, split_bytes: int | None = None,
                   merge: str = "auto") -> Any:
    """Read event-log files (JSON Lines, CSV, Parquet) into a DataFrame: ``EVENT_LOG_SCHEMA``.

    ``path``: a file, a directory (its log files by path, in ``key=value`` partition folders
    too), a glob, or a list of them — local paths, ``file://`` or a store's URIs, compressed
    files as Spark writes them (``spark_adapter.files``: anything else found is refused by
    name); the list order is the file index of the engine's merge. Runs on the driver: lists the files, plans the
    splits (``plan_splits``: a large JSON Lines or CSV file is cut at line starts into spans
    of about ``split_bytes``, one task each, after one sequential read counting its
    newlines) and registers the source; the files are parsed lazily on the executors by the
    engine's reader, each span from its own first line, so errors name ``FILE:LINE`` as a
    whole-file read does. ``split_bytes``: ``None`` for Spark's own split size
    (``spark.sql.files.maxPartitionBytes``, smaller when the logs would not fill the cores),
    ``0`` for one task per file. ``bad_records``: ``fail`` (the default: the first action fails with the
    engine's ``FILE:LINE: …`` message), ``skip``, or ``quarantine`` (skipped records written to
    ``quarantine``, a directory, one ``<file index>-<name>.bad.jsonl`` per file, in the
    engine's quarantine format). ``time_unit``: the unit of the logs' integer times, ``"s"``,
    ``"ms"``, ``"us"`` or ``"ns"`` (``None``: nanoseconds, refusing integers implausible as
    such — the engine's rule, ``eventlog.time_scale``); typed timestamps keep their own.
    ``merge``: how ``order_key`` orders the files' records among them, as the engine's
    replay merges them: ``"arrival"`` (their order keys, TS §5.2), ``"time"`` (each row's
    key is the latest time its file has shown up to it, so the replay order takes the next
    row from the file furthest behind, TS §5.8; each file is then one task) or ``"auto"``
    (the default): ``"time"`` when there are several files and none carries ``seq`` or
    ``arrival`` — one log per device — else ``"arrival"``.
    """
    from eventlog import BAD_RECORD_MODES, time_scale

    time_scale(time_unit)  # refused here, on the driver, with the engine's message
    if bad_records not in BAD_RECORD_MODES:
        raise InputError(f"read_event_log: bad_records={bad_records!r}; expected one of "
                         f"{', '.join(BAD_RECORD_MODES)}")
    if bad_records == "quarantine" and quarantine is None:
        raise InputError("read_event_log: bad_records='quarantine' needs quarantine=<directory>")
    if split_bytes is not None and (type(split_bytes) is not int or split_bytes < 0):
        raise InputError(f"read_event_log: split_bytes={split_bytes!r}; expected a byte "
                         "count >= 0 (0: one task per file) or None")
    files = list_logs(path)
    if split_bytes is None:
        split_bytes = _split_bytes(spark, files)
    chosen: list[str] = []
    splits = plan_splits(files, split_bytes, time_unit, merge, chosen)
    register(spark)
    reader = (spark.read.format(SOURCE_NAME)
              .option("paths", json.dumps([f.to_list() for f in files]))
              .option("splits", json.dumps([p.to_list() for p in splits]))
              .option("bad_records", bad_records)
              .option("merge", chosen[0]))
    if quarantine is not None:
        reader = reader.option("quarantine", os.path.abspath(os.fspath(quarantine)))
    if time_unit is not None:
        reader = reader.option("time_unit", time_unit)
    try:
        frame = reader.load()  # creates the source in a Python worker: it must import us
        if is_connect(spark):
            frame.schema  # a Connect client is lazy: analyse it now, so the error is said here
        return frame
    except Exception as err:
        explained = worker_python_error(err, spark)
        if explained is None:
            raise
        raise explained from err
