"""Edge events over the network (TS §7, docs/protocol.md): a device sends start and end edges
with their ids, the server's union decides them under ``with_edges``, subscribers receive them
with their ids, late and unmatched edges go to the late records (and files) with their
reasons, and malformed edge rows are refused naming the field."""

from __future__ import annotations

import os

import orjson
import pytest

from engine.event import END, START, Event
from engine.times import MAX_TIME
from goldilocks.net.protocol import (
    ProtocolError,
    decode_events,
    decode_frame,
    encode_next,
    encode_next_raw,
    encode_publish,
    event_row,
)
from operators import goldilocks, with_edges

from tests.net.netsupport import Raw, run, start_server, until, url_of
from tests.net.test_end_to_end import _in_process, _over_the_network

MIN = 60 * 10**9


def test_edge_rows_round_trip_with_their_ids_and_old_rows_are_unchanged():
    events = [Event.start_edge(5, "door-1", {"p": 1}, source="A"),
              Event.end_edge(5, 9, 7, source="A"), Event.point(3, {"v": 1}, source="A"),
              Event.interval(3, 8, source="A"), Event.cti(4, source="A")]
    assert event_row(events[0]) == ["start", 5, None, {"p": 1}, "door-1"]
    assert event_row(events[1], True) == ["end", 5, 9, None, "A", 7]
    assert event_row(events[2]) == ["point", 3, None, {"v": 1}]  # as before edges
    device = decode_frame(encode_next(1, events))
    assert decode_events(device.events, "A", stream=1) == events
    merged = decode_frame(encode_next(2, events, with_source=True))
    assert [len(r) for r in merged.events] == [6, 6, 5, 5, 5]
    assert decode_events(merged.events, None, stream=2, with_source=True) == events
    assert decode_events(merged.events, None, with_source=True)[0].end == MAX_TIME


@pytest.mark.parametrize("row, field", [
    (["start", 5, None, {}], "id"),                          # no id
    (["start", 5, None, {}, None], "id"),                    # id null
    (["start", 5, None, {}, True], "id"),                    # id a bool
    (["end", 5, 9, {}, 1.5], "id"),                          # id a float
    (["start", 5, 9, {}, "d"], "end"),                       # a start edge has no end
    (["end", 5, None, {}, "d"], "end"),                      # an end edge needs one
    (["end", 9, 5, {}, "d"], "end"),                         # ... after its start
    (["start", MAX_TIME, None, {}, "d"], "latest instant"),  # no room for a lifetime
    (["start", "5", None, {}, "d"], "start"),
    (["point", 5, None, {}, "d"], "elements"),               # only an edge has an id
    (["stop", 5, None, {}, "d"], "kind"),
])
def test_malformed_edge_rows_are_refused_naming_the_field(row, field):
    with pytest.raises(ProtocolError) as err:
        decode_events([["point", 1, None, None], row], "A", stream=3)
    assert err.value.code == "malformed"
    message = str(err.value)
    assert "event 1 on stream 3" in message and field in message and "expected" in message


def test_an_edge_row_on_the_merged_output_needs_its_source_and_id():
    with pytest.raises(ProtocolError, match="source, id"):
        decode_events([["end", 5, 9, None, "door"]], None, stream=2, with_source=True)


def _edge_arrivals():
    return [("A", Event.start_edge(1 * MIN, "door", {"open": 1})),
            ("B", Event.point(2 * MIN, {"v": 2})),
            ("A", Event.cti(3 * MIN)), ("B", Event.cti(3 * MIN)),
            ("A", Event.end_edge(1 * MIN, 4 * MIN, "door")),
            ("B", Event.start_edge(4 * MIN, 17)),
            ("B", Event.end_edge(4 * MIN, 6 * MIN, 17, {"closed": True})),
            ("A", Event.cti(8 * MIN)), ("B", Event.cti(8 * MIN))]


def test_a_device_sends_start_and_end_edges_and_a_subscriber_receives_them(transport):
    policy = with_edges(goldilocks("1m"))
    merged, late, stats = run(_over_the_network(transport, policy, _edge_arrivals()))
    expected, expected_late = _in_process(policy, _edge_arrivals())
    assert merged == expected and late == expected_late == []
    edges = [(e.kind, e.start, e.end, e.id, e.source) for e in merged if e.id is not None]
    assert edges == [(START, 1 * MIN, MAX_TIME, "door", "A"),
                     (END, 1 * MIN, 4 * MIN, "door", "A"),
                     (START, 4 * MIN, MAX_TIME, 17, "B"),
                     (END, 4 * MIN, 6 * MIN, 17, "B")]
    assert stats.union.edges is not None and stats.union.edges.closed == 2


def test_a_server_given_a_plain_policy_decides_edges():
    policy = goldilocks("1m")  # the server wraps it: devices may send edges
    merged, _, stats = run(_over_the_network("tcp", policy, _edge_arrivals()))
    assert merged == _in_process(with_edges(policy), _edge_arrivals())[0]
    assert stats.union.edges.opened == 2


def test_a_late_end_edge_is_adjusted_and_unmatched_edges_are_recorded_in_the_late_file(
        tmp_path):
    arrivals = [("A", Event.start_edge(5 * MIN, "door")),
                ("A", Event.cti(20 * MIN)),                        # CTI in force: 18 min
                ("A", Event.end_edge(5 * MIN, 9 * MIN, "door")),    # late: its start went out
                ("A", Event.end_edge(5 * MIN, 30 * MIN, "ghost")),  # no start edge
                ("A", Event.start_edge(25 * MIN, "left-open"))]
    policy = goldilocks("2m")  # on_late drop: still, the end edge is never dropped alone

    async def scenario():
        server = await start_server(policy, out_dir=str(tmp_path))
        from goldilocks.net import connect
        from engine.sources import from_iterable

        client = await connect(url_of(server, "tcp"), token="test-token-7f3a9c")
        publication = client.publish(from_iterable([e for _, e in arrivals]), device="A")
        assert await publication.wait(5) == "completed"
        await client.close()
        await until(lambda: server.stats().events_received == len(arrivals))
        assert await server.close()
        return server.stats()

    stats = run(scenario())
    # the files: the adjusted end edge among the events, the records in the late parts
    events = [{k: v for k, v in orjson.loads(line).items() if k != "seq"} for name in sorted(os.listdir(tmp_path))
              if name.startswith("events-") for line in open(tmp_path / name, "rb")]
    assert {"source": "A", "kind": "end", "start": 5 * MIN, "end": 18 * MIN,
            "id": "door"} in events
    late = [{k: v for k, v in orjson.loads(line).items() if k != "seq"} for name in sorted(os.listdir(tmp_path))
            if name.startswith("late-") for line in open(tmp_path / name, "rb")]
    assert sorted((r["id"], r["action"], r.get("reason")) for r in late) == [
        ("door", "adjusted", "end_edge"), ("ghost", "unmatched", "no_start"),
        ("left-open", "unmatched", "not_closed")]
    assert [r["adjusted_end"] for r in late if r["id"] == "door"] == [18 * MIN]
    assert stats.union.edges.moved == 1 and stats.union.edges.unmatched == 2


def test_a_malformed_edge_frame_is_refused_with_an_error_naming_the_field(transport):
    async def scenario():
        server = await start_server(goldilocks("1m"))
        raw = await Raw.open(url_of(server, transport))
        raw.send(encode_publish(1, "door-sensor"))
        await raw.recv_until("request")
        raw.send(encode_next_raw(1, [["start", 5, None, {"x": 1}, "d1"],
                                     ["end", 5, 9, None, {"not": "an id"}]]))
        error = await raw.recv_until("error")
        await until(lambda: server.stats().events_refused == 2)
        stats = server.stats()
        await server.close()
        return error, stats

    error, stats = run(scenario())
    assert error.stream == 0 and error.code == "malformed"
    assert "event 1 on stream 1: an end edge's id" in error.message
    assert "expected a string or an integer" in error.message
    assert stats.events_received == 0  # the frame is refused whole: nothing merged


def test_an_old_device_frame_still_merges_beside_edges():
    """A device written before edges sends four-element rows and nothing else changes."""
    async def scenario():
        server = await start_server(goldilocks("1m"))
        raw = await Raw.open(server.tcp_url)
        raw.send(encode_publish(1, "old"))
        await raw.recv_until("request")
        raw.send(encode_next_raw(1, [["point", 5, None, {"v": 1}], ["cti", 6, None, None]]))
        await until(lambda: server.stats().events_received == 2)
        stats = server.stats()
        await server.close()
        return stats

    stats = run(scenario())
    assert stats.events_refused == 0 and stats.union.input("old").received == 1


def test_an_end_edge_is_refused_when_its_moved_times_could_not_fit_an_output_frame():
    """An end edge goes out with its start edge's start and its end moved to the CTI (TS
    §7.3): both times may grow, so it needs room for both where another event needs room
    for its start only."""
    from goldilocks.net.protocol import EVENT_ENVELOPE, event_refusals

    max_frame = 4096
    room = max_frame - EVENT_ENVELOPE
    end = Event.end_edge(1, 2, "d", "", source="dev")
    pad = room - len(orjson.dumps(event_row(end, True))) - 10  # 10 bytes to spare
    end = Event.end_edge(1, 2, "d", "x" * pad, source="dev")
    longer = len(orjson.dumps(event_row(end, True))) - len(orjson.dumps(event_row(
        Event.interval(1, 2, "x" * pad, source="dev"), True)))
    same = Event.interval(1, 2, "x" * (pad + longer), source="dev")  # a row as long
    assert len(orjson.dumps(event_row(same, True))) == len(orjson.dumps(event_row(end, True)))
    refused = event_refusals([same, end], max_frame, max_frame, stream=4)
    assert [(i, code) for i, code, _ in refused] == [(1, "too_large")]
    assert "end edge's times to grow" in refused[0][2]
    # what it could become: its start edge's start and the CTI, 19 digits each
    moved = Event.end_edge(10**18, 9 * 10**18, "d", "x" * pad, source="dev")
    assert len(encode_next(2**31 - 1, [moved], with_source=True)) > max_frame
