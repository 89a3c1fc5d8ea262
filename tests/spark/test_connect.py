"""Goldilocks on a Spark Connect session: the results of the classic session, with no JVM handle.

``connect`` is a Connect client of the server that runs in the shared session's JVM
(``conftest.py``); each test runs the same pipeline on both kinds of session and compares,
or compares with the engine where the classic tests already do.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from engine.errors import InputError
from goldilocks.windowed import replay_windows, window_row
from spark_support import (READINGS_SCHEMA, canonical_events, canonical_late, classic_mode,
                           engine_replay_bytes, random_readings, write_readings)

pytestmark = pytest.mark.spark

TIMEOUT = 300
DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
ORDER = ["order_key", "file_index", "line"]
_ROOT = "spark.sql.streaming.checkpointLocation"


class _Said(logging.Handler):
    """What the adapter's logger said, as ``(level, message)``."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.said: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append((record.levelname, record.getMessage()))


@pytest.fixture
def said():
    logger = logging.getLogger("goldilocks.spark")
    handler, level = _Said(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler.said
    logger.removeHandler(handler)
    logger.setLevel(level)


def _readings(session, directory):
    return (session.readStream.schema(READINGS_SCHEMA).option("maxFilesPerTrigger", 1)
            .json(str(directory)))


def _window_counts(session, readings, out, checkpoint, name=None):
    """A user's pipeline: the stage with no ``state_dir``, a filter, a one-minute window
    count in append mode to a Parquet sink, over what the folder holds (availableNow).
    Returns ``[(Spark's watermark, the stage's metrics)]`` of the micro-batches with data."""
    from pyspark.sql import functions as F

    from spark_adapter import stage_metrics, watermark_stage

    staged = watermark_stage(_readings(session, readings), delay="20 seconds", time_col="ts",
                             source_col="device_id")
    counts = (staged.where(F.col("temperature") > 21)
              .groupBy(F.window("ts", "1 minute")).count())
    writer = (counts.writeStream.format("parquet").option("path", str(out))
              .outputMode("append").trigger(availableNow=True))
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    if name is not None:  # under the checkpoint root: <root>/<name>
        writer = writer.queryName(name)
    query = writer.start()
    assert query.awaitTermination(TIMEOUT), f"the query did not finish in {TIMEOUT} s"
    assert query.exception() is None
    return [(p["eventTime"].get("watermark"), stage_metrics(p))
            for p in query.recentProgress if p.numInputRows > 0]  # Connect: not p[...]


def _results(session, out, late):
    windows = sorted((r["window"]["start"], r["window"]["end"], r["count"])
                     for r in session.read.parquet(str(out)).collect())
    rows = sorted((r["id"], r["late_action"], r["cti"], r["late_reason"])
                  for r in session.read.parquet(str(late)).collect())
    return windows, rows


def test_a_users_readings_give_classics_rows_late_rows_and_windows_and_resume(
        spark, connect, tmp_path):
    """Readings through ``watermark_stage`` with no ``state_dir`` (so under the session's
    checkpoint root), a filter, one-minute windows counted in append mode into Parquet: on
    Spark Connect, with the query stopped halfway and started again from its checkpoint, the
    same windows, late rows and per-micro-batch metrics as one run on the classic session —
    no row counted twice, none lost, the clock resumed where it stood."""
    batches = random_readings(seed=11, batches=8, step_s=40, late_share=0.25)
    write_readings(tmp_path / "all", batches)
    with classic_mode():
        before = spark.conf.get(_ROOT, None)
        spark.conf.set(_ROOT, str(tmp_path / "classic-root"))
        try:
            want_marks = _window_counts(spark, tmp_path / "all", tmp_path / "classic-out",
                                        tmp_path / "classic-ck")
            want = _results(spark, tmp_path / "classic-out",
                            tmp_path / "classic-root" / "goldilocks-stage" / "late")
        finally:
            if before is None:
                spark.conf.unset(_ROOT)
            else:
                spark.conf.set(_ROOT, before)
    windows, late = want
    assert len(windows) >= 4 and late, "windows closed and late rows, so the test can fail"
    assert sum(c for *_, c in windows) < sum(map(len, batches)) - len(late)  # the filter

    root = tmp_path / "connect-root"
    connect.conf.set(_ROOT, str(root))
    try:
        write_readings(tmp_path / "in", batches[:4])
        # a named query checkpoints in <root>/<name>; its stage keeps its clock in
        # <root>/goldilocks-stage/<query id>
        first = _window_counts(connect, tmp_path / "in", tmp_path / "out", None, "readings")
        write_readings(tmp_path / "in", batches[4:], first=4)
        second = _window_counts(connect, tmp_path / "in", tmp_path / "out", None, "readings")
    finally:
        connect.conf.unset(_ROOT)
    assert (root / "readings").is_dir() and (root / "goldilocks-stage").is_dir()
    assert _results(connect, tmp_path / "out", root / "goldilocks-stage" / "late") == want
    # per micro-batch: the same Spark watermark and stage metrics (the resumed clock, too)
    assert first + second == want_marks
    late_ids = {x[0] for x in late}
    assert [m["late"] for _, m in want_marks] == [
        sum(1 for r in rows if r.id in late_ids) for rows in batches]


def test_no_checkpoint_root_means_a_temporary_clock_said_at_warn(connect, tmp_path, said):
    """No ``state_dir`` and no checkpoint root: the clock lives in a temporary directory,
    and the log says so (a restart starts a fresh clock); ``read_stage_state`` reads it."""
    from spark_adapter import read_stage_state, watermark_stage

    write_readings(tmp_path / "in", random_readings(seed=2, batches=3))
    assert connect.conf.get(_ROOT, None) is None
    staged = watermark_stage(_readings(connect, tmp_path / "in"), delay="5 seconds",
                             time_col="ts", source_col="device_id")
    (message,) = [m for level, m in said if level == "WARNING" and "temporary" in m]
    assert "a restarted query starts a fresh clock" in message
    state_dir = message.split("temporary directory, ")[1].split(":")[0]
    query = (staged.writeStream.format("memory").queryName("temporary_clock")
             .trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT) and query.exception() is None
    state = read_stage_state(state_dir, query.id)  # folded up to the micro-batch before last
    assert state["published"] is not None
    assert set(name for _, name in state["sources"]) == {"A", "B", "C"}


@pytest.mark.parametrize("files", ["fleet", "devices"])
def test_bundled_logs_replay_and_window_as_the_engine(connect, tmp_path, files):
    """``read_event_log`` + ``replay`` + ``windows`` of the bundled logs on Spark Connect: the
    engine's output, late file and window rows byte for byte (the classic session's are the
    same: test_event_log.py, test_windows.py)."""
    from spark_adapter import read_event_log, replay, windows, write_replay

    paths = ([str(DATA / "fleet.jsonl")] if files == "fleet"
             else [str(p) for p in sorted((DATA / "devices").glob("*.jsonl"))])
    events, late = replay(read_event_log(connect, paths), delay="30s")
    want_out, want_late = engine_replay_bytes(paths, tmp_path, delay="30s")
    assert canonical_events(events.orderBy(*ORDER).collect()) == want_out
    assert canonical_late(late.orderBy(*ORDER).collect()) == want_late

    aggs = ["count", "mean:celsius", "max:celsius"]
    want = io.BytesIO()
    replay_windows(paths, window="1m", aggregates=aggs, key="source", delay="30s", out=want)
    got = windows(events, window="1m", aggregates=aggs, key="source").orderBy("end", "key")
    labels = [a.replace(":", "_") for a in aggs]
    assert b"".join(window_row(r["start"], r["end"], r["key"], r["count"],
                               [(label, r[label]) for label in labels], True, False)
                    for r in got.collect()) == want.getvalue()

    write_replay(read_event_log(connect, paths), str(tmp_path / "ev"), str(tmp_path / "late"),
                 delay="30s")
    written = connect.read.parquet(str(tmp_path / "ev")).orderBy(*ORDER).collect()
    assert canonical_events(written) == want_out


def _refusals(session, tmp_path):
    """The messages ``watermark_stage`` refuses bad input with, built on ``session``."""
    from pyspark.sql import functions as F

    from spark_adapter import watermark_stage

    frame = session.createDataFrame([("A", "2026-01-01T00:00:00Z", "reading", 20.0)],
                                    "device_id string, ts string, kind string, temperature double")
    stream = _readings(session, tmp_path)
    out = []
    for df, options in [
            (frame, {"time_col": "ts"}),  # a string time column
            (frame.withColumn("ts", F.to_timestamp("ts")),  # an unknown kind
             {"time_col": "ts", "kind_col": "kind", "kinds": {"reading": "Insert"}}),
            (frame.withColumn("ts", F.to_timestamp("ts")).withColumn("cti", F.lit(1)),
             {"time_col": "ts"}),  # a name clash with an added column
            (stream.withWatermark("ts", "5 seconds"), {"time_col": "ts"})]:
        with pytest.raises(InputError) as caught:
            watermark_stage(df, source_col="device_id", keep_late=True, **options)
        out.append(str(caught.value))
    return out


def test_bad_input_gets_classics_errors_when_the_plan_is_built(spark, connect, tmp_path):
    """A string time column, an unknown kind, a name clash, a watermark already there: the
    same ``InputError`` on Spark Connect as on the classic session, before any query runs."""
    with classic_mode():
        want = _refusals(spark, tmp_path)
    got = _refusals(connect, tmp_path)
    assert got == want
    assert "time_col 'ts' is a string; parse it, e.g. F.to_timestamp('ts')" in got[0]
    assert "kinds['reading']='Insert'" in got[1]
    assert "already has a column 'cti'" in got[2]
    assert "already has a watermark" in got[3]


def test_one_plan_chooser_says_why_python_on_connect(connect, tmp_path, said):
    """The JVM plan needs a JVM handle the Connect client does not have: ``jvm=None`` runs
    a Python plan and says why once at WARN; ``jvm=True`` is an ``InputError`` saying why."""
    from spark_adapter import watermark_stage
    from spark_adapter.session import default_parallelism, is_connect

    assert is_connect(connect)
    assert default_parallelism(connect) == 2  # local[2], without sparkContext
    stream = _readings(connect, tmp_path)
    options = dict(delay="5 seconds", time_col="ts", source_col="device_id",
                   state_dir=str(tmp_path / "state"))
    for _ in range(2):
        watermark_stage(stream, **options)
    why = [(level, m) for level, m in said if "runs in Python" in m]
    assert [level for level, _ in why][-2:] in (["WARNING", "INFO"], ["INFO", "INFO"])
    assert "a Spark Connect session" in why[-1][1]
    with pytest.raises(InputError, match="jvm=True, but the JVM plan cannot run this stage: "
                                         "a Spark Connect session"):
        watermark_stage(stream, jvm=True, **options)


def test_the_package_reaches_a_connect_servers_workers_as_documented(connect_url, connect,
                                                                    tmp_path):
    """The workers run an interpreter with Goldilocks' dependencies but not Goldilocks; after
    ``spark.addArtifacts(package_zip(), pyfile=True)`` (docs/spark.md) they import it from
    the zip, and a read and replay give the engine's counts. A worker's failed import is
    said with the Connect ways out."""
    import sys
    import sysconfig

    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from spark_adapter import package_zip, read_event_log, replay
    from spark_adapter.session import worker_python_error

    empty = tmp_path / "cwd"
    empty.mkdir()
    other = tmp_path / "python-with-the-dependencies-only"
    # -S: no site-packages, so no installed Goldilocks; its dependencies through PYTHONPATH;
    # an empty working directory, so no source tree either
    other.write_text(f'#!/bin/sh\ncd "{empty}"\nPYTHONPATH="$PYTHONPATH:'
                     f'{sysconfig.get_paths()["purelib"]}" exec "{sys.executable}" -S "$@"\n')
    other.chmod(0o755)

    def where(batches):  # nested: pickled by value, not imported from this module
        import pyarrow as pa

        try:
            import spark_adapter
            found = spark_adapter.__file__
        except ModuleNotFoundError as err:
            found = f"ModuleNotFoundError: {err}"
        for _ in batches:
            yield pa.RecordBatch.from_pydict({"found": [found]})

    def probe(session):
        return session.range(1).mapInArrow(where, "found string").first()["found"]

    session = ConnectSession.builder.remote(connect_url).create()  # its own artifacts
    try:
        session.conf.set("spark.sql.execution.pyspark.python", str(other))
        missing = probe(session)
        assert missing == "ModuleNotFoundError: No module named 'spark_adapter'"
        said = str(worker_python_error(Exception(missing), session))
        assert "Connect server's Python workers cannot import 'spark_adapter'" in said
        assert "package_zip()" in said and "spark.sql.execution.pyspark.python" in said
        session.addArtifacts(package_zip(), pyfile=True)
        assert ".zip/spark_adapter/__init__.py" in probe(session)
        log = str(DATA / "fleet.jsonl")
        events, late = replay(read_event_log(session, log), delay="5m")
        want_out, want_late = engine_replay_bytes([log], tmp_path, delay="5m")
        assert (events.count(), late.count()) == (want_out.count(b"\n"),
                                                  want_late.count(b"\n"))
    finally:
        session.stop()


def _source_stage_windows(session, tmp_path, tag):
    """The ``"goldilocks"`` source over a rolling sink's parts (a part per micro-batch)
    through the stage with ``keep_late``, split; and a user's readings through the stage
    and ``window_stage``. Returns what each gave, sorted."""
    from engine.event import Event
    from engine.sources import from_iterable
    from eventlog import RollingFileSink
    from spark_adapter import EVENT_LOG_STAGE, split_late, watermark_stage, window_stage

    logs = tmp_path / "logs"
    if not logs.is_dir():
        s = 10**9
        events = []
        for t in range(0, 60, 5):  # B's clock 4 s behind A's, some of B's readings late
            events += [Event.point(t * s, {"v": t}, "A"), Event.point((t - 4) * s, {"v": t}, "B")]
            if t % 20 == 15:
                events.append(Event.point((t - 14) * s, {"v": -1}, "B"))
            events += [Event.cti(t * s, source="A"), Event.cti((t - 4) * s, source="B")]
        sink = RollingFileSink(logs, max_events=16)
        from_iterable(events).subscribe(sink)
        assert sink.error is None and len(sink.published) > 2
        write_readings(tmp_path / "readings", random_readings(seed=7, batches=6, step_s=40))
    work = tmp_path / tag
    stream = (session.readStream.format("goldilocks").option("maxFilesPerTrigger", 1)
              .load(str(logs)))
    staged = watermark_stage(stream, delay="30s", keep_late=True,
                             state_dir=str(work / "state"), **EVENT_LOG_STAGE)
    query = (staged.writeStream.format("memory").queryName(f"source_{tag}")
             .option("checkpointLocation", str(work / "ck1")).trigger(availableNow=True)
             .start())
    assert query.awaitTermination(TIMEOUT) and query.exception() is None
    events, late = split_late(session.table(f"source_{tag}"))
    key = ["order_key", "file_index", "line"]
    got = [[tuple(r) for r in frame.orderBy(*key).collect()] for frame in (events, late)]

    staged = watermark_stage(_readings(session, tmp_path / "readings"), delay="20 seconds",
                             time_col="ts", source_col="device_id",
                             state_dir=str(work / "state2"))
    windows = window_stage(staged, window="1 minute", aggregates=["count", "mean:temperature"],
                           key="device_id", time_col="ts")
    query = (windows.writeStream.format("memory").queryName(f"windows_{tag}")
             .option("checkpointLocation", str(work / "ck2")).trigger(availableNow=True)
             .start())
    assert query.awaitTermination(TIMEOUT) and query.exception() is None
    got.append(sorted(tuple(r) for r in session.table(f"windows_{tag}").collect()))
    return got


@pytest.mark.slow
def test_the_source_split_late_and_window_stage_give_classics_rows(spark, connect, tmp_path):
    """Our log format through the ``"goldilocks"`` streaming source and the stage
    (``keep_late``, ``split_late``), and ``window_stage`` after the stage on a user's
    readings: on Spark Connect the rows of the classic session."""
    with classic_mode():
        want = _source_stage_windows(spark, tmp_path, "classic")
    events, _late, windows = want
    assert events and len(windows) > 5, "something to compare"
    assert _source_stage_windows(connect, tmp_path, "connect") == want


@pytest.mark.slow
def test_formats_spans_quarantine_and_every_replay_strategy_give_the_engines_bytes(
        connect, tmp_path):
    """The device logs as JSON Lines (read in spans, one bad record quarantined), CSV and
    Parquet, on Spark Connect: every replay strategy gives the engine's output and late file
    byte for byte, and the quarantine file is the engine's."""
    import orjson

    from eventlog import write_log
    from goldilocks.replay import replay as engine_replay
    from spark_adapter import read_event_log, replay
    from spark_adapter.batch import STRATEGIES

    devices = sorted((DATA / "devices").glob("*.jsonl"))
    logs = tmp_path / "logs"
    logs.mkdir()
    paths = []
    for i, device in enumerate(devices):
        records = [orjson.loads(line) for line in device.read_bytes().splitlines() if line]
        path = logs / (device.stem + (".csv", ".parquet", ".jsonl", ".jsonl")[i % 4])
        write_log(path, records)
        paths.append(path)
    with open(paths[2], "ab") as f:  # a bad record, quarantined by both
        f.write(b'{"source": "x", "kind": "insert", "start": "yesterday"}\n')
    paths = [str(p) for p in paths]
    engine_q = tmp_path / "engine-quarantine.jsonl"
    engine_replay(paths, out=tmp_path / "engine-out.jsonl", late=tmp_path / "engine-late.jsonl",
                  delay="30s", bad_records="quarantine", quarantine=engine_q)
    want = ((tmp_path / "engine-out.jsonl").read_bytes(),
            (tmp_path / "engine-late.jsonl").read_bytes())
    frame = read_event_log(connect, paths, split_bytes=2048, bad_records="quarantine",
                           quarantine=tmp_path / "quarantine")
    for strategy in STRATEGIES:
        events, late = replay(frame, delay="30s", strategy=strategy)
        got = (canonical_events(events.orderBy(*ORDER).collect()),
               canonical_late(late.orderBy(*ORDER).collect()))
        assert got == want, strategy
    written = {p.read_bytes() for p in (tmp_path / "quarantine").iterdir()} - {b""}
    assert written == {engine_q.read_bytes()} and engine_q.read_bytes()
