"""The bounded reorder buffer against a sorted() reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.event import CTI, Event
from operators.reorder_buffer import ReorderBuffer, ReorderStats


def p(t, payload=None):
    return Event.point(t, payload=payload)


def test_marble():
    buf = ReorderBuffer(capacity=10)
    for t in (7, 3, 5):
        assert buf.push(p(t))
    assert buf.release(6) == ([p(3), p(5), Event.cti(6)], [])
    assert buf.push(p(9)) and buf.push(p(2))
    assert buf.release(10) == ([p(7), p(9), Event.cti(10)], [p(2)])
    buf._check()
    assert buf.stats() == ReorderStats(buffered=0, late_pending=0, peak=3, capacity=10,
                                       released=4, late=1, last_cti=10)


def test_ties_release_in_arrival_order_and_exactly_at_the_cti_stays():  # TS §2.4
    buf = ReorderBuffer(capacity=10)
    for payload in "abc":
        buf.push(p(5, payload))
    buf.push(p(4, "z"))
    assert buf.release(5) == ([p(4, "z"), Event.cti(5)], [])
    assert len(buf) == 3
    assert buf.push(p(5, "d"))  # exactly at the last CTI: on time, buffered
    assert buf.release(6)[0] == [p(5, "a"), p(5, "b"), p(5, "c"), p(5, "d"), Event.cti(6)]


def test_non_advancing_cti_is_swallowed():  # TS §2.1
    buf = ReorderBuffer(capacity=4)
    buf.push(p(1))
    assert buf.release(3)[0] == [p(1), Event.cti(3)]
    buf.push(p(2))  # late
    assert buf.release(3) == ([], [p(2)])
    assert buf.release(2) == ([], [])


def test_full_buffer_returns_false_and_takes_nothing():
    buf = ReorderBuffer(capacity=2)
    assert buf.push(p(3)) and buf.push(p(1))
    assert buf.push(p(2)) is False
    assert len(buf) == 2 and buf.stats().peak == 2
    assert buf.release(2) == ([p(1), Event.cti(2)], [])
    assert buf.push(p(2)) is True
    buf._check()


def test_late_events_count_against_capacity_until_taken():
    buf = ReorderBuffer(capacity=2)
    buf.release(10)
    assert buf.push(p(1)) and buf.push(p(2))
    assert buf.push(p(11)) is False
    assert buf.take_late() == [p(1), p(2)]
    assert buf.push(p(11)) is True
    assert buf.take_late() == []


def test_flush_releases_everything_in_order():
    buf = ReorderBuffer(capacity=5)
    for t in (9, 1, 5):
        buf.push(p(t))
    assert buf.flush() == ([p(1), p(5), p(9)], [])
    assert len(buf) == 0


def test_validation():
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(InputError, match=r"capacity=.*expected an int >= 1"):
            ReorderBuffer(bad)
    with pytest.raises(InputError, match="push got a CTI at 5; expected an insert"):
        ReorderBuffer(1).push(Event.cti(5))


ops = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 60), st.integers(0, 20)),
    st.tuples(st.just("cti"), st.integers(0, 60), st.just(0)),
    st.tuples(st.just("take_late"), st.just(0), st.just(0)),
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 12))
def test_matches_sorted_reference(operations, capacity):
    buf = ReorderBuffer(capacity)
    pending: list[tuple[int, int, Event]] = []  # reference: (start, arrival, event)
    late_pending: list[Event] = []
    last = None
    out: list[Event] = []
    seq = 0
    for op, t, extra in operations:
        if op == "insert":
            event = Event.interval(t, t + 1 + extra, payload=seq)
            seq += 1
            full = len(pending) + len(late_pending) >= capacity
            taken = buf.push(event)
            assert taken is (not full)
            if taken:
                if last is not None and t < last:
                    late_pending.append(event)
                else:
                    pending.append((t, seq, event))
        elif op == "cti":
            released, late = buf.release(t)
            assert late == late_pending
            late_pending = []
            if last is None or t > last:
                ready = sorted(x for x in pending if x[0] < t)
                pending = [x for x in pending if x[0] >= t]
                expected = [x[2] for x in ready] + [Event.cti(t)]
                last = t
            else:
                expected = []
            assert released == expected
            out.extend(released)
        else:
            assert buf.take_late() == late_pending
            late_pending = []
        buf._check()
        assert buf.stats().buffered == len(pending)
        assert buf.stats().late_pending == len(late_pending)
    rest, late = buf.flush()
    assert rest == [x[2] for x in sorted(pending)] and late == late_pending
    # the released stream obeys TS §2.1 and §2.3
    last_cti = None
    for e in out:
        if e.kind == CTI:
            assert last_cti is None or e.start > last_cti
            last_cti = e.start
        else:
            assert last_cti is None or e.start >= last_cti
