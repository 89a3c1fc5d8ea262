"""Alignment through credit on the network (TS §4.6): a device whose time runs ahead of the
others gets no more credit until they catch up, against a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio

from engine.event import Event
from engine.sources import from_iterable
from operators import goldilocks
from goldilocks.net import connect
from goldilocks.net.cli import SERVE
from goldilocks.cli import build_parser, register_command

from tests.net.netsupport import TOKEN, run, start_server, until

T0 = 1_795_334_400 * 10**9
S = 10**9


class Feed:
    """An async iterable of events the test hands over one at a time (a slow device)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()

    def __aiter__(self):
        return self

    async def __anext__(self) -> Event:
        event = await self.queue.get()
        if event is None:
            raise StopAsyncIteration
        return event


def test_ts_4_6_a_device_ahead_gets_credit_only_as_the_others_catch_up():
    async def scenario():
        server = await start_server(goldilocks("10s"), max_drift="5s", idle_after="30s",
                                    prefetch=4, min_credit=1)
        fast = await connect(server.ws_url, token=TOKEN)
        slow = await connect(server.tcp_url, token=TOKEN)
        feed = Feed()
        behind = slow.publish(feed, device="behind", batch=1)
        await feed.queue.put(Event.cti(T0))
        ahead_events = [Event.cti(T0 + 3600 * S + i * S) for i in range(200)]
        ahead = fast.publish(from_iterable(ahead_events), device="ahead", batch=1)

        def line(name):
            return next(s for s in server.union.stats().inputs if name in s.name)

        await until(lambda: any("ahead" in s.name and s.paused
                                for s in server.union.stats().inputs), timeout=10,
                    what="the device ahead paused")
        held = line("ahead").received + line("ahead").ctis
        assert held <= 8 and ahead.sent <= 8  # what it held when seen ahead, and no more
        for i in range(0, 3700, 100):  # the slow device catches up, and the fast one goes on
            await feed.queue.put(Event.cti(T0 + i * S))
        await feed.queue.put(Event.cti(T0 + 3600 * S + 300 * S))
        assert await ahead.wait(20) == "completed"
        await feed.queue.put(None)
        assert await behind.wait(20) == "completed"
        assert line("ahead").pauses >= 1
        await fast.close()
        await slow.close()
        await server.close()

    run(scenario(), timeout=60)


def test_serve_takes_max_drift_and_idle_after():
    register_command(SERVE)
    args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--token-file", "t",
                                      "--max-drift", "2s", "--idle-after", "10s"])
    assert (args.max_drift, args.idle_after) == ("2s", "10s")
