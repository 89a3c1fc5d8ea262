"""A Spark user's first try: a bare local session, no ``PYSPARK_PYTHON``, read and replay a log.

It runs in a fresh process (the test session's Spark is shared and was set up with
``PYSPARK_PYTHON``), started without ``PYSPARK_PYTHON`` or ``PYTHONPATH`` and in an empty
directory, so the workers PySpark starts find Goldilocks only if we make them run the
driver's interpreter. Its console is the user's console: Spark logs at its default level
(WARN) there, and replay must not flood it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spark_support import engine_replay_bytes

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FLEET = Path(__file__).resolve().parents[2] / "examples" / "data" / "fleet.jsonl"

_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from pyspark.sql import SparkSession
    from engine.errors import InputError
    from spark_adapter import WorkerPythonError, read_event_log, replay, watermark_stage

    log_path, other_python = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.master("local[1]").getOrCreate()
    events, late = replay(read_event_log(spark, log_path), delay="5m")
    print(json.dumps({"events": events.count(), "late": late.count(),
                      "python": spark.sparkContext.pythonExec}))
    # The stage without the stage's jar: a Python plan, or jvm=True saying what to do
    Path("readings").mkdir()
    Path("readings/a.json").write_text('{"device_id": "A", "ts": "2026-01-01T00:00:00Z"}\\n')
    stream = spark.readStream.schema("device_id string, ts timestamp").json("readings")
    options = dict(delay="5 seconds", time_col="ts", source_col="device_id",
                   state_dir="state")
    query = (watermark_stage(stream, **options).writeStream.format("memory")
             .queryName("bare").trigger(availableNow=True).start())
    query.awaitTermination()
    try:  # a new query (its own state_dir): the stage says why not the JVM plan
        watermark_stage(stream, jvm=True, **{**options, "state_dir": "state-jvm"})
    except InputError as err:
        print(json.dumps({"stage": spark.table("bare").count(), "jvm": str(err)}))
    # The user chooses an interpreter that lacks Goldilocks: our error, saying what to do
    spark.sparkContext.pythonExec = other_python
    try:
        read_event_log(spark, log_path)
    except WorkerPythonError as err:
        print(json.dumps({"error": str(err)}))
    spark.stop()
""")


def test_a_bare_local_session_reads_and_replays_without_pyspark_python(tmp_path):
    # An interpreter without Goldilocks: this one, without its site-packages (-S); Spark
    # still gives it pyspark through PYTHONPATH, as it does to any worker.
    other = tmp_path / "python-without-goldilocks"
    other.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    other.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(FLEET), str(other)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result, stage, refused = [json.loads(line) for line in done.stdout.splitlines()
                              if line.startswith("{")]

    out, late = engine_replay_bytes([FLEET], tmp_path, delay="5m")
    assert (result["events"], result["late"]) == (out.count(b"\n"), late.count(b"\n"))
    assert result["python"] == sys.executable  # a local session: the driver's interpreter

    assert stage["stage"] == 1  # the reading, through a Python plan
    assert "started without the stage's jar" in stage["jvm"]
    assert "spark.jars', spark_adapter.stage_jar()" in stage["jvm"]

    message = refused["error"]
    assert str(other) in message and "cannot import 'spark_adapter'" in message
    assert f"PYSPARK_PYTHON={sys.executable}" in message

    assert "WindowExec" not in done.stderr, [line for line in done.stderr.splitlines()
                                             if "WindowExec" in line][:3]


_JAR_SCRIPT = textwrap.dedent("""
    import json, logging, sys
    from pathlib import Path
    from pyspark.sql import SparkSession
    from engine.errors import InputError
    from spark_adapter import stage_jar, watermark_stage

    Path("readings").mkdir()
    Path("readings/a.json").write_text('{"device_id": "A", "ts": "2026-01-01T00:00:00Z"}\\n')
    options = dict(delay="5 seconds", time_col="ts", source_col="device_id", state_dir="state")
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append((record.levelname, record.getMessage()))
    logging.getLogger("goldilocks.spark").addHandler(handler)
    logging.getLogger("goldilocks.spark").setLevel(logging.INFO)

    def stream(spark):
        return spark.readStream.schema("device_id string, ts timestamp").json("readings")

    def refusal(spark):
        try:
            watermark_stage(stream(spark), jvm=True, **options)
        except InputError as err:
            return str(err)

    # spark.jars names a jar that is not there: Spark starts without it
    spark = (SparkSession.builder.master("local[1]")
             .config("spark.jars", "/nowhere/goldilocks-spark.jar").getOrCreate())
    out = {"missing": refusal(spark)}
    for _ in range(3):  # a Python plan, said once at WARN
        watermark_stage(stream(spark), **options)
    out["said"] = [level for level, message in said if "runs in Python" in message]
    spark.stop()
    # the jar named after the session started: getOrCreate gives the running one
    spark = SparkSession.builder.master("local[1]").getOrCreate()
    spark = SparkSession.builder.config("spark.jars", stage_jar()).getOrCreate()
    out["running"] = refusal(spark)
    print(json.dumps(out))
    spark.stop()
""")

_JVM_SCRIPT = textwrap.dedent("""
    import json
    from pathlib import Path
    from pyspark.sql import SparkSession
    from spark_adapter import stage_jar, watermark_stage

    Path("readings").mkdir()
    Path("readings/a.json").write_text('{"device_id": "A", "ts": "2026-01-01T00:00:00Z"}\\n')
    spark = (SparkSession.builder.master("local[1]").config("spark.jars", stage_jar())
             .getOrCreate())
    before = spark.sparkContext.pythonExec
    stream = spark.readStream.schema("device_id string, ts timestamp").json("readings")
    staged = watermark_stage(stream, delay="5 seconds", time_col="ts", source_col="device_id",
                             state_dir="state", jvm=True)
    # the user's own Python function after the JVM plan: the workers import this Python's pandas
    def mine(frames):
        import pandas
        for frame in frames:
            yield frame.assign(n=len(frame))
    query = (staged.mapInPandas(mine, "device_id string, ts timestamp, cti timestamp, n long")
             .writeStream.format("memory").queryName("mine").trigger(availableNow=True).start())
    query.awaitTermination()
    print(json.dumps({"before": before, "after": spark.sparkContext.pythonExec,
                      "rows": spark.table("mine").count()}))
    spark.stop()
""")


def _bare(script: str, tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(line)


def test_why_not_the_jvm_plan_is_said_once_and_fits_the_case(tmp_path):
    """The jar named but missing, or named after the session started: ``jvm=True`` says which
    (and what to do); ``jvm=None`` runs a Python plan and says so once, at WARN."""
    out = _bare(_JAR_SCRIPT, tmp_path)
    assert "spark.jars names /nowhere/goldilocks-spark.jar, which does not exist" in \
        out["missing"]
    assert out["said"] == ["WARNING", "INFO", "INFO"]
    assert "keeps the class path it started with" in out["running"]
    assert "spark.stop()" in out["running"]


def test_the_jvm_plan_runs_the_workers_on_the_drivers_python_as_the_others_do(tmp_path):
    """One rule whatever the plan: in a bare local session the stage (its JVM plan here)
    makes the Python workers run the driver's interpreter, so the user's own Python function
    after it imports what the driver imports."""
    out = _bare(_JVM_SCRIPT, tmp_path)
    assert out["before"] == "python3"
    assert out["after"] == sys.executable
    assert out["rows"] == 1
