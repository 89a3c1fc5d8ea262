"""Memory and credit under abuse, against a real server on 127.0.0.1: a subscriber that asks
for everything and reads nothing, devices holding credit they do not use, and a thousand
devices at once. The server's memory stays within its bounds, backpressure reaches the
devices, and every connected device gets credit."""

from __future__ import annotations

import asyncio
import socket

import psutil
import pytest

from engine.sources import from_iterable
from operators import max_policy
from goldilocks.net import connect
from goldilocks.net.protocol import (
    LENGTH,
    decode_frame,
    encode_complete,
    encode_keepalive,
    encode_next,
    encode_publish,
    encode_setup,
)

from tests.net.netsupport import (
    TOKEN,
    LazyPoints,
    Raw,
    deaf_subscriber,
    points,
    run,
    start_server,
    until,
)

MIB = 1 << 20


@pytest.mark.slow
def test_a_subscriber_that_reads_nothing_neither_holds_the_device_back_nor_grows_memory():
    """Before, a subscriber that read nothing held the output, the union and so the device:
    it sent 80,000-110,000 of these 400,000 events and waited for the idle timeout to cut
    the subscriber off; earlier still, its outgoing queue took every event (+35 MiB). Now
    the device publishes at its own pace while the subscriber is cut off as soon as it is
    more than subscriber_lag events behind, and the server's memory stays within the bounds:
    the outgoing queue (outbox_bytes) and the events kept for subscribers (subscriber_lag)."""
    total = 400_000

    async def scenario():
        server = await start_server(max_policy(), idle_timeout=5.0, final_cti=False)
        silent = await deaf_subscriber(server.tcp_address)
        await until(lambda: any(c.streams for c in server.stats().connections))

        async def keep_alive():  # it is not silent on the wire: only deaf
            while True:
                await asyncio.sleep(0.2)
                keepalive = encode_keepalive()
                silent.write(LENGTH.pack(len(keepalive)) + keepalive)

        pinger = asyncio.create_task(keep_alive())
        process = psutil.Process()
        base = process.memory_info().rss
        peak = {"rss": base, "outbox": 0}

        async def sample():
            while True:
                peak["rss"] = max(peak["rss"], process.memory_info().rss)
                for c in server.stats().connections:
                    peak["outbox"] = max(peak["outbox"], c.outbox_bytes)
                await asyncio.sleep(0.01)

        sampler = asyncio.create_task(sample())
        device = await connect(server.ws_url, token=TOKEN)
        publication = device.publish(from_iterable(LazyPoints(total)), device="dev", batch=1024)
        await until(lambda: server.stats().subscribers_cut == 1, timeout=20,
                    what="the deaf subscriber cut off")
        cut_at = publication.sent
        assert await publication.wait(60) == "completed"
        await until(lambda: server.stats().output_events == total, timeout=30)
        sampler.cancel()
        pinger.cancel()
        stats = server.stats()
        assert cut_at < total // 2, f"cut off late ({cut_at} sent by then)"
        assert stats.errors("too_slow") == 1 and stats.errors("stalled") == 0
        assert stats.events_received == total and stats.events_refused == 0
        assert stats.union.emitted == total
        assert peak["outbox"] <= stats.outbox_bytes + server.max_frame
        assert stats.output_peak <= stats.subscriber_lag + 1024
        growth = (peak["rss"] - base) / MIB
        assert growth < 48, f"server memory grew by {growth:.0f} MiB"
        await device.close()
        silent.close()
        await server.close()
        return cut_at, growth

    cut_at, growth = run(scenario(), timeout=90)
    print(f"cut off after {cut_at} events; memory growth {growth:.1f} MiB")


class _Device:
    """A device written by hand over TCP: a frame of at most ``chunk`` points every ``period``
    seconds (its own rate) within the credit it was granted, until told to stop; then it
    completes and ends the connection cleanly."""

    def __init__(self, name: str, period: float = 0.5, chunk: int = 32) -> None:
        self.name = name
        self.period = period
        self.chunk = chunk
        self.granted = 0
        self.sent = 0
        self.requests: list[int] = []
        self.stop = asyncio.Event()

    async def run(self, address: tuple[str, int]) -> None:
        reader, writer = await asyncio.open_connection(*address)

        def send(frame: bytes) -> None:
            writer.write(LENGTH.pack(len(frame)) + frame)

        async def recv():
            (size,) = LENGTH.unpack(await reader.readexactly(4))
            return decode_frame(await reader.readexactly(size))

        async def read() -> None:
            try:
                while True:
                    frame = await recv()
                    assert frame.type == "request", frame
                    self.requests.append(frame.n)
                    self.granted += frame.n
            except asyncio.IncompleteReadError:
                return  # the server closed: the clean end

        send(encode_setup(TOKEN, 1))  # written before positions: protocol 1, no durable
        assert (await recv()).type == "ok"
        send(encode_publish(1, self.name))
        reading = asyncio.create_task(read())
        while not self.stop.is_set():
            n = min(self.granted - self.sent, self.chunk)
            if n > 0:
                send(encode_next(1, points(range(self.sent, self.sent + n))))
                self.sent += n
            try:  # the device's own pace, cut short when it is told to stop
                await asyncio.wait_for(self.stop.wait(), self.period)
            except TimeoutError:
                pass
        send(encode_complete(1))
        writer.write_eof()  # the clean end: nothing more from this side, and the server
        await reading       # closes once it has read it all
        writer.close()


@pytest.mark.slow
def test_a_thousand_devices_all_get_credit_and_the_accounting_is_exact():
    """With the defaults, 16 devices × 4,096 credit filled the union's total bound, and the
    17th got no credit while the others kept publishing. Now each holds at most its fair
    share, re-balanced as devices join, so every one of a thousand makes progress."""
    count = 1000

    async def scenario():
        server = await start_server(max_policy(), max_connections=count + 10,
                                    idle_timeout=60, final_cti=False)
        devices = [_Device(f"dev-{i:04d}") for i in range(count)]
        tasks = []
        for device in devices:  # they join one after another, each as soon as it can
            tasks.append(asyncio.create_task(device.run(server.tcp_address)))
            await until(lambda d=device: d.requests, timeout=2,
                        what=f"{device.name} granted credit when it joined")
        # every one of them has been granted credit and has had events merged
        await until(lambda: all((s.received > 0) for s in server.stats().union.inputs
                                if s.state == "active")
                    and len(server.stats().union.inputs) == count, timeout=60,
                    what="every device's events merged")
        for device in devices:
            device.stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        await until(lambda: server.stats().union.buffered == 0 and
                    all(s.state == "completed" for s in server.stats().union.inputs))
        stats = server.stats()
        union = stats.union
        sent = {d.name: d.sent for d in devices}
        assert {s.name: s.received for s in union.inputs} == sent
        assert stats.events_received == sum(sent.values()) and stats.events_refused == 0
        assert stats.protocol_errors == () and stats.disconnects == 0
        assert union.received == union.emitted == stats.output_events
        # the late joiners' first grants are their fair share of the total bound
        assert devices[-1].requests[0] <= server.max_buffered // (count - 1) + 1
        assert union.peak_buffered <= server.max_buffered + count * union.min_credit
        await server.close()
        return sum(sent.values())

    print(f"{run(scenario(), timeout=240)} events from {count} devices")


def test_a_device_joining_while_the_others_hold_every_credit_gets_credit_at_once(transport):
    """Two devices hold the whole bound and send nothing: a third still gets credit at
    once (min_credit), and as the holders use theirs they are topped up only to their new
    share; once the third has left, their share grows back."""
    async def scenario():
        server = await start_server(max_policy(), prefetch=32, max_buffered=64,
                                    idle_timeout=30)  # the holders send no keepalives
        url = server.tcp_url if transport == "tcp" else server.ws_url
        holders = [await Raw.open(url) for _ in range(2)]
        for i, raw in enumerate(holders):
            raw.send(encode_publish(1, f"holder-{i}"))
            assert (await raw.recv_until("request")).n == 32
        client = await connect(url, token=TOKEN)
        publication = client.publish(from_iterable(points(range(5))), device="late")
        assert await publication.wait(5) == "completed"  # one credit at a time
        await until(lambda: server.stats().union.input("late").received == 5)
        late = await connect(url, token=TOKEN)
        ongoing = late.publish(from_iterable(LazyPoints(10**6)), device="late-2")
        await until(lambda: ongoing.granted > 0)
        # a holder that uses its credit is topped up to at most its share among three
        holder = holders[0]
        holder.send(encode_next(1, points(range(32))))
        sent = 32
        credit = (await holder.recv_until("request")).n
        assert 1 <= credit <= 64 // 3, credit
        await late.close()  # the third leaves: the shares grow back to 32
        await until(lambda: server.stats().union.input("late-2").state != "active")
        for _ in range(4):  # use what it holds; the next top-up is to the new share
            holder.send(encode_next(1, points(range(sent, sent + credit))))
            sent += credit
            credit = (await holder.recv_until("request")).n
            if credit == 32:
                break
        assert credit == 32
        stats = server.stats()
        assert stats.events_refused == 0 and stats.errors("overrun") == 0
        for raw in holders:
            await raw.close()
        await client.close()
        await server.close()

    run(scenario())


@pytest.mark.slow
def test_shutdown_is_bounded_even_with_a_subscriber_that_reads_nothing(tmp_path):
    """close(timeout) waits for every output to end; a deaf subscriber never lets it, so it
    is cut off at the bound, the file part is still published whole, and close() says the
    output did not end in order (the command's exit status 1)."""
    async def scenario():
        server = await start_server(max_policy(), out_dir=str(tmp_path), idle_timeout=30,
                                    final_cti=False)
        deaf = await deaf_subscriber(server.tcp_address)
        await until(lambda: any(c.streams for c in server.stats().connections))
        # The kernel's buffers on the server's side of it fixed small as well (the kernel
        # would otherwise grow them, and keep taking a little): once full, nothing moves.
        for conn in server._connections:
            conn.transport._writer_stream.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        device = await connect(server.ws_url, token=TOKEN)
        device.publish(from_iterable(LazyPoints(10**6)), device="dev")
        # stuck: the kernel takes no more for the deaf subscriber (the socket transport has
        # begun to buffer) and its queue is full: it can take nothing, not even its end
        await until(lambda: any(c.transport._unsent() > 0
                                and c.transport.queued >= server.outbox_bytes
                                for c in server._connections), timeout=20)
        loop = asyncio.get_running_loop()
        began = loop.time()
        ended = await server.close(timeout=0.5)
        took = loop.time() - began
        assert ended is False and took < 0.5 + 3, took
        stats = server.stats()
        assert stats.union.done and stats.files.count == stats.union.emitted + stats.output_ctis
        assert not stats.connections
        deaf.close()
        await device.close()
        return stats.union.emitted

    emitted = run(scenario(), timeout=60)
    assert sum(len(part.read_bytes().splitlines())
               for part in tmp_path.glob("events-*.jsonl")) == emitted
