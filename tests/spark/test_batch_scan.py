"""The scan plan (``replay``'s default): the engine's columnar kernel in parallel ranges gives
the engine's replay exactly (TS §5.1), however the log is cut into files and ranges."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from engine.errors import InputError
from engine.event import Event
from engine.times import Nanoseconds
from eventlog import write_log
from spark_support import (ROW_SCHEMA, arrivals_to_rows, canonical_events, canonical_late,
                           engine_replay_bytes)
from test_batch_replay import _check_against_engine, _collect, _logs_frame, _plan
from tests.reference import arrivals_strategy

pytestmark = pytest.mark.spark

_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
ORDER = ["order_key", "file_index", "line"]
_DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "data"


def _scan_bytes(spark, paths, ranges, **options):
    """The scan plan over ``read_event_log(paths)``: (events, late) as the engine's bytes."""
    from spark_adapter import read_event_log, replay

    log = read_event_log(spark, paths)
    events, late = replay(log, strategy="scan", ranges=ranges, **options)
    assert events.rdd.getNumPartitions() == min(ranges, log.count())  # one task per range
    return (canonical_events(events.orderBy(*ORDER).collect()),
            canonical_late(late.orderBy(*ORDER).collect()))


@pytest.mark.parametrize("which", ["fleet.jsonl", "devices"])
def test_bundled_logs_in_many_ranges_equal_the_engine(spark, tmp_path, which):
    paths = ([_DATA / which] if which.endswith(".jsonl")
             else sorted((_DATA / which).glob("*.jsonl")))
    for on_late in ("drop", "adjust"):
        want = engine_replay_bytes(paths, tmp_path, delay="90s", on_late=on_late)
        assert want[1]  # late events present: the comparison can fail
        for ranges in (1, 7, 64):
            assert _scan_bytes(spark, paths, ranges, delay="90s", on_late=on_late) == want


@st.composite
def _split_log(draw):
    """One arrival sequence written as 1-4 files (JSON Lines or CSV, some of one line), each a
    consecutive piece of the ``seq`` order, CTIs sparse so that many ranges hold none."""
    n = draw(st.integers(1, 60))
    records = []
    seq = 0
    for _ in range(n):
        kind = draw(st.sampled_from(["insert"] * 6 + ["cti", "join", "leave"]))
        rec = {"seq": seq, "source": draw(st.sampled_from(["A", "B", "C"])), "kind": kind}
        seq += draw(st.integers(0, 2))  # equal keys: ties broken by file, then line
        if kind in ("insert", "cti"):
            rec["start"] = draw(st.integers(0, 80))
        if kind == "insert" and draw(st.booleans()):
            rec["end"] = rec["start"] + draw(st.integers(1, 30))
        records.append(rec)
    cuts = sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3, unique=True)))
    pieces = [records[a:b] for a, b in zip([0, *cuts], [*cuts, n]) if records[a:b]]
    return [(draw(st.sampled_from(["jsonl", "csv"])), piece) for piece in pieces]


def write_split_log(tmp, files):
    """``_split_log``'s files written under ``tmp``; their paths in arrival order."""
    paths = []
    for i, (fmt, records) in enumerate(files):
        if fmt == "csv" and not any("start" in r for r in records):
            fmt = "jsonl"  # a CSV log needs a start column (docs/event-log.md)
        paths.append(tmp / f"part{i}.{fmt}")
        write_log(paths[-1], records)
    return paths


@settings(phases=_NO_SHRINK, max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files=_split_log(), delay=st.sampled_from([0, 4, 25]).map(Nanoseconds),
       on_late=st.sampled_from(["drop", "adjust"]), ranges=st.sampled_from([1, 2, 5, 40]))
def test_logs_split_into_files_and_ranges_equal_the_engine(spark, tmp_path_factory, files,
                                                          delay, on_late, ranges):
    tmp = tmp_path_factory.mktemp("split")
    paths = write_split_log(tmp, files)
    want = engine_replay_bytes(paths, tmp, delay=delay, on_late=on_late)
    assert _scan_bytes(spark, paths, ranges, delay=delay, on_late=on_late) == want


def test_ranges_without_a_cti_and_files_of_one_line(spark, tmp_path):
    """The only CTI is in the first of many ranges: every later range starts from the state
    carried across ranges that hold none. Each file holds one line."""
    records = [{"seq": 0, "source": "A", "kind": "insert", "start": 50},
               {"seq": 1, "source": "A", "kind": "cti", "start": 40}]
    records += [{"seq": 2 + i, "source": "B", "kind": "insert", "start": 5 * i,
                 "end": 5 * i + 20} for i in range(30)]
    paths = []
    for i, rec in enumerate(records):
        paths.append(tmp_path / f"one-{i:02d}.jsonl")
        write_log(paths[-1], [rec])
    for on_late in ("drop", "adjust"):
        want = engine_replay_bytes(paths, tmp_path, delay=0, on_late=on_late)
        assert want[1].count(b"\n") >= 6  # late rows in ranges far from the CTI's
        assert _scan_bytes(spark, paths, 16, delay=0, on_late=on_late) == want


@settings(phases=_NO_SHRINK, max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(logs=st.lists(arrivals_strategy(markers=True), min_size=1, max_size=25),
       delay=st.sampled_from([0, 1, 5, 17, 2**63 - 1]).map(Nanoseconds),
       on_late=st.sampled_from(["drop", "adjust"]),
       ranges=st.sampled_from([None, 1, 3, 50]))
def test_group_clocks_in_parallel_ranges_equal_the_engine(spark, logs, delay, on_late, ranges):
    _check_against_engine(spark, logs, delay, on_late, strategy="scan", ranges=ranges)


def test_a_group_spreads_over_ranges_and_groups_share_them(spark):
    """One big group and several small ones: the big group's rows are decided in several
    tasks (carried state between them), and the answer is still the engine's."""
    big = [Event.cti(10 * i, source="A") if i % 7 == 0 else Event.point(10 * i - 25, source="B")
           for i in range(200)]
    small = [[Event.point(3, source="C"), Event.cti(9, source="C"), Event.point(1, source="C")]
             for _ in range(5)]
    logs = [big, *small]
    from spark_adapter import replay

    frame = _logs_frame(spark, logs)
    events, _ = replay(frame, delay=Nanoseconds(5), group_col="g", strategy="scan", ranges=8)
    tasks = (events.where(F.col("g") == 0).select(F.spark_partition_id().alias("p"))
             .distinct().count())
    assert tasks > 1  # the big group was decided by several tasks
    _check_against_engine(spark, logs, 5, "adjust", strategy="scan", ranges=8)


def test_a_users_frame_keeps_its_own_columns(spark):
    """A Spark user's frame: a timestamp and a reading beside the log columns, a null group
    value, no CTI in one group; every extra column comes out as it went in."""
    from spark_adapter import replay

    rows = [(g, i, "dev", "cti" if i % 4 == 3 else "insert", 10 * i - (25 if i % 3 == 1 else 0),
             None, None, None, i, 0, i + 1) for g in (0, 1) for i in range(12)]
    rows += [(None, 0, "dev", "insert", 5, None, None, None, 0, 0, 1)]  # a null group
    frame = (spark.createDataFrame(rows, ROW_SCHEMA)
             .withColumn("ts", F.timestamp_seconds(F.col("start")))
             .withColumn("reading", F.col("start") * 0.5))
    scan, reference = ([_collect(part) for part in replay(frame, delay=0, group_col="g",
                                                          strategy=strategy, ranges=3)]
                       for strategy in ("scan", "global"))
    assert scan == reference  # the same rows as the reference plan, extra columns included
    assert scan[1]  # late rows present: the comparison can fail
    inserts = [r for r in scan[0] if r["kind"] == "insert"]
    assert all(r["ts"] is not None and r["reading"] == r["start"] * 0.5 for r in inserts)
    assert [r["cti"] for r in scan[0] if r["g"] is None] == [None]


def test_the_plan_has_no_window_and_moves_no_rows_to_one_task(spark):
    from spark_adapter import replay

    frame = _logs_frame(spark, [[Event.cti(5, source="A"), Event.point(1, source="B")]])
    for staged in replay(frame.drop("g"), delay=0, strategy="scan"):
        plan = _plan(staged)
        assert plan.count("ArrowEvalPython") == 1  # pass 2, once: no copy below the sort
        assert "Window" not in plan
        assert "SinglePartition" not in plan.split("ArrowEvalPython")[1]  # below pass 2


def test_bad_rows_name_the_row(spark):
    from spark_adapter import replay

    rows = arrivals_to_rows([Event.cti(5, source="A"), Event.point(1, source="B")])
    frame = spark.createDataFrame(rows, ROW_SCHEMA)
    typo = frame.withColumn("kind", F.when(F.col("line") == 2, "insrt").otherwise(F.col("kind")))
    with pytest.raises(Exception, match=r"kind 'insrt' at order_key=1, file_index=0, line=2"):
        replay(typo, delay=0, strategy="scan")[0].collect()
    no_start = frame.withColumn("start", F.when(F.col("line") == 2, None).otherwise(F.col("start")))
    with pytest.raises(Exception, match=r"a row of kind 'insert' has no start \(.*line=2"):
        replay(no_start, delay=0, strategy="scan")[0].collect()
    with pytest.raises(InputError, match="ranges"):
        replay(frame, delay=0, strategy="scan", ranges=0)
