"""The late file says which rule made each record late (``"reason"``), on every writer of
late records; a record without a reason is written as before, byte for byte."""

from __future__ import annotations

import io

import orjson

from engine.event import ADJUSTED, DROPPED, Event, LateRecord
from eventlog import EventLogWriter, encode_late, read_records
from goldilocks.replay import replay

# A and B agree; under quantile(k=2) B's CTI at 20 is the most advanced, so the CTI follows
# A's 10, and A's insert at 3 (after it) is late by the quantile rule.
LOG = (b'{"source":"A","kind":"insert","start":5}\n'
       b'{"source":"A","kind":"cti","start":10}\n'
       b'{"source":"B","kind":"cti","start":20}\n'
       b'{"source":"A","kind":"insert","start":3,"end":15,"payload":{"v":1}}\n'
       b'{"source":"B","kind":"insert","start":4}\n')


def test_a_record_with_a_reason_ends_with_it_and_one_without_is_unchanged():
    ev = Event.interval(3, 15, payload={"v": 1}, source="A")
    clipped = Event.interval(10, 15, payload={"v": 1}, source="A")
    plain = encode_late(LateRecord("A", ev, 10, ADJUSTED, clipped))
    assert plain == (b'{"source":"A","kind":"insert","start":3,"end":15,"payload":{"v":1},'
                     b'"cti":10,"action":"adjusted","adjusted_start":10}\n')
    why = encode_late(LateRecord("A", ev, 10, ADJUSTED, clipped, "max_ahead"))
    assert why == plain[:-2] + b',"reason":"max_ahead"}\n'
    iso = encode_late(LateRecord("A", Event.point(3, source="A"), 10, DROPPED,
                                 reason="resumed"), "iso")
    assert orjson.loads(iso)["reason"] == "resumed"
    assert iso.endswith(b'"action":"dropped","reason":"resumed"}\n')


def test_replay_writes_the_rule_on_each_late_line_on_both_paths(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_bytes(LOG)
    files = {}
    for columnar in (False, True):
        late = tmp_path / f"late-{columnar}.jsonl"
        stats = replay([log], policy="quantile", on_late="adjust", out=tmp_path / "out.jsonl",
                       late=late, columnar=columnar)
        assert stats.path == ("columnar" if columnar else "element")
        files[columnar] = late.read_bytes()
    assert files[False] == files[True]
    records = [orjson.loads(line) for line in files[False].splitlines()]
    assert [(r["source"], r["start"], r["action"], r["reason"]) for r in records] == [
        ("A", 3, "adjusted", "quantile"), ("B", 4, "dropped", "quantile")]


def test_goldilocks_late_files_carry_no_reason_field(tmp_path, seed_log):
    late = tmp_path / "late.jsonl"
    replay([seed_log], delay="5m", late=late)
    text = late.read_bytes()
    assert text and b'"reason"' not in text


def test_a_late_file_with_reasons_still_reads_as_an_event_log(tmp_path):
    """Readers that know nothing of ``reason`` (the log readers, which ignore fields they do
    not use) read the late file as the late inserts."""
    log = tmp_path / "log.jsonl"
    log.write_bytes(LOG)
    late = tmp_path / "late.jsonl"
    replay([log], policy="quantile", late=late)
    assert b'"reason":"quantile"' in late.read_bytes()
    records = list(read_records([late]))
    assert [(r["source"], r["kind"], r["start"]) for r in records] == [
        ("A", "insert", 3), ("B", "insert", 4)]


def test_the_log_writer_keeps_the_reason():
    """``EventLogWriter`` (the server's late parts go through it) writes the reason too."""
    buf = io.BytesIO()
    writer = EventLogWriter(buf)
    writer.write(LateRecord("A", Event.point(3, source="A"), 10, DROPPED, reason="quantile"))
    writer.close()
    assert orjson.loads(buf.getvalue().splitlines()[0])["reason"] == "quantile"


def test_the_servers_late_parts_keep_the_reason(tmp_path):
    """``RollingFileSink`` (what ``serve --out-dir`` writes the late output with) writes the
    reason as the late file does."""
    from engine.sources import from_iterable
    from eventlog import RollingFileSink

    records = [LateRecord("A", Event.point(3, source="A"), 10, DROPPED, reason="max_ahead"),
               LateRecord("B", Event.point(4, source="B"), 10, DROPPED)]
    sink = RollingFileSink(tmp_path, prefix="late", max_events=10)
    from_iterable(records).subscribe(sink)
    assert sink.error is None and sink.published
    text = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("late-*.jsonl")))
    lines = [orjson.loads(line) for line in text.splitlines()]  # with seq, in arrival order
    assert [line.get("reason") for line in lines] == ["max_ahead", None]
    assert text.splitlines()[0].endswith(b'"action":"dropped","reason":"max_ahead"}')
