"""The streaming pieces with a real local session: the ``"goldilocks"`` source over a directory
of rolling-sink parts, ``watermark_stage`` over our own log format (``EVENT_LOG_STAGE``) equal
to ``goldilocks.replay`` across micro-batches, Spark's watermark following the CTI, and a
restart from a checkpoint that really runs a batch again."""

from __future__ import annotations

import random
import shutil

import pytest

from eventlog import RollingFileSink, write_log
from engine.event import Event
from engine.sources import from_iterable
from spark_support import canonical_events, canonical_late, engine_replay_bytes

pytestmark = pytest.mark.spark

S = 10**9
TIMEOUT = 180  # seconds; a query that takes longer fails the test


def _write_parts(directory, parts, first=0):
    directory.mkdir(parents=True, exist_ok=True)
    for i, records in enumerate(parts, start=first):
        write_log(directory / f"events-{i:06d}.jsonl", records)


def _random_parts(seed, n_parts=4, per_part=12):
    rng = random.Random(seed)
    parts = []
    for _ in range(n_parts):
        records = []
        for _ in range(per_part):
            source = rng.choice("ABC")
            r = rng.random()
            if r < 0.08:
                records.append({"source": source, "kind": rng.choice(["join", "leave"])})
            elif r < 0.35:
                records.append({"source": source, "kind": "cti", "start": rng.randint(0, 90) * S})
            else:
                rec = {"source": source, "kind": "insert", "start": rng.randint(0, 90) * S,
                       "payload": {"n": rng.randint(0, 9)}}
                if rng.random() < 0.5:
                    rec["end"] = rec["start"] + rng.randint(1, 30) * S
                records.append(rec)
        parts.append(records)
    return parts


def _run_available_now(frame, name, checkpoint, sink="memory", path=None):
    writer = (frame.writeStream.format(sink).outputMode("append")
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    if sink == "memory":
        writer = writer.queryName(name)
    query = writer.start(str(path)) if path is not None else writer.start()
    assert query.awaitTermination(TIMEOUT), f"query {name} did not finish in {TIMEOUT}s"
    assert query.exception() is None
    return query


def _stream(spark, directory, **options):
    reader = spark.readStream.format("goldilocks")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(directory))


def _canonical(rows, reasons=None):
    """The stage's rows (``keep_late=True``) as the engine's output and late bytes, CTIs left
    out of the engine's output (the stage's output holds data rows only). ``reasons``: the
    late record's reason for a ``late_reason`` text (none by default)."""
    rows = sorted(rows, key=lambda r: r["order_key"])
    events = [dict(r.asDict(), kind="insert") for r in rows if r["late_reason"] is None]
    late = [dict(r.asDict(), action=r["late_action"],
                 adjusted_start=r["cti"] if r["late_action"] == "adjusted" else None,
                 reason=(reasons or {}).get(r["late_reason"]))
            for r in rows if r["late_reason"] is not None]
    return canonical_events(events), canonical_late(late)


def _without_ctis(output: bytes) -> bytes:
    return b"".join(line + b"\n" for line in output.splitlines() if b'"kind":"cti"' not in line)


def _concatenated(tmp_path, parts):
    path = tmp_path / "all.jsonl"
    write_log(path, [rec for part in parts for rec in part])
    return path


def _stage(stream, tmp_path, **options):
    from spark_adapter import EVENT_LOG_STAGE, watermark_stage

    return watermark_stage(stream, **EVENT_LOG_STAGE, state_dir=str(tmp_path / "state"),
                           keep_late=True, **options)


@pytest.mark.parametrize("policy, delay, on_late", [("goldilocks", "7s", "adjust"),
                                                     ("min", None, "drop")])
def test_event_log_parts_through_the_stage_equal_goldilocks_replay(spark, tmp_path, policy,
                                                                  delay, on_late):
    """Our own log format through the stage, in its arrival order: the engine's replay of
    the concatenated parts (inserts, intervals clipped, joins and leaves, late records)."""
    parts = _random_parts(seed=len(policy))
    _write_parts(tmp_path / "parts", parts)
    staged = _stage(_stream(spark, tmp_path / "parts", maxFilesPerTrigger=1), tmp_path,
                    delay=delay, policy=policy, on_late=on_late)
    name = f"stage_{policy}"
    query = _run_available_now(staged, name, tmp_path / "ck")
    assert [p["numInputRows"] for p in query.recentProgress][:4] == [len(p) for p in parts]
    got = _canonical(spark.table(name).collect())
    out, late = engine_replay_bytes([_concatenated(tmp_path, parts)], tmp_path, delay=delay,
                                    policy=policy, on_late=on_late)
    assert late, "the log has late events, so the comparison can fail"
    assert got == (_without_ctis(out), late)


def test_spark_watermark_follows_the_cti_one_batch_later(spark, tmp_path):
    from datetime import datetime

    from spark_adapter import cti_to_watermark_ms

    ms = 10**6
    parts = [[{"source": "A", "kind": "insert", "start": 5 * S},
              {"source": "A", "kind": "cti", "start": 12 * S + 345 * ms + 678}],
             [{"source": "B", "kind": "insert", "start": 30 * S},
              {"source": "B", "kind": "cti", "start": 40 * S}],
             [{"source": "A", "kind": "cti", "start": 20 * S}],  # does not advance time
             [{"source": "A", "kind": "insert", "start": 60 * S}]]
    _write_parts(tmp_path / "parts", parts)
    staged = _stage(_stream(spark, tmp_path / "parts", maxFilesPerTrigger=1), tmp_path,
                    delay="2s")
    query = _run_available_now(staged, "stage_wm", tmp_path / "ck")
    marks = [p["eventTime"]["watermark"] for p in query.recentProgress]
    ctis = [None, 10 * S + 345 * ms + 678, 38 * S, 38 * S, 38 * S]  # in force after batch k-1
    expected = [cti_to_watermark_ms(c) if c is not None else 0 for c in ctis]
    as_ms = [int(datetime.fromisoformat(m.replace("Z", "+00:00")).timestamp() * 1000)
             for m in marks]
    assert as_ms[:4] == expected[:4]
    assert as_ms[1] == 10_344  # 10.345678 s -> 10 345 ms -> watermark 10 344 ms
    rows = spark.table("stage_wm").orderBy("order_key").collect()
    # each data row carries the CTI in force when its micro-batch began
    assert [(r["start"], r["cti"]) for r in rows] == [(5 * S, None), (30 * S, ctis[1]),
                                                      (60 * S, 38 * S)]
    observed = [p["observedMetrics"]["goldilocks"]["cti"] for p in query.recentProgress[:4]]
    assert observed[1] == 38_000  # the CTI after each batch, as it ends: epoch ms (UTC)


def test_restart_keeps_the_cti_and_reruns_a_batch_exactly_once(spark, tmp_path):
    """Stop, add parts, restart (the CTI survives in the stage's state files), then delete the
    last commit so that Spark runs that batch again — into a sink that really re-runs it
    (``foreachBatch`` overwriting per batch id; a file sink would skip the batch)."""
    from spark_adapter import EVENT_LOG_STAGE, read_stage_state, watermark_stage

    directory = tmp_path / "parts"
    first = [Event.point(5 * S, source="A"), Event.cti(50 * S, source="A"),
             Event.point(51 * S, source="B"), Event.cti(60 * S, source="B")]
    sink = RollingFileSink(directory, max_events=2)
    from_iterable(first).subscribe(sink)
    assert sink.done and len(sink.published) == 2
    out, checkpoint, state = tmp_path / "out", tmp_path / "ck", tmp_path / "state"
    runs: list = []

    def write(batch, batch_id):
        runs.append(batch_id)
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    def run():
        staged = watermark_stage(_stream(spark, directory, maxFilesPerTrigger=1),
                                 **EVENT_LOG_STAGE, delay="10s", state_dir=str(state),
                                 keep_late=True)
        query = (staged.writeStream.foreachBatch(write)
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(TIMEOUT)
        assert query.exception() is None
        return query

    q1 = run()
    assert sum(p["numInputRows"] for p in q1.recentProgress) == 4
    # more parts arrive while the query is down; the first one is late against CTI 50 s
    second = [Event.point(45 * S, source="C"), Event.cti(70 * S, source="C"),
              Event.point(65 * S, source="C")]
    sink2 = RollingFileSink(directory, max_events=2, first_seq=4)
    from_iterable(second).subscribe(sink2)
    q2 = run()
    assert sum(p["numInputRows"] for p in q2.recentProgress) == 3  # only the new parts
    saved = read_stage_state(str(state), str(q2.id))
    assert saved["groups"][()] == 60 * S  # C's CTI at 70 s, delayed: after the batch but one

    # replay the last batch as after a crash between writing and committing it
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    runs.clear()
    q3 = run()
    assert q3.recentProgress[0]["batchId"] == last and runs[0] == last  # ran again, for real
    assert q3.recentProgress[0]["numInputRows"] == 1

    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == len({(r["file_index"], r["line"]) for r in rows})  # no duplicates
    log = tmp_path / "all.jsonl"
    shutil.copyfile(directory / "events-000000.jsonl", log)
    with open(log, "ab") as f:
        for n in (1, 2, 3):
            f.write((directory / f"events-{n:06d}.jsonl").read_bytes())
    want_out, want_late = engine_replay_bytes([log], tmp_path, delay="10s")
    assert b'"start":45000000000' in want_late  # late only if the CTI survived the restart
    assert _canonical(rows) == (_without_ctis(want_out), want_late)
    files = sorted(p.name for p in (state / str(q3.id) / "goldilocks").iterdir())
    assert len(files) <= 2 + 1 + 3, files  # begun, snapshots kept, this batch's partials


def test_a_malformed_part_fails_the_query_with_the_engines_message(spark, tmp_path):
    directory = tmp_path / "parts"
    _write_parts(directory, [[{"source": "A", "kind": "insert", "start": 1}]])
    (directory / "events-000001.jsonl").write_text('{"source": "A", "kind": "cti"}\n')
    staged = _stage(_stream(spark, directory), tmp_path, delay=0)
    query = (staged.writeStream.format("memory").queryName("bad_part")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(Exception) as error:
        query.awaitTermination(TIMEOUT)
    assert f"{directory / 'events-000001.jsonl'}:1: field 'start': missing" in str(error.value)


def test_offsets_are_frozen_ordered_and_serialisable():
    import dataclasses
    import json
    import pickle

    from spark_adapter.source import PartOffset

    a, b = PartOffset(1), PartOffset(7)
    assert a < b and PartOffset() < a
    assert PartOffset.from_dict(json.loads(json.dumps(b.to_dict()))) == b
    assert pickle.loads(pickle.dumps(b)) == b
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.part = 3  # type: ignore[misc]


def test_the_source_lists_only_published_parts_of_its_prefix(tmp_path):
    from spark_adapter.source import EventLogStreamReader, list_parts

    _write_parts(tmp_path, [[{"source": "A", "kind": "insert", "start": 1}]] * 3)
    (tmp_path / ".events-000003.jsonl.tmp").write_text("{")
    (tmp_path / "other-000009.jsonl").write_text("{}\n")
    assert [n for n, _ in list_parts(str(tmp_path), "events")] == [0, 1, 2]
    reader = EventLogStreamReader({"path": str(tmp_path), "maxfilespertrigger": "2"})
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"part": 1}
    assert [p.part for p in reader.partitions(start, end)] == [0, 1]
    reader.prepareForTriggerAvailableNow()
    _write_parts(tmp_path, [[{"source": "A", "kind": "insert", "start": 1}]], first=3)
    assert reader.latestOffset(end, ReadAllAvailable()) == {"part": 2}  # not the new part 3


