"""Windows in Spark (``spark_adapter.windowing``): the rows of ``goldilocks replay --window``
byte for byte, the reference model's windows on generated logs (each window once), a Spark
user's own readings through the stage, and the errors a plan refuses with."""

from __future__ import annotations

import io
from pathlib import Path
from datetime import datetime, timedelta, timezone

import orjson
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.event import CTI, Event
from engine.times import MAX_TIME
from engine.times import Nanoseconds
from goldilocks.windowed import replay_windows, window_row
from operators import goldilocks
from operators.windows import Windows, hopping_spec, parse_fold, tumbling_spec
from spark_support import ROW_SCHEMA, arrivals_to_rows
from tests.reference import REFERENCE_FOLDS, reference_windows, run_steps

pytestmark = pytest.mark.spark

FLEET = Path(__file__).resolve().parents[2] / "examples" / "data" / "fleet.jsonl"
_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
AGGS = [k if f is None else f"{k}:{f}" for k, f in REFERENCE_FOLDS]
LABELS = [k if f is None else f"{k}_{f}" for k, f in REFERENCE_FOLDS]


def _as_bytes(rows, labels, keyed):
    """Spark window rows, already in the engine's order, as ``replay --window`` writes them."""
    return b"".join(window_row(r["start"], r["end"], r["key"] if keyed else None, r["count"],
                               [(label, r[label]) for label in labels], keyed, False)
                    for r in rows)


@pytest.mark.parametrize("files,key,hop", [
    ("fleet", "source", None), ("fleet", None, "20s"), ("devices", "source", "30s"),
    ("devices", None, None)])
def test_the_bundled_logs_give_replays_window_rows_byte_for_byte(spark, files, key, hop):
    """One log with arrival times, and per-device logs merged round-robin; tumbling and
    hopping, per input and fleet-wide."""
    from examples import fleet_windows as example
    from spark_adapter import read_event_log, replay, windows

    paths = [str(FLEET)] if files == "fleet" else [str(p) for p in example.DEVICES]
    aggs = ["count", "mean:celsius", "sum:celsius", "min:celsius", "max:celsius",
            "count:celsius"]
    want = io.BytesIO()
    stats = replay_windows(paths, window="1m", hop=hop, aggregates=aggs, key=key,
                           delay="30s", out=want)
    events, _late = replay(read_event_log(spark, paths), delay="30s")
    rows = windows(events, window="1m", hop=hop, aggregates=aggs, key=key)
    got = rows.orderBy("end", *(["key"] if key else [])).collect()
    assert _as_bytes(got, [a.replace(":", "_") for a in aggs], key is not None) == \
        want.getvalue()
    assert len(got) == stats.windows > 10


_payloads = st.one_of(st.none(), st.just("text"), st.fixed_dictionaries({}, optional={
    "x": st.one_of(st.integers(-5, 5), st.floats(-100, 100, allow_nan=False), st.just(-0.0),
                   st.just(0.1), st.just(0.2), st.text(max_size=1))}))


@st.composite
def _logs(draw):
    source = st.sampled_from("ABC")
    point = st.builds(lambda s, t, p: Event.point(t, p, s), source, st.integers(-30, 90),
                      _payloads)
    interval = st.builds(lambda s, t, n, p: Event.interval(t, t + n, p, s), source,
                         st.integers(-30, 90), st.integers(1, 20), _payloads)
    cti = st.builds(lambda s, t: Event.cti(t, source=s), source,
                    st.one_of(st.integers(-40, 120), st.just(MAX_TIME)))
    log = st.lists(st.one_of(point, point, interval, cti), max_size=40)
    return draw(st.lists(log, min_size=1, max_size=3))


@pytest.mark.slow
@settings(phases=_NO_SHRINK, max_examples=5, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(logs=_logs(), delay=st.integers(0, 20), on_late=st.sampled_from(["drop", "adjust"]),
       size=st.integers(1, 25), per=st.integers(1, 3), offset=st.integers(0, 7),
       keyed=st.booleans())
@example(  # the only carrier of x is late: no window has it (found by this test)
    logs=[[Event.interval(-24, -9, payload={}, source="A"), Event.point(54, "text", source="B"),
           Event.cti(MAX_TIME, source="A"),
           Event.interval(72, 89, payload={"x": 0.2}, source="A"),
           Event.cti(100, source="C"), Event.cti(MAX_TIME, source="B")]],
    delay=3, on_late="drop", size=3, per=3, offset=1, keyed=False)
def test_spark_windows_equal_the_reference_and_each_comes_out_once(spark, logs, delay, on_late,
                                                                   size, per, offset, keyed):
    """Several independent logs (``group_col``) replayed and windowed in Spark: per log, the
    reference model's windows over the policy's output (TS §6.1, §6.5), values bit for bit,
    every window once."""
    from spark_adapter import replay, windows

    rows = [r for g, log in enumerate(logs) for r in arrivals_to_rows(log, g)]
    frame = spark.createDataFrame(rows, ROW_SCHEMA)
    hop = max(size // per, 1)
    wanted = []
    for log in logs:
        emitted, _ = run_steps(goldilocks(Nanoseconds(delay), on_late), log)
        want, _ = reference_windows(emitted, size, hop, REFERENCE_FOLDS, keyed=keyed,
                                    offset=offset)
        wanted.append([e.payload for e in want if e.kind != CTI])
    events, _late = replay(frame, delay=Nanoseconds(delay), on_late=on_late, group_col="g")
    result = (windows(events, window=Nanoseconds(size), hop=Nanoseconds(hop),
                      offset=Nanoseconds(offset), aggregates=AGGS,
                      key="source" if keyed else None, group_col="g")
              .orderBy("g", "end", *(["key"] if keyed else [])))
    closed = [w for group in wanted for w in group]
    if closed and not any(w[4]["count_x"] for w in closed):
        # no window holds an insert with a numeric x (its carriers were late, or there are
        # none): windows() says so, naming the field, rather than giving nulls everywhere
        with pytest.raises(Exception, match="count:x: no insert of any window has a numeric "
                                            "payload field 'x'"):
            result.collect()
        return
    got = result.collect()
    seen = [(r["g"], r["key"] if keyed else None, r["start"]) for r in got]
    assert len(seen) == len(set(seen))  # never twice
    for g, want in enumerate(wanted):
        mine = [(r["start"], r["end"], r["key"] if keyed else None, r["count"],
                 {label: r[label] for label in LABELS}) for r in got if r["g"] == g]
        assert mine == want, g


def test_a_spark_users_readings_through_the_stage_give_the_engines_windows(spark, tmp_path):
    """A Spark user's frame (a timestamp, a device, a temperature; no CTIs, no payload) through
    ``watermark_stage`` and ``windows`` by device: the engine's window operator over the same
    readings in the stage's order (event time, then device), closed at the end."""
    from spark_adapter import watermark_stage, windows

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    readings = []
    for i in range(300):
        device = f"dev-{i % 7}"
        temp = None if i % 23 == 0 else (21.5 + (i * 37 % 100) / 10 if i % 5 else i % 4)
        readings.append((t0 + timedelta(seconds=(i * 13) % 900, microseconds=i), device,
                         float(temp) if temp is not None else None))
    df = spark.createDataFrame(readings, "ts timestamp, device_id string, temperature double")
    staged = watermark_stage(df, delay="5 seconds", time_col="ts", source_col="device_id",
                             late_path=str(tmp_path / "late"))
    aggs = ["count", "mean:temperature", "max:temperature", "count:temperature"]
    got = (windows(staged, window="1 minute", aggregates=aggs, key="device_id",
                   time_col="ts", order_by=["ts", "device_id"], clock=None)
           .orderBy("end", "key").collect())

    w = Windows(tumbling_spec("1m"), tuple(parse_fold(a) for a in aggs), key="source")
    want = []
    for ts, device, temp in sorted(readings, key=lambda r: (r[0], r[1])):
        ns = int((ts - datetime(1970, 1, 1, tzinfo=timezone.utc)) / timedelta(microseconds=1))
        payload = {} if temp is None else {"temperature": temp}
        want += w.step(Event.point(ns * 1000, payload, device))
    want += w.step(Event.cti(MAX_TIME))
    results = [e.payload for e in want if e.kind != CTI]
    assert [(r["start"], r["end"], r["key"], r["count"],
             {a: r[a] for a in ("mean_temperature", "max_temperature", "count_temperature")})
            for r in got] == \
        [(r.start, r.end, r.key, r.count, {k: v for k, v in r.values.items() if k != "count"})
         for r in results]
    assert sum(r["count"] for r in got) == 300


def test_a_stream_through_the_stage_closes_each_window_once_with_the_engines_values(
        spark, tmp_path):
    """A user's readings as a stream (JSON files, one per micro-batch, one reading very late):
    ``watermark_stage`` then ``window_stage`` by device in append mode. Each window comes out
    once, only once the CTI passed its end, with the values of the engine's window operator
    over the rows the stage kept (in the fold order, time then device); the late reading is
    in the stage's late output, not in a window."""
    import json

    from spark_adapter import watermark_stage, window_stage
    from spark_adapter.schema import cti_to_watermark_ms
    from spark_support import reading_time

    t0 = 1_767_225_600 * 10**9  # 2026-01-01
    s = 10**9
    batches = []
    for b in range(4):
        rows = [(f"dev-{i % 3}", t0 + (b * 40 + i) * s + i * 1000, 20.0 + (i * 7 % 10) / 10)
                for i in range(40)]
        batches.append(rows)
    batches[2].append(("dev-1", t0 + 2 * s, 99.0))  # very late: its window closed long ago
    directory = tmp_path / "in"
    directory.mkdir()
    for k, rows in enumerate(batches):
        path = directory / f"part-{k}.json"
        path.write_text("".join(json.dumps({"device_id": d, "ts": reading_time(t),
                                            "temperature": v}) + "\n" for d, t, v in rows))
        import os
        os.utime(path, (1_700_000_000 + k,) * 2)
    stream = (spark.readStream.schema("device_id string, ts timestamp, temperature double")
              .option("maxFilesPerTrigger", 1).json(str(directory)))
    staged = watermark_stage(stream, delay="5 seconds", time_col="ts", source_col="device_id",
                             state_dir=str(tmp_path / "state"))
    aggs = ["count", "mean:temperature", "sum:temperature", "min:temperature"]
    out = window_stage(staged, window="30 seconds", hop="10 seconds", aggregates=aggs,
                       key="device_id", time_col="ts")
    query = (out.writeStream.format("memory").queryName("stream_windows").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start())
    assert query.awaitTermination(300) and query.exception() is None
    got = spark.table("stream_windows").orderBy("end", "key").collect()

    late = spark.read.parquet(str(tmp_path / "state" / "late")).collect()
    assert [(r["device_id"], r["temperature"]) for r in late] == [("dev-1", 99.0)]
    kept = sorted((t, d, v) for rows in batches for d, t, v in rows if v != 99.0)
    final_cti = max(t for t, _, _ in kept) - 5 * s  # each reading its device's CTI
    closes_by = (cti_to_watermark_ms(final_cti) + 1) * 10**6  # Spark's last watermark, in ns
    w = Windows(hopping_spec("30s", "10s"), tuple(parse_fold(a) for a in aggs), key="source")
    want = []
    for t, d, v in kept:
        want += w.step(Event.point(t, {"temperature": v}, d))
    want += w.step(Event.cti(MAX_TIME))
    expect = [(r.start, r.end, r.key, r.count, r.values) for r in
              (e.payload for e in want if e.kind != CTI) if r.end <= closes_by - 10**6]
    assert [(r["start"], r["end"], r["key"], r["count"],
             {"count": r["count"], **{a.replace(":", "_"): r[a.replace(":", "_")]
                                      for a in aggs[1:]}}) for r in got] == expect
    assert len(expect) > 20


def test_the_names_resolve_to_the_functions_whatever_was_imported_first():
    """``windows`` is a function of the package, not a module of it: importing the module
    that defines it (as ``window_stage`` does) does not shadow the name."""
    import spark_adapter
    import spark_adapter.windowing as module

    assert spark_adapter.window_stage is module.window_stage
    assert spark_adapter.windows is module.windows and callable(spark_adapter.windows)


def test_plans_refuse_what_they_cannot_window(spark):
    from operators import fold
    from spark_adapter import windows

    df = spark.createDataFrame([(1, "a", 2.0, 3)], "start long, source string, v double, n int")
    cases = [
        (dict(window="1m"), "no arrival order"),
        (dict(window="1m", order_by=["start"], key="n"), "key column 'n' has type int"),
        (dict(window="1m", order_by=["start"], key="k"), "neither a column nor a payload"),
        (dict(window="1m", order_by=["start"], aggregates=["mean:source"]),
         "column 'source' has type string; expected a number"),
        (dict(window="1m", order_by=["start"], aggregates=["mean:w"]),
         "'w' is neither a column nor a payload field"),
        (dict(window="1m", order_by=["start"]), "lacks column\\(s\\) cti"),
        (dict(window="1m", order_by=["start"], clock="end"), "clock='end'"),
        (dict(window="1m", order_by=["start"], time_col="source"), "time_col 'source' has"),
        (dict(window="1m", order_by=["start"], clock=None,
              aggregates=[fold("f", 0, lambda a, v: a)]), "user fold"),
        (dict(window="1m", hop="2m", order_by=["start"]), "hop .* is longer than the size"),
    ]
    for kw, message in cases:
        with pytest.raises(InputError, match=message):
            windows(df, **kw)


def test_a_non_string_payload_key_fails_naming_it(spark):
    from spark_adapter import windows

    df = spark.createDataFrame([(1, 0, '{"k": 3}')], "start long, seq long, payload string")
    with pytest.raises(Exception, match="a window key is 3; expected a string"):
        windows(df, window=Nanoseconds(10), key="k", clock=None).collect()
    ok = spark.createDataFrame([(1, 0, orjson.dumps({"k": "p", "x": 2}).decode())],
                               "start long, seq long, payload string")
    (row,) = windows(ok, window=Nanoseconds(10), key="k", clock=None,
                     aggregates=["sum:x"]).collect()
    assert (row["start"], row["end"], row["key"], row["count"], row["sum_x"]) == \
        (0, 10, "p", 1, 2.0)
    # a misspelled field is in no insert: an error naming it, not a column of nulls
    with pytest.raises(Exception, match="mean:celcius: no insert of any window has a "
                                        "numeric payload field 'celcius'"):
        windows(ok, window=10, key="k", clock=None, aggregates=["mean:celcius"]).collect()
