"""Alignment through demand (TS §4.6) and idleness (TS §4.7) in the union.

The property: inputs whose own times advance in steps of at most ``g`` (with a CTI at least
every ``q`` events), fed in any order the producers' credit allows, lose nothing to lateness
that they would not lose if they were read in time order — provided ``max_drift + (prefetch
+ q) × g <= delay`` (the credit an input holds, and the time up to its next CTI, carry it
that far beyond the point where it was last given credit). Without alignment the same
schedules make on-time inserts late.
"""

from __future__ import annotations

import heapq

from hypothesis import given, settings, strategies as st

from engine import CallbackSubscriber, Event
from engine.clock import VirtualClock
from engine.event import CTI
from engine.times import Nanoseconds
from operators import Union, goldilocks
from tests.reference import reference_goldilocks


def _union(**options):
    """A union and its output; ``delay``, ``max_drift`` and ``idle_after`` in nanoseconds."""
    for name in ("max_drift", "idle_after"):
        if isinstance(options.get(name), int):
            options[name] = Nanoseconds(options[name])
    out: list[Event] = []
    union = Union(goldilocks(Nanoseconds(options.pop("delay", 10))), **options)
    union.subscribe(CallbackSubscriber(out.append, prefetch=1 << 20))
    return union, out


def test_ts_4_6_an_input_ahead_gets_no_credit_until_the_floor_rises():
    clock = VirtualClock()
    union, out = _union(max_drift=5, clock=clock, prefetch=2)
    a, b = union.open_input("A"), union.open_input("B")
    assert a.try_send(Event.cti(100)) and b.try_send(Event.cti(10))
    # A holds the credit it was given before it was seen ahead: it may use it
    assert a.try_send(Event.point(101))
    assert not a.try_send(Event.point(102))  # TS §4.6: no new credit
    stats = union.stats()
    assert stats.input("A").paused and stats.input("A").pauses == 1
    assert stats.paused == 1 and stats.floor == 10 and stats.max_drift == 5
    assert not stats.input("B").paused
    assert b.try_send(Event.cti(94))          # still more than 5 behind A
    assert not a.try_send(Event.point(102))
    assert b.try_send(Event.cti(95))          # within max_drift of A: A gets credit again
    assert not union.stats().input("A").paused
    assert a.try_send(Event.point(102))
    assert union.stats().input("A").pauses == 1
    assert [e.start for e in out if e.kind == CTI] == [90]  # A's CTI, delayed by 10


def test_ts_4_6_an_input_without_progress_holds_the_others_until_it_shows_some():
    clock = VirtualClock()
    union, _ = _union(max_drift=0, idle_after=1_000, clock=clock, prefetch=1)
    a, b, c = (union.open_input(n) for n in "ABC")
    assert b.try_send(Event.cti(10))
    assert not b.try_send(Event.cti(11))      # A and C have shown nothing: B waits
    assert union.stats().input("B").paused and union.stats().floor is None
    assert a.try_send(Event.cti(50))          # A shows 50; C still nothing
    assert not union.stats().input("C").paused  # C holds credit: it can always send
    clock.advance(1_000)                       # C quiet with credit: idle, floor B's 10
    stats = union.stats()
    assert stats.input("C").idle and stats.floor == 10
    assert stats.input("A").paused and not stats.input("B").paused
    assert b.try_send(Event.cti(11))


def test_ts_4_6_inputs_that_left_do_not_hold_others_back():
    union, _ = _union(max_drift=0, clock=VirtualClock(), prefetch=1)
    a, b = union.open_input("A"), union.open_input("B")
    assert b.try_send(Event.cti(10)) and a.try_send(Event.cti(50))
    assert not a.try_send(Event.point(51))    # B at 10 holds A (at 50) back
    assert union.stats().input("A").paused
    b.complete()                              # B leaves: the floor is A's own
    assert a.try_send(Event.point(51))
    c = union.open_input("C")
    assert c.try_send(Event.point(5))         # C shows progress 5: A is ahead again
    assert a.try_send(Event.point(52))        # the credit A was given before: still its own
    assert not a.try_send(Event.point(53))
    c.remove()
    assert a.try_send(Event.point(53))


def test_ts_4_7_an_idle_input_releases_the_paused_without_any_arrival():
    clock = VirtualClock()
    union, _ = _union(max_drift=5, idle_after=1_000, clock=clock, prefetch=1)
    a, b = union.open_input("A"), union.open_input("B")
    assert b.try_send(Event.cti(10)) and a.try_send(Event.cti(100))
    assert not a.try_send(Event.point(101))
    clock.advance(999)
    assert not a.try_send(Event.point(101)) and not union.stats().input("B").idle
    clock.advance(1)                           # B quiet for idle_after: the alarm reviews
    stats = union.stats()
    assert stats.input("B").idle and stats.input("B").idles == 1 and stats.idle == 1
    assert not stats.input("A").paused and stats.floor == 100
    assert a.try_send(Event.point(101))
    assert b.try_send(Event.point(20))         # B's next arrival resumes it ...
    stats = union.stats()
    assert not stats.input("B").idle and stats.input("B").idles == 1
    assert stats.floor == 10                   # ... and counts for the floor again (its CTI)
    assert a.try_send(Event.point(102))        # the credit A was given while B was idle
    assert not a.try_send(Event.point(103))
    assert union.stats().input("A").pauses == 2


def test_ts_4_7_quiet_time_counts_only_while_the_input_holds_credit():
    clock = VirtualClock()
    union, _ = _union(max_drift=0, idle_after=1_000, clock=clock, prefetch=1)
    a, b = union.open_input("A"), union.open_input("B")
    assert b.try_send(Event.cti(10)) and a.try_send(Event.cti(100))
    assert not a.try_send(Event.point(101))   # A paused: it cannot send
    clock.advance(5_000)                       # B idle; A, without credit, never was
    stats = union.stats()
    assert stats.input("B").idle and not stats.input("A").idle


def test_ts_4_6_the_configuration_is_checked():
    import pytest
    with pytest.raises(ValueError, match="max_drift"):
        Union(goldilocks(0), max_drift=-1)
    with pytest.raises(ValueError, match="idle_after"):
        Union(goldilocks(0), idle_after=0)
    with pytest.raises(TypeError, match="clock"):
        Union(goldilocks(0), max_drift="1s", clock=object())
    assert Union(goldilocks(0), max_drift="2s").stats().idle_after == 10**9


# -- the property -------------------------------------------------------------------------

DELAY = Nanoseconds(40)
STEP = 3      # g: an input's time advances by at most this per event
CTI_GAP = 3   # q: at most this many events between an input's CTIs
PREFETCH = 2
DRIFT = DELAY - (PREFETCH + CTI_GAP) * STEP  # 25


@st.composite
def _inputs(draw):
    """Per input: events whose times never go back (but for late inserts, clearly late:
    before the input's own last CTI minus the delay), starting within DRIFT of each other."""
    k = draw(st.integers(2, 4))
    streams = []
    for i in range(k):
        t = draw(st.integers(0, DRIFT))
        n = draw(st.integers(1, 60))
        events: list[Event] = []
        last_cti = None
        since = 0
        for j in range(n):
            t += draw(st.integers(0, STEP))
            kind = draw(st.sampled_from(["insert", "insert", "cti", "late"]))
            if since + 1 >= CTI_GAP:
                kind = "cti"
            if kind == "late" and last_cti is not None and last_cti - DELAY > 0:
                s = draw(st.integers(0, last_cti - DELAY - 1))
                events.append(Event.point(s, payload=(i, j), source=f"in{i}"))
                since += 1
            elif kind == "cti":
                events.append(Event.cti(t, source=f"in{i}"))
                last_cti = t
                since = 0
            else:
                events.append(Event.point(t, payload=(i, j), source=f"in{i}"))
                since += 1
        streams.append(events)
    return streams


def _time_order(streams):
    """The inputs read in time order: the next event from the input whose next event is
    earliest (ties: the lower input)."""
    heads = [(s[0].start, i, 0) for i, s in enumerate(streams) if s]
    heapq.heapify(heads)
    merged = []
    while heads:
        _, i, j = heapq.heappop(heads)
        merged.append(streams[i][j])
        if j + 1 < len(streams[i]):
            heapq.heappush(heads, (streams[i][j + 1].start, i, j + 1))
    return merged


def _run(streams, schedule, max_drift):
    union, out = _union(delay=DELAY, max_drift=max_drift, clock=VirtualClock(),
                        prefetch=PREFETCH, final_cti=True)
    emitters = [union.open_input(f"in{i}") for i in range(len(streams))]
    nxt = [0] * len(streams)

    def send(i):
        if nxt[i] < len(streams[i]) and emitters[i].try_send(streams[i][nxt[i]]):
            nxt[i] += 1
            if nxt[i] == len(streams[i]):
                emitters[i].complete()
            return True
        return False

    for i in range(len(streams)):  # every input shows its first time before any races
        assert send(i)
    for i in schedule:
        send(i % len(streams))
    while any(n < len(s) for n, s in zip(nxt, streams)):
        assert any([send(i) for i in range(len(streams))]), "no input could send: stalled"
    union.close()
    return union, out


@settings(max_examples=150, deadline=None)
@given(_inputs(), st.lists(st.tuples(st.integers(0, 3), st.integers(1, 60)), max_size=12))
def test_ts_4_6_aligned_inputs_lose_nothing_that_time_order_keeps(streams, bursts):
    # a schedule of bursts: one producer may run far ahead of the others, as under the GIL
    schedule = [i for i, n in bursts for _ in range(n)]
    union, out = _run(streams, schedule, DRIFT)
    _, expected_late = reference_goldilocks(_time_order(streams), DELAY)
    late = union.late.drain()
    assert sorted(r.event.payload for r in late) == sorted(
        r.event.payload for r in expected_late)
    ctis = [e.start for e in out if e.kind == CTI]
    assert ctis == sorted(set(ctis))  # TS §2.1
    stats = union.stats()
    for s in stats.inputs:
        assert s.received == s.emitted + s.dropped and s.buffered == 0  # TS §3.4
    assert stats.done and stats.emitted + stats.dropped == sum(
        e.kind != CTI for s in streams for e in s)


def test_ts_4_6_without_alignment_the_same_schedule_makes_on_time_inserts_late():
    """The property's counterpart: one input racing ahead, as a scheduler may let it."""
    fast = [Event.cti(t, source="in0") for t in range(0, 300, 3)]
    slow = [Event.point(t, payload=(1, t), source="in1") for t in range(0, 300, 3)]
    streams = [fast, slow]
    schedule = [0] * 200 + [1] * 200
    _, expected_late = reference_goldilocks(_time_order(streams), DELAY)
    assert expected_late == []
    unaligned, _ = _run(streams, schedule, None)
    assert len(unaligned.late.drain()) > 50
    aligned, _ = _run(streams, schedule, DRIFT)
    assert aligned.late.drain() == []


def test_ts_4_7_late_records_of_an_input_that_resumed_say_so():
    clock = VirtualClock()
    union, out = _union(delay=0, idle_after=1_000, clock=clock)
    a, b = union.open_input("A"), union.open_input("B")
    assert b.try_send(Event.cti(10)) and a.try_send(Event.cti(10))
    assert b.try_send(Event.point(5))          # late, but B was never idle
    clock.advance(1_000)                        # both quiet: idle
    assert union.stats().idle == 2
    assert a.try_send(Event.cti(500))           # A resumes and moves time on
    assert b.try_send(Event.point(20))          # B resumes behind it: late, "resumed"
    assert b.try_send_many([Event.point(21), Event.cti(600), Event.point(30)])
    late = union.late.drain()
    assert [(r.event.start, r.reason) for r in late] == [
        (5, None), (20, "resumed"), (21, "resumed"), (30, None)]
    assert union.stats().input("B").idles == 1 and not union.stats().input("B").idle


def test_ts_4_6_asyncio_producers_get_alignment_through_credit():
    """Four tasks whose clocks run 50 apart, each awaiting credit: with alignment they lose
    only what time order loses (the inserts drawn late), without it far more."""
    import asyncio
    import random

    rng = random.Random(7)
    streams = []
    for i in range(4):
        events = []
        for j in range(2_000):
            t = 1_000 + j + 50 * i
            if j % 100 == 99:
                events.append(Event.cti(t, source=f"in{i}"))
            else:
                s = t - (500 if rng.random() < 0.01 else 0)
                events.append(Event.point(s, payload=(i, j), source=f"in{i}"))
        streams.append(events)
    _, truth = reference_goldilocks(_time_order(streams), 100)

    async def run(**options):
        union, _ = _union(delay=100, **options)
        emitters = [union.open_input(f"in{i}") for i in range(4)]

        async def produce(em, events):
            for e in events:
                await em.send(e)
            em.complete()

        await asyncio.gather(*(produce(em, s) for em, s in zip(emitters, streams)))
        union.close()
        return union

    aligned = asyncio.run(run(max_drift=0, prefetch=32, clock=VirtualClock()))
    unaligned = asyncio.run(run())
    assert sorted(r.event.payload for r in aligned.late.drain()) == sorted(
        r.event.payload for r in truth)
    assert len(unaligned.late.drain()) > 3 * len(truth)
