"""cti_sync, advance_time, reorder and broadcast as pipe operators, against the reference models
and the step logic they wrap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import CallbackSubscriber, Event, collect, from_iterable, pipe
from engine.event import CTI, DROPPED
from engine.times import Nanoseconds
from operators import Union, advance_time, broadcast, cti_sync, max_policy, reorder
from operators.timegen import AdvanceTime
from tests.reference import arrivals_strategy, reference_goldilocks

TIMEOUT = 10.0


@settings(max_examples=300, deadline=None)
@given(arrivals=arrivals_strategy(), delay=st.sampled_from([0, 3, 10, 25]),
       on_late=st.sampled_from(["drop", "adjust"]), prefetch=st.integers(1, 8))
def test_cti_sync_matches_the_reference(arrivals, delay, on_late, prefetch):
    operator = cti_sync(Nanoseconds(delay), on_late, prefetch=prefetch)
    out = collect(pipe(from_iterable(arrivals), operator), timeout=TIMEOUT, prefetch=prefetch)
    expected, expected_late = reference_goldilocks(arrivals, delay, on_late)
    assert out == expected
    assert operator.late.drain() == expected_late


def test_cti_sync_state_belongs_to_the_subscription():
    operator = cti_sync(Nanoseconds(5))
    stream = pipe(from_iterable([Event.cti(20), Event.point(1)]), operator)
    assert collect(stream) == collect(stream) == [Event.cti(15)]
    assert [r.action for r in operator.late.drain()] == [DROPPED, DROPPED]


@settings(max_examples=200, deadline=None)
@given(starts=st.lists(st.integers(0, 100), max_size=40), every=st.integers(1, 5),
       delay=st.integers(0, 10), final=st.booleans())
def test_advance_time_is_its_step_logic(starts, every, delay, final):
    events = [Event.point(t) for t in starts]
    operator = advance_time(every_events=every, delay=Nanoseconds(delay), final_cti=final)
    out = collect(pipe(from_iterable(events), operator), timeout=TIMEOUT)
    gen = AdvanceTime(every, None, Nanoseconds(delay))
    expected = [o for e in events for o in gen.step(e)] + list(gen.flush(to_infinity=final))
    assert out == [o for o in expected if o.__class__ is Event]
    assert operator.late.drain() == [o for o in expected if o.__class__ is not Event]
    last = None
    for e in out:
        if e.kind == CTI:
            assert last is None or e.start > last  # TS §2.1
            last = e.start
        else:
            assert last is None or e.start >= last  # TS §2.3


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.one_of(st.integers(0, 60).map(Event.point),
                                st.integers(0, 60).map(Event.cti)), max_size=40))
def test_reorder_releases_sorted_between_ctis_and_reports_late(items):
    operator = reorder(capacity=100)
    out = collect(pipe(from_iterable(items), operator), timeout=TIMEOUT)
    late = operator.late.drain()
    inserts = [e for e in items if e.kind != CTI]
    released = sorted(e.start for e in out if e.kind != CTI)
    assert sorted(released + [r.event.start for r in late]) == sorted(e.start for e in inserts)
    assert len([e for e in out if e.kind != CTI]) + len(late) == len(inserts)  # TS §3.3
    last, previous = None, None
    for e in out:
        if e.kind == CTI:
            assert last is None or e.start > last
            last, previous = e.start, None
        else:
            assert last is None or e.start >= last  # TS §2.3
            assert previous is None or e.start >= previous  # sorted between CTIs
            previous = e.start


def test_reorder_over_capacity_fails_with_a_clear_error():
    out, errors = [], []
    sink = CallbackSubscriber(out.append, on_error=errors.append)
    pipe(from_iterable([Event.point(t) for t in range(5)]), reorder(capacity=3)).subscribe(sink)
    assert sink.done.wait(TIMEOUT)
    assert len(errors) == 1 and "3 inserts are waiting" in str(errors[0])


def test_broadcast_gives_every_subscriber_the_same_stream_paced_by_the_slowest():
    union = Union(max_policy(), prefetch=4)
    shared = pipe(union, broadcast(8))
    seen = [[], []]
    subscribers = [CallbackSubscriber(seen[i].append, prefetch=1 + 5 * i) for i in range(2)]
    for s in subscribers:
        shared.subscribe(s)
    a = union.open_input("A")
    for t in range(100):
        assert a.try_send(Event.point(t))  # both keep requesting: credit always returns
        assert shared.stats().buffered <= 8
    a.complete()
    union.close()
    assert all(s.done.wait(TIMEOUT) and s.error is None for s in subscribers)
    assert seen[0] == seen[1] == [Event.point(t, source="A") for t in range(100)]
    assert shared.stats().peak <= 8
