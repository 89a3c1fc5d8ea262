"""The watermark stage's JVM plan against its Python plan, in the real local session (which
has the stage's jar on ``spark.jars``).

The same user's stream runs through both plans: the JVM functions (``jvm=True``) and the
parallel ``mapInArrow`` plan (``jvm=False``), which ``test_stage.py`` compares with the
engine. Every output row with every column, the late rows written (columns, types and
values), the observed metrics and Spark's watermark at every micro-batch must be equal —
with bad rows among the readings, a delay in the CTI generator, both late-row outputs, and
a user's filter and window downstream.
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import pytest

from engine.errors import InputError
from spark_support import random_readings, write_readings
from stage_reference import Row
from test_stage import TIMEOUT, readings_stream, run_query

pytestmark = pytest.mark.spark

SCHEMA = "device_id string, ts timestamp, temperature double, id bigint"


def _readings(seed: int) -> list[list[Row]]:
    """Readings of four devices, a fifth of them late, and in every micro-batch a reading
    without a device and one without a time (rejected, kept with their reason)."""
    batches = random_readings(seed=seed, batches=5, per_batch=40, devices="ABCD",
                              late_share=0.2)
    rng = random.Random(seed)
    next_id = 10_000
    for rows in batches:
        t = rng.choice(rows).time
        rows.insert(rng.randrange(len(rows)), Row(next_id, None, t))
        rows.insert(rng.randrange(len(rows)), Row(next_id + 1, "B", None))
        next_id += 2
    return batches


def _run(spark, tmp: Path, name: str, jvm: bool, *, upstream=None, downstream=None,
         **options):
    from spark_adapter import watermark_stage

    work = tmp / name
    options = {"delay": "5 seconds", **options}
    frame = readings_stream(spark, tmp / "in", SCHEMA)
    if upstream is not None:
        frame = upstream(frame)
    staged = watermark_stage(frame, time_col="ts", source_col="device_id",
                             state_dir=str(work / "state"), jvm=jvm, **options)
    if downstream is not None:
        staged = downstream(staged)
    query = run_query(staged, name, work / "ck")
    ran_jvm = any(p.name == "jvm" for p in (work / "state").glob("*/goldilocks/*"))
    assert ran_jvm == jvm
    return work, query


def _progress(query) -> list[tuple]:
    """Per micro-batch: Spark's watermark and the stage's observed metrics."""
    out = []
    for p in query.recentProgress:
        mark = p["eventTime"].get("watermark")
        metrics = p.get("observedMetrics", {}).get("goldilocks")
        out.append((mark, None if metrics is None else metrics.asDict()))
    return out


def _table(spark, name, order="id"):
    frame = spark.table(name)
    return frame.schema, [tuple(r) for r in frame.orderBy(order).collect()]


def _late(spark, work):
    """The late files' rows (the ``query=<id>`` folder told apart, the ``batch`` kept); no
    other file beside them (no temporary or checksum file left behind)."""
    import re

    files = [p.name for p in (work / "state" / "late").rglob("*") if p.is_file()]
    assert files and all(re.fullmatch(r"part-\d{6}-[\w-]+\.parquet", f) for f in files), files
    frame = spark.read.parquet(str(work / "state" / "late")).drop("query")
    return frame.schema, [tuple(r) for r in frame.orderBy("id").collect()]


@pytest.mark.parametrize("options", [
    {},
    {"advance": {"every_events": 1, "delay": "2 seconds"}},
    {"policy": "max", "delay": None},
], ids=["goldilocks", "source_delay", "max"])
def test_the_jvm_plan_equals_the_python_plan(spark, tmp_path, options):
    batches = _readings(seed=21)
    write_readings(tmp_path / "in", batches)
    results = {}
    for jvm in (True, False):
        name = f"jvm_eq_{int(jvm)}_{options.get('policy', 'goldilocks')}_{len(options)}"
        work, query = _run(spark, tmp_path, name, jvm, **options)
        results[jvm] = (_table(spark, name), _late(spark, work), _progress(query))
    (rows_j, late_j, prog_j), (rows_p, late_p, prog_p) = results[True], results[False]
    assert rows_j[0] == rows_p[0]                   # the output's columns and types
    assert rows_j[1] == rows_p[1] and rows_j[1]     # every data row, its cti included
    assert late_j[0] == late_p[0]                   # the late files' columns and types
    assert late_j[1] == late_p[1]
    reasons = {r[late_j[0].names.index("late_reason")] for r in late_j[1]}
    assert {"null source", "null time"} <= reasons  # rejected rows kept, with their reason
    assert any(r.startswith("starts before") for r in reasons)  # and late ones
    assert prog_j == prog_p                         # watermarks and metrics, batch by batch
    assert len(prog_j) >= len(batches)


def test_a_micro_batch_of_on_time_rows_below_the_cti_in_force_reports_that_cti(spark,
                                                                               tmp_path):
    """A is far ahead after micro-batch 0; micro-batch 1 holds only B's readings, on time yet
    making a CTI below the one in force: both plans report the CTI in force, and the same
    watermarks; no late or rejected row hides the difference."""
    t0 = 1_767_225_600 * 10**9
    batches = [[Row(1, "A", t0 + 1000 * 10**9), Row(2, "B", t0 + 980 * 10**9)],
               [Row(3, "B", t0 + 995 * 10**9), Row(4, "B", t0 + 996 * 10**9)]]
    write_readings(tmp_path / "in", batches)
    got = {}
    for jvm in (True, False):
        name = f"jvm_in_force_{int(jvm)}"
        _, query = _run(spark, tmp_path, name, jvm, delay="10 seconds")
        got[jvm] = (_table(spark, name), _progress(query))
    assert got[True] == got[False]
    metrics = [m for _, m in got[True][1] if m is not None]
    assert [m["late"] + m["rejected"] for m in metrics[:2]] == [0, 0]
    assert metrics[1]["cti"] == (t0 + 990 * 10**9) // 10**6, metrics[1]  # in force, epoch ms


def test_late_rows_kept_in_the_stream_equal_the_python_plans(spark, tmp_path):
    write_readings(tmp_path / "in", _readings(seed=22))
    got = {}
    for jvm in (True, False):
        name = f"jvm_keep_{int(jvm)}"
        _, query = _run(spark, tmp_path, name, jvm, keep_late=True)
        got[jvm] = (_table(spark, name), _progress(query))
    assert got[True] == got[False]
    schema, rows = got[True][0]
    actions = {r[schema.names.index("late_action")] for r in rows}
    assert actions == {None, "dropped", "rejected"}


def test_late_rows_of_every_flat_column_type_are_written_as_the_python_plan_writes_them(
        spark, tmp_path):
    """A user's frame with a column of every type the JVM late writer takes (and nulls in
    each): the late files' columns, types and values equal the Python plan's."""
    from pyspark.sql import functions as F

    from spark_adapter.stage_jvm import LATE_TYPES

    write_readings(tmp_path / "in", _readings(seed=26))
    id_ = F.col("id")

    def typed(frame):
        def some(column):  # a null in every third row
            return F.when(id_ % 3 != 0, column)
        return frame.select(
            "*", some((id_ % 100).cast("int")).alias("i32"),
            some((id_ % 100).cast("smallint")).alias("i16"),
            some((id_ % 100).cast("tinyint")).alias("i8"),
            some(F.col("temperature").cast("float")).alias("f32"),
            some(id_ % 2 == 0).alias("flag"), some(F.to_date("ts")).alias("day"),
            some(F.encode(F.concat(F.lit("é"), F.col("device_id")), "UTF-8")).alias("raw"))

    got = {}
    for jvm in (True, False):
        work, _ = _run(spark, tmp_path, f"jvm_types_{int(jvm)}", jvm, upstream=typed)
        got[jvm] = _late(spark, work)
    schema, rows = got[True]
    assert {type(f.dataType) for f in schema.fields} >= set(LATE_TYPES)  # each type at least once
    assert got[True] == got[False]
    for name in ("i32", "i16", "i8", "f32", "flag", "day", "raw"):
        values = [r[schema.names.index(name)] for r in rows]
        assert None in values and any(v is not None for v in values), name


def test_a_filter_and_a_window_downstream_close_the_same_windows(spark, tmp_path):
    """The user's filter removes most rows (Spark would push it below a plain projection)
    and a window count follows: the JVM plan's watermark still sees every on-time row and
    closes the windows the Python plan closes, with the same counts."""
    from pyspark.sql import functions as F

    write_readings(tmp_path / "in", _readings(seed=23))

    def windows(staged):
        return (staged.where(F.col("temperature") > 24)
                .groupBy(F.window("ts", "10 seconds")).count()
                .select(F.col("window.start").alias("start"), "count"))

    got = {}
    for jvm in (True, False):
        name = f"jvm_win_{int(jvm)}"
        work, query = _run(spark, tmp_path, name, jvm, downstream=windows)
        got[jvm] = (_table(spark, name, "start"), [m for m, _ in _progress(query)],
                    _late(spark, work))  # late rows whole, though the query reads two columns
    assert got[True] == got[False]
    assert len(got[True][0][1]) >= 3, "windows closed"
    assert got[True][2][1], "late rows written"


def test_read_stage_state_shows_the_jvm_plans_clock(spark, tmp_path):
    from spark_adapter import read_stage_state

    batches = _readings(seed=24)
    write_readings(tmp_path / "in", batches)
    work, query = _run(spark, tmp_path, "jvm_state", True)
    state = read_stage_state(str(work / "state"), str(query.id))
    newest = {}
    for rows in batches[:-1]:  # the last micro-batch is folded by the next one's tasks
        for r in rows:
            if r.source is not None and r.time is not None:
                newest[r.source] = max(newest.get(r.source, r.time), r.time)
    # every device's newest accepted reading is at or below its newest reading, its CTI is
    # that less the delay (the default: each device's tolerance), and the merged CTI the
    # newest of those
    assert set(state["sources"]) == {((), d) for d in newest}
    for (_, device), (largest, last) in state["sources"].items():
        assert largest <= newest[device] and last == largest - 5 * 10**9
    assert state["published"] == max(m for m, _ in state["sources"].values()) - 5 * 10**9
    assert state["groups"] == {(): state["published"]}


def _continue(spark, tmp_path, name, jvm_first):
    """Run one micro-batch with one plan, then the rest from its checkpoint with the other."""
    from spark_adapter import watermark_stage

    batches = _readings(seed=25)
    work = tmp_path / name
    write_readings(work / "in", batches[:1])

    def start(jvm):
        staged = watermark_stage(readings_stream(spark, work / "in", SCHEMA),
                                 delay="5 seconds", time_col="ts", source_col="device_id",
                                 state_dir=str(work / "state"), jvm=jvm)
        return (staged.writeStream.format("parquet")  # a sink that recovers
                .option("checkpointLocation", str(work / "ck"))
                .trigger(availableNow=True).start(str(work / "out")))

    first = start(jvm_first)
    assert first.awaitTermination(TIMEOUT) and first.exception() is None
    write_readings(work / "in", batches[1:2], first=1)
    try:
        start(not jvm_first)
    except InputError as error:  # refused when the plan is built
        return error
    return None


def test_a_restart_with_the_other_plan_refuses_the_state(spark, tmp_path):
    """Refused when the plan is built (the state says which plan wrote it), naming the
    plan and what to do; the tasks check again (a state written before the options file)."""
    error = _continue(spark, tmp_path, "jvm_then_python", True)
    assert error is not None and "jvm=False, but state_dir=" in str(error)
    assert "as its JVM plan wrote it: restart that query with the JVM plan" in str(error)
    error = _continue(spark, tmp_path, "python_then_jvm", False)
    assert error is not None and "jvm=True, but state_dir=" in str(error)
    assert "as its Python plan wrote it: restart that query with jvm=False" in str(error)


def test_jvm_true_says_why_the_jvm_plan_cannot_run(spark, tmp_path):
    from pyspark.sql import functions as F

    from spark_adapter import watermark_stage

    write_readings(tmp_path / "in", _readings(seed=26)[:1])
    stream = readings_stream(spark, tmp_path / "in", SCHEMA)
    common = dict(delay="5 seconds", time_col="ts", source_col="device_id",
                  state_dir=str(tmp_path / "state"), jvm=True)
    cases = [
        (dict(group_col="device_id"), "group_col (the JVM plan has one clock)"),
        (dict(order_by=["id"]), "sequential plan"),
        (dict(advance={"every": "1 second"}), "sequential plan"),
        (dict(policy="min", delay=None), "sequential plan"),
    ]
    for extra, words in cases:
        with pytest.raises(InputError, match="jvm=True, but the JVM plan cannot run") as err:
            watermark_stage(stream, **{**common, **extra})
        assert words in str(err.value)
    nested = stream.withColumn("tags", F.array("device_id"))
    with pytest.raises(InputError, match="column 'tags' is array<string>"):
        watermark_stage(nested, **common)
    batch = spark.read.schema(SCHEMA).json(str(tmp_path / "in"))
    with pytest.raises(InputError, match="a batch DataFrame"):
        watermark_stage(batch, **common)
    with pytest.raises(InputError, match="jvm='yes'"):
        watermark_stage(stream, **{**common, "jvm": "yes"})
    # with jvm=None the same options run the Python plan, and say so nowhere but the log
    assert watermark_stage(stream, **{**common, "jvm": None, "group_col": "device_id"})


def test_sources_with_any_text_and_integer_devices_keep_their_clocks(spark, tmp_path):
    """Device names with tabs, newlines and non-ASCII letters (the state files hold them as
    bytes), and a device column of integers: the plans agree."""
    import json
    import os

    rng = random.Random(27)
    names = ["a\tb", "line\nbreak", "Gerät-ß", "", "x" * 300]
    directory = tmp_path / "in"
    directory.mkdir()
    t0 = 1_767_225_600
    for k in range(4):
        path = directory / f"r-{k}.json"
        with open(path, "w") as out:
            for i in range(30):
                late = rng.random() < 0.3
                t = t0 + k * 10 + rng.random() * 10 - (15 if late else 0)
                out.write(json.dumps({"device_id": rng.choice(names), "dev": rng.randint(1, 3),
                                      "ts": datetime.utcfromtimestamp(t).isoformat() + "Z",
                                      "temperature": 1.0, "id": k * 100 + i}) + "\n")
        os.utime(path, (1_700_000_000 + k, 1_700_000_000 + k))
    from spark_adapter import watermark_stage

    got = {}
    for jvm in (True, False):
        for column in ("device_id", "dev"):
            name = f"jvm_names_{column}_{int(jvm)}"
            stream = readings_stream(spark, directory, SCHEMA + ", dev int")
            staged = watermark_stage(stream, delay="2 seconds", time_col="ts",
                                     source_col=column, state_dir=str(tmp_path / name),
                                     keep_late=True, jvm=jvm)
            run_query(staged, name, tmp_path / f"{name}_ck")
            got[jvm, column] = _table(spark, name)
    for column in ("device_id", "dev"):
        assert got[True, column] == got[False, column]
        schema, rows = got[True, column]
        assert any(r[schema.names.index("late_action")] == "dropped" for r in rows)


def test_a_first_micro_batch_that_gives_the_stage_no_row_starts_the_clock_later(spark,
                                                                                 tmp_path):
    """The user's filter before the stage removes all of micro-batch 0: the JVM plan's
    functions never run in it, so its state begins at micro-batch 1 — which goes on, and
    decides as the Python plan does."""
    from pyspark.sql import functions as F

    from spark_adapter import watermark_stage

    t0 = 1_767_225_600 * 10**9
    batches = [[Row(i, "AB"[i % 2], t0 + i * 10**9) for i in range(5)],
               [Row(100 + i, "AB"[i % 2], t0 + (10 + i) * 10**9) for i in range(5)]
               + [Row(200, "A", t0)]]  # older than A's CTI: late
    write_readings(tmp_path / "in", batches)
    got = {}
    for jvm in (True, False):
        name = f"jvm_empty_first_{int(jvm)}"
        stream = readings_stream(spark, tmp_path / "in", SCHEMA).where(F.col("id") >= 100)
        staged = watermark_stage(stream, delay="5 seconds", time_col="ts",
                                 source_col="device_id", state_dir=str(tmp_path / name),
                                 keep_late=True, jvm=jvm)
        run_query(staged, name, tmp_path / f"{name}_ck")
        got[jvm] = _table(spark, name)
    assert got[True] == got[False]
    schema, rows = got[True]
    assert [r[schema.names.index("id")] for r in rows] == [100, 101, 102, 103, 104, 200]
