"""``PartWriter``: the parts of ``serve --out-dir``, consistent with every checkpoint — parts
published only once a checkpoint covers them, a restart cutting them back to the record and
finishing a publication a crash interrupted, numbering and ``seq`` continuing."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from engine.event import Event
from goldilocks.parts import PartWriter, read_part
from operators.checkpoint import CheckpointError

T0 = 1_795_334_400_000_000_000


def _events(first: int, count: int) -> list[Event]:
    return [Event.point(T0 + i, {"i": i}, "d") for i in range(first, first + count)]


def _lines(folder, prefix="events"):
    return [json.loads(line) for part in sorted(folder.glob(f"{prefix}-*.jsonl"))
            for line in part.read_bytes().splitlines()]


def test_without_a_checkpoint_parts_are_published_as_they_close_and_seq_goes_on(tmp_path):
    first = PartWriter(tmp_path, max_events=4)
    first.write_events(_events(0, 10))
    first.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "events-000000.jsonl", "events-000001.jsonl", "events-000002.jsonl"]
    second = PartWriter(tmp_path, max_events=4)  # a restart: after what the folder holds
    second.write_events(_events(10, 3))
    second.finish()
    assert [r["seq"] for r in _lines(tmp_path)] == list(range(13))  # no seq twice
    assert [r["payload"]["i"] for r in _lines(tmp_path)] == list(range(13))
    assert (tmp_path / "events-000003.jsonl").exists()


def test_a_part_a_crash_left_unpublished_is_published_with_its_whole_lines(tmp_path):
    crashed = PartWriter(tmp_path, max_events=100)
    crashed.write_events(_events(0, 5))
    crashed.flush()
    temp = tmp_path / ".events-000000.jsonl.tmp"
    with open(temp, "ab") as f:
        f.write(b'{"seq":5,"source":"d","ki')  # killed mid-line
    after = PartWriter(tmp_path, max_events=100)
    assert not temp.exists() and after.seq == 5 and after.next_part == 1
    assert [r["seq"] for r in _lines(tmp_path)] == list(range(5))


def test_with_a_checkpoint_closed_parts_wait_for_the_checkpoint_that_covers_them(tmp_path):
    writer = PartWriter(tmp_path, max_events=3, deferred=True)
    writer.write_events(_events(0, 7))
    assert not list(tmp_path.glob("events-*.jsonl"))  # closed, not published
    record = writer.mark()
    assert record["open"][:2] == [2, os.path.getsize(tmp_path / ".events-000002.jsonl.tmp")]
    assert [n for n, _ in record["closed"]] == [0, 1] and record["seq"] == 7
    writer.sync(record)
    writer.write_events(_events(7, 3))  # goes on while the checkpoint is written
    assert [os.path.basename(p) for p in writer.publish(record)] == [
        "events-000000.jsonl", "events-000001.jsonl"]
    assert writer.stats().waiting == 1  # part 2 closed after the mark: the next checkpoint's


def test_a_restart_cuts_back_to_the_record_and_finishes_the_publication(tmp_path):
    writer = PartWriter(tmp_path, max_events=3, deferred=True)
    writer.write_events(_events(0, 7))
    record = json.loads(json.dumps(writer.mark()))  # as the checkpoint holds it
    writer.sync(record)
    # crash after publishing one of the two parts, with more written since the mark
    os.replace(tmp_path / ".events-000000.jsonl.tmp", tmp_path / "events-000000.jsonl")
    writer.write_events(_events(7, 5))
    writer.flush()
    assert (tmp_path / ".events-000003.jsonl.tmp").exists()  # a part the record lacks
    PartWriter.check(tmp_path, "events", record, "ckpt")
    restarted = PartWriter(tmp_path, max_events=3, deferred=True, record=record)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".events-000002.jsonl.tmp", "events-000000.jsonl", "events-000001.jsonl"]
    restarted.write_events(_events(7, 5))
    restarted.close_part()
    restarted.publish(restarted.mark())
    assert [(r["seq"], r["payload"]["i"]) for r in _lines(tmp_path)] == \
        [(i, i) for i in range(12)]


@pytest.mark.parametrize("damage, words", [
    (lambda d: (d / ".events-000002.jsonl.tmp").unlink(), "is missing"),
    (lambda d: os.truncate(d / ".events-000001.jsonl.tmp", 5), "5 bytes, the checkpoint"),
    (lambda d: shutil.copy(d / ".events-000001.jsonl.tmp", d / "events-000009.jsonl"),
     "has moved on past this checkpoint"),
])
def test_a_folder_that_does_not_match_the_record_is_refused_naming_what(tmp_path, damage,
                                                                         words):
    writer = PartWriter(tmp_path, max_events=3, deferred=True)
    writer.write_events(_events(0, 7))
    record = writer.mark()
    writer.discard()
    damage(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(CheckpointError, match=words):
        PartWriter.check(tmp_path, "events", record, "ckpt")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_parts_are_read_back_from_a_position_whole_lines_only(tmp_path):
    writer = PartWriter(tmp_path, max_events=4, deferred=True)
    writer.write_events(_events(0, 10))
    paths = writer.paths_from(5)
    assert [first for first, _ in paths] == [4, 8]
    events, nxt, end = read_part(paths[0][1], 5, 10)
    assert [e.payload["i"] for e in events] == [5, 6, 7] and nxt == 8 and end
    events, nxt, end = read_part(paths[1][1], 8, 1)
    assert [e.payload["i"] for e in events] == [8] and nxt == 9 and not end
