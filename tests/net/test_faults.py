"""Security and faults over real sockets on 127.0.0.1: refused tokens, devices beyond their
credit, bad frames, silent and vanished devices, slow consumers, and a crowd of connections
— the server says what was wrong, closes only the faulty connection, and keeps serving."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from engine.event import Event
from engine.sinks import iterate
from engine.sources import from_iterable
from operators import goldilocks, max_policy
from goldilocks.net import ConnectionLost, ProtocolError, RemoteError, connect
from goldilocks.net.protocol import (
    LENGTH,
    encode_next,
    encode_next_raw,
    encode_publish,
    encode_request,
    encode_setup,
)

from tests.net.netsupport import (
    TOKEN,
    Raw,
    input_of,
    points,
    run,
    start_server,
    until,
    url_of,
)

#: today's instants: a device's times that look like epoch seconds or milliseconds (a relative
#: clock between 0.95 s and 4.1 s, for one) are refused where they enter (TS §1.6)
T0 = 1_795_334_400 * 10**9


class NONE:
    received = 0
    state = None


async def _healthy(server, transport: str, name: str, start: int = 0, count: int = 20) -> None:
    """A well-behaved device publishes ``count`` events and they reach the union."""
    client = await connect(url_of(server, transport), token=TOKEN)
    before = server.stats().events_received
    publication = client.publish(from_iterable(points(range(start, start + count))),
                                 device=name)
    assert await publication.wait(5) == "completed"  # every event durable: merged
    assert (input_of(server, name) or NONE).received == count
    assert server.stats().events_received >= before + count
    await client.close()


# ------------------------------------------------------------------------------ tokens
@pytest.mark.parametrize("token", ["wrong-token-5d1e", None])
def test_a_wrong_or_missing_token_is_refused_and_never_logged(transport, token, caplog):
    caplog.set_level(logging.DEBUG)

    async def scenario():
        server = await start_server(max_policy())
        raw = await Raw.open(url_of(server, transport), setup=False)
        raw.send(encode_setup(token))
        raw.send(encode_publish(1, "intruder"))
        raw.send(encode_next(1, points([1, 2, 3])))
        frames = await raw.closed()
        assert [(f.type, f.code) for f in frames] == [("error", "unauthorized")]
        with pytest.raises(RemoteError) as info:
            await connect(url_of(server, transport), token=token)
        assert info.value.code == "unauthorized"
        await _healthy(server, transport, "good")
        stats = server.stats()
        assert stats.auth_failures == 2 and stats.errors("unauthorized") == 2
        assert [s.name for s in stats.union.inputs] == ["good"]  # nothing reached the union
        await server.close()

    run(scenario())
    assert TOKEN not in caplog.text
    if token:
        assert token not in caplog.text
    assert "unauthorized" in caplog.text  # the refusal itself is logged


def test_tokens_are_compared_in_constant_time_against_every_accepted_token():
    from goldilocks.net.admission import Admission
    from goldilocks.net.server import Server

    server = Server(max_policy(), tokens=["alpha-1", "beta-2"])
    admission = server.admission
    assert admission.check_token("beta-2") and admission.check_token("alpha-1")
    assert not admission.check_token("alpha-") and not admission.check_token(None)
    assert not admission.check_token("")
    import inspect
    assert "hmac.compare_digest" in inspect.getsource(Admission.check_token)


def test_a_server_without_room_for_its_subscribers_refuses_to_start():
    """A subscriber lag of 0 would cut every subscriber off at its first event."""
    from engine.errors import InputError
    from goldilocks.net.server import Server

    with pytest.raises(InputError, match="subscriber_lag=0"):
        Server(max_policy(), tokens=["t"], subscriber_lag=0)


def test_a_server_without_tokens_refuses_to_start():
    from engine.errors import InputError
    from goldilocks.net.server import Server

    with pytest.raises(InputError, match="would accept anyone"):
        Server(max_policy(), tokens=[])


def test_an_unsupported_version_is_refused():
    async def scenario():
        server = await start_server(max_policy())
        raw = await Raw.open(server.tcp_url, setup=False)
        raw.send(encode_setup(TOKEN, version=99))
        frames = await raw.closed()
        assert frames[0].code == "unsupported_version" and "99" in frames[0].message
        await server.close()

    run(scenario())


# ------------------------------------------------------------------------------ credit
def test_a_device_sending_beyond_its_credit_is_cut_off_and_nothing_it_overran_is_merged(
        transport):
    async def scenario():
        server = await start_server(max_policy(), prefetch=8)
        raw = await Raw.open(url_of(server, transport))
        raw.send(encode_publish(1, "greedy"))
        request = await raw.recv_until("request")
        assert request.n == 8
        raw.send(encode_next(1, points(range(3))))          # within credit: merged
        raw.send(encode_next(1, points(range(3, 14))))      # 11 more with 5 left: refused
        frames = await raw.closed()
        error = frames[-1]
        assert (error.type, error.code) == ("error", "overrun")
        assert "RS §1.1" in error.message and "11 events with only 5 requested" in \
            error.message
        stats = server.stats()
        greedy = stats.union.input("greedy")
        assert greedy.state == "failed" and isinstance(greedy.error, ProtocolError)
        assert greedy.received == 3 and stats.events_refused == 11
        assert stats.events_received == 3
        await _healthy(server, transport, "polite", start=100)
        await server.close()

    run(scenario())


def test_a_device_may_use_several_frames_of_credit_at_once_and_each_is_merged_whole(transport):
    """The default credit covers several of the client's frames, so a device need not wait a
    round trip between frames; the server merges each frame as one batch, and the credit it
    gives back is exact: a device that spends all of it, and then all of the top-up, is never
    cut off (RS §1.1, §3.8)."""
    async def scenario():
        server = await start_server(max_policy())
        raw = await Raw.open(url_of(server, transport))
        raw.send(encode_publish(1, "fast"))
        credit = (await raw.recv_until("request")).n
        assert credit == server.prefetch == 4096  # four frames of the client's default batch
        for k in range(4):
            raw.send(encode_next(1, points(range(k * 1024, (k + 1) * 1024))))
        top_up = (await raw.recv_until("request")).n  # credit returns as frames are merged
        assert 1 <= top_up <= credit
        raw.send(encode_next(1, points(range(credit, credit + top_up))))
        await until(lambda: server.stats().events_received == credit + top_up)
        stats = server.stats()
        assert stats.events_refused == 0 and stats.errors("overrun") == 0
        assert stats.union.input("fast").received == credit + top_up
        await until(lambda: server.stats().output_events == credit + top_up)
        await server.close()

    run(scenario())


class _RecordingPublisher:
    """Points 0, 1, …, count − 1, emitted synchronously inside ``request``; every request
    is recorded, with how many events had been emitted when it came."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.emitted = 0
        self.requests: list[tuple[int, int]] = []

    def subscribe(self, subscriber):
        publisher = self

        class Subscription:
            cancelled = False

            def request(self, n):
                publisher.requests.append((n, publisher.emitted))
                while n > 0 and publisher.emitted < publisher.count and not self.cancelled:
                    subscriber.on_next(Event.point(publisher.emitted))
                    publisher.emitted += 1
                    n -= 1
                if publisher.emitted == publisher.count and not self.cancelled:
                    self.cancelled = True
                    subscriber.on_complete()

            def cancel(self):
                self.cancelled = True

        subscriber.on_subscribe(Subscription())


def test_a_publication_passes_its_credit_on_in_steps_and_never_beyond_it(transport):
    """The server's credit reaches the local publisher a step (max(batch, 1024) events) at a
    time, not all at once, and never more than the server granted (RS §1.1, §3.8)."""
    async def scenario():
        server = await start_server(max_policy())
        client = await connect(url_of(server, transport), token=TOKEN)
        source = _RecordingPublisher(10_000)
        publication = client.publish(source, device="stepper", batch=256)
        assert await publication.wait(5) == "completed"
        await until(lambda: server.stats().events_received == 10_000)
        assert all(n <= 1024 for n, _ in source.requests), source.requests
        assert sum(n for n, _ in source.requests) <= publication.granted
        assert publication.sent == 10_000 and publication.credit == publication.granted - 10_000
        stats = server.stats()
        assert stats.events_refused == 0 and stats.errors("overrun") == 0
        assert stats.union.input("stepper").received == 10_000
        await client.close()
        await server.close()

    run(scenario())


def test_a_slow_subscriber_no_longer_slows_the_device_and_comes_back_from_its_position(
        tmp_path):
    """Before, a subscriber that stopped requesting held the output, the union and so the
    device (it had sent 74 of 10,000 events). Now the device and the files go on; the
    subscriber is cut off once it is more than subscriber_lag events behind, told its
    position, and takes the rest up from there — from the files, as memory has moved on."""
    async def scenario():
        server = await start_server(max_policy(), prefetch=16, max_buffered=64,
                                    subscriber_lag=32, final_cti=False, out_dir=str(tmp_path))
        watcher = await connect(server.ws_url, token=TOKEN)
        taken: list[Event] = []
        ended: list[BaseException] = []

        class Slow:
            def on_subscribe(self, s):
                s.request(10)  # and never more

            def on_next(self, e):
                taken.append(e)

            def on_error(self, e):
                ended.append(e)

            def on_complete(self):
                pass

        watcher.output(prefetch=10).subscribe(Slow())
        await until(lambda: any(c.streams for c in server.stats().connections))
        device = await connect(server.tcp_url, token=TOKEN)
        publication = device.publish(from_iterable(points(range(10_000))), device="fast",
                                     batch=4)
        assert await publication.wait(10) == "completed"  # not held back
        await until(lambda: ended, timeout=10, what="the slow subscriber cut off")
        error = ended[0]
        assert isinstance(error, RemoteError) and error.code == "too_slow"
        assert "--subscriber-lag 32" in str(error) and error.position == len(taken) == 10
        stats = server.stats()
        assert stats.subscribers_cut == 1 and stats.errors("too_slow") == 1
        assert stats.union.peak_buffered <= 64 and stats.output_peak <= 32 + 16
        rest = await collect_output(watcher, error.position, 10_000 - 10)
        assert [e.start for e in taken + rest] == list(range(10_000))
        await device.close()
        await watcher.close()
        await server.close()

    run(scenario())


async def collect_output(client, start: int, count: int) -> list[Event]:
    """``count`` events of the merged stream from position ``start``."""
    got: list[Event] = []
    done = asyncio.Event()

    class Taker:
        def on_subscribe(self, s):
            s.request(count)

        def on_next(self, e):
            got.append(e)
            if len(got) == count:
                done.set()

        def on_error(self, e):
            got.append(e)
            done.set()

        def on_complete(self):
            done.set()

    client.output(prefetch=1024, start=start).subscribe(Taker())
    await asyncio.wait_for(done.wait(), 20)
    assert all(isinstance(e, Event) for e in got), got[-1]
    return got


# ------------------------------------------------------------------------------ bad frames
BAD_FRAMES = [
    ("not json", b"{nope", "malformed", "not valid UTF-8 JSON"),
    ("unknown type", b'{"type":"push","stream":1}', "malformed", "frame type 'push'"),
    ("no events", b'{"type":"next","stream":1,"events":[]}', "malformed", "non-empty list"),
    ("next before publish", encode_next(5, points([1])), "out_of_order", "never opened"),
    ("second setup", encode_setup(TOKEN), "out_of_order", "setup frame after setup"),
    ("request on a publish stream", None, "out_of_order", "the server grants the credit"),
    ("reused stream id", None, "out_of_order", "expected a new, increasing stream id"),
    ("bad event", None, "malformed", "kind 'bogus'"),
]


@pytest.mark.parametrize("name, data, code, words", BAD_FRAMES, ids=[b[0] for b in BAD_FRAMES])
def test_bad_frames_close_only_the_faulty_connection(transport, name, data, code, words):
    async def scenario():
        server = await start_server(max_policy())
        bystander = await connect(url_of(server, transport), token=TOKEN)
        bystander_pub = bystander.publish(_forever(), device="bystander")
        await until(lambda: server.stats().union is not None and
                    any(s.name == "bystander" for s in server.stats().union.inputs))
        raw = await Raw.open(url_of(server, transport))
        raw.send(encode_publish(1, "faulty"))
        await raw.recv_until("request")
        if name == "request on a publish stream":
            raw.send(encode_request(1, 5))
        elif name == "reused stream id":
            raw.send(encode_publish(1, "again"))
        elif name == "bad event":
            raw.send(encode_next_raw(1, [["bogus", 1, None, None]]))
        else:
            raw.send(data)
        frames = await raw.closed()
        assert (frames[-1].type, frames[-1].code) == ("error", code), frames
        assert words in frames[-1].message
        assert server.stats().union.input("faulty").state == "failed"
        assert server.stats().errors(code) == 1
        await _healthy(server, transport, "after")          # the server keeps serving
        assert server.stats().union.input("bystander").state == "active"
        assert bystander_pub.state == "open"
        await bystander.close()
        await server.close()

    run(scenario())


async def _forever():
    t = 0
    while True:
        await asyncio.sleep(0.05)
        t += 1
        yield Event.point(T0 + t)


def test_oversized_frames_are_refused_on_both_transports():
    async def scenario():
        server = await start_server(max_policy(), max_frame=4096)
        raw = await Raw.open(server.ws_url)
        raw.send(b'{"type":"keepalive","pad":"' + b"x" * 5000 + b'"}')
        frames = await raw.closed()
        assert frames[-1].code == "oversized" and "4096" in frames[-1].message
        # TCP: the length prefix alone is enough to refuse, nothing more is read
        reader, writer = await asyncio.open_connection(*server.tcp_address)
        writer.write(LENGTH.pack(len(encode_setup(TOKEN))) + encode_setup(TOKEN))
        writer.write(LENGTH.pack(10**9))
        await writer.drain()
        replies = []
        while True:
            head = await asyncio.wait_for(reader.read(4), 5)
            if not head:
                break
            replies.append(await reader.readexactly(LENGTH.unpack(head)[0]))
        writer.close()
        assert b'"code":"oversized"' in replies[-1] and b"1000000000 bytes" in replies[-1]
        assert server.stats().errors("oversized") == 2
        await _healthy(server, "tcp", "after")
        await server.close()

    run(scenario())


# ------------------------------------------------------------------------------ silence, loss
def test_a_silent_device_leaves_after_the_idle_timeout_and_the_union_carries_on(transport):
    async def scenario():
        server = await start_server(max_policy(), idle_timeout=0.3)
        talker = await connect(url_of(server, transport), token=TOKEN)  # keepalives: 0.1 s
        raw = await Raw.open(url_of(server, transport))
        raw.send(encode_publish(1, "quiet"))
        await raw.recv_until("request")
        raw.send(encode_next(1, points([1, 2])))
        frames = await raw.closed(timeout=5)
        assert frames[-1].code == "idle_timeout"
        quiet = server.stats().union.input("quiet")
        assert quiet.state == "failed" and isinstance(quiet.error, ProtocolError)
        assert quiet.error.code == "idle_timeout" and "idle timeout" in str(quiet.error)
        assert quiet.received == 2
        # the keepalive-sending client outlived several idle timeouts
        assert not talker.stats().closed
        publication = talker.publish(from_iterable(points([10, 11])), device="talker")
        assert await publication.wait(5) == "completed"
        await until(lambda: server.stats().union.input("talker").state == "completed")
        await talker.close()
        await server.close()

    run(scenario())


def test_a_device_that_vanishes_leaves_with_the_reason_and_the_union_carries_on(transport):
    async def scenario():
        server = await start_server(max_policy(), final_cti=False)
        watcher = await connect(server.ws_url, token=TOKEN)
        seen: list[Event] = []

        async def read():
            async for event in iterate(watcher.output()):
                seen.append(event)

        reader = asyncio.create_task(read())
        await until(lambda: any(c.streams for c in server.stats().connections))
        doomed = await connect(url_of(server, transport), token=TOKEN)
        doomed.publish(_forever(), device="doomed")
        await until(lambda: (input_of(server, "doomed") or NONE).received >= 2)
        doomed.abort()
        await until(lambda: server.stats().union.input("doomed").state == "failed")
        error = server.stats().union.input("doomed").error
        assert isinstance(error, ConnectionLost) and "ended" in str(error)
        assert server.stats().disconnects == 1
        await _healthy(server, transport, "survivor", start=10**13)
        await until(lambda: any(e.source == "survivor" for e in seen))
        reader.cancel()
        await watcher.close()
        await server.close()

    run(scenario())


# ------------------------------------------------------------------------------ a crowd
def test_hundreds_of_connections_joining_and_leaving_are_accounted_exactly():
    rng = random.Random(7)
    plans = []
    for i in range(240):
        kind = "overrun" if i % 40 == 7 else "abort" if i % 12 == 5 else "clean"
        plans.append((f"dev-{i}", rng.choice(["ws", "tcp"]), kind,
                      [T0 + rng.randint(0, 2000) * 10**6 for _ in range(rng.randint(1, 40))]))

    async def device(server, name, transport, kind, times):
        if kind == "overrun":
            raw = await Raw.open(url_of(server, transport))
            raw.send(encode_publish(1, name))
            await raw.recv_until("request")
            # Its credit is its share of the union's bound, at most the prefetch (16), and
            # more may be on its way: one event beyond the prefetch is beyond any of it.
            raw.send(encode_next(1, points(range(17))))
            await raw.closed()
            return 0
        client = await connect(url_of(server, transport), token=TOKEN)
        events = [Event.cti(min(times) - 10**6)] + points(times)
        if kind == "abort":
            client.publish(from_iterable(events), device=name, batch=3)
            await until(lambda: client.events_sent > 0 or client.stats().closed)
            client.abort()
            return None  # what reached the server before the reset is unknown here
        publication = client.publish(from_iterable(events), device=name, batch=5)
        assert await publication.wait(10) == "completed"
        await client.close()
        return len(events)

    async def scenario():
        server = await start_server(goldilocks("500ms"), prefetch=16, max_buffered=512,
                                    subscriber_lag=256, max_connections=300)
        results = await asyncio.gather(*(device(server, *plan) for plan in plans))
        await until(lambda: not server.stats().connections, what="every connection gone")
        await until(lambda: server.stats().union.buffered == 0)
        stats = server.stats()
        union = stats.union
        # every event read off the wire was merged or refused, and nothing else
        wire = stats.events_received
        assert wire == sum(s.received + s.ctis for s in union.inputs)
        assert union.received == union.emitted + union.dropped  # nothing left buffered
        assert union.late.records == union.dropped
        assert stats.output_events == union.emitted
        overruns = sum(1 for p in plans if p[2] == "overrun")
        assert stats.errors("overrun") == overruns
        assert stats.events_refused == sum(17 for p in plans if p[2] == "overrun")
        for (name, _, kind, _), sent in zip(plans, results):
            s = union.input(name)
            if kind == "clean":
                assert (s.state, s.received + s.ctis) == ("completed", sent)
            elif kind == "overrun":
                assert (s.state, s.received) == ("failed", 0)
            else:
                assert s.state in ("failed", "completed")
        # bounded: the union's total credit (and at least min_credit for every device, so
        # that each has credit at once), the fan-out, every connection's queue
        assert union.peak_buffered <= 512 + len(plans) * union.min_credit
        assert stats.output_peak <= 256
        assert stats.connections_total == len(plans) + 0
        await server.close()

    run(scenario(), timeout=40)
