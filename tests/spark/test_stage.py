"""The watermarking stage on a Spark user's own readings, with the real local session.

Readings ``{device_id, ts, temperature, id[, seq]}`` arrive as JSON Lines files, one per
micro-batch (``maxFilesPerTrigger=1``). What the stage keeps, the CTI on each row, and the
late rows it writes are compared with the engine fed the same rows (``stage_reference``):
in arrival order when the stream has an arrival column, else micro-batch by micro-batch in
event-time order — the semantics ``docs/spark.md`` documents.
"""

from __future__ import annotations

import pytest

from operators import goldilocks, max_policy, min_policy
from spark_support import READINGS_SCHEMA, random_readings, write_readings
from stage_reference import engine_stage

pytestmark = pytest.mark.spark

TIMEOUT = 300
_REASONS = {"source": "starts before its source's CTI", "merge": "starts before the merged CTI"}


def run_query(frame, name, checkpoint, mode="append"):
    query = (frame.writeStream.format("memory").queryName(name).outputMode(mode)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT), f"query {name} did not finish in {TIMEOUT} s"
    assert query.exception() is None
    return query


def readings_stream(spark, directory, schema=READINGS_SCHEMA):
    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
            .json(str(directory)))


def stage_rows(spark, table, late_path):
    """``({id: (start ns, cti ns)}, {id: (action, cti ns, reason)})`` of a stage's run."""
    from pyspark.sql import functions as F

    def ns(col):
        return (F.unix_micros(col) * 1000).alias(col)

    data = {r["id"]: (r["ts"], r["cti"])
            for r in spark.table(table).select("id", ns("ts"), ns("cti")).collect()}
    late = {}
    try:
        frame = spark.read.parquet(str(late_path))
    except Exception as err:  # no late file at all
        assert "PATH_NOT_FOUND" in str(err) or "UNABLE_TO_INFER_SCHEMA" in str(err)
    else:
        for r in frame.select("id", "late_action", ns("cti"), "late_reason").collect():
            assert r["id"] not in late, f"row {r['id']} written twice"
            late[r["id"]] = (r["late_action"], r["cti"], r["late_reason"])
    return data, late


def expected(run, batches):
    """The engine's answer in the stage's terms."""
    data, late = {}, {}
    for k, rows in enumerate(batches):
        for r in rows:
            o = run.outcomes[r.id]
            if o.action is None:
                data[r.id] = (o.start, run.began[k].get(r.group))
            if o.action is not None:
                late[r.id] = (o.action, o.cti, _REASONS[o.level])
    return data, late


@pytest.mark.parametrize("advance, name", [(None, "arrival_default"),
                                           ({"every": "10 seconds"}, "arrival_every")])
def test_readings_in_arrival_order_equal_the_engine(spark, tmp_path, advance, name):
    """Bring-your-own readings with an arrival column: CTIs generated per device as
    advance_time does, merged by goldilocks — the engine's rows, CTIs and late set."""
    from spark_adapter import watermark_stage

    batches = random_readings(seed=3)
    write_readings(tmp_path / "in", batches, seq=True)
    staged = watermark_stage(readings_stream(spark, tmp_path / "in"), delay="5 seconds",
                             time_col="ts", source_col="device_id", order_by=["seq"],
                             advance=advance, state_dir=str(tmp_path / "state"))
    query = run_query(staged, name, tmp_path / "ck")
    assert [p["numInputRows"] for p in query.recentProgress][:4] == [12, 12, 12, 12]
    adv = {"every_events": 1} if advance is None else {"every": 10 * 10**9}
    run = engine_stage(batches, policy=goldilocks("5s"), advance=adv, arrival=True)
    want = expected(run, batches)
    assert want[1], "some readings are late, so the comparison can fail"
    assert stage_rows(spark, name, tmp_path / "state" / "late") == want


@pytest.mark.parametrize("policy, advance, name", [
    ("goldilocks", None, "batches_parallel"),         # the default: no exchange
    ("goldilocks", {"every_events": 3}, "batches_every3"),  # one task per clock, sorted
    ("min", None, "batches_min"),
])
def test_micro_batch_semantics_hold_without_an_arrival_column(spark, tmp_path, policy,
                                                              advance, name):
    """No arrival column: each micro-batch in event-time order, judged against the CTI at its
    start; the engine fed the same micro-batches in that order gives the same rows, CTIs
    (on every row, and at every boundary: Spark's watermark) and late set."""
    from datetime import datetime

    from spark_adapter import cti_to_watermark_ms, watermark_stage

    batches = random_readings(seed=5)
    write_readings(tmp_path / "in", batches)
    delay = "5 seconds" if policy == "goldilocks" else None
    staged = watermark_stage(readings_stream(spark, tmp_path / "in"), delay=delay,
                             policy=policy, time_col="ts", source_col="device_id",
                             advance=advance, state_dir=str(tmp_path / "state"))
    query = run_query(staged, name, tmp_path / "ck")
    built = {"goldilocks": goldilocks("5s"), "min": min_policy(), "max": max_policy()}[policy]
    run = engine_stage(batches, policy=built, advance=advance or {"every_events": 1})
    want = expected(run, batches)
    assert want[1]
    assert stage_rows(spark, name, tmp_path / "state" / "late") == want

    marks = [p["eventTime"]["watermark"] for p in query.recentProgress]
    as_ms = [int(datetime.fromisoformat(m.replace("Z", "+00:00")).timestamp() * 1000)
             for m in marks]
    for k in range(1, len(batches)):  # Spark's watermark in batch k: the CTI after k-1
        assert as_ms[k] == cti_to_watermark_ms(run.ended[k - 1][()]), k
    metrics = [p["observedMetrics"]["goldilocks"] for p in query.recentProgress[:4]]
    assert [m["late"] for m in metrics] == [
        sum(1 for r in rows if run.outcomes[r.id].action) for rows in batches]
