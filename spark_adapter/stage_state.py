"""The watermarking stage's state between micro-batches, and its late rows: side files.

Spark keeps a stateful operator's state in its state store, committed with the micro-batch;
the stage's decisions run in stateless ``mapInArrow`` tasks (``stage_core``), so it keeps its
own small state in files under ``state_dir`` — like a checkpoint, on storage every executor
reaches and that survives restarts (a local or mounted path, or any URI ``pyarrow.fs``
opens: ``s3://``, ``gs://``, ``hdfs://``…). Layout, per query (Spark's query id: stable
across restarts from one checkpoint, new with a new checkpoint) and per stage name::

    <state_dir>/<query id>/<stage name>/
        begun                              the stage has run for this query
        snap-<batch>.pkl                   the state after <batch> (folded)
        part-<batch>-<run id>-<task>.pkl   one task's partial summary of <batch>
    <late_path>/query=<query id>/batch=<batch>/part-<task>-<run id>.parquet

Exactly once, without a commit hook of our own. Spark runs micro-batch k only after k−1 is
committed, and re-runs an uncommitted k with the same input (its offset log) in a new run. So
at the start of every task of micro-batch k:

- files of *this* micro-batch written by another run are a failed attempt's: deleted (a re-run
  overwrites, never double-counts, even if it splits its input otherwise); snapshots at or
  after k and partials after k are abandoned work: deleted;
- the state at the start of k is the latest snapshot before k folded with the partials of the
  micro-batches after it (all committed). The task writes that fold as a new snapshot (every
  task writes the same bytes; tmp file and rename) and deletes what it covers, keeping the
  last ``RETAIN`` snapshots: the files stay few whatever the number of batches.

A failed attempt whose input is never run again leaves nothing in the state: its partials are
deleted by the re-run of its micro-batch. A sink that skips a re-run batch (the file sink
does, for a batch it already holds) leaves the first attempt's files, which are then the ones
that match its output.

A reader that finds a file gone (a peer task compacted it) lists again.
"""

from __future__ import annotations

import json
import pickle
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from engine.errors import InputError
from spark_adapter.jvm import read_jvm_state
from spark_adapter.stage_core import StageState, fold
from spark_adapter.stage_spec import StageSpec, TaskInfo, identity_changes, readable_duration

__all__ = ["StateStore", "LateFiles", "filesystem", "read_stage_state", "stored_stages",
           "options_record", "StoredStage", "RETAIN", "OPTIONS"]

#: snapshots kept before the newest one (enough to re-run the last committed micro-batch)
RETAIN = 2
_SNAP = re.compile(r"snap-(\d+)\.pkl$")
_PART = re.compile(r"part-(\d+)-(.+)-(\d+)\.pkl$")
_LATE = re.compile(r"part-(\d+)-(.+)\.parquet$")
_BEGUN = "begun"
#: the stage's options beside its state (``options_record``), read when a plan is built
OPTIONS = "options.json"
_QUERY = re.compile(r"[0-9a-fA-F-]{8,}|batch")  # a query id (Spark's: a UUID)
_JVM = "jvm"  # the JVM plan's folder (spark_adapter/java: StageTask)
_ATTEMPTS = 8


def filesystem(uri: str) -> tuple[Any, str]:
    """``(pyarrow FileSystem, path)`` for a local path or a URI."""
    from pyarrow import fs

    if "://" in uri:
        return fs.FileSystem.from_uri(uri)
    import os

    return fs.LocalFileSystem(), os.path.abspath(uri)


def _write_atomically(filesystem_: Any, path: str, write: Callable[[Any], None]) -> None:
    """Write through a temporary name, then move into place: readers see all or nothing."""
    head, _, tail = path.rpartition("/")
    tmp = f"{head}/.{tail}.{uuid.uuid4().hex}.tmp"
    try:
        with filesystem_.open_output_stream(tmp) as out:
            write(out)
        filesystem_.move(tmp, path)
    except BaseException:
        _delete(filesystem_, tmp)
        raise


def _delete(filesystem_: Any, path: str) -> None:
    try:
        filesystem_.delete_file(path)
    except (FileNotFoundError, OSError):
        pass  # gone already (a peer task compacted it)


def _names(filesystem_: Any, directory: str) -> list[str]:
    from pyarrow import fs

    infos = filesystem_.get_file_info(fs.FileSelector(directory, allow_not_found=True))
    return [info.base_name for info in infos if info.type == fs.FileType.File]


def _is_dir(filesystem_: Any, path: str) -> bool:
    from pyarrow import fs

    return bool(filesystem_.get_file_info(path).type == fs.FileType.Directory)


class StateStore:
    """One stage's state files for one query; used by every task of every micro-batch."""

    def __init__(self, spec: StageSpec, info: TaskInfo) -> None:
        if spec.state_dir is None or info.batch is None:
            raise InputError("watermark_stage: a streaming stage needs state_dir and a "
                             "micro-batch id")
        self.spec = spec
        self.info = info
        self.fs, root = filesystem(spec.state_dir)
        self.dir = f"{root.rstrip('/')}/{info.query}/{spec.name}"

    def _path(self, name: str) -> str:
        return f"{self.dir}/{name}"

    def _read(self, name: str) -> Any:
        with self.fs.open_input_stream(self._path(name)) as f:
            return pickle.loads(f.read())

    def _write(self, name: str, value: Any) -> None:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        _write_atomically(self.fs, self._path(name), lambda out: out.write(data))

    def load(self) -> StageState:
        """The state at the start of this task's micro-batch (module docstring). Executor."""
        for _ in range(_ATTEMPTS):
            try:
                return self._load()
            except FileNotFoundError:
                continue  # a peer compacted what this listing showed: list again
        raise RuntimeError(f"watermark_stage: the state in {self.dir} kept changing while it "
                           "was read; is another query writing it?")

    def _load(self) -> StageState:
        k = self.info.batch
        assert k is not None
        names = _names(self.fs, self.dir)
        if _is_dir(self.fs, self._path(_JVM)):
            raise InputError(
                f"watermark_stage: the state in {self.dir} was written by the stage's JVM plan; "
                "this query runs a Python plan. Run it as before (a session with "
                "spark.jars=spark_adapter.stage_jar() and the same options), or start a new "
                "query (a new checkpoint)")
        if not names:
            if k > 0:
                raise InputError(
                    f"watermark_stage: no state for this query in {self.dir}, but the query is "
                    f"at micro-batch {k}: the stage's state_dir was moved or deleted while the "
                    "checkpoint was kept. Restart with the state_dir of the earlier runs, or "
                    "with a new checkpoint (which starts the stream over)")
            self.fs.create_dir(self.dir, recursive=True)
            _write_atomically(self.fs, self._path(_BEGUN), lambda out: out.write(b"0\n"))
            record = options_record(self.spec, "python").encode()
            _write_atomically(self.fs, self._path(OPTIONS), lambda out: out.write(record))
        snaps: dict[int, str] = {}
        parts: dict[int, list[str]] = {}
        for name in names:
            if m := _SNAP.fullmatch(name):
                b = int(m.group(1))
                if b >= k:  # abandoned: written after a batch that is running again
                    _delete(self.fs, self._path(name))
                else:
                    snaps[b] = name
            elif m := _PART.fullmatch(name):
                b, run = int(m.group(1)), m.group(2)
                if b > k or (b == k and run != self.info.run):  # a failed attempt's
                    _delete(self.fs, self._path(name))
                elif b < k:
                    parts.setdefault(b, []).append(name)
        base = max(snaps, default=None)
        fingerprint = self.spec.fingerprint()
        state = self._read(snaps[base]) if base is not None else StageState(fingerprint)
        changed = identity_changes(state.fingerprint, fingerprint)
        if changed:
            raise InputError(
                f"watermark_stage: the state in {self.dir} was written by this stage with "
                f"other options ({'; '.join(changed)}). A restart of this query must keep "
                "them; to run with these options, start a new query (a new checkpoint) with "
                "its own state_dir")
        state.fingerprint = fingerprint  # the delays may change (docs/spark.md, "Restarts")
        pending = sorted(b for b in parts if base is None or b > base)
        for b in pending:
            state = fold(state, [self._read(name) for name in sorted(parts[b])], self.spec, b)
        if pending:
            base = pending[-1]
            self._write(f"snap-{base:012d}.pkl", state)
        if base is not None:  # compact: what the newest snapshot covers
            for b, names_b in parts.items():
                if b <= base:
                    for name in names_b:
                        _delete(self.fs, self._path(name))
            for b, name in snaps.items():
                if b < base and len([s for s in snaps if s > b]) >= RETAIN:
                    _delete(self.fs, self._path(name))
        return state

    def save(self, partial: dict) -> None:
        """This task's partial summary of its micro-batch (overwritten by a retry). Executor."""
        info = self.info
        self._write(f"part-{info.batch:012d}-{info.run}-{info.partition:06d}.pkl", partial)


class LateFiles:
    """Late and rejected rows of one task, as one Parquet file, written whole at the end.

    Streaming: ``<late_path>/query=<query>/batch=<k>/part-<task>-<run>.parquet``; files of
    the same micro-batch from another run are deleted when the task starts (module docstring).
    A batch DataFrame: ``<late_path>/part-<task>.parquet`` (each action that computes the
    frame writes it again, whole).
    """

    def __init__(self, late_path: str, info: TaskInfo) -> None:
        self.fs, root = filesystem(late_path)
        root = root.rstrip("/")
        self.info = info
        if info.batch is None:
            self.dir = root
            self.name = f"part-{info.partition:06d}.parquet"
        else:
            self.dir = f"{root}/query={info.query}/batch={info.batch}"
            self.name = f"part-{info.partition:06d}-{info.run}.parquet"
            for name in _names(self.fs, self.dir):
                m = _LATE.fullmatch(name)
                if m and m.group(2) != info.run:
                    _delete(self.fs, f"{self.dir}/{name}")
        self._writer: Any = None
        self._tmp: str | None = None
        self._out: Any = None
        self.rows = 0

    def write(self, table: Any) -> None:
        """Append late rows (a ``pyarrow.RecordBatch``); the file appears at ``close``."""
        import pyarrow.parquet as pq

        if self._writer is None:
            self.fs.create_dir(self.dir, recursive=True)
            self._tmp = f"{self.dir}/.{self.name}.{uuid.uuid4().hex}.tmp"
            self._out = self.fs.open_output_stream(self._tmp)
            self._writer = pq.ParquetWriter(self._out, table.schema)
        self._writer.write_batch(table)
        self.rows += table.num_rows

    def close(self) -> None:
        """Publish the file (atomically) if there were late rows."""
        if self._writer is None:
            return
        self._writer.close()
        self._out.close()
        self.fs.move(self._tmp, f"{self.dir}/{self.name}")
        self._writer = None

    def abort(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
                self._out.close()
            finally:
                _delete(self.fs, self._tmp)  # type: ignore[arg-type]
                self._writer = None


def options_record(spec: StageSpec, plan: str) -> str:
    """The stage's options as JSON (``options.json`` beside its state): the plan (``python``
    or ``jvm``), the fingerprint a restart is checked against (``stored_stages``), and the
    options that may change, as given."""
    return json.dumps({
        "plan": plan, "name": spec.name, "fingerprint": spec.fingerprint(),
        "delay": readable_duration(getattr(spec.policy, "delay", 0)),
        "source_delay": readable_duration(spec.source_delay),
        "idle_after": readable_duration(spec.idle_after),
        "on_late": getattr(spec.policy, "on_late", None)}, indent=1) + "\n"


@dataclass(frozen=True)
class StoredStage:
    """A stage's state found under ``state_dir``: its query, its plan (``python`` or
    ``jvm``) and its fingerprint (``StageSpec.fingerprint``)."""

    query: str
    plan: str
    fingerprint: str


def stored_stages(state_dir: str, name: str) -> list[StoredStage]:
    """The states of the stage ``name`` under ``state_dir`` that say their options, one per
    query (driver, when the plan is built; the state of an older version says none)."""
    from pyarrow import fs

    fs_, root = filesystem(state_dir)
    root = root.rstrip("/")
    try:
        infos = fs_.get_file_info(fs.FileSelector(root, allow_not_found=True))
    except (OSError, ValueError):
        return []
    found = []
    for info in infos:
        if info.type != fs.FileType.Directory or not _QUERY.fullmatch(info.base_name):
            continue
        for folder in (f"{info.path}/{name}", f"{info.path}/{name}/{_JVM}"):
            try:
                with fs_.open_input_stream(f"{folder}/{OPTIONS}") as f:
                    record = json.loads(f.read())
            except (FileNotFoundError, OSError, ValueError):
                continue
            found.append(StoredStage(info.base_name, str(record.get("plan")),
                                     str(record.get("fingerprint"))))
    return found


def read_stage_state(state_dir: str, query_id: str, name: str = "goldilocks",
                     policy: Any = None) -> dict:
    """The stage's newest snapshot for a query, as plain values (for inspection; driver).

    ``{"batch": last micro-batch folded, "published": CTI published (ns), "groups": {group:
    CTI}, "sources": {(group, source): (largest start, last CTI)}, "ahead": {group: sorted
    sources}}``; empty if none yet. ``ahead`` when ``policy`` (the stage's policy object) is a
    robust rule (``quantile_policy``, ``goldilocks(max_ahead=…)``, TS §2.5, §2.6): the
    sources of each group whose clock the rule holds back now (the union's ``stats()``
    flag), for the groups that have any. Partials of the micro-batch after it are not
    folded in.
    """
    fs_, root = filesystem(state_dir)
    directory = f"{root.rstrip('/')}/{query_id}/{name}"
    if _is_dir(fs_, f"{directory}/{_JVM}"):  # the JVM plan's state: one clock, sources by text
        jvm_dir = f"{directory}/{_JVM}"

        def read(n: str) -> bytes:
            with fs_.open_input_stream(f"{jvm_dir}/{n}") as f:
                return f.read()

        return read_jvm_state(_names(fs_, jvm_dir), read)
    if not _is_dir(fs_, directory):
        from pyarrow import fs

        listed = fs_.get_file_info(fs.FileSelector(root.rstrip("/"), allow_not_found=True))
        queries = sorted(i.base_name for i in listed if _is_dir(fs_, f"{i.path}/{name}"))
        raise InputError(f"read_stage_state: no state of the stage {name!r} for query "
                         f"{query_id!r} in {state_dir}; it holds "
                         + (f"the queries {', '.join(queries)}" if queries else "none")
                         + " (a query's id: query.id, or its checkpoint's metadata file)")
    snaps = sorted(int(m.group(1)) for n in _names(fs_, directory) if (m := _SNAP.fullmatch(n)))
    if not snaps:
        return {}
    with fs_.open_input_stream(f"{directory}/snap-{snaps[-1]:012d}.pkl") as f:
        state: StageState = pickle.loads(f.read())
    found = {"batch": state.batch, "published": state.published,
             "groups": {g: getattr(v, "high", v) for g, v in state.groups.items()},
             "sources": dict(state.sources)}
    flag = getattr(policy, "ahead", None)
    if flag is not None:
        found["ahead"] = {g: sorted(names) for g, clock in state.groups.items()
                          if (names := flag(getattr(clock, "state", None) or policy.initial()))}
    return found
