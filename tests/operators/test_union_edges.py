"""Edge events through the union (TS §7 with TS §4.1): the per-event and the batch ways in
give the reference model's output, late records and reports; unmatched edges are counted in
``stats().edges``; a union whose policy does not decide edges refuses them where sent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.event import Event
from engine.sinks import CallbackSubscriber
from engine.times import Nanoseconds
from operators import Union, goldilocks, with_edges
from tests.reference import edge_arrivals_strategy, reference_edges
from tests.waiting import wait_until


def _run_union(arrivals, delay, on_late, chunk):
    union = Union(with_edges(goldilocks(Nanoseconds(delay), on_late=on_late)), prefetch=64,
                  max_buffered=1024)
    out: list = []
    done = []
    union.subscribe(CallbackSubscriber(out.append, on_complete=lambda: done.append(1),
                                       prefetch=1024))
    emitters = {name: union.open_input(name) for name in "ABC"}
    if chunk == 0:
        for e in arrivals:
            assert emitters[e.source].try_send(e)
    else:
        sent = union.feed([(emitters[e.source], e) for e in arrivals], chunk=chunk)
        assert sent == len(arrivals)
    for em in emitters.values():
        em.complete()
    union.close()
    wait_until(lambda: done, timeout=10)
    return union, out, union.late.drain()


@settings(max_examples=120, deadline=None)
@given(edge_arrivals_strategy(), st.integers(0, 15), st.sampled_from(["drop", "adjust"]),
       st.sampled_from([0, 1, 3, 64]))
def test_union_with_edges_equals_the_reference(arrivals, delay, on_late, chunk):
    union, out, late = _run_union(arrivals, delay, on_late, chunk)
    want_out, want_late = reference_edges(arrivals, delay, on_late, finish=True)
    assert out == want_out
    assert late == want_late
    stats = union.stats()
    for s in stats.inputs:  # TS §3.4: every edge is emitted once or leaves one record
        assert s.received == s.emitted + s.dropped
    reasons = [r.reason for r in want_late]
    e = stats.edges
    assert (e.no_start, e.duplicate, e.not_closed, e.open) == (
        reasons.count("no_start"), reasons.count("duplicate"), reasons.count("not_closed"), 0)


def test_a_plain_policy_refuses_edges_where_they_are_sent():  # TS §7.1
    union = Union(goldilocks(0))
    emitter = union.open_input("A")
    union.subscribe(CallbackSubscriber(lambda e: None))
    with pytest.raises(InputError, match="with_edges"):
        emitter.try_send(Event.start_edge(1, "x"))
    with pytest.raises(InputError, match="with_edges"):
        union.feed([(emitter, Event.point(1)), (emitter, Event.end_edge(1, 2, 0))])
    assert emitter.try_send(Event.point(1))


def test_the_union_reports_start_edges_left_open_when_it_completes():  # TS §7.5
    union, out, late = _run_union([Event.start_edge(5, "door", source="A"),
                                   Event.cti(9, source="A")], 0, "drop", 0)
    assert out == [Event.start_edge(5, "door", source="A"), Event.cti(9)]
    assert [(r.input, r.action, r.reason, r.cti) for r in late] == [
        ("A", "unmatched", "not_closed", 9)]
    assert union.stats().edges.not_closed == 1
