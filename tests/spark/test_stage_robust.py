"""The robust rules (TS §2.5, §2.6) in Spark, with the real local session, on a Spark user's
readings where one device's clock runs an hour ahead.

Devices a, b and c report every 10 s; a few readings arrive 5 minutes old (late for their own
device: truly late), and a fourth device, d, comes online once with a reading 2 minutes old
(late for the merge). Device r's clock is an hour ahead. Through ``watermark_stage`` with
``quantile_policy(2, …)`` or ``goldilocks(…, max_ahead=…)`` the others lose exactly the truly
late readings — what they lose without r — with the rule on each late row; r is flagged
``ahead``. Spark's own ``withWatermark`` on the same stream follows r and drops every later
reading of the others. Batch replay refuses the rules by name.
"""

from __future__ import annotations

import pytest

from operators import goldilocks, quantile_policy
from spark_support import READINGS_SCHEMA, write_readings
from stage_reference import Row, engine_stage

pytestmark = pytest.mark.spark

TIMEOUT = 300
S = 10**9
T0 = 1_767_225_600 * S  # 2026-01-01T00:00:00Z
HOUR = 3_600 * S
DELAY = "30 seconds"
_MERGE = {"quantile": "starts before the merged CTI (set by the quantile rule)",
          "max_ahead": "starts before the merged CTI (held back by max_ahead)",
          "goldilocks": "starts before the merged CTI (goldilocks, not held back by max_ahead)",
          None: "starts before the merged CTI"}
_SOURCE = "starts before its source's CTI"


def fleet(runaway: bool = True) -> tuple[list[list[Row]], set[int]]:
    """Three micro-batches of two minutes of readings (arrival order = id), and the ids of
    the truly late ones."""
    batches: list[list[Row]] = []
    late: set[int] = set()
    next_id = 0

    def add(rows: list[Row], source: str, t: int) -> int:
        nonlocal next_id
        rows.append(Row(next_id, source, t, arrival=next_id))
        next_id += 1
        return next_id - 1

    for k in range(3):
        rows: list[Row] = []
        for step in range(12):
            minute = k * 12 + step
            t = T0 + 5 * 60 * S + minute * 10 * S
            for device in "abc":
                if device == "b" and minute % 7 == 4:
                    late.add(add(rows, device, t - 5 * 60 * S - 1_000))  # 5 minutes old
                else:
                    add(rows, device, t)
            if runaway:
                add(rows, "r", t + HOUR)
            if minute == 15:
                late.add(add(rows, "d", t - 2 * 60 * S))  # a new device's old reading
        batches.append(rows)
    return batches, late


def _stream(spark, directory):
    return (spark.readStream.schema(READINGS_SCHEMA).option("maxFilesPerTrigger", 1)
            .json(str(directory)))


def _run(frame, name, checkpoint):
    query = (frame.writeStream.format("memory").queryName(name).outputMode("append")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT), f"query {name} did not finish in {TIMEOUT} s"
    assert query.exception() is None
    return query


def _readings(batches, ids) -> set[tuple[str, int]]:
    """The (device, time) of the rows ``ids``."""
    return {(r.source, r.time) for rows in batches for r in rows if r.id in ids}


def _late_of(run) -> dict[int, str]:
    """The engine's late rows: id -> the stage's late_reason for them."""
    return {i: (_SOURCE if o.level == "source" else _MERGE[o.reason])
            for i, o in run.outcomes.items() if o.action is not None}


@pytest.mark.parametrize("name, policy", [
    ("robust_quantile", quantile_policy(2, DELAY)),
    ("robust_max_ahead", goldilocks(DELAY, max_ahead=DELAY)),
])
def test_one_clock_an_hour_ahead_costs_the_others_nothing_native_drops_them(
        spark, tmp_path, name, policy):
    from pyspark.sql import functions as F

    from spark_adapter import read_stage_state, watermark_stage

    batches, truly_late = fleet()
    write_readings(tmp_path / "in", batches, seq=True)
    # the engine (a union per clock group, fed in arrival order) on the same rows
    advance = {"every_events": 1}
    run = engine_stage(batches, policy=policy, advance=advance, arrival=True)
    want = _late_of(run)
    without, _ = fleet(runaway=False)
    alone = _late_of(engine_stage(without, policy=policy, advance=advance, arrival=True))
    plain = _late_of(engine_stage(batches, policy=goldilocks(DELAY), advance=advance,
                                  arrival=True))
    assert set(want) == truly_late
    # r costs the others nothing: the same readings are late without it
    assert _readings(batches, want) == _readings(without, alone)
    assert len(plain) > 10 * len(truly_late)  # ... where plain goldilocks follows r

    staged = watermark_stage(_stream(spark, tmp_path / "in"), policy=policy, time_col="ts",
                             source_col="device_id", order_by=["seq"], advance=advance,
                             state_dir=str(tmp_path / "state"), name=name)
    query = _run(staged, name, tmp_path / "ck")
    kept = {r["id"] for r in spark.table(name).select("id").collect()}
    late = {r["id"]: r["late_reason"] for r in spark.read.parquet(
        str(tmp_path / "state" / "late")).select("id", "late_reason").collect()}
    every = {r.id for rows in batches for r in rows}
    assert late == want  # the engine's late rows, each with the rule that made it late
    assert kept == every - set(want)
    merge_reasons = {late[i] for i in late if late[i] != _SOURCE}
    assert merge_reasons and all("(" in text for text in merge_reasons)  # the rule is named
    state = read_stage_state(str(tmp_path / "state"), str(query.id), name, policy=policy)
    assert state["ahead"] == {(): ["r"]}  # the runaway, flagged in its clock group ()

    # Spark's own watermark on the same stream: r's clock moves it an hour ahead after the
    # first micro-batch; Spark filters late rows against the watermark of the micro-batch
    # before, so from the third on every reading of the others is dropped
    native = (_stream(spark, tmp_path / "in").withWatermark("ts", DELAY)
              .dropDuplicates(["id", "ts"]))
    _run(native, f"{name}_native", tmp_path / "ck-native")
    passed = {r["id"] for r in spark.table(f"{name}_native").select("id").collect()}
    others_later = {r.id for rows in batches[2:] for r in rows
                    if r.source != "r" and r.id not in truly_late}
    assert others_later and not (others_later & passed)  # native: all dropped
    assert others_later <= kept  # the stage: all kept
    assert spark.table(f"{name}_native").where(F.col("device_id") == "r").count() == 36


@pytest.mark.parametrize("name, policy", [
    ("log_quantile", quantile_policy(2, "3s", "adjust")),
    ("log_max_ahead", goldilocks("3s", "adjust", max_ahead="5s")),
])
def test_our_log_through_the_stage_equals_the_columnar_replay(spark, tmp_path, name, policy):
    """The same rule on the same arrival order: the stage over our log format (joins and
    leaves included) and ``goldilocks.replay``'s columnar path write the same events and the
    same late file, reasons included."""
    from goldilocks.replay import replay
    from test_streaming import (_canonical, _concatenated, _random_parts,
                                _run_available_now, _stage, _stream, _without_ctis,
                                _write_parts)

    parts = _random_parts(seed=11)
    _write_parts(tmp_path / "parts", parts)
    staged = _stage(_stream(spark, tmp_path / "parts", maxFilesPerTrigger=1), tmp_path,
                    policy=policy)
    _run_available_now(staged, name, tmp_path / "ck")
    reasons = {text: rule for rule, text in _MERGE.items()}
    got = _canonical(spark.table(name).collect(), reasons)
    out, late = tmp_path / "replay-out.jsonl", tmp_path / "replay-late.jsonl"
    stats = replay([_concatenated(tmp_path, parts)], policy=policy, out=out, late=late)
    assert stats.path == "columnar" and stats.late > 0
    assert b'"reason":' in late.read_bytes()
    assert got == (_without_ctis(out.read_bytes()), late.read_bytes())


def test_batch_replay_refuses_the_robust_rules_by_name():
    from spark_adapter.batch import resolve_spark_policy

    for policy, says in ((goldilocks("5m", max_ahead="1m"), r"goldilocks\(max_ahead=…\)"),
                         (quantile_policy(2, "5m"), "'quantile' rule"),
                         ("quantile", "'quantile' rule")):
        with pytest.raises(NotImplementedError, match=says) as err:
            resolve_spark_policy(policy, None, "drop")
        assert "not a running maximum" in str(err.value)
        assert "watermark_stage" in str(err.value) and "goldilocks.replay" in str(err.value)


def test_the_stage_takes_the_rules_by_name_and_plans_one_task_per_clock():
    from engine.errors import InputError
    from spark_adapter.stage_spec import build_policy, choose_plan

    built = build_policy("quantile:3", None, "drop", "watermark_stage")
    assert (built.k, built.delay) == (3, 0)
    for policy in (built, goldilocks("1s", max_ahead="1s")):
        assert choose_plan(policy, None, ()) == "sequential"  # the rule reads every source
    for name, says in (("quantile:x", "quantile:K with K an integer >= 1"),
                       ("min:2", "other policies take no ':'")):
        with pytest.raises(InputError, match=f"watermark_stage: policy '{name}': .*{says}"):
            build_policy(name, None, "drop", "watermark_stage")
