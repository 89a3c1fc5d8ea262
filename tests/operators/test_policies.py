"""The CTI policies as scan steps: the worked example (design.md §4.2), edge cases, and
properties against the brute-force reference model (tests/reference.py)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.event import CTI, Event, LateRecord
from engine.policy import LateEntry, Policy
from operators.policies import resolve_policy
from engine.policy import step_many as engine_step_many
from engine.times import MAX_TIME, MIN_TIME
from engine.times import Nanoseconds
from operators.policies import (
    GoldilocksPolicy,
    HighState,
    MinPolicy,
    goldilocks,
    max_policy,
    min_policy,
)
from tests.reference import (
    arrivals_strategy,
    is_marker,
    reference_goldilocks,
    reference_max,
    reference_min,
    run_steps,
)

M = 60 * 10**9  # one minute in ns


def _view(events):
    return [(e.kind, e.start, e.end, e.payload) for e in events]


# -- the StreamInsight CTI synchronizing subject's worked example (design.md §4.2) ----------

def seed_arrivals():
    return [
        Event.point(5 * M, payload=1.0, source="A"),
        Event.point(0 * M, payload=2.0, source="B"),
        Event.cti(5 * M, source="A"),
        Event.cti(0 * M, source="B"),
        Event.point(7 * M, payload=3.0, source="A"),
        Event.cti(8 * M, source="A"),
        Event.point(1 * M, payload=4.0, source="B"),
    ]


def test_seed_worked_example_exact_output():
    emitted, late = run_steps(goldilocks(dt.timedelta(minutes=5)), seed_arrivals())
    assert emitted == [
        Event.point(5 * M, payload=1.0, source="A"),
        Event.point(0 * M, payload=2.0, source="B"),
        Event.cti(0 * M),
        Event.point(7 * M, payload=3.0, source="A"),
        Event.cti(3 * M),
    ]
    assert late == [LateRecord("B", Event.point(1 * M, payload=4.0, source="B"), 3 * M, "dropped")]


def test_seed_worked_example_step_by_step():
    policy = goldilocks("5m")
    state = policy.initial()
    per_arrival = []
    for event in seed_arrivals():
        state, out = policy.step(state, event)
        per_arrival.append(out)
    assert [len(out) for out in per_arrival] == [1, 1, 1, 0, 1, 1, 1]
    assert per_arrival[2] == (Event.cti(0),)
    assert per_arrival[5] == (Event.cti(3 * M),)
    assert state == HighState(3 * M)


def test_seed_worked_example_matches_reference():
    assert run_steps(goldilocks("5m"), seed_arrivals()) == reference_goldilocks(seed_arrivals(), 5 * M)


# -- construction and validation --------------------------------------------------------------

@pytest.mark.parametrize("delay, ns", [("5m", 5 * M), ("PT5M", 5 * M), ("1h30m", 90 * M),
                                       (dt.timedelta(minutes=5), 5 * M), (Nanoseconds(250), 250),
                                       (250, 250 * 10**9), (0.25, 250 * 10**6), (0, 0)])
def test_goldilocks_delay_forms(delay, ns):
    p = goldilocks(delay, on_late="adjust")
    assert (p.name, p.delay, p.on_late) == ("goldilocks", ns, "adjust")
    assert isinstance(p, Policy)


def test_policies_satisfy_the_protocol():
    for p in (goldilocks(0), max_policy(), min_policy()):
        assert isinstance(p, Policy)
    assert (max_policy().name, max_policy().delay) == ("max", 0)
    assert (min_policy().name, min_policy().delay) == ("min", 0)


def test_policies_resolve_by_name_through_entry_points():
    assert isinstance(resolve_policy("goldilocks", delay="5m"), GoldilocksPolicy)
    assert resolve_policy("goldilocks", delay="5m").delay == 5 * M
    assert resolve_policy("max", on_late="adjust").on_late == "adjust"
    assert isinstance(resolve_policy("min", delay=0), MinPolicy)


@pytest.mark.parametrize("make", [lambda: goldilocks(-1), lambda: goldilocks("-5m"),
                                  lambda: goldilocks(dt.timedelta(seconds=-1))])
def test_negative_delay_is_refused_naming_the_argument(make):
    with pytest.raises(InputError, match=r"goldilocks: delay.*(negative|expected)"):
        make()


@pytest.mark.parametrize("make, who", [(lambda: goldilocks(0, on_late="skip"), "goldilocks"),
                                       (lambda: max_policy(on_late="Drop"), "max policy"),
                                       (lambda: min_policy(on_late=None), "min policy")])
def test_unknown_on_late_is_refused_naming_the_expected_values(make, who):
    with pytest.raises(InputError) as info:
        make()
    message = str(info.value)
    assert who in message and "on_late=" in message and "'drop' or 'adjust'" in message


def test_max_and_min_refuse_a_delay():
    for make in (max_policy, min_policy):
        with pytest.raises(InputError, match="delay='5m'; expected 0"):
            make(delay="5m")


# -- goldilocks / max edge cases --------------------------------------------------------------

def test_insert_exactly_at_the_cti_is_on_time():  # TS §2.4
    p = goldilocks(Nanoseconds(10))
    s, _ = p.step(p.initial(), Event.cti(100, source="A"))
    on_time = Event.point(90, source="B")
    assert p.step(s, on_time) == (s, (on_time,))
    s2, out = p.step(s, Event.point(89, source="B"))
    assert s2 is s and out == (LateRecord("B", Event.point(89, source="B"), 90, "dropped"),)


def test_on_time_insert_returns_the_same_state_object():
    p = goldilocks(0)
    s0 = p.initial()
    e = Event.point(1, source="A")
    s1, out = p.step(s0, e)
    assert s1 is s0 and out[0] is e
    s2, _ = p.step(s1, Event.cti(0, source="A"))
    s3, out = p.step(s2, Event.cti(0, source="B"))  # does not advance: nothing, same state
    assert s3 is s2 and out == ()


def test_delay_larger_than_t_and_the_min_time_floor():  # TS §2.2
    p = goldilocks(Nanoseconds(10**6))
    s, out = p.step(p.initial(), Event.cti(5, source="A"))
    assert out == (Event.cti(5 - 10**6),)
    s, out = p.step(s, Event.cti(MIN_TIME + 3, source="A"))
    assert out == ()  # floored at MIN_TIME, below the CTI in force
    s0, out = p.step(p.initial(), Event.cti(MIN_TIME + 3, source="A"))
    assert out == (Event.cti(MIN_TIME),) and s0 == HighState(MIN_TIME)
    # the first CTI is emitted even at MIN_TIME; a second at MIN_TIME is not (TS §2.1)
    assert p.step(s0, Event.cti(MIN_TIME, source="B"))[1] == ()
    assert p.step(s0, Event.point(MIN_TIME, source="B"))[1] == (Event.point(MIN_TIME, source="B"),)


def test_huge_delay_floors_every_cti():
    p = goldilocks(Nanoseconds(2**70))
    s, out = p.step(p.initial(), Event.cti(MAX_TIME, source="A"))
    assert out == (Event.cti(MIN_TIME),)


def test_cti_at_infinity_is_delayed_like_any_other():
    p = goldilocks(Nanoseconds(5))
    _, out = p.step(p.initial(), Event.cti_infinity(source="A"))
    assert out == (Event.cti(MAX_TIME - 5),)


def test_no_cti_yet_means_nothing_is_late():
    p = goldilocks(0, on_late="adjust")
    s = p.initial()
    for e in (Event.point(MIN_TIME, source="A"), Event.interval(-5, 3, source="B")):
        assert p.step(s, e) == (s, (e,))


def _after_cti(p, t):
    return p.step(p.initial(), Event.cti(t, source="A"))[0]


def test_adjust_clips_an_interval_overlapping_the_cti():  # TS §3.2
    p = max_policy(on_late="adjust")
    s = _after_cti(p, 100)
    e = Event.interval(90, 110, payload="p", source="B")
    clipped = Event.interval(100, 110, payload="p", source="B")
    assert p.step(s, e) == (s, (clipped, LateRecord("B", e, 100, "adjusted", clipped)))


def test_adjust_drops_an_interval_wholly_before_the_cti():  # TS §3.2
    p = max_policy(on_late="adjust")
    s = _after_cti(p, 100)
    for e in (Event.interval(80, 100, source="B"), Event.interval(80, 95, source="B")):
        assert p.step(s, e)[1] == (LateRecord("B", e, 100, "dropped"),)


def test_adjust_drops_late_points():  # TS §3.2
    p = max_policy(on_late="adjust")
    s = _after_cti(p, 100)
    e = Event.point(99, source="B")
    assert p.step(s, e)[1] == (LateRecord("B", e, 100, "dropped"),)


def test_drop_drops_an_overlapping_interval():  # TS §3.1
    p = max_policy(on_late="drop")
    s = _after_cti(p, 100)
    e = Event.interval(90, 110, source="B")
    assert p.step(s, e)[1] == (LateRecord("B", e, 100, "dropped"),)


def test_goldilocks_join_and_leave_change_nothing():
    p = goldilocks("1s")
    s = _after_cti(p, 10**10)
    assert p.join(s, "Z") == (s, ()) and p.leave(s, "A") == (s, ())


# -- min policy -------------------------------------------------------------------------------

def test_min_emits_the_minimum_over_live_inputs():
    p = min_policy()
    emitted, _ = run_steps(p, [Event.cti(10, source="A"), Event.cti(5, source="B"),
                               Event.cti(20, source="B"), Event.cti(30, source="A")])
    # A alone: 10; B joins at 5 (below the CTI in force: nothing); B 20 -> min 10 (no rise);
    # A 30 -> min 20
    assert emitted == [Event.cti(10), Event.cti(20)]


def test_min_input_joining_late_holds_time_back_and_leaving_releases_it():
    p = min_policy()
    s = p.initial()
    s, out = p.step(s, Event.cti(10, source="A"))
    assert out == (Event.cti(10),)
    s, out = p.join(s, "B")  # B has no CTI yet: counts as MIN_TIME
    assert out == ()
    s, out = p.step(s, Event.cti(50, source="A"))
    assert out == ()  # held back by B
    s, out = p.step(s, Event.point(12, source="B"))
    assert out == (Event.point(12, source="B"),)
    s, out = p.leave(s, "B")
    assert out == (Event.cti(50),)  # released
    s, out = p.step(s, Event.point(40, source="A"))
    assert out == (LateRecord("A", Event.point(40, source="A"), 50, "dropped"),)


def test_min_first_event_of_any_kind_makes_an_input_live():
    p = min_policy()
    s, _ = p.step(p.initial(), Event.cti(10, source="A"))
    s, out = p.step(s, Event.point(11, source="C"))  # C is live now, at MIN_TIME
    s, out = p.step(s, Event.cti(20, source="A"))
    assert out == ()
    s, out = p.step(s, Event.cti(15, source="C"))
    assert out == (Event.cti(15),)


def test_min_smaller_cti_does_not_retract_a_promise():
    p = min_policy()
    s, _ = p.step(p.initial(), Event.cti(10, source="A"))
    s2, out = p.step(s, Event.cti(3, source="A"))
    assert out == () and s2 is s


def test_min_last_input_leaving_emits_nothing_and_rejoining_starts_afresh():
    p = min_policy()
    arrivals = [Event.cti(10, source="A"), ("leave", "A"), ("leave", "A"), ("join", "A"),
                ("join", "A"), Event.cti(5, source="A"), ("leave", "A"), Event.cti(12, source="A")]
    emitted, late = run_steps(p, arrivals)
    assert emitted == [Event.cti(10), Event.cti(12)] and late == []
    assert (emitted, late) == reference_min(arrivals)


def test_min_adjust_clips_late_intervals():
    p = min_policy(on_late="adjust")
    s, _ = p.step(p.initial(), Event.cti(10, source="A"))
    e = Event.interval(5, 15, source="B")
    assert p.step(s, e)[1][0] == Event.interval(10, 15, source="B")


def test_min_has_no_columnar_form_and_goldilocks_has():
    assert min_policy().run_columns([True], [0], [0]) is None
    action, cti, state = goldilocks(0).run_columns([True, False], [5, 4], [0, 5])
    assert action.tolist() == [3, 2] and cti.tolist() == [5, 5]
    assert state == goldilocks(0).step(goldilocks(0).initial(), Event.cti(5))[0]


# -- properties against the reference model ---------------------------------------------------

def _check_rules(arrivals, emitted, late):
    # TS §2.1: emitted CTIs strictly increase
    ctis = [e.start for e in emitted if e.kind == CTI]
    assert all(a < b for a, b in zip(ctis, ctis[1:])), ctis
    assert all(e.source is None for e in emitted if e.kind == CTI)
    # TS §2.3: no emitted insert starts before the last CTI emitted before it
    last = None
    for e in emitted:
        if e.kind == CTI:
            last = e.start
        else:
            assert last is None or e.start >= last, (e, last)
    # TS §3.3 / §3.4: per input, received = emitted + dropped; adjusted counted apart
    inserts = [a for a in arrivals if not is_marker(a) and a.kind != CTI]
    received = Counter(a.source for a in inserts)
    out = Counter(e.source for e in emitted if e.kind != CTI)
    dropped = Counter(r.input for r in late if r.action == "dropped")
    for name in received | out | dropped:
        assert received[name] == out[name] + dropped[name], name
    adjusted = [r for r in late if r.action == "adjusted"]
    assert all(r.adjusted in emitted and r.adjusted.start == r.cti for r in adjusted)
    # every late insert has a record, and only late ones do
    assert len(late) == sum(1 for a in inserts if any(r.event is a for r in late))
    assert all(r.event.start < r.cti for r in late)


delays = st.one_of(st.integers(0, 30), st.sampled_from([2**62, 2**63, 2**70]))
on_lates = st.sampled_from(["drop", "adjust"])


@settings(max_examples=1000, deadline=None)
@given(arrivals_strategy(), delays, on_lates)
def test_goldilocks_matches_reference_and_rules(arrivals, delay, on_late):
    emitted, late = run_steps(goldilocks(Nanoseconds(delay), on_late=on_late), arrivals)
    assert (emitted, late) == reference_goldilocks(arrivals, delay, on_late)
    _check_rules(arrivals, emitted, late)


@settings(max_examples=400, deadline=None)
@given(arrivals_strategy(markers=True), on_lates)
def test_max_matches_reference_and_rules(arrivals, on_late):
    emitted, late = run_steps(max_policy(on_late=on_late), arrivals)
    assert (emitted, late) == reference_max(arrivals, on_late)
    _check_rules(arrivals, emitted, late)


@settings(max_examples=1000, deadline=None)
@given(arrivals_strategy(markers=True), on_lates)
def test_min_matches_reference_and_rules(arrivals, on_late):
    emitted, late = run_steps(min_policy(on_late=on_late), arrivals)
    assert (emitted, late) == reference_min(arrivals, on_late)
    _check_rules(arrivals, emitted, late)


@settings(max_examples=100, deadline=None)
@given(arrivals_strategy(markers=True), on_lates)
def test_min_never_emits_a_cti_above_a_live_input(arrivals, on_late):
    # the conservative promise: the output CTI is never ahead of any live input's CTI
    p = min_policy(on_late=on_late)
    s = p.initial()
    for item in arrivals:
        if is_marker(item):
            s, out = (p.join if item[0] == "join" else p.leave)(s, item[1])
        else:
            s, out = p.step(s, item)
        for e in out:
            if isinstance(e, Event) and e.kind == CTI:
                assert all(e.start <= latest for _, latest in s.ctis)
        assert s.live == frozenset(name for name, _ in s.ctis)


# -- the batch step ----------------------------------------------------------------------------

def _step_by_step(policy, state, events):
    emitted, late = [], []
    for e in events:
        state, outputs = policy.step(state, e)
        for out in outputs:
            (emitted if isinstance(out, Event) else late).append(out)
    return state, emitted, late


@settings(max_examples=1000, deadline=None)
@given(arrivals_strategy(), delays, on_lates, st.data())
def test_step_many_decides_exactly_as_step_over_any_split(arrivals, delay, on_late, data):
    """The union's batch path runs ``step_many`` over whatever batches arrivals come in: any
    split of any arrival sequence, from any state, must give step's outputs and state."""
    for policy in (goldilocks(Nanoseconds(delay), on_late=on_late), max_policy(on_late=on_late),
                   min_policy(on_late=on_late)):
        cut = data.draw(st.integers(0, len(arrivals)), label="prefix run by step")
        state, _, _ = _step_by_step(policy, policy.initial(), arrivals[:cut])
        expected = _step_by_step(policy, state, arrivals[cut:])
        emitted, late = [], []
        rest = arrivals[cut:]
        while rest:
            k = data.draw(st.integers(1, len(rest)), label="batch size")
            state, e, l, c = engine_step_many(policy, state, rest[:k])
            assert c == [a for a in rest[:k] if a.kind == CTI]
            assert all(type(entry) is LateEntry for entry in l)
            emitted += e
            late += [LateRecord(*entry) for entry in l]  # entries: the records' fields
            rest = rest[k:]
        assert (state, emitted, late) == expected, policy


def test_step_many_without_events_returns_the_state_it_was_given():
    p = goldilocks(Nanoseconds(5))
    s = p.step(p.initial(), Event.cti(100))[0]
    assert p.step_many(s, []) == (s, [], [], [])
    assert p.step_many(p.initial(), []) == (p.initial(), [], [], [])
