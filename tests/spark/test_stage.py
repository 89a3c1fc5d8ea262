"""The watermarking stage on a Spark user's own readings, with the real local session.

Readings ``{device_id, ts, temperature, id[, seq]}`` arrive as JSON Lines files, one per
micro-batch (``maxFilesPerTrigger=1``). What the stage keeps, the CTI on each row, and the
late rows it writes are compared with the engine fed the same rows (``stage_reference``):
in arrival order when the stream has an arrival column, else micro-batch by micro-batch in
event-time order — the semantics ``docs/spark.md`` documents.
"""

from __future__ import annotations

import pytest

from engine.times import Nanoseconds
from operators import goldilocks, min_policy
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
    if advance is None:  # the default: a device's CTI trails its newest reading by the delay
        adv, policy = {"every_events": 1, "delay": Nanoseconds(5 * 10**9)}, goldilocks(0)
    else:
        adv, policy = {"every": Nanoseconds(10 * 10**9)}, goldilocks("5s")
    run = engine_stage(batches, policy=policy, advance=adv, arrival=True)
    want = expected(run, batches)
    assert want[1], "some readings are late, so the comparison can fail"
    assert stage_rows(spark, name, tmp_path / "state" / "late") == want


@pytest.mark.parametrize("policy, advance, name, jvm", [
    ("goldilocks", None, "batches_jvm", True),        # the default with the jar: JVM functions
    ("goldilocks", None, "batches_parallel", False),  # the same in Python: no exchange
    ("goldilocks", {"every_events": 3}, "batches_every3", None),  # one task per clock, sorted
    ("min", None, "batches_min", None),
])
def test_micro_batch_semantics_hold_without_an_arrival_column(spark, tmp_path, policy,
                                                              advance, name, jvm):
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
                             advance=advance, state_dir=str(tmp_path / "state"), jvm=jvm)
    query = run_query(staged, name, tmp_path / "ck")
    ran_jvm = any(p.name == "jvm" for p in (tmp_path / "state").glob("*/goldilocks/*"))
    assert ran_jvm == bool(jvm)
    if advance is None:  # the default: the delay is each device's, the merge adds none
        built = {"goldilocks": goldilocks(0), "min": min_policy()}[policy]
        tolerance = Nanoseconds(5 * 10**9 if policy == "goldilocks" else 0)
        run = engine_stage(batches, policy=built, advance={"every_events": 1,
                                                           "delay": tolerance})
    else:
        run = engine_stage(batches, policy=goldilocks("5s"), advance=advance)
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


def _pushdown_batches():
    """Readings of two devices and their heartbeats (``kind``): batch 2 holds only cold
    readings (the user's filter removes them all), batch 3 only a heartbeat (a quiet
    period), so only CTIs can close the windows of batches 1 and 2."""
    import random

    from stage_reference import Row

    rng = random.Random(11)
    t0 = 1_767_225_600 * S
    batches, next_id = [], 0

    def row(device, seconds, kind="insert"):
        nonlocal next_id
        next_id += 1
        return Row(next_id, device, t0 + int(seconds * 10**6) * 1000, kind)

    batches.append([row("ab"[i % 2], i * 0.5 + rng.random() * 0.3) for i in range(40)])
    b1 = [row("ab"[i % 2], 20 + i * 0.5 + rng.random() * 0.3) for i in range(40)]
    b1 += [row("b", 3 + i * 0.1) for i in range(3)]  # very late
    batches.append(b1)
    batches.append([row("ab"[i % 2], 40 + i * 0.5) for i in range(10)])
    batches.append([row("a", 70, "cti")])
    cold = {r.id for r in batches[2]}
    return batches, cold


S = 10**9


def test_filters_selects_and_a_quiet_period_close_every_window_and_drop_nothing(spark,
                                                                                tmp_path):
    """The user filters and selects after the stage; their filter cannot stop the watermark
    (it stays above the observe barrier), a micro-batch of heartbeats only closes the last
    windows, and every on-time reading that passes the filter is counted."""
    import json
    import os

    from pyspark.sql import functions as F

    from spark_adapter import watermark_stage

    batches, cold = _pushdown_batches()
    directory = tmp_path / "in"
    directory.mkdir()
    for k, rows in enumerate(batches):
        path = directory / f"part-{k}.json"
        with open(path, "w") as out:
            for r in rows:
                from spark_support import reading_time
                out.write(json.dumps({
                    "device_id": r.source, "ts": reading_time(r.time), "id": r.id,
                    "kind": "reading" if r.kind == "insert" else "heartbeat",
                    "temperature": None if r.kind == "cti" else (5.0 if r.id in cold else 20.0),
                }) + "\n")
        os.utime(path, (1_700_000_000 + k,) * 2)
    schema = "device_id string, ts timestamp, temperature double, id bigint, kind string"
    staged = watermark_stage(readings_stream(spark, directory, schema), delay="5 seconds",
                             time_col="ts", source_col="device_id", kind_col="kind",
                             kinds={"reading": "insert", "heartbeat": "cti"},
                             advance={"every_events": 1}, state_dir=str(tmp_path / "state"))
    windows = (staged.where(F.col("temperature") > 12).select("ts", "temperature")
               .groupBy(F.window("ts", "10 seconds")).count())
    query = run_query(windows, "pushdown", tmp_path / "ck")
    plan = query._jsq.explainInternal(True).split("== Optimized Logical Plan ==")[1]
    assert plan.index("Filter (isnotnull(temperature") < plan.index("CollectMetrics")

    run = engine_stage(batches, policy=goldilocks("5s"), advance={"every_events": 1})
    final = run.ended[-1][()]
    assert final == batches[0][0].time - batches[0][0].time % S + 65 * S  # the heartbeat's
    on_time = [r for b in batches for r in b
               if r.kind == "insert" and run.outcomes[r.id].action is None and r.id not in cold]
    assert len(on_time) == 80  # the three very late readings are not among them
    counts: dict = {}
    for r in on_time:
        start = (r.time // (10 * S)) * 10 * S
        counts[start] = counts.get(start, 0) + 1
    closable = {w: c for w, c in counts.items() if w + 10 * S <= final - 10**6}
    got = {int(r["window"]["start"].timestamp()) * S: r["count"]
           for r in spark.table("pushdown").collect()}
    assert got == closable and sum(got.values()) == len(on_time)
    late = spark.read.parquet(str(tmp_path / "state" / "late")).select("id", "late_reason")
    assert sorted(r["id"] for r in late.collect()) == [r.id for r in batches[1][-3:]]


def test_clock_groups_publish_the_minimum_and_spark_drops_no_on_time_row(spark, tmp_path):
    """Two sites, the south's clock 30 s behind the north's: one Spark watermark, at most the
    slower site's CTI, so Spark's window aggregation drops none of the rows the stage kept
    (with one watermark per maximum it dropped most of the south's); every window Spark
    closes is complete, and it closes once both sites' CTIs have passed its end."""
    import random

    from pyspark.sql import functions as F

    from spark_adapter import watermark_stage
    from stage_reference import Row

    rng = random.Random(2)
    t0 = 1_767_225_600 * S
    batches, next_id = [], 0
    for b in range(5):
        rows = []
        for i in range(16):
            site = "north" if i % 2 else "south"
            device = f"{site[0]}{i % 4 // 2}"
            seconds = b * 10 + rng.random() * 10 - (30 if site == "south" else 0) + 30
            rows.append(Row(next_id, device, t0 + int(seconds * 10**6) * 1000, group=(site,)))
            next_id += 1
        batches.append(rows)
    write_readings(tmp_path / "in", batches)
    schema = READINGS_SCHEMA + ", site string"

    def windows(mode):
        staged = watermark_stage(readings_stream(spark, tmp_path / "in", schema),
                                 delay="2 seconds", time_col="ts", source_col="device_id",
                                 group_col="site", state_dir=str(tmp_path / f"state-{mode}"),
                                 advance={"every_events": 1, "delay": "20 seconds"})
        return staged.groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("n"))

    every = run_query(windows("update"), "groups_update", tmp_path / "ck-update", "update")
    closed = run_query(windows("append"), "groups_append", tmp_path / "ck-append")
    late_dir = tmp_path / "state-update" / "late"
    late = spark.read.parquet(str(late_dir)).count() if late_dir.exists() else 0
    final: dict = {}
    for r in spark.table("groups_update").collect():  # the last update of each window
        final[r["window"]["start"]] = r["n"]
    assert sum(final.values()) + late == sum(len(b) for b in batches)  # nothing vanished
    assert late == 0  # each site keeps its own clock: none of these readings is late

    run = engine_stage(batches, policy=goldilocks("2s"),
                       advance={"every_events": 1, "delay": Nanoseconds(20 * S)})
    slowest = min(run.ended[-1].values())
    watermark = closed.recentProgress[-1]["eventTime"]["watermark"]
    from datetime import datetime

    wm_ns = int(datetime.fromisoformat(watermark.replace("Z", "+00:00")).timestamp()) * S
    assert wm_ns <= slowest
    got = {r["window"]["start"]: r["n"] for r in spark.table("groups_append").collect()}
    assert got and all(final[w] == n for w, n in got.items())  # closed windows are complete
    assert all(w.timestamp() * S + 10 * S <= slowest for w in got)
    del every


def test_options_are_checked_when_the_plan_is_built(spark, tmp_path):
    """A user's typos and type mismatches fail at once, naming the option and what was
    expected — before any data moves."""
    from pyspark.sql import functions as F

    from engine.errors import InputError
    from spark_adapter import watermark_stage

    readings = spark.createDataFrame(
        [("a", "2026-01-01T00:00:00Z", 1.0, 7)],
        "device_id string, ts_text string, temperature double, epoch_s bigint",
    ).withColumn("ts", F.to_timestamp("ts_text"))
    ok = {"time_col": "ts", "source_col": "device_id", "keep_late": True}

    def refused(match, df=readings, **options):
        with pytest.raises(InputError, match=match):
            watermark_stage(df, **{**ok, **options})

    refused(r"time_col='tss' is not a column of the DataFrame; it has device_id, ts_text",
            time_col="tss")
    refused(r"time_col 'ts_text' is a string; parse it, e.g. F.to_timestamp\('ts_text'\)",
            time_col="ts_text")
    refused(r"'temperature' is double; convert it, e.g. F.timestamp_seconds",
            time_col="temperature")
    refused(r"without a time zone; say which zone",
            df=readings.withColumn("ts", F.col("ts").cast("timestamp_ntz")))
    refused(r"time_unit='sec'; expected one of s, ms, us, ns", time_col="epoch_s",
            time_unit="sec")
    refused(r"time_unit='s' is for integer time columns", time_unit="s")
    refused(r"kind_col 'temperature' is double; expected a string", kind_col="temperature")
    refused(r"kinds\['reading'\]='Insert'", kind_col="ts_text", kinds={"reading": "Insert"})
    refused(r"already has a column 'cti'.*names=\{'cti': 'another_name'\}",
            df=readings.withColumn("cti", F.lit(1)))
    refused(r"reserved prefix '_gl_'", df=readings.withColumn("_gl_x", F.lit(1)))
    refused(r"unknown policy 'goldilock'", policy="goldilock")
    refused(r"advance has 'every_event'", advance={"every_event": 5})
    refused(r"where should late rows go\? give late_path", keep_late=False)
    refused(r"on_late='keep' is not a late policy", on_late="keep")
    refused(r"delay", delay="5 fortnights")
    refused(r"source_col 'temperature' is double", source_col="temperature")
    # Spark's interval syntax and ours; several group columns; a renamed CTI column
    staged = watermark_stage(readings.withColumn("cti", F.lit(1)), delay="interval 5 minutes",
                             group_col=["device_id", "ts_text"], names={"cti": "stage_cti"},
                             **ok)
    assert staged.columns[-3:] == ["stage_cti", "late_action", "late_reason"]

    stream = (spark.readStream.schema(READINGS_SCHEMA).json(str(tmp_path))
              .withWatermark("ts", "5 seconds"))
    with pytest.raises(InputError, match="already has a watermark"):  # no state_dir: a default
        watermark_stage(stream, time_col="ts", source_col="device_id")
    with pytest.raises(InputError, match="already has a watermark"):
        watermark_stage(stream, time_col="ts", source_col="device_id",
                        state_dir=str(tmp_path / "state"))


def test_a_batch_dataframe_in_arrival_order_equals_the_engine_and_keeps_bad_rows(spark):
    """A batch DataFrame with an integer time column (epoch milliseconds) and an arrival
    column: the engine's decisions; rows with a null time or an unknown kind come out on the
    late side with their reason, none vanish."""
    from spark_adapter import split_late, watermark_stage
    from stage_reference import Row

    ms = 10**6
    rows = [Row(i, src, t * 1000 * ms, arrival=i) for i, (src, t) in enumerate(
        [("a", 100), ("b", 99), ("a", 130), ("b", 101), ("a", 131), ("b", 140), ("b", 120)])]
    frame = spark.createDataFrame(
        [(r.source, r.time // ms, r.id, r.arrival, "reading") for r in rows]
        + [("a", None, 90, 90, "reading"), ("b", 150_000, 91, 91, "Reading")],
        "device string, epoch_ms bigint, id bigint, seq bigint, kind string")
    staged = watermark_stage(frame, delay="10 seconds", time_col="epoch_ms", time_unit="ms",
                             source_col="device", kind_col="kind", kinds={"reading": "insert"},
                             advance={"every_events": 1}, order_by=["seq"], keep_late=True)
    events, late = split_late(staged)
    run = engine_stage([rows], policy=goldilocks("10s"), advance={"every_events": 1},
                       arrival=True)
    assert {r["id"]: r["epoch_ms"] * ms for r in events.collect()} == {
        i: o.start for i, o in run.outcomes.items() if o.action is None}
    got = {r["id"]: (r["late_action"], r["cti"], r["late_reason"]) for r in late.collect()}
    assert got == {
        **{i: (o.action, o.cti // ms, _REASONS[o.level])
           for i, o in run.outcomes.items() if o.action},
        90: ("rejected", None, "null time"),
        91: ("rejected", None, "unknown kind 'Reading'; expected one of 'reading'")}
    assert len(got) >= 4  # b's readings behind a's clock
    assert "event_time" in events.columns  # a timestamp beside the integer time, for windows
