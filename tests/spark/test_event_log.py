"""Reading event logs in Spark: the engine's reader on the executors, the engine's errors, and
batch replay byte-identical to ``goldilocks.replay`` (docs/event-log.md, TS §5.1–§5.3)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engine.errors import BadRecordError, InputError
from engine.times import Nanoseconds
from eventlog import write_log
from goldilocks.replay import replay as engine_replay
from spark_adapter.schema import ORDER_COLUMNS
from spark_support import canonical_events, canonical_late, engine_replay_bytes

pytestmark = pytest.mark.spark

# Each example runs Spark jobs (seconds): report a failing example as found, unshrunk.
_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)

ORDER = ["order_key", "file_index", "line"]


def _spark_replay_bytes(spark, paths, **options):
    from spark_adapter import read_event_log, replay

    reading = ("bad_records", "quarantine", "merge")
    frame = read_event_log(spark, paths, **{k: v for k, v in options.items() if k in reading})
    rest = {k: v for k, v in options.items() if k not in reading}
    events, late = replay(frame, **rest)
    return (canonical_events(events.orderBy(*ORDER).collect()),
            canonical_late(late.orderBy(*ORDER).collect()))


def test_read_gives_the_documented_schema_and_values(spark, tmp_path):
    from spark_adapter import EVENT_LOG_SCHEMA, read_event_log

    log = tmp_path / "a.jsonl"
    log.write_text(
        '{"seq": 4, "source": "A", "kind": "insert", "start": "1970-01-01T00:00:01Z", '
        '"end": 2000000000, "payload": {"b": 1, "a": [true, null]}}\n'
        "\n"
        '{"seq": 9, "kind": "cti", "start": 7}\n'
        '{"seq": 9, "source": "A", "kind": "leave"}\n')
    frame = read_event_log(spark, log)
    assert frame.schema.simpleString() == spark.createDataFrame([], EVENT_LOG_SCHEMA).schema.simpleString()
    rows = [r.asDict() for r in frame.orderBy(*ORDER).collect()]
    assert rows == [
        dict(seq=4, source="A", kind="insert", start=10**9, end=2 * 10**9,
             payload='{"b":1,"a":[true,null]}', id=None, arrival=None, order_key=4,
             file_index=0, line=1),
        dict(seq=9, source=None, kind="cti", start=7, end=None, payload=None, id=None,
             arrival=None, order_key=9, file_index=0, line=3),
        dict(seq=9, source="A", kind="leave", start=None, end=None, payload=None, id=None,
             arrival=None, order_key=9, file_index=0, line=4),
    ]


def test_a_directory_reads_its_log_files_by_name_and_skips_hidden_ones(spark, tmp_path):
    from spark_adapter import read_event_log

    write_log(tmp_path / "b.csv", [{"source": "B", "kind": "insert", "start": 2}])
    write_log(tmp_path / "a.jsonl", [{"source": "A", "kind": "insert", "start": 1}])
    (tmp_path / ".a-000001.jsonl.tmp").write_text("{broken\n")
    (tmp_path / "_SUCCESS").write_text("")
    rows = read_event_log(spark, tmp_path).orderBy("file_index").collect()
    assert [(r["source"], r["file_index"]) for r in rows] == [("A", 0), ("B", 1)]


# -- differential: Spark replay == engine replay, byte for byte ----------------------------

_SOURCES = ["A", "B", "C"]


@st.composite
def _logs(draw):
    """1-3 files of one order-key mode, each in a random format, with late events likely."""
    mode = draw(st.sampled_from(["position", "seq", "arrival"]))
    files = []
    for _ in range(draw(st.integers(1, 3))):
        fmt = draw(st.sampled_from(["jsonl", "csv", "parquet"]))
        key = draw(st.integers(0, 5))
        records = []
        for _ in range(draw(st.integers(0, 12))):
            kind = draw(st.sampled_from(["insert", "insert", "cti", "leave", "join"]))
            rec = {"source": draw(st.sampled_from(_SOURCES)), "kind": kind}
            if kind in ("insert", "cti"):
                rec["start"] = draw(st.integers(0, 40))
            if kind == "insert" and draw(st.booleans()):
                rec["end"] = rec["start"] + draw(st.integers(1, 20))
            if kind == "insert" and draw(st.booleans()):
                rec["payload"] = draw(st.sampled_from([1, "x", {"k": [1, 2]}, [None, True]]))
            if kind == "cti" and draw(st.booleans()):
                rec["source"] = None
            key += draw(st.integers(0, 3))
            if mode != "position":
                rec[mode] = key
            records.append(rec)
        if fmt == "csv" and not any("start" in r for r in records):
            fmt = "jsonl"  # a CSV log needs a start column (docs/event-log.md)
        files.append((fmt, records))
    return files


def _write(tmp_path, files, tag=""):
    paths = []
    for i, (fmt, records) in enumerate(files):
        path = tmp_path / f"log{tag}{i}.{fmt}"
        write_log(path, records)
        paths.append(path)
    return paths


@settings(phases=_NO_SHRINK, max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files=_logs(), delay=st.sampled_from([0, 3, 10]).map(Nanoseconds),
       on_late=st.sampled_from(["drop", "adjust"]))
def test_spark_replay_equals_the_engine_byte_for_byte(spark, tmp_path_factory, files, delay, on_late):
    tmp = tmp_path_factory.mktemp("logs")
    paths = _write(tmp, files)
    want = engine_replay_bytes(paths, tmp, delay=delay, on_late=on_late)
    assert _spark_replay_bytes(spark, paths, delay=delay, on_late=on_late) == want


def _device_logs(tmp_path, split=False):
    """Two devices' own logs, no seq or arrival: A's clock an hour ahead of B's, B's
    readings each a second after the one before. Read round-robin by position, A's CTIs
    make B late; merged by time, nothing is."""
    hour = 3600 * 10**9

    def log(device, first, count):  # each reading, then the device's CTI at it
        return [{"source": device, "kind": kind, "start": first + i * 10**9,
                 **({"payload": {"n": i}} if kind == "insert" else {})}
                for i in range(count) for kind in ("insert", "cti")]

    a, b = log("A", hour, 40), log("B", 0, 400)
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    write_log(paths[0], a)
    write_log(paths[1], b)
    return paths


@pytest.mark.parametrize("merge", ["auto", "arrival", "time"])
def test_per_device_logs_merge_as_the_engine_merges_them(spark, tmp_path, merge):
    """TS §5.8 in Spark: the same ``merge`` choices as the engine's replay, the same default
    (by time for several logs without an order key), so the same bytes, late rows included;
    the engine's ``arrival`` and ``time`` differ here, so a wrong choice cannot pass. A file
    merged by time is read whole even when it would be split."""
    paths = _device_logs(tmp_path)
    options = {"delay": Nanoseconds(0), "merge": merge}
    want = engine_replay_bytes(paths, tmp_path, **options)
    got = _spark_replay_bytes(spark, paths, **options)
    assert got == want
    late_lines = want[1].count(b"\n")
    if merge == "arrival":
        assert late_lines > 300  # round-robin: A's hour-ahead CTIs make B's readings late
    else:
        assert late_lines == 0


def test_a_time_merge_reads_each_file_in_one_task(spark, tmp_path):
    """Merged by time, a row's key is the latest time its file has shown up to it, which a
    span of the file cannot know: each file is one task, where by arrival it would be cut."""
    from spark_adapter import read_event_log
    from spark_adapter.files import list_logs
    from spark_adapter.source import plan_splits

    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for i, path in enumerate(paths):
        write_log(path, [{"source": "AB"[i], "kind": "insert", "start": n * 10**9, "seq": n}
                         for n in range(300)])
    files = list_logs([str(p) for p in paths])
    chosen: list[str] = []
    assert len(plan_splits(files, 1024, merge="auto", chosen=chosen)) > 4
    assert chosen == ["arrival"]  # an order key: the arrival order
    chosen.clear()
    assert len(plan_splits(files, 1024, merge="time", chosen=chosen)) == 2
    assert chosen == ["time"]
    frame = read_event_log(spark, paths, split_bytes=1024, merge="time")
    assert frame.rdd.getNumPartitions() == 2
    rows = frame.orderBy(*ORDER).select("source", "start").collect()
    assert [r.start for r in rows] == sorted(r.start for r in rows)
    with pytest.raises(InputError, match="merge='sideways'; expected one of auto, arrival, time"):
        read_event_log(spark, paths, merge="sideways")


def test_bundled_style_log_with_iso_times_matches_the_engine(spark, tmp_path):
    base = "2026-11-22T08:0{}:00Z"
    records = [
        {"source": "thermo-1", "kind": "insert", "start": base.format(5), "payload": {"c": 21.5}},
        {"source": "thermo-2", "kind": "insert", "start": base.format(0)},
        {"source": "thermo-1", "kind": "cti", "start": base.format(5)},
        {"source": "thermo-2", "kind": "cti", "start": base.format(0)},
        {"source": "thermo-1", "kind": "insert", "start": base.format(7),
         "end": "2026-11-22T09:09:00+01:00"},
        {"source": "thermo-1", "kind": "cti", "start": base.format(8)},
        {"source": "thermo-2", "kind": "insert", "start": base.format(1), "end": base.format(6)},
    ]
    paths = [tmp_path / "seed.jsonl"]
    write_log(paths[0], records)
    for on_late in ("drop", "adjust"):
        want = engine_replay_bytes(paths, tmp_path, delay="5m", on_late=on_late)
        assert want[1]  # the log has a late event, so the comparison can fail
        assert _spark_replay_bytes(spark, paths, delay="5m", on_late=on_late) == want


_DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "data"


@pytest.mark.parametrize("which", ["fleet.jsonl", "devices"])
def test_bundled_logs_replay_as_in_the_engine(spark, tmp_path, which):
    paths = ([_DATA / which] if which.endswith(".jsonl")
             else sorted((_DATA / which).glob("*.jsonl")))
    want = engine_replay_bytes(paths, tmp_path, delay="90s", on_late="adjust")
    assert want[1]  # late events present: the comparison can fail
    assert _spark_replay_bytes(spark, paths, delay="90s", on_late="adjust") == want


# -- bad records: the engine's errors, skip and quarantine -----------------------------------

def _broken_log(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"source": "A", "kind": "insert", "start": 1}\n'
                    '{"source": "A", "kind": "cti", "start": 5}\n'
                    '{"source": "A", "kind": "insert", "start": "yesterday"}\n'
                    '{"source": "A", "kind": "insert", "start": 7}\n'
                    '{"source": "A", "kind": "insert", "start": 8, "end": 3}\n')
    return path


def test_a_malformed_record_fails_with_the_engines_message_naming_file_and_line(spark, tmp_path):
    from spark_adapter import read_event_log

    path = _broken_log(tmp_path)
    with pytest.raises(BadRecordError) as engine_error:
        engine_replay([path], delay=0, out=None)
    message = str(engine_error.value)
    assert message.startswith(f"{path}:3:")
    frame = read_event_log(spark, path)  # lazy: nothing read yet
    with pytest.raises(Exception) as spark_error:
        frame.collect()
    assert message in str(spark_error.value)
    assert "BadRecordError" in str(spark_error.value)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_bad_times_in_csv_and_parquet_name_the_line(spark, tmp_path, fmt):
    from spark_adapter import read_event_log

    path = tmp_path / f"bad.{fmt}"
    if fmt == "csv":
        path.write_text("source,kind,start\nA,insert,1\nA,insert,soon\n")
    else:
        write_log(path, [{"source": "A", "kind": "insert", "start": 1},
                         {"source": "A", "kind": "cti", "start": 3, "end": 9}])
    with pytest.raises(BadRecordError) as engine_error:
        engine_replay([path], delay=0)
    with pytest.raises(Exception) as spark_error:
        read_event_log(spark, path).collect()
    assert str(engine_error.value) in str(spark_error.value)
    assert re.search(rf"{re.escape(str(path))}:\d+:", str(spark_error.value))


def test_skip_and_quarantine_behave_as_in_the_engine(spark, tmp_path):
    from spark_adapter import read_event_log

    path = _broken_log(tmp_path)
    want = engine_replay_bytes([path], tmp_path, delay=0, bad_records="skip")
    assert _spark_replay_bytes(spark, [path], delay=0, bad_records="skip") == want

    engine_q = tmp_path / "engine-quarantine.jsonl"
    engine_replay([path], delay=0, bad_records="quarantine", quarantine=engine_q)
    qdir = tmp_path / "quarantine"
    assert read_event_log(spark, path, bad_records="quarantine", quarantine=qdir).count() == 3
    written = sorted(qdir.iterdir())
    assert [p.name for p in written] == ["000000-broken.jsonl.bad.jsonl"]
    assert written[0].read_bytes() == engine_q.read_bytes()
    assert engine_q.read_bytes().count(b"\n") == 2


def test_files_with_different_order_keys_are_refused(spark, tmp_path):
    from spark_adapter import read_event_log

    write_log(tmp_path / "a.jsonl", [{"seq": 1, "source": "A", "kind": "insert", "start": 1}])
    write_log(tmp_path / "b.jsonl", [{"source": "B", "kind": "insert", "start": 1}])
    with pytest.raises(Exception, match="must use the same order key"):
        read_event_log(spark, [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]).collect()


def test_bad_arguments_are_refused_on_the_driver(spark, tmp_path):
    from spark_adapter import read_event_log

    with pytest.raises(InputError, match="no such file"):
        read_event_log(spark, tmp_path / "missing.jsonl")
    with pytest.raises(InputError, match="bad_records"):
        read_event_log(spark, tmp_path, bad_records="ignore")
    with pytest.raises(InputError, match="quarantine"):
        read_event_log(spark, tmp_path, bad_records="quarantine")


def test_time_unit_reads_integer_times_as_the_engine_does(spark, tmp_path):
    """Epoch seconds in a log: refused with the engine's message without a unit, read as
    the engine reads them with ``time_unit="s"`` (also a bad unit is refused at once)."""
    from spark_adapter import read_event_log, replay

    log = tmp_path / "seconds.jsonl"
    write_log(log, [{"source": "A", "kind": "insert", "start": 1_795_334_401},
                    {"source": "A", "kind": "cti", "start": 1_795_334_460},
                    {"source": "B", "kind": "insert", "start": 1_795_334_402}])
    with pytest.raises(Exception, match="looks like seconds since the epoch"):
        read_event_log(spark, log).collect()
    with pytest.raises(InputError, match="time_unit='sec'"):
        read_event_log(spark, log, time_unit="sec")
    frame = read_event_log(spark, log, time_unit="s")
    assert [r["start"] for r in frame.orderBy("line").collect()] == [
        1_795_334_401 * 10**9, 1_795_334_460 * 10**9, 1_795_334_402 * 10**9]
    events, late = replay(frame, delay="30s")
    out, late_bytes = engine_replay_bytes([log], tmp_path, delay="30s", time_unit="s")
    assert canonical_events(events.orderBy(*ORDER_COLUMNS).collect()) == out
    assert canonical_late(late.orderBy(*ORDER_COLUMNS).collect()) == late_bytes != b""
