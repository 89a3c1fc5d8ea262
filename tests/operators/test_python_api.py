"""The Python API as asyncio users meet it: what ``subscribe`` refuses, ``async for`` over any
publisher (and leaving it early), producers started together with ``asyncio.gather``, and
the union's stats once it has ended.

Everything runs on a real asyncio loop (``asyncio.run``); nothing sleeps to let things happen.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import pkgutil

import pytest

from engine import (CallbackSubscriber, ClosedError, Event, LateRecord, PublisherBase, empty,
                    failed, from_async_iterable, from_iterable, iterate, pipe, transform)
from engine.event import CTI, DROPPED
from engine.sinks import DEFAULT_PREFETCH
from engine.stage import step_operator
from engine.times import MAX_TIME
from operators import LateOutput, Union, broadcast, goldilocks
from operators import map as map_events

MS = 10**6
MINUTE = 60 * 10**9


# ------------------------------------------------------------------------------ subscribe
def test_subscribing_a_function_raises_type_error_that_names_the_fix():
    union = Union(goldilocks("5m"))
    with pytest.raises(TypeError) as caught:
        union.subscribe(print)
    message = str(caught.value)
    assert "RS §1.9" in message and "on_subscribe" in message
    assert "CallbackSubscriber(print)" in message
    union.subscribe(CallbackSubscriber(lambda event: None))  # the slot is still free


def test_subscribing_a_subscriber_class_asks_for_an_instance():
    with pytest.raises(TypeError, match=r"the class CallbackSubscriber; pass an instance"):
        from_iterable([1]).subscribe(CallbackSubscriber)


# ------------------------------------------------------------------------------ async for
def _points(count: int, source: str = "a") -> list[Event]:
    return [Event.point(i * MS, source=source) for i in range(count)]


def _union(count: int = 5) -> tuple[Union, list[Event]]:
    """A closed union holding ``count`` on-time points from one input, merged on demand."""
    union = Union(goldilocks(0))
    emitter = union.open_input("a")
    events = _points(count)
    assert emitter.try_send_many(events) == count
    emitter.complete()
    union.close()
    return union, events


def _late() -> tuple[LateOutput, list[LateRecord]]:
    late = LateOutput(capacity=8)
    records = [LateRecord("a", Event.point(i, source="a"), i + 1, DROPPED) for i in range(3)]
    for record in records:
        late.push(record)
    late.complete()
    return late, records


async def _arange(count: int):
    for i in range(count):
        yield i


def _transformed():
    processor = transform(step_operator(lambda: (lambda x: (x * 10,)), name="times_ten"))
    from_iterable(range(4)).subscribe(processor)  # hot: flows once someone subscribes to it
    return processor, [0, 10, 20, 30]


#: name -> () -> (publisher, what ``async for`` over it gives)
PUBLISHERS = {
    "from_iterable": lambda: (from_iterable(range(5)), list(range(5))),
    "empty": lambda: (empty(), []),
    "from_async_iterable": lambda: (from_async_iterable(_arange(4)), [0, 1, 2, 3]),
    "pipe stage": lambda: (pipe(from_iterable(range(3)), map_events(lambda x: -x)), [0, -1, -2]),
    "broadcast": lambda: (pipe(from_iterable(range(70)), broadcast(capacity=8)),
                          list(range(70))),
    "transform": _transformed,
    "union": _union,
    "union.batches": lambda: (lambda u, e: (u.batches(2), [e[0:2], e[2:4], e[4:]]))(*_union()),
    "union.late": _late,
}


@pytest.mark.parametrize("name", sorted(PUBLISHERS))
def test_async_for_over_a_publisher_gives_its_elements(name):
    async def main():
        publisher, expected = PUBLISHERS[name]()  # inside the loop: some bind to it
        return [item async for item in publisher], expected

    got, expected = asyncio.run(main())
    assert got == expected


def test_async_for_over_a_failed_publisher_raises_its_error():
    async def main():
        async for _ in failed(ZeroDivisionError("boom")):
            pass

    with pytest.raises(ZeroDivisionError, match="boom"):
        asyncio.run(main())


def test_every_publisher_the_project_ships_supports_async_for():
    """Every class in the packages we ship (the network server and client included) that has
    a ``subscribe`` derives from ``PublisherBase``, so ``async for`` works on it."""
    publishers = []
    for package in ("engine", "operators", "eventlog", "goldilocks"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            module = importlib.import_module(info.name)
            for cls in vars(module).values():
                if (inspect.isclass(cls) and cls.__module__ == module.__name__
                        and callable(vars(cls).get("subscribe"))
                        and not getattr(cls, "_is_protocol", False)):
                    publishers.append(cls)
    names = {cls.__qualname__ for cls in publishers}
    assert {"Union", "UnionBatches", "Multicast", "TransformProcessor", "IterablePublisher",
            "StagePublisher", "LateOutput", "Server", "RemoteOutput"} <= names
    assert [cls.__qualname__ for cls in publishers if not issubclass(cls, PublisherBase)] == []


class _Tracked:
    """A re-iterable source whose generator records that it started and that it closed."""

    def __init__(self) -> None:
        self.started = 0
        self.closed = 0

    def __iter__(self):
        self.started += 1
        try:
            yield from itertools.count()
        finally:
            self.closed += 1


def test_break_out_of_async_for_cancels_the_subscription_at_once():
    source = _Tracked()

    async def main():
        async for item in from_iterable(source):
            if item == 3:
                break
        return source.closed  # right after the loop: no turn of the loop in between

    assert asyncio.run(main()) == 1


def test_break_out_of_iterate_cancels_too():
    source = _Tracked()

    async def main():
        async for item in iterate(from_iterable(source), prefetch=4):
            if item == 9:
                break
        return source.closed

    assert asyncio.run(main()) == 1


def test_after_break_the_union_serves_the_next_loop_from_where_it_stopped():
    """The union has one subscriber at a time: the first loop's break must free it."""
    async def main():
        union, events = _union(200)
        first = []
        async for event in union:
            first.append(event)
            if len(first) == 3:
                break
        rest = [event async for event in union]
        return events, first, rest

    events, first, rest = asyncio.run(main())
    assert first == events[:3]
    # hot: the second loop continues after what the first was given — the 3 it took and the
    # rest of its prefetch, which went with it — and gets everything after, once
    assert rest and rest == events[-len(rest):]
    assert len(events) - len(rest) <= DEFAULT_PREFETCH


def test_break_out_of_the_last_loop_over_broadcast_cancels_its_upstream():
    source = _Tracked()

    async def main():
        shared = pipe(from_iterable(source), broadcast(capacity=4))
        async for item in shared:
            if item == 5:
                break
        return shared, source.closed

    shared, closed = asyncio.run(main())
    assert closed == 1  # the last subscriber left: upstream cancelled (its generator closed)
    probe = CallbackSubscriber(lambda item: None, on_error=lambda err: None)
    shared.subscribe(probe)
    assert isinstance(probe.error, ClosedError)


def test_iterate_closed_before_on_subscribe_cancels_when_it_arrives():
    """``aclose()`` while the publisher has not yet called ``on_subscribe`` (it does so on a
    loop turn): the subscription is cancelled as soon as it arrives."""
    source = _Tracked()

    async def main():
        loop = asyncio.get_running_loop()
        items = iterate(from_iterable(source, executor=loop), prefetch=4)
        pending = asyncio.ensure_future(items.__anext__())  # subscribes on its first step
        await asyncio.sleep(0)  # that step: subscribe() schedules on_subscribe on the loop
        await items.aclose()
        with pytest.raises(StopAsyncIteration):
            await pending  # woken by aclose(); on_subscribe was delivered on the way (FIFO)
        subscription = items._receiver._subscription
        return subscription is not None and subscription.is_done, source.started

    # cancelled in on_subscribe: nothing requested, nothing pulled
    assert asyncio.run(main()) == (True, 0)


# ------------------------------------------------------------------------------ fair producers
def _clock(offset_ms: int, points: int) -> list[Event]:
    """One producer's events: a point every 2 ms from ``offset_ms``, and after every tenth a
    CTI at its time (each producer's own clock, in order)."""
    events = []
    for k in range(points):
        t = (2 * k + offset_ms) * MS
        events.append(Event.point(t))
        if k % 10 == 9:
            events.append(Event.cti(t))
    return events


def test_producers_started_with_gather_take_turns_and_none_is_late():
    """Two producers whose clocks interleave, started together, each awaiting ``send``:
    nothing they send is late under a one-second delay — as long as neither runs ahead of the
    other by a second. ``send`` used to return without yielding while there was credit (and
    the inline merge returns credit at once), so the first producer sent everything before the
    second started, ran 4 s ahead, and three quarters of the second one's points came late."""
    points = 2000

    async def produce(emitter, events):
        for event in events:
            await emitter.send(event)
        emitter.complete()

    async def main():
        union = Union(goldilocks("1s"), final_cti=True)
        a, b = union.open_input("A"), union.open_input("B")
        out: list[Event] = []
        union.subscribe(CallbackSubscriber(out.append))
        await asyncio.gather(produce(a, _clock(0, points)), produce(b, _clock(1, points)))
        union.close()
        return union.stats(), out

    stats, out = asyncio.run(main())
    assert (stats.dropped, stats.adjusted, stats.late.records) == (0, 0, 0)
    assert stats.emitted == 2 * points and stats.done
    sources = [e.source for e in out if e.kind != CTI]
    longest = max(len(list(run)) for _, run in itertools.groupby(sources))
    assert longest < points // 4, f"one producer ran {longest} events ahead of the other"


# ------------------------------------------------------------------------------ stats
def test_lag_after_the_final_cti_is_the_lag_each_input_ended_with():
    union = Union(goldilocks("5m"), final_cti=True)
    out: list[Event] = []
    union.subscribe(CallbackSubscriber(out.append))
    a, b = union.open_input("A"), union.open_input("B")
    assert a.try_send(Event.cti(10 * MINUTE)) and b.try_send(Event.cti(7 * MINUTE))
    running = {s.name: s.lag for s in union.stats().inputs}
    assert running == {"A": -5 * MINUTE, "B": -2 * MINUTE}  # output CTI 5 min
    a.complete()
    b.complete()
    union.close()
    stats = union.stats()
    assert stats.done and stats.output_cti == MAX_TIME and out[-1] == Event.cti(MAX_TIME)
    assert {s.name: s.lag for s in stats.inputs} == running


def test_lag_of_an_input_that_ended_time_itself_is_measured_against_the_last_cti():
    union = Union(goldilocks("5m"), final_cti=True)
    union.subscribe(CallbackSubscriber(lambda event: None))
    a = union.open_input("A")
    assert a.try_send(Event.cti(MAX_TIME))  # A's clock ran to the end: output CTI +inf - 5m
    a.complete()
    union.close()
    (stats,) = union.stats().inputs
    assert stats.last_cti == MAX_TIME and stats.lag == -5 * MINUTE


def test_stats_and_policies_show_times_and_durations_readably_and_document_their_fields():
    """The reprs of stats and policies show instants as RFC 3339 text and durations as
    '2s', not raw nanoseconds; help() on the stats types explains every field."""
    import pydoc

    from engine import CallbackSubscriber, Event
    from operators import Union, goldilocks, quantile_policy
    from operators.union.stats import InputStats, UnionStats

    union = Union(goldilocks("2s"), max_drift="2s", idle_after=5)
    union.subscribe(CallbackSubscriber(lambda e: None))
    a, b = union.open_input("A"), union.open_input("B")
    a.try_send(Event.cti("2026-11-22T08:00:10Z"))
    b.try_send(Event.cti("2026-11-22T08:00:05Z"))
    text = repr(union.stats())
    assert "output_cti='2026-11-22T08:00:08Z'" in text
    assert "max_drift='2s', idle_after='5s'" in text
    assert "last_cti='2026-11-22T08:00:10Z', lag='-2s'" in text  # A: ahead of the output
    assert "lag='3s'" in text
    assert "1795334" not in text  # no raw nanoseconds anywhere
    assert repr(union) == "Union(goldilocks(delay='2s', on_late='drop'), inputs=2)"
    assert repr(goldilocks("5m", max_ahead="1m")) == \
        "goldilocks(delay='5m', on_late='drop', max_ahead='1m')"
    assert repr(quantile_policy(2, "90s")) == "quantile(k=2, delay='1m30s', on_late='drop')"
    for cls, fields in ((InputStats, ("lag", "progress", "discarded", "prefetch")),
                        (UnionStats, ("output_cti", "max_drift", "floor", "forgotten"))):
        doc = pydoc.render_doc(cls, renderer=pydoc.plaintext)
        for name in fields:
            assert f"``{name}``" in doc, (cls.__name__, name)
    assert "positive: behind, negative: ahead" in " ".join(InputStats.__doc__.split())


def test_replay_stats_show_times_and_durations_readably():
    from pathlib import Path

    from goldilocks.replay import replay

    fleet = Path(__file__).resolve().parents[2] / "examples" / "data" / "fleet.jsonl"
    text = repr(replay([fleet]))
    assert "delay='5m'" in text and "final_cti='2026-11-22T08:34:32.734Z'" in text
    assert "1795334" not in text
