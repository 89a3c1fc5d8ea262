"""``--merge time`` (TS §5.8): per-device logs without ``seq``/``arrival`` merged so that the
next record comes from the log furthest behind in time, instead of round-robin by position."""

from __future__ import annotations

import heapq

from hypothesis import given, settings, strategies as st

from engine.event import Event
from eventlog.format import encode_event
from goldilocks.cli import main
from goldilocks.replay import replay
from tests.reference import reference_goldilocks

T0 = 1_795_334_400 * 10**9
S = 10**9


def _time_order(streams):
    """The reference merge: each log's key is the latest time it has shown (its running
    maximum); the next record has the least key, ties by log, then line."""
    keyed = []
    for f, events in enumerate(streams):
        high = None
        for line, e in enumerate(events):
            high = e.start if high is None else max(high, e.start)
            keyed.append((high, f, line, e))
    return [e for *_, e in heapq.merge(*[[k for k in keyed if k[1] == f]
                                          for f in range(len(streams))])]


def _write(tmp_path, streams):
    paths = []
    for f, events in enumerate(streams):
        path = tmp_path / f"device-{f}.jsonl"
        path.write_bytes(b"".join(encode_event(e) for e in events))
        paths.append(str(path))
    return paths


@st.composite
def _streams(draw):
    streams = []
    for f in range(draw(st.integers(2, 4))):
        t = T0 + draw(st.integers(0, 600)) * S
        events = []
        for j in range(draw(st.integers(1, 40))):
            t += draw(st.integers(0, 20)) * S
            kind = draw(st.sampled_from(["point", "point", "cti", "late"]))
            name = f"dev{f}"
            if kind == "cti":
                events.append(Event.cti(t, source=name))
            else:
                start = t - (draw(st.integers(61, 600)) * S if kind == "late" else 0)
                events.append(Event.point(start, payload=[f, j], source=name))
        streams.append(events)
    return streams


@settings(max_examples=60, deadline=None)
@given(streams=_streams())
def test_ts_5_8_logs_merged_by_time_replay_as_time_order_does(tmp_path_factory, streams):
    tmp_path = tmp_path_factory.mktemp("logs")
    paths = _write(tmp_path, streams)
    out, late = tmp_path / "out.jsonl", tmp_path / "late.jsonl"
    replay(paths, delay="60s", merge="time", out=str(out), late=str(late))
    emitted, records = reference_goldilocks(_time_order(streams), 60 * S)
    assert out.read_bytes() == b"".join(encode_event(e) for e in emitted)
    assert len(late.read_bytes().splitlines()) == len(records)


def test_ts_5_8_by_position_a_log_ahead_makes_the_others_late(tmp_path, capsys):
    """Two devices an hour of records long, one recorded with its clock 10 minutes ahead:
    round-robin by position makes the other's readings late; by time, only the truly late."""
    ahead = [Event.point(T0 + 600 * S + i * 10 * S, payload=["a", i], source="a")
             for i in range(360)] + [Event.cti(T0 + 600 * S + 3600 * S, source="a")]
    behind = []
    for i in range(360):
        behind.append(Event.point(T0 + i * 10 * S, payload=["b", i], source="b"))
        if i % 6 == 5:
            behind.append(Event.cti(T0 + i * 10 * S, source="b"))
    ahead = [e for i, e in enumerate(ahead)]
    for i in range(6, 360, 6):  # a's CTI every minute of its clock
        ahead.insert(ahead.index(next(e for e in ahead if e.payload == ["a", i])),
                     Event.cti(T0 + 600 * S + i * 10 * S, source="a"))
    paths = _write(tmp_path, [ahead, behind])
    late_by_position = tmp_path / "late-position.jsonl"
    late_by_time = tmp_path / "late-time.jsonl"
    assert main(["replay", *paths, "--delay", "60s", "--merge", "arrival", "--out",
                 str(tmp_path / "o1"), "--late", str(late_by_position), "--no-summary"]) == 0
    assert main(["replay", *paths, "--delay", "60s", "--merge", "time", "--out",
                 str(tmp_path / "o2"), "--late", str(late_by_time), "--no-summary"]) == 0
    assert len(late_by_position.read_bytes().splitlines()) > 100
    assert late_by_time.read_bytes() == b""


def test_ts_5_8_an_unknown_merge_is_refused(tmp_path, capsys):
    paths = _write(tmp_path, [[Event.point(T0, source="a")]])
    assert main(["replay", *paths, "--merge", "clock", "--out", str(tmp_path / "o")]) == 2
    assert "--merge" in capsys.readouterr().err


# -- the default: by time when no log carries an order key --------------------------------------

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
DEVICES = sorted(str(p) for p in (ROOT / "examples" / "data" / "devices").glob("*.jsonl"))


def _without_order_keys(tmp_path):
    """The bundled per-device logs with their ``arrival`` field removed: one log per device,
    as most devices record them."""
    import orjson

    paths = []
    for path in DEVICES:
        lines = [orjson.loads(line) for line in open(path, "rb")]
        out = tmp_path / __import__("os").path.basename(path)
        out.write_bytes(b"".join(orjson.dumps({k: v for k, v in r.items()
                                                 if k not in ("arrival", "seq")}) + b"\n"
                                  for r in lines))
        paths.append(str(out))
    return paths


def test_ts_5_8_per_device_logs_without_order_keys_merge_by_time_by_default(tmp_path):
    paths = _without_order_keys(tmp_path)
    by_default = replay(paths, delay="5m", out=tmp_path / "a.jsonl")
    by_time = replay(paths, delay="5m", merge="time", out=tmp_path / "b.jsonl")
    by_position = replay(paths, delay="5m", merge="arrival", out=tmp_path / "c.jsonl")
    assert (by_default.merge, by_default.merge_asked) == ("time", "auto")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert by_default.late == by_time.late == 18  # round-robin by position: 578 of 690
    assert by_position.merge == "arrival" and by_position.late == 578
    assert [f.order for f in by_default.files] == ["position"] * 4
    # logs that carry an order key keep their arrival order (TS §5.2)
    recorded = replay(DEVICES, delay="5m", out=tmp_path / "d.jsonl")
    assert recorded.merge == "arrival" and recorded.late == 38
    assert [f.order for f in recorded.files] == ["arrival"] * 4
    one = replay([DEVICES[0]], delay="5m")
    assert one.merge == "file"


def test_the_summary_says_how_the_logs_were_merged_and_when_most_came_out_late(
        tmp_path, capsys):
    paths = _without_order_keys(tmp_path)
    assert main(["replay", *paths, "--out", str(tmp_path / "a.jsonl")]) == 0
    err = capsys.readouterr().err
    assert "merged by time (no log carries seq or arrival" in err
    assert "most inserts were late" not in err
    assert main(["replay", *paths, "--merge", "arrival", "--out", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "merged by position (no log carries seq or arrival)" in err
    assert ("most inserts were late (578 of 690): the logs were read round-robin by "
            "position; if each is one device's log, --merge time merges them by time") in err
    # the per-device logs one after another in one file: the file's order, and a hint
    joined = tmp_path / "joined.jsonl"
    joined.write_bytes(b"".join(open(p, "rb").read() for p in paths))
    assert main(["replay", str(joined), "--out", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "most inserts were late" in err and "replay them as separate files" in err
    # --merge time on one log changes nothing, and says so (--no-summary or not)
    assert main(["replay", str(joined), "--merge", "time", "--out", str(tmp_path / "d"),
                 "--no-summary"]) == 0
    assert ("note: --merge time with one log changes nothing: its records are replayed in "
            "the file's order") in capsys.readouterr().err
    assert (tmp_path / "c").read_bytes() == (tmp_path / "d").read_bytes()
