"""Exactly once across crashes: a real driver process, killed (SIGKILL, its whole process group:
the JVM and the Python workers with it) at random points, restarted from its checkpoint
until its input is done.

The driver streams a user's readings (one file per micro-batch) through the stage, in
parallel tasks, into a ``foreachBatch`` sink that overwrites ``out/batch=<id>`` — a sink that
really runs a batch again after a crash (a file sink would skip it). It announces each batch
as it starts writing and once written (before Spark commits it); the test kills it right
after a randomly chosen announcement, so the kills land inside the stage's tasks, between
writing and committing, and between batches. In the end the data rows and the late rows equal
the engine's, micro-batch by micro-batch, with none lost and none twice.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.times import Nanoseconds
from operators import goldilocks
from spark_support import random_readings, write_readings
from stage_reference import engine_stage

pytestmark = [pytest.mark.spark, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from waiting import wait_until  # noqa: E402

_DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pyspark.sql import SparkSession
    from spark_adapter import stage_jar, watermark_stage

    work, jvm = Path(sys.argv[1]), sys.argv[2] == "jvm"
    builder = SparkSession.builder.config("spark.jars", stage_jar()) if jvm else SparkSession.builder
    spark = (builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    stream = (spark.readStream.schema("device_id string, ts timestamp, temperature double, "
                                      "id bigint")
              .option("maxFilesPerTrigger", 1).json(str(work / "in")))
    staged = watermark_stage(stream, delay="5 seconds", time_col="ts", source_col="device_id",
                             state_dir=str(work / "state"), late_path=str(work / "late"),
                             jvm=jvm)

    def announce(text):
        with open(work / "progress", "a") as f:
            f.write(text + "\\n")

    def write(batch, batch_id):
        announce(f"start {batch_id}")
        batch.write.mode("overwrite").parquet(str(work / "out" / f"batch={batch_id}"))
        announce(f"written {batch_id}")

    query = (staged.writeStream.foreachBatch(write)
             .option("checkpointLocation", str(work / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    announce("done")
""")

BATCHES = 8
KILLS = 3
TIMEOUT = 240


def _progress(work: Path) -> list[str]:
    path = work / "progress"
    return path.read_text().splitlines() if path.exists() else []


def _start(work: Path, plan: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _DRIVER, str(work), plan], cwd=work,
                            stdout=subprocess.DEVNULL, stderr=open(work / "stderr", "ab"),
                            start_new_session=True)  # its own process group, to kill whole


@pytest.mark.parametrize("plan", ["python", "jvm"])
def test_a_killed_driver_restarts_and_loses_and_repeats_nothing(spark, tmp_path, plan):
    rng = random.Random(20261123 if plan == "python" else 20261124)
    batches = random_readings(seed=9, batches=BATCHES, per_batch=10, late_share=0.25)
    write_readings(tmp_path / "in", batches)
    announcements = [f"{phase} {k}" for k in range(BATCHES) for phase in ("start", "written")]
    points = sorted(rng.sample(range(len(announcements) - 1), KILLS))
    killed_at = []
    for point in points:
        seen = len(_progress(tmp_path))
        driver = _start(tmp_path, plan)
        try:
            # a run goes on from where the last one stopped: kill it at the chosen
            # announcement, or at its first one if it starts past that point
            wait_until(lambda: driver.poll() is not None or any(
                announcements.index(line) >= point for line in _progress(tmp_path)[seen:]
                if line in announcements), TIMEOUT, "the driver announced nothing")
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(TIMEOUT)
        killed_at.append(_progress(tmp_path)[-1])
    driver = _start(tmp_path, plan)
    assert driver.wait(TIMEOUT) == 0, (tmp_path / "stderr").read_text()[-3000:]
    assert _progress(tmp_path)[-1] == "done"
    reran = [line for line in _progress(tmp_path) if line.startswith("start")]
    assert len(reran) > BATCHES, f"no batch ran twice; killed after {killed_at}"

    run = engine_stage(batches, policy=goldilocks(0),  # the default: delay is each device's
                       advance={"every_events": 1, "delay": Nanoseconds(5 * 10**9)})
    out = spark.read.parquet(str(tmp_path / "out")).select("id", "batch").collect()
    ids = [r["id"] for r in out]
    assert len(ids) == len(set(ids)), "a data row was written twice"
    late = spark.read.parquet(str(tmp_path / "late")).select("id", "late_action", "batch")
    late_rows = late.collect()
    late_ids = [r["id"] for r in late_rows]
    assert len(late_ids) == len(set(late_ids)), "a late row was written twice"
    batch_of = {r.id: k for k, rows in enumerate(batches) for r in rows}
    assert {r["id"]: r["batch"] for r in out} == {
        i: batch_of[i] for i, o in run.outcomes.items() if o.action is None}
    assert {r["id"]: (r["late_action"], r["batch"]) for r in late_rows} == {
        i: (o.action, batch_of[i]) for i, o in run.outcomes.items() if o.action}
    assert late_ids, "some readings are late, so the comparison can fail"
    state = tmp_path / "state"
    files = [p.name for p in state.rglob("*") if p.is_file()]
    if plan == "jvm":
        assert any(p.name == "jvm" for p in state.rglob("jvm")), "the JVM plan ran"
        assert len(files) <= 1 + 3 + 2, files  # begun, cums kept, one batch's parts
    else:
        assert len(files) <= 1 + 3 + 2, files  # begun, snapshots kept, one batch's partials
    print(json.dumps({"killed after": killed_at, "batches run": len(reran)}))
