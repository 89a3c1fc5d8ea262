"""What a device may put in an event, checked on input against a real server on 127.0.0.1: a
payload nested too deep, an event that can never fit an output frame, a point at the latest
instant. Such an event is refused alone, with the reason, and never reaches a sink; the file
writer and remote subscribers keep working, and the counts stay exact."""

from __future__ import annotations

import asyncio

import orjson

from engine.event import Event
from eventlog import read_records
from engine.sinks import CallbackSubscriber
from engine.sources import from_iterable
from engine.times import MAX_TIME
from operators import max_policy
from goldilocks.net import ProtocolError, connect
from goldilocks.net.protocol import (
    encode_complete,
    encode_next,
    encode_next_raw,
    encode_publish,
    encode_request,
    encode_subscribe,
)

from tests.net.netsupport import TOKEN, Raw, points, run, start_server, until, url_of

#: The documented limits (docs/protocol.md, "Limits"): a payload nests at most 64 levels; an
#: event's row with its source fits in an output frame with 67 bytes to spare.
MAX_DEPTH = 64
EVENT_ENVELOPE = 67


def nested(depth: int) -> bytes:
    """The JSON text of a payload ``depth`` levels deep: arrays and objects by turns (written
    by hand: the encoder itself stops at 255 levels)."""
    text = b"1"
    for level in range(depth):
        text = b"[%b]" % text if level % 2 else b'{"k":%b}' % text
    return text


def next_frame(stream: int, rows: list[tuple[int, bytes]]) -> bytes:
    """A ``next`` frame of points ``(start, payload JSON text)``, written by hand."""
    events = b",".join(b'["point",%d,null,%b]' % (start, payload) for start, payload in rows)
    return b'{"type":"next","stream":%d,"events":[%b]}' % (stream, events)


async def _watch(server):
    """A remote subscriber (our client) of the merged output: the list it fills."""
    watcher = await connect(server.ws_url, token=TOKEN)
    seen: list[Event] = []
    watcher.output().subscribe(CallbackSubscriber(seen.append))
    await until(lambda: any(c.streams for c in server.stats().connections), what="subscribed")
    return watcher, seen


async def _publish(raw: Raw, stream: int, device: str) -> int:
    raw.send(encode_publish(stream, device))
    return (await raw.recv_until("request")).n


def test_a_payload_nested_too_deep_is_refused_alone_and_every_output_keeps_working(
        transport, tmp_path):
    """A payload 300 deep decodes (the decoder goes to 1024) but could not be written again
    (the encoder stops at 255): before, it reached the union, the file writer's subscription
    was cancelled, the subscribers lost the batch, and the summary counted it as emitted."""
    async def scenario():
        server = await start_server(max_policy(), out_dir=str(tmp_path), final_cti=False)
        watcher, seen = await _watch(server)
        raw = await Raw.open(url_of(server, transport))
        await _publish(raw, 1, "deep")
        raw.send(next_frame(1, [(1, b'{"ok":1}'), (2, nested(300)), (3, nested(MAX_DEPTH)),
                                (4, nested(MAX_DEPTH + 1))]))
        error = await raw.recv_until("error")
        assert (error.stream, error.code) == (1, "too_deep")
        assert "event 1 on stream 1" in error.message and f"at most {MAX_DEPTH}" in \
            error.message and "2 events of the frame refused" in error.message
        # the connection carries on: a new stream on it publishes as usual
        await _publish(raw, 2, "shallow")
        raw.send(encode_next(2, [Event.point(5, {"ok": 5})]))
        raw.send(encode_complete(2))
        await until(lambda: len(seen) == 3, what="the three accepted events seen")
        assert [(e.start, e.payload, e.source) for e in seen] == [
            (1, {"ok": 1}, "deep"), (3, orjson.loads(nested(MAX_DEPTH)), "deep"),
            (5, {"ok": 5}, "shallow")]
        stats = server.stats()
        assert stats.events_received == 3 and stats.events_refused == 2
        assert stats.errors("too_deep") == 1 and stats.errors("malformed") == 0
        deep = stats.union.input("deep")
        assert deep.state == "failed" and isinstance(deep.error, ProtocolError)
        assert deep.error.code == "too_deep" and deep.received == 2
        assert stats.union.emitted == stats.output_events == 3  # refused: never emitted
        assert not watcher.stats().closed and watcher.stats().streams == 1
        await server.close()
        await watcher.close()
        await raw.close()
        return server

    server = run(scenario())
    written = list(read_records([tmp_path / "events-000000.jsonl"]))
    assert [(r["start"], r["source"]) for r in written] == [(1, "deep"), (3, "deep"),
                                                            (5, "shallow")]
    assert server.stats().files.count == 3


def _frame_of_size(stream: int, size: int, start: int = 1) -> bytes:
    """A ``next`` frame of exactly ``size`` bytes holding one point whose payload is a string."""
    base = len(encode_next_raw(stream, [["point", start, None, ""]]))
    data = encode_next_raw(stream, [["point", start, None, "x" * (size - base)]])
    assert len(data) == size
    return data


def test_a_largest_frame_with_one_event_never_cuts_a_subscriber_off(transport, tmp_path):
    """A legal frame of max_frame bytes with one event grows on output (the source is added):
    before, it did not fit and every subscriber was cut off. Now an event that can never fit
    is refused on input with the reason, and output frames are split as needed."""
    max_frame = 8192

    async def scenario():
        server = await start_server(max_policy(), max_frame=max_frame, out_dir=str(tmp_path),
                                    final_cti=False)
        # a subscriber written by hand, to see every frame on the wire
        sub = await Raw.open(url_of(server, transport))
        sub.send(encode_subscribe(1))
        sub.send(encode_request(1, 10**6))
        await until(lambda: any(c.streams for c in server.stats().connections))
        raw = await Raw.open(url_of(server, transport))
        await _publish(raw, 1, "big")
        raw.send(_frame_of_size(1, max_frame))                # fits on input, not on output
        error = await raw.recv_until("error")
        assert (error.stream, error.code) == (1, "too_large")
        assert f"output frame of at most {max_frame} bytes" in error.message
        await _publish(raw, 2, "fits")
        room = max_frame - EVENT_ENVELOPE
        row = len(orjson.dumps(["point", 2, None, "", "fits"]))
        raw.send(encode_next_raw(2, [["point", 2, None, "y" * (room - row)]]))  # just fits
        third = [["point", t, None, "z" * 2600] for t in (3, 4, 5)]  # fit together on
        raw.send(encode_next_raw(2, third))                           # input, not on output
        raw.send(encode_complete(2))
        frames = []
        while sum(len(f.events) for f in frames) < 4:
            frames.append(await sub.recv_until("next"))
        assert all(f.size <= max_frame for f in frames), [f.size for f in frames]
        assert len(frames) >= 3  # the three events of one input frame took two or more
        starts = [row[1] for f in frames for row in f.events]
        assert starts == [2, 3, 4, 5]
        stats = server.stats()
        assert stats.events_refused == 1 and stats.events_received == 4
        assert stats.errors("too_large") == 1 and stats.errors("oversized") == 0
        assert stats.union.input("big").state == "failed"
        assert stats.union.emitted == 4 and stats.events_sent == 4
        assert any(c.streams for c in stats.connections)  # the subscriber is still there
        await server.close()
        await raw.close()
        await sub.close()

    run(scenario())
    assert [r["start"] for r in read_records([tmp_path / "events-000000.jsonl"])] == \
        [2, 3, 4, 5]


def test_a_point_at_the_latest_instant_is_refused_and_no_point_goes_out_with_an_end(
        transport):
    """A point's end is start + 1: at the latest instant that is 2^63, outside int64. It is
    refused on input (as Event.point and the event-log readers refuse it, TS §1.3), and the
    encoder sends every point's end as null."""
    async def scenario():
        server = await start_server(max_policy(), final_cti=False)
        sub = await Raw.open(url_of(server, transport))
        sub.send(encode_subscribe(1))
        sub.send(encode_request(1, 100))
        await until(lambda: any(c.streams for c in server.stats().connections))
        device = await Raw.open(url_of(server, transport))
        await _publish(device, 1, "edge")
        device.send(encode_next_raw(1, [["point", 7, 8, None]]))
        data = await sub.t.recv()
        assert b'["point",7,null,null,"edge"]' in data
        device.send(encode_next_raw(1, [["point", MAX_TIME, None, None]]))
        frames = await device.closed()
        assert (frames[-1].stream, frames[-1].code) == (0, "malformed")
        assert "latest instant" in frames[-1].message
        stats = server.stats()
        assert stats.events_received == 1 and stats.events_refused == 1
        assert stats.union.emitted == 1
        await server.close()
        await sub.close()

    run(scenario())
    # what the encoder makes of a point built without checks (Event trusts its arguments)
    data = encode_next(1, [Event("point", MAX_TIME, MAX_TIME + 1, None, "x")], with_source=True)
    assert str(2**63).encode() not in data and b"null" in data


def test_a_client_publishing_a_payload_too_deep_is_told_which_and_why(transport):
    """The client's encoder stops at 255 levels: before, the exception was lost in a loop
    callback and the publication waited for ever. Shallower, but over the limit: the server
    refuses it and the publication fails with the reason."""
    from engine.errors import InputError
    from engine.sources import from_iterable
    from goldilocks.net import RemoteError

    def deep(depth: int) -> object:
        value: object = 0
        for _ in range(depth):
            value = [value]
        return value

    async def scenario():
        server = await start_server(max_policy())
        client = await connect(url_of(server, transport), token=TOKEN)
        unsendable = client.publish(from_iterable([Event.point(1, deep(300))]), device="a")
        assert await unsendable.wait(5) == "failed"
        assert isinstance(unsendable.error, InputError)
        assert "nested at most 64 deep" in str(unsendable.error)
        release = asyncio.Event()

        async def one_then_wait():  # the stream stays open: a refusal can reach it
            yield Event.point(1, deep(100))
            await release.wait()

        refused = client.publish(one_then_wait(), device="b")
        assert await refused.wait(5) == "failed"
        release.set()
        assert isinstance(refused.error, RemoteError) and refused.error.code == "too_deep"
        ok = client.publish(from_iterable([Event.point(1, deep(MAX_DEPTH))]), device="c")
        assert await ok.wait(5) == "completed"
        await until(lambda: server.stats().union.input("c").received == 1)
        await client.close()
        await server.close()

    run(scenario())


def test_a_stream_refused_for_want_of_room_takes_the_frames_in_flight_for_it_in_stride():
    """A client opens a stream and sends its first frames before the answer can reach it: a
    subscriber its request, a device its complete. When the stream is refused (too_many),
    those frames crossed the refusal on the wire; they are no fault, and the connection and
    its open streams carry on. (Before, the refused stream counted as never opened, and its
    request closed the connection as out_of_order.)"""
    async def scenario():
        server = await start_server(max_policy(), max_streams=1)
        raw = await Raw.open(server.tcp_url)
        raw.send(encode_subscribe(1))
        raw.send(encode_request(1, 10))
        raw.send(encode_subscribe(2))
        raw.send(encode_request(2, 10))   # in flight when stream 2 is refused
        raw.send(encode_publish(3, "late-device"))
        raw.send(encode_complete(3))      # in flight when stream 3 is refused
        refused = [await raw.recv_until("error"), await raw.recv_until("error")]
        assert [(f.stream, f.code) for f in refused] == [(2, "too_many"), (3, "too_many")]
        device = await connect(server.ws_url, token=TOKEN)
        assert await device.publish(from_iterable(points([1, 2])), device="A").wait(5) == "completed"
        delivered = await raw.recv_until("next")
        assert delivered.stream == 1 and [e[1] for e in delivered.events] == [1, 2]
        stats = server.stats()
        assert stats.errors("out_of_order") == 0
        assert len(stats.connections) == 2  # the subscriber's connection is still there
        await device.close()
        await raw.close()
        await server.close()

    run(scenario())
