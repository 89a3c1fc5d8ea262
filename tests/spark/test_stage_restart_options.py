"""Restarts of a stage that changed, or that lost its state, and clocks that go quiet — on a
real local session, each query stopped and started again from its checkpoint.

- A restart may change the delays (as native ``withWatermark`` allows): the query goes on,
  its CTIs (Spark's watermark, the ``cti`` metric) never go back, and every reading comes
  out once, as data or late. An option that would give the state another meaning
  (``policy``, ``group_col``…) is refused when the plan is built, named in the user's terms.
- A ``state_dir`` deleted while the checkpoint was kept is refused by both plans; a query
  whose first micro-batch gives the stage no row is not mistaken for one.
- ``idle_after``: a device (``policy="min"``) or a clock group that stops no longer holds
  the watermark; the windows close, and a restart decides as an uninterrupted run does.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from engine.errors import InputError
from spark_support import random_readings, write_readings
from test_stage import TIMEOUT, readings_stream

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "device_id string, ts timestamp, temperature double, id bigint"


def _ms(mark: str) -> int:
    return int(datetime.fromisoformat(mark.replace("Z", "+00:00")).timestamp() * 1000)


def _start(frame, work: Path, mode: str = "append"):
    """A query writing Parquet files (exactly once across restarts) from its checkpoint."""
    query = (frame.writeStream.format("parquet").outputMode(mode)
             .option("checkpointLocation", str(work / "ck"))
             .trigger(availableNow=True).start(str(work / "out")))
    assert query.awaitTermination(TIMEOUT)
    return query


def _ids(spark, path: Path) -> list[int]:
    if not path.exists():
        return []
    return [r["id"] for r in spark.read.parquet(str(path)).select("id").collect()]


@pytest.mark.parametrize("jvm", [True, False], ids=["jvm", "python"])
def test_a_restart_may_change_the_delay_and_nothing_else_that_the_state_means(spark, tmp_path,
                                                                              jvm):
    from spark_adapter import watermark_stage

    batches = random_readings(seed=41, batches=6, per_batch=16, devices="ABCD")
    write_readings(tmp_path / "in", batches[:3])

    def staged(**options):
        stream = readings_stream(spark, tmp_path / "in", SCHEMA)
        settings = dict(delay="5 seconds", time_col="ts", source_col="device_id",
                        state_dir=str(tmp_path / "state"), jvm=jvm)
        return watermark_stage(stream, **{**settings, **options})

    first = _start(staged(), tmp_path)
    write_readings(tmp_path / "in", batches[3:], first=3)
    # what the state means may not change: refused when the plan is built, in user terms
    with pytest.raises(InputError, match=r"policy: 'goldilocks' → 'min'"):
        staged(policy="min")
    with pytest.raises(InputError, match=r"group_col: None → \('device_id',\)"):
        staged(group_col="device_id")
    # the delay may: the query goes on from its checkpoint and its state
    second = _start(staged(delay="10 seconds"), tmp_path)
    progress = list(first.recentProgress) + list(second.recentProgress)
    assert sum(p["numInputRows"] for p in second.recentProgress) == 16 * 3
    marks = [_ms(mark) for p in progress if (mark := p["eventTime"].get("watermark"))]
    assert marks == sorted(marks) and marks[-1] > marks[len(first.recentProgress) - 1]
    ctis = [m["cti"] for p in progress
            if (m := p.get("observedMetrics", {}).get("goldilocks")) and m["cti"] is not None]
    assert ctis == sorted(ctis) and all(isinstance(c, int) for c in ctis)  # epoch ms
    data = _ids(spark, tmp_path / "out")
    late = _ids(spark, tmp_path / "state" / "late")
    everyone = [r.id for b in batches for r in b]
    assert sorted(data + late) == sorted(everyone)  # each reading once: data or late
    assert late  # some readings are late, so the sum can fail

    # the state deleted, the checkpoint kept: refused by both plans (Spark would drop the
    # rows behind its watermark without a word)
    shutil.rmtree(tmp_path / "state")
    write_readings(tmp_path / "in", [batches[0]], first=6)
    third = (staged(delay="10 seconds").writeStream.format("parquet")
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start(str(tmp_path / "out")))
    with pytest.raises(Exception, match="no state for this query"):
        third.awaitTermination(TIMEOUT)


def test_a_first_micro_batch_without_rows_starts_the_state(spark, tmp_path):
    """The user's filter leaves the stage no row in micro-batch 0 (a rate or Kafka source's
    empty first micro-batch alike): the JVM plan's tasks still start the query's state, so
    the next micro-batch goes on — and a deleted state is still told apart."""
    from pyspark.sql import functions as F

    from spark_adapter import watermark_stage

    batches = random_readings(seed=43, batches=2, per_batch=8)
    write_readings(tmp_path / "in", batches[:1])
    first_file = tmp_path / "in" / "readings-0000.json"
    first_file.write_text(first_file.read_text().replace('"temperature": ', '"temperature": -1'))
    os.utime(first_file, (1_700_000_000, 1_700_000_000))  # the file source goes by mtime

    def run():
        stream = readings_stream(spark, tmp_path / "in", SCHEMA).where(F.col("temperature") > 0)
        staged = watermark_stage(stream, delay="5 seconds", time_col="ts",
                                 source_col="device_id", state_dir=str(tmp_path / "state"),
                                 jvm=True)
        query = _start(staged, tmp_path)
        assert query.exception() is None
        return query

    first = run()
    assert [p["batchId"] for p in first.recentProgress] == [0]  # (its rows, filtered in
    # the JSON reader, do not count as input)
    assert list((tmp_path / "state").glob("*/goldilocks/jvm/begun"))  # begun, without a row
    write_readings(tmp_path / "in", batches[1:], first=1)
    second = run()
    assert sum(p["numInputRows"] for p in second.recentProgress) == 8
    assert len(_ids(spark, tmp_path / "out")) == 8 - len(_ids(spark, tmp_path / "state" / "late"))


def _quiet_readings(groups: bool) -> list[list]:
    """Readings every second: A always; B (or, with ``groups``, site south) stops after
    micro-batch 1."""
    from stage_reference import Row

    t0 = 1_767_225_600 * 10**9
    batches, next_id = [], 0
    for k in range(6):
        rows = []
        for i in range(10):
            t = t0 + (10 * k + i) * 10**9 + 123_000_000
            for device in ("A", "B") if k < 2 else ("A",):
                site = ("north",) if device == "A" else ("south",)
                rows.append(Row(next_id, device, t + (0 if device == "A" else 317_000_000),
                                group=site if groups else ()))
                next_id += 1
        batches.append(rows)
    return batches


@pytest.mark.parametrize("groups", [False, True], ids=["min_devices", "quiet_site"])
def test_an_idle_rule_closes_the_windows_of_a_clock_that_stops(spark, tmp_path, groups):
    """``policy="min"`` (one device that stops), or goldilocks per site (``group_col``, one
    site that stops): without ``idle_after`` the watermark stays where the quiet clock left
    it and only the first windows close; with it, the windows close as the others go on —
    and run in two parts, restarted from the checkpoint, the same windows come out."""
    from pyspark.sql import functions as F

    from spark_adapter import watermark_stage

    batches = _quiet_readings(groups)
    schema = SCHEMA + (", site string" if groups else "")

    def windows(directory: Path, work: Path, **options):
        stream = readings_stream(spark, directory, schema)
        policy = dict(group_col="site", delay="2 seconds") if groups else dict(policy="min")
        staged = watermark_stage(stream, time_col="ts", source_col="device_id",
                                 state_dir=str(work / "state"), **policy, **options)
        counted = staged.groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("n"))
        return counted.select(F.unix_seconds(F.col("window.start")).alias("start"), "n")

    def result(work: Path) -> list[tuple]:
        return sorted(tuple(r) for r in spark.read.parquet(str(work / "out")).collect())

    write_readings(tmp_path / "all", batches)
    _start(windows(tmp_path / "all", tmp_path / "stuck"), tmp_path / "stuck")
    _start(windows(tmp_path / "all", tmp_path / "idle", idle_after="15 seconds"),
           tmp_path / "idle")
    stuck, idle = result(tmp_path / "stuck"), result(tmp_path / "idle")
    t0 = 1_767_225_600
    assert [s - t0 for s, _ in stuck] == [0]  # held where B (the south) stopped
    assert [s - t0 for s, _ in idle] == [0, 10, 20, 30, 40]  # the last one is still open
    assert idle[:2] == [(t0, 20), (t0 + 10, 20)] and all(n == 10 for _, n in idle[2:])
    if groups:
        return  # a group's idleness is judged from the state at each micro-batch's start
    write_readings(tmp_path / "parts", batches[:3])  # a device's from its rows: a restart
    _start(windows(tmp_path / "parts", tmp_path / "parts", idle_after="15 seconds"),
           tmp_path / "parts")
    write_readings(tmp_path / "parts", batches[3:], first=3)
    _start(windows(tmp_path / "parts", tmp_path / "parts", idle_after="15 seconds"),
           tmp_path / "parts")
    assert result(tmp_path / "parts") == idle
