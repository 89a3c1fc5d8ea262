"""Edge events under a policy (TS §7): ``with_edges`` against the brute-force reference, its
batch step and its columnar form against its own step, the bound, the reports."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.event import CTI, END, START, Event, LateRecord
from engine.policy import LateEntry
from engine.times import MAX_TIME, MIN_TIME
from engine.times import Nanoseconds
from operators.edges import EdgeState, with_edges
from operators.policies import goldilocks, min_policy
from tests.reference import edge_arrivals_strategy, reference_edges, run_steps


def _run(policy, arrivals, finish=True):
    emitted, late = run_steps(policy, arrivals)
    if finish:
        state = policy.initial()
        for e in arrivals:
            state, _ = policy.step(state, e)
        late = late + list(policy.finish(state)[1])
    return emitted, late


@settings(max_examples=300, deadline=None)
@given(edge_arrivals_strategy(), st.integers(0, 15), st.sampled_from(["drop", "adjust"]))
def test_edges_equal_the_reference(arrivals, delay, on_late):  # TS §7.1-§7.5
    policy = with_edges(goldilocks(Nanoseconds(delay), on_late=on_late))
    assert _run(policy, arrivals) == reference_edges(arrivals, delay, on_late, finish=True)


@settings(max_examples=200, deadline=None)
@given(edge_arrivals_strategy(), st.integers(0, 15), st.sampled_from(["drop", "adjust"]))
def test_no_end_edge_of_an_emitted_start_is_lost(arrivals, delay, on_late):  # TS §7.3
    emitted, late = _run(with_edges(goldilocks(Nanoseconds(delay), on_late=on_late)), arrivals)
    opened = [e for e in emitted if e.kind == START]
    closed = {(e.source, e.id, e.start) for e in emitted if e.kind == END}
    not_closed = {(r.input, r.event.id, r.event.start) for r in late if r.reason == "not_closed"}
    # every emitted start edge is closed by an emitted end edge with its start, or reported
    for e in opened:
        assert (e.source, e.id, e.start) in closed | not_closed
    last_cti = MIN_TIME
    for e in emitted:
        if e.kind == CTI:
            last_cti = e.start
        elif e.kind == END:  # an end edge never ends before the CTI emitted before it
            assert e.end >= last_cti and e.end > e.start


@settings(max_examples=200, deadline=None)
@given(edge_arrivals_strategy(), st.integers(0, 15), st.sampled_from(["drop", "adjust"]),
       st.integers(1, 7))
def test_step_many_decides_as_step(arrivals, delay, on_late, cut):
    policy = with_edges(goldilocks(Nanoseconds(delay), on_late=on_late))
    emitted, late = run_steps(policy, arrivals)
    state = policy.initial()
    got_e: list = []
    got_l: list = []
    got_c: list = []
    for i in range(0, len(arrivals), cut):
        state, e, lt, c = policy.step_many(state, arrivals[i:i + cut])
        got_e += e
        got_l += lt
        got_c += c
    assert got_e == emitted
    assert [LateRecord(*x) for x in got_l] == late
    assert got_c == [a for a in arrivals if a.kind == CTI]


@settings(max_examples=100, deadline=None)
@given(edge_arrivals_strategy(), st.integers(0, 15), st.sampled_from(["drop", "adjust"]))
def test_columns_between_edges_decide_as_step(arrivals, delay, on_late):  # TS §7.7
    """Runs without edges through ``run_columns``, edges through ``step``: the same CTI in
    force afterwards, and the same late decisions as the step throughout."""
    policy = with_edges(goldilocks(Nanoseconds(delay), on_late=on_late))
    state_a = policy.initial()
    state_b = policy.initial()
    run: list[Event] = []

    def flush(state):
        if not run:
            return state
        is_cti = np.array([e.kind == CTI for e in run])
        start = np.array([e.start for e in run], np.int64)
        end = np.array([e.start if e.kind == CTI else e.end for e in run], np.int64)
        _, _, state = policy.run_columns(is_cti, start, end, state)
        run.clear()
        return state

    for e in arrivals:
        state_a, _ = policy.step(state_a, e)
        if e.kind in (START, END):
            state_b = flush(state_b)
            state_b, _ = policy.step(state_b, e)
        else:
            run.append(e)
    state_b = flush(state_b)
    assert policy.cti_in_force(state_a) == policy.cti_in_force(state_b)
    assert state_a.inner == state_b.inner
    assert state_a.open == state_b.open and state_a.counts == state_b.counts


def test_a_late_start_edge_is_dropped_and_so_is_its_end():  # TS §7.2, §7.4
    p = with_edges(goldilocks(0))
    emitted, late = _run(p, [Event.cti(10, source="A"), Event.start_edge(5, 1, source="A"),
                             Event.end_edge(5, 20, 1, source="A")])
    assert emitted == [Event.cti(10)]
    assert [(r.action, r.reason) for r in late] == [("dropped", None),
                                                   ("dropped", "start_dropped")]


def test_adjust_clips_a_late_start_edge_and_its_end_carries_the_clipped_start():  # TS §7.2
    p = with_edges(goldilocks(0, on_late="adjust"))
    emitted, late = _run(p, [Event.cti(10, source="A"), Event.start_edge(5, 1, source="A"),
                             Event.end_edge(5, 20, 1, source="A")])
    assert emitted == [Event.cti(10), Event(START, 10, MAX_TIME, None, "A", 1),
                       Event(END, 10, 20, None, "A", 1)]
    assert [(r.action, r.reason) for r in late] == [("adjusted", None)]


def test_a_late_end_edge_is_moved_to_the_cti_under_drop_too():  # TS §7.3
    p = with_edges(goldilocks(0, on_late="drop"))
    emitted, late = _run(p, [Event.start_edge(5, "s", source="A"), Event.cti(30, source="B"),
                             Event.end_edge(5, 9, "s", source="A")])
    assert emitted[-1] == Event(END, 5, 30, None, "A", "s")
    assert late[0].action == "adjusted" and late[0].reason == "end_edge" and late[0].cti == 30


def test_ids_are_per_input():  # TS §7.1
    p = with_edges(goldilocks(0))
    emitted, late = _run(p, [Event.start_edge(1, 7, source="A"), Event.start_edge(2, 7, source="B"),
                             Event.end_edge(2, 4, 7, source="B")])
    assert emitted[-1] == Event(END, 2, 4, None, "B", 7)
    assert [(r.input, r.reason) for r in late] == [("A", "not_closed")]


def test_unmatched_edges_are_reported_and_counted():  # TS §7.5
    p = with_edges(goldilocks(0))
    s = p.initial()
    outs: list = []
    for e in [Event.end_edge(1, 2, "x", source="A"), Event.start_edge(3, "y", source="A"),
              Event.start_edge(4, "y", source="A")]:
        s, o = p.step(s, e)
        outs += o
    s, o = p.finish(s)
    outs += o
    assert [(r.action, r.reason) for r in outs if isinstance(r, LateRecord)] == [
        ("unmatched", "no_start"), ("unmatched", "duplicate"), ("unmatched", "not_closed")]
    st_ = p.stats(s)
    assert (st_.no_start, st_.duplicate, st_.not_closed, st_.unmatched, st_.open) == (1, 1, 1, 3, 0)


def test_open_edges_are_bounded_and_one_more_is_refused_and_reported():  # TS §7.6
    p = with_edges(goldilocks(0), max_open=2)
    s = p.initial()
    outs = []
    for i in range(4):
        s, o = p.step(s, Event.start_edge(10 + i, i, source="A"))
        outs += o
    assert outs[:2] == [Event.start_edge(10, 0, source="A"), Event.start_edge(11, 1, source="A")]
    assert [(r.event.id, r.action, r.reason) for r in outs[2:]] == [
        (2, "unmatched", "full"), (3, "unmatched", "full")]
    stats = p.stats(s)
    assert (stats.open, stats.peak, stats.max_open, stats.full) == (2, 2, 2, 2)
    s, o = p.step(s, Event.end_edge(12, 15, 2, source="A"))  # its start was refused
    assert o[0].reason == "no_start"
    s, o = p.step(s, Event.end_edge(10, 15, 0, source="A"))
    s, o = p.step(s, Event.start_edge(20, 5, source="A"))  # one closed: room again
    assert o == (Event.start_edge(20, 5, source="A"),)


def test_a_full_table_forgets_the_oldest_dropped_start_first():  # TS §7.6
    p = with_edges(goldilocks(0), max_open=2)
    s = p.initial()
    for e in [Event.cti(10, source="A"), Event.start_edge(1, "old", source="A"),
              Event.start_edge(12, "kept", source="A"), Event.start_edge(13, "new", source="A")]:
        s, o = p.step(s, e)
    assert o == (Event.start_edge(13, "new", source="A"),)
    s, o = p.step(s, Event.end_edge(1, 20, "old", source="A"))
    assert o[0].reason == "no_start"  # forgotten: no longer known as dropped
    assert p.stats(s).forgotten == 1


def test_min_policy_sees_an_edge_as_an_insert_of_its_input():
    p = with_edges(min_policy())
    s = p.initial()
    s, _ = p.step(s, Event.cti(10, source="A"))
    s, out = p.step(s, Event.start_edge(10, 1, source="B"))  # B is live now, at MIN_TIME
    assert out == (Event.start_edge(10, 1, source="B"),)
    s, out = p.step(s, Event.cti(20, source="A"))
    assert out == ()  # B holds time back


def test_edge_constructors_check_their_arguments():  # TS §1.3
    with pytest.raises(InputError, match="not after start"):
        Event.end_edge(5, 5, 1)
    with pytest.raises(InputError, match="edge id"):
        Event.start_edge(5, 1.5)
    with pytest.raises(InputError, match="MAX_TIME"):
        Event.start_edge(MAX_TIME, 1)
    with pytest.raises(InputError, match="max_open"):
        with_edges(goldilocks(0), max_open=0)
    assert with_edges(with_edges(goldilocks(0))).policy.name == "goldilocks"
    assert isinstance(with_edges(goldilocks(0)).initial(), EdgeState)


def test_late_entries_carry_the_edge_ids():
    p = with_edges(goldilocks(0, on_late="adjust"))
    _, _, late, _ = p.step_many(p.initial(), [Event.cti(9, source="A"),
                                              Event.start_edge(1, "k", source="A")])
    assert isinstance(late[0], LateEntry) and late[0].adjusted.id == "k"


def test_cti_sync_decides_edges_as_with_edges_and_reports_those_left_open():  # TS §7
    from engine import collect, from_iterable, pipe
    from operators import cti_sync

    arrivals = [Event.start_edge(5, "a", source="A"), Event.start_edge(6, "b", source="A"),
                Event.cti(20, source="A"), Event.point(3, source="A"),
                Event.end_edge(5, 9, "a", source="A"), Event.end_edge(1, 2, "z", source="A")]
    op = cti_sync(0)
    out = collect(pipe(from_iterable(arrivals), op), timeout=10)
    want, want_late = reference_edges(arrivals, 0, "drop", finish=True)
    assert out == want
    assert op.late.drain() == want_late
    assert [r.reason for r in want_late] == [None, "end_edge", "no_start", "not_closed"]


def test_advance_time_refuses_edges_with_an_error_naming_the_event():  # TS §7.1
    from engine import collect, from_iterable, pipe
    from operators import advance_time

    with pytest.raises(InputError, match="edge event"):
        collect(pipe(from_iterable([Event.start_edge(5, "a", source="A")]),
                     advance_time(every_events=1)), timeout=10)
