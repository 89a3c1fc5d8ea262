"""Devices → network → union → remote subscriber gives exactly what the in-process union gives
on the same arrival order (design.md §12), on the worked example of design.md §4.2 and on a
seeded random fleet."""

from __future__ import annotations

import asyncio
import random

from engine.event import Event
from engine.sinks import collect, iterate
from engine.times import MAX_TIME
from operators import Union, goldilocks
from goldilocks.net import connect

from tests.net.netsupport import TOKEN, run, start_server, until, url_of

MIN = 60 * 10**9


async def _queue_source(queue: asyncio.Queue):
    while True:
        event = await queue.get()
        if event is None:
            return
        yield event


def _arrived(server) -> int:
    return sum(s.received + s.ctis for s in server.union.stats().inputs)


async def _over_the_network(transport: str, policy, arrivals: list[tuple[str, Event]]):
    server = await start_server(policy)
    url = url_of(server, transport)
    watcher = await connect(url, token=TOKEN)
    merged: list[Event] = []

    async def read() -> None:
        async for event in iterate(watcher.output(prefetch=64), prefetch=64):
            merged.append(event)

    reader = asyncio.create_task(read())
    await until(lambda: server.stats().connections and
                any(c.streams for c in server.stats().connections), what="subscribed")
    devices = {}
    queues: dict[str, asyncio.Queue] = {}
    for name, _ in arrivals:  # join in order of first arrival, as the in-process union does
        if name in devices:
            continue
        queues[name] = asyncio.Queue()
        client = await connect(url, token=TOKEN)
        devices[name] = (client, client.publish(_queue_source(queues[name]), device=name))
        await until(lambda: any(s.name == name for s in server.union.stats().inputs),
                    what=f"{name} joined")
    for count, (name, event) in enumerate(arrivals, 1):
        queues[name].put_nowait(event)
        await until(lambda: _arrived(server) == count, what=f"arrival {count}")
    for name, (client, publication) in devices.items():
        queues[name].put_nowait(None)
        assert await publication.wait(5) == "completed"
        await client.close()
    await until(lambda: not server.union.stats().inputs or
                all(s.state != "active" for s in server.union.stats().inputs))
    await server.close()
    await asyncio.wait_for(reader, 5)
    await watcher.close()
    return merged, server.union.late.drain(), server.stats()


def _in_process(policy, arrivals: list[tuple[str, Event]]):
    union = Union(policy, final_cti=True)
    emitters = {}
    for name, _ in arrivals:
        if name not in emitters:
            emitters[name] = union.open_input(name)
    out: list[Event] = []
    from engine.sinks import CallbackSubscriber
    union.subscribe(CallbackSubscriber(out.append))
    for name, event in arrivals:
        assert emitters[name].try_send(event)
    for emitter in emitters.values():
        emitter.complete()
    union.close()
    return out, union.late.drain()


SEED_EXAMPLE = [("A", Event.point(5 * MIN)), ("B", Event.point(0)), ("A", Event.cti(5 * MIN)),
                ("B", Event.cti(0)), ("A", Event.point(7 * MIN)), ("A", Event.cti(8 * MIN)),
                ("B", Event.point(1 * MIN))]


def test_the_seed_example_over_the_network_matches_the_in_process_union(transport):
    merged, late, stats = run(_over_the_network(transport, goldilocks("5m"), SEED_EXAMPLE))
    expected, expected_late = _in_process(goldilocks("5m"), SEED_EXAMPLE)
    assert merged == expected
    assert [(e.kind, e.start) for e in merged] == [
        ("point", 5 * MIN), ("point", 0), ("cti", 0), ("point", 7 * MIN), ("cti", 3 * MIN),
        ("cti", MAX_TIME)]
    assert late == expected_late and [r.input for r in late] == ["B"]
    assert stats.events_received == 7 and stats.events_refused == 0
    # the fan-out takes the union's output in lists and counts inserts and CTIs apart
    assert stats.output_events == sum(e.kind != "cti" for e in merged) == 3
    assert stats.output_ctis == sum(e.kind == "cti" for e in merged) == 3


def test_a_random_fleet_with_skewed_clocks_matches_the_in_process_union():
    rng = random.Random(20240607)
    skew = {"A": 0, "B": -3 * MIN, "C": 2 * MIN}
    clock = {name: 0 for name in skew}
    arrivals = []
    for _ in range(150):
        name = rng.choice("ABC")
        clock[name] += rng.randint(0, 40) * 10**9
        t = clock[name] + skew[name] + rng.randint(-90, 0) * 10**9
        if rng.random() < 0.2:
            arrivals.append((name, Event.cti(clock[name] + skew[name] - 60 * 10**9)))
        elif rng.random() < 0.3:
            arrivals.append((name, Event.interval(t, t + 30 * 10**9, {"n": len(arrivals)})))
        else:
            arrivals.append((name, Event.point(t, {"n": len(arrivals)})))
    policy = goldilocks("1m", on_late="adjust")
    merged, late, _ = run(_over_the_network("ws", policy, arrivals), timeout=30)
    expected, expected_late = _in_process(policy, arrivals)
    assert merged == expected
    assert late == expected_late


def test_collect_over_a_background_loop_gives_the_same_events():
    """The remote output is an ordinary publisher: ``collect`` works from another thread."""
    import threading

    from engine.sources import from_iterable

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def setup():
        server = await start_server(goldilocks(0), final_cti=False)
        return server, await connect(server.ws_url, token=TOKEN)

    async def publish(server):
        await until(lambda: any(c.streams for c in server.stats().connections))
        device = await connect(server.tcp_url, token=TOKEN)
        events = [Event.point(t, t) for t in range(100)]
        assert await device.publish(from_iterable(events), device="D", batch=7).wait(5) \
            == "completed"
        await until(lambda: server.stats().events_sent == 100)
        await device.close()
        await server.close()

    server, watcher = asyncio.run_coroutine_threadsafe(setup(), loop).result(5)
    try:
        result: list = []
        reader = threading.Thread(
            target=lambda: result.extend(collect(watcher.output(prefetch=8), timeout=10)))
        reader.start()
        asyncio.run_coroutine_threadsafe(publish(server), loop).result(10)
        reader.join(10)
        assert [e.start for e in result] == list(range(100))
        assert {e.source for e in result} == {"D"}
    finally:
        asyncio.run_coroutine_threadsafe(watcher.close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_device_publishing_epoch_seconds_is_refused_not_silently_late():
    """TS §1.6: ``Event.point(1795334401)`` (epoch seconds, taken as nanoseconds in Python) is
    refused where it enters the server, naming the unit it looks like; before, the stream
    completed and its events were late without a word."""
    from engine import from_iterable

    async def scenario():
        server = await start_server(goldilocks("1m"))
        client = await connect(url_of(server, "tcp"), token=TOKEN)
        with_list = None
        try:
            client.publish([Event.point(1)], device="list")
        except TypeError as err:
            with_list = str(err)
        client.publish(from_iterable([Event.point(1_795_334_401, 20.5)]), device="thermo-1")
        await asyncio.wait_for(client.done.wait(), 5)  # the server closes the connection
        stats = server.stats()
        error = client.stats().error
        await client.close()
        await server.close()
        return with_list, error, stats

    with_list, error, stats = run(scenario())
    assert "publish engine.from_iterable(events)" in with_list
    assert error.code == "malformed"
    assert "1795334401 looks like seconds since the epoch (2026-11-22T08:00:01Z)" in str(error)
    assert stats.events_received == 0 and stats.errors("malformed") == 1
