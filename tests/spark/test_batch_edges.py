"""Edge events in Spark's batch replay (TS §7): the scan and range plans give the engine's
replay exactly — the same events, the same late records with their reasons, the start edges
never closed reported last — however the log is cut into files and ranges; the plans without
an edge form refuse edge rows by name; read_event_log reads edges with their id."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from engine.event import Event
from engine.times import Nanoseconds
from engine.times import to_ns
from eventlog import write_log
from spark_support import canonical_events, canonical_late, engine_replay_bytes
from tests.reference import edge_arrivals_strategy
from tests.replay.test_replay_edges import _record

pytestmark = pytest.mark.spark

ORDER = ["order_key", "file_index", "line"]
_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
BASE = to_ns("2024-06-01T12:00:00Z")
S = 10**9


def _spark_bytes(spark, paths, **options):
    """Spark's replay of ``read_event_log(paths)`` as the engine's (output, late) bytes: the
    late rows in arrival order, the start edges never closed last (as the engine writes them,
    in the order they opened)."""
    from spark_adapter import read_event_log, replay

    events, late = replay(read_event_log(spark, [str(p) for p in paths]), **options)
    rows = late.collect()
    rows.sort(key=lambda r: (r["reason"] == "not_closed", *(r[c] for c in ORDER)))
    return canonical_events(events.orderBy(*ORDER).collect()), canonical_late(rows)


def _write_pieces(tmp, records, cuts, formats=("jsonl",)):
    """``records`` (with ``seq``) written as consecutive pieces, one file each."""
    paths = []
    bounds = [0, *sorted(set(cuts)), len(records)]
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        if a < b:
            fmt = formats[i % len(formats)]
            paths.append(tmp / f"part{i}.{fmt}")
            write_log(paths[-1], records[a:b])
    return paths


def _doors() -> list[dict]:
    """examples/door_edges.py's doors as one recorded log: a close moved to the CTI, a late
    opening dropped with its close, a close never opened, a door never closed."""
    def at(s):
        return BASE + s * S

    arrivals = [Event.start_edge(at(0), "front", payload="open", source="door-1"),
                Event.start_edge(at(10), "back", payload="open", source="door-1"),
                Event.cti(at(90), source="door-2"),
                Event.cti(at(100), source="door-1"),
                Event.start_edge(at(20), "side", payload="open", source="door-2"),
                Event.end_edge(at(20), at(95), "side", source="door-2"),
                Event.point(at(75), payload={"t": 1}, source="door-2"),
                Event.end_edge(at(10), at(40), "back", source="door-1"),
                Event.end_edge(at(5), at(6), 7, source="door-2"),
                Event.start_edge(at(120), "back", source="door-1"),  # the id reused
                Event.cti(at(160), source="door-1"),
                Event.end_edge(at(120), at(200), "back", source="door-1")]
    return [{"seq": i, **_record(e)} for i, e in enumerate(arrivals)]


@pytest.mark.parametrize("on_late", ["drop", "adjust"])
def test_door_edges_equal_the_engine_in_every_plan_and_cut(spark, tmp_path, on_late):
    records = _doors()
    for cuts, formats in (((), ("jsonl",)), ((3, 7), ("jsonl", "csv")), ((1, 5, 9), ("csv",))):
        tmp = tmp_path / f"{on_late}-{len(cuts)}"
        tmp.mkdir()
        paths = _write_pieces(tmp, records, cuts, formats)
        want = engine_replay_bytes(paths, tmp, delay="30s", on_late=on_late)
        for reason in (b'"reason":"end_edge"', b'"reason":"no_start"', b'"reason":"not_closed"'):
            assert reason in want[1]  # every fate is there: the comparison can fail
        if on_late == "drop":
            assert b'"reason":"start_dropped"' in want[1]
        for options in ({}, {"strategy": "ranges"}, {"ranges": 4}):
            got = _spark_bytes(spark, paths, delay="30s", on_late=on_late, **options)
            assert got == want, (cuts, options)


@st.composite
def _edge_log(draw):
    """An edge log (``edge_arrivals_strategy``) with ``seq``, cut into 1-3 files."""
    arrivals = draw(edge_arrivals_strategy(max_size=30))
    records = [{"seq": i, **_record(e)} for i, e in enumerate(arrivals)]
    cuts = draw(st.lists(st.integers(1, max(1, len(records) - 1)), max_size=2))
    return records, cuts


@settings(phases=_NO_SHRINK, max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(log=_edge_log(), delay=st.sampled_from([0, 4, 15]).map(Nanoseconds),
       on_late=st.sampled_from(["drop", "adjust"]),
       options=st.sampled_from([{}, {"ranges": 3}, {"strategy": "ranges", "ranges": 1}]))
def test_edge_logs_split_into_files_and_ranges_equal_the_engine(spark, tmp_path_factory, log,
                                                               delay, on_late, options):
    records, cuts = log
    tmp = tmp_path_factory.mktemp("edges")
    paths = _write_pieces(tmp, records, cuts) if records else [tmp / "empty.jsonl"]
    if not records:
        paths[0].write_bytes(b"")
    want = engine_replay_bytes(paths, tmp, delay=delay, on_late=on_late)
    assert _spark_bytes(spark, paths, delay=delay, on_late=on_late, **options) == want


def test_read_event_log_reads_edges_with_their_id_as_json_text(spark, tmp_path):
    from spark_adapter import read_event_log

    path = tmp_path / "doors.jsonl"
    write_log(path, [{"source": "A", "kind": "insert", "start": 1},
                     {"source": "A", "kind": "start", "start": 2, "id": "7"},
                     {"source": "A", "kind": "end", "start": 2, "end": 5, "id": 7}])
    rows = read_event_log(spark, str(path)).orderBy("line").collect()
    assert [(r["kind"], r["start"], r["end"], r["id"]) for r in rows] == [
        ("insert", 1, None, None), ("start", 2, None, '"7"'), ("end", 2, 5, "7")]
    assert orjson.loads(rows[1]["id"]) != orjson.loads(rows[2]["id"])  # "7" is not 7


_USER_SCHEMA = "seq long, source string, kind string, start long, end long, payload string"


def test_a_users_frame_with_an_id_column_decides_its_edges(spark):
    """A Spark user's frame of door rows: ``id`` a plain string column, two clock groups with
    the same door names; the late frame says each edge's fate with its reason."""
    from engine.times import MIN_TIME
    from spark_adapter import replay

    rows = [(0, "A", "start", 10, None, "s", "front"), (1, "A", "cti", 50, None, None, None),
            (2, "A", "end", 10, 30, None, "front"), (3, "A", "start", 20, None, None, "back"),
            (4, "A", "end", 20, 60, None, "back"), (5, "B", "end", 1, 2, None, "front"),
            (6, "A", "start", 70, None, None, "side")]
    other = [(7, "A", "start", 5, None, None, "front")]  # group 1: no CTI, never closed
    frame = spark.createDataFrame([(0, *r) for r in rows] + [(1, *r) for r in other],
                                  "g int, " + _USER_SCHEMA + ", id string")
    for strategy in ("scan", "ranges"):
        events, late = replay(frame, delay=0, on_late="drop", order_by=["seq"], group_col="g",
                              strategy=strategy)
        got = [(r["g"], r["kind"], r["source"], r["start"], r["end"], r["id"], r["cti"])
               for r in events.orderBy("seq").collect()]
        assert got == [(0, "start", "A", 10, None, "front", None),
                       (0, "cti", None, 50, None, None, 50),
                       (0, "end", "A", 10, 50, "front", 50),
                       (0, "start", "A", 70, None, "side", 50),
                       (1, "start", "A", 5, None, "front", None)]
        fates = [(r["seq"], r["action"], r["reason"], r["cti"], r["adjusted_end"])
                 for r in late.orderBy("seq").collect()]
        assert fates == [
            (2, "adjusted", "end_edge", 50, 50), (3, "dropped", None, 50, None),
            (4, "dropped", "start_dropped", 50, None), (5, "unmatched", "no_start", 50, None),
            (6, "unmatched", "not_closed", 50, None),
            (7, "unmatched", "not_closed", MIN_TIME, None)]  # as the late file writes it


def test_frames_and_plans_without_an_edge_form_refuse_edge_rows_by_name(spark):
    from spark_adapter import replay

    rows = [(0, "A", "insert", 1, None, None), (1, "A", "end", 1, 5, None),
            (2, "A", "cti", 9, None, None)]
    no_id = spark.createDataFrame(rows, _USER_SCHEMA)
    with pytest.raises(Exception, match="needs an 'id' column"):
        replay(no_id, delay=0, order_by=["seq"])[0].collect()
    with_id = no_id.withColumn("id", F.lit("door"))
    for strategy in ("bucketed", "global"):
        with pytest.raises(Exception, match=f"strategy='{strategy}' has no form for edge rows"):
            replay(with_id, delay=0, strategy=strategy, order_by=["seq"])[0].collect()
        plain = with_id.where("kind != 'end'")  # without edges the plan runs as before
        events, late = replay(plain, delay=0, strategy=strategy, order_by=["seq"])
        assert sorted(r.kind for r in events.collect()) == ["cti", "insert"]
        assert late.columns[-2:] == ["adjusted_end", "reason"]


def test_more_start_edges_than_max_open_are_refused_with_the_counts(spark):
    """TS §7.6: the keys are decided apart only while the bound cannot be reached."""
    from operators.edges import with_edges
    from operators.policies import goldilocks
    from spark_adapter import replay

    rows = [(i, "A", "start", i, None, None, f"d{i}") for i in range(4)]
    frame = spark.createDataFrame(rows, _USER_SCHEMA + ", id string")
    with pytest.raises(NotImplementedError, match="up to 4 edges open at once, more than "
                                                  "max_open=3"):
        replay(frame, policy=with_edges(goldilocks(0), max_open=3), order_by=["seq"])
    events, late = replay(frame, policy=with_edges(goldilocks(0), max_open=4), order_by=["seq"])
    assert events.count() == 4 and late.where("reason = 'not_closed'").count() == 4


def test_many_start_edges_closed_in_turn_stay_within_a_small_bound(spark, tmp_path):
    """A door opened and closed 40 times, two doors open at most at once: a bound of 2 is
    never reached, so the replay runs (not refused for its 80 start edges) and equals the
    engine's under the same bound; three doors open at once under a bound of 2 are
    refused."""
    from operators.edges import with_edges
    from operators.policies import goldilocks
    from spark_adapter import replay

    records = []
    for i in range(40):  # door d{i % 2} opens at 10i and closes at 10i + 15
        records.append({"seq": 2 * i, "source": "A", "kind": "start", "start": 10 * i,
                        "id": f"d{i % 2}"})
        if i:
            records.append({"seq": 2 * i + 1, "source": "A", "kind": "end",
                            "start": 10 * (i - 1), "end": 10 * i + 5, "id": f"d{(i - 1) % 2}"})
    records.append({"seq": 100, "source": "A", "kind": "cti", "start": 1000})
    path = tmp_path / "doors.jsonl"
    write_log(path, records)
    policy = with_edges(goldilocks(0), max_open=2)
    want = engine_replay_bytes([path], tmp_path, policy=policy)
    assert want[1].count(b'"reason":"not_closed"') == 1  # the last door left open
    assert _spark_bytes(spark, [path], policy=policy) == want
    rows = [(0, "A", "start", 1, None, None, "a"), (1, "A", "start", 2, None, None, "b"),
            (2, "A", "start", 3, None, None, "c")]
    three = spark.createDataFrame(rows, _USER_SCHEMA + ", id string")
    with pytest.raises(NotImplementedError, match="up to 3 edges open at once"):
        replay(three, policy=policy, order_by=["seq"])


def test_bad_edge_rows_name_the_row(spark):
    from spark_adapter import replay

    rows = [(0, "A", "start", 1, None, None, None), (1, "A", "cti", 9, None, None, None)]
    frame = spark.createDataFrame(rows, _USER_SCHEMA + ", id string")
    with pytest.raises(Exception, match=r"a row of kind 'start' has no id \(TS §7.1\) \(seq=0"):
        replay(frame, delay=0, order_by=["seq"])[0].collect()
    rows = [(0, "A", "end", 5, 5, None, "x"), (1, "A", "cti", 9, None, None, None)]
    frame = spark.createDataFrame(rows, _USER_SCHEMA + ", id string")
    with pytest.raises(Exception, match=r"the end edge at seq=0: .*end"):
        replay(frame, delay=0, order_by=["seq"])[0].collect()


@pytest.mark.parametrize("on_late", ["drop", "adjust"])
def test_windows_count_an_edge_once_by_its_start_edge_as_replay_does(spark, tmp_path,
                                                                      on_late):
    """TS §7.8: Spark's windows over the replayed door log are ``replay --window``'s rows."""
    import io

    from goldilocks.windowed import replay_windows, window_row
    from spark_adapter import read_event_log, replay, windows

    path = tmp_path / "doors.jsonl"
    write_log(path, _doors())
    want = io.BytesIO()
    replay_windows([str(path)], window="30s", aggregates=["count"], delay="30s",
                   on_late=on_late, out=want)
    events, _ = replay(read_event_log(spark, str(path)), delay="30s", on_late=on_late)
    rows = windows(events, window="30s", aggregates=["count"]).orderBy("end").collect()
    got = b"".join(window_row(r["start"], r["end"], None, r["count"], [("count", r["count"])],
                              False, False) for r in rows)
    assert got == want.getvalue()
    inserts = events.where("kind = 'insert'").count()
    assert sum(r["count"] for r in rows) > inserts  # start edges were counted


def test_keys_cut_across_arrow_batches_are_carried_over(spark, tmp_path):
    """Batches of two rows: a key's edges, and the last key's never-closed start edge, span
    the edge pass's Arrow batches; the answer is still the engine's."""
    records = _doors()
    path = tmp_path / "doors.jsonl"
    write_log(path, records)
    want = engine_replay_bytes([path], tmp_path, delay="30s", on_late="adjust")
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    spark.conf.set(key, "2")
    try:
        assert _spark_bytes(spark, [path], delay="30s", on_late="adjust") == want
    finally:
        spark.conf.set(key, old)
