"""The columnar Goldilocks kernel equals the element-by-element step on the same arrivals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.event import CTI, Event, LateRecord
from engine.policy import CTI_EMIT, CTI_SUPPRESS, DROP_LATE, EMIT, EMIT_ADJUSTED
from engine.times import MAX_TIME, MIN_TIME
from engine.times import Nanoseconds
from operators.columnar import delayed_cti_column, goldilocks_columns
from operators.policies import HighState, goldilocks, max_policy
from tests.reference import arrivals_strategy

M = 60 * 10**9


def columns(arrivals):
    is_cti = np.array([e.kind == CTI for e in arrivals], dtype=bool)
    start = np.array([e.start for e in arrivals], dtype=np.int64)
    end = np.array([0 if e.end is None else e.end for e in arrivals], dtype=np.int64)
    return is_cti, start, end


def step_decisions(policy, arrivals):
    """Per row, the (action, cti in force after the row) the step takes, derived from its
    outputs alone; and the step's final state."""
    state = policy.initial()
    actions, ctis = [], []
    for e in arrivals:
        state, out = policy.step(state, e)
        if e.kind == CTI:
            actions.append(CTI_EMIT if out else CTI_SUPPRESS)
        elif out == (e,):
            actions.append(EMIT)
        else:
            record = out[-1]
            assert isinstance(record, LateRecord)
            actions.append(EMIT_ADJUSTED if record.action == "adjusted" else DROP_LATE)
        ctis.append(MIN_TIME if state.high is None else state.high)
    return actions, ctis, state


def test_seed_example_columns():
    arrivals = [Event.point(5 * M, source="A"), Event.point(0, source="B"),
                Event.cti(5 * M, source="A"), Event.cti(0, source="B"),
                Event.point(7 * M, source="A"), Event.cti(8 * M, source="A"),
                Event.point(1 * M, source="B")]
    action, cti, state = goldilocks("5m").run_columns(*columns(arrivals))
    assert action.tolist() == [EMIT, EMIT, CTI_EMIT, CTI_SUPPRESS, EMIT, CTI_EMIT, DROP_LATE]
    assert state == HighState(3 * M)
    assert cti.tolist() == [MIN_TIME, MIN_TIME, 0, 0, 0, 3 * M, 3 * M]
    assert action.dtype == np.int8 and cti.dtype == np.int64


def test_empty_columns():
    action, cti, high = goldilocks_columns([], [], [], 0)
    assert action.shape == (0,) and cti.shape == (0,) and high is None
    assert goldilocks_columns([], [], [], 0, high=7)[2] == 7
    assert action.dtype == np.int8 and cti.dtype == np.int64


def test_first_cti_at_min_time_is_emitted_and_a_second_is_not():
    action, cti, high = goldilocks_columns([False, True, True, False],
                                     [MIN_TIME, MIN_TIME + 2, MIN_TIME + 5, MIN_TIME],
                                     [MIN_TIME + 1, 0, 0, MIN_TIME + 1], Nanoseconds(5))
    assert action.tolist() == [EMIT, CTI_EMIT, CTI_SUPPRESS, EMIT]
    assert cti.tolist() == [MIN_TIME] * 4 and high == MIN_TIME
    # once a CTI at MIN_TIME was emitted, "no CTI yet" no longer applies: suppressed
    action, cti, high = goldilocks_columns([True, False], [MIN_TIME, MIN_TIME], [0, MIN_TIME + 1],
                                           Nanoseconds(5), high=MIN_TIME)
    assert action.tolist() == [CTI_SUPPRESS, EMIT] and high == MIN_TIME


def test_delay_floor_without_overflow():  # TS §2.2
    start = np.array([MIN_TIME, MIN_TIME + 4, MIN_TIME + 5, MIN_TIME + 6, 0, MAX_TIME])
    is_cti = np.ones(6, dtype=bool)
    # a wrapped subtraction would show up as a huge positive value
    assert delayed_cti_column(is_cti, start, 5).tolist() == [
        MIN_TIME, MIN_TIME, MIN_TIME, MIN_TIME + 1, -5, MAX_TIME - 5]
    assert delayed_cti_column(is_cti, start, MAX_TIME).tolist() == [MIN_TIME] * 4 + [
        MIN_TIME + 1, 0]
    assert delayed_cti_column(is_cti, start, 2**63 + 1).tolist() == [MIN_TIME] * 5 + [
        MAX_TIME - 2**63 - 1]
    assert delayed_cti_column(is_cti, start, 2**64 - 1).tolist() == [MIN_TIME] * 6
    assert delayed_cti_column(is_cti, start, 2**64).tolist() == [MIN_TIME] * 6
    not_cti = delayed_cti_column(np.zeros(6, dtype=bool), start, 0)
    assert not_cti.tolist() == [MIN_TIME] * 6


def test_adjust_codes():  # TS §3.2
    # CTI 100; an overlapping interval is clipped, one wholly before and a point are dropped
    action, cti, _ = goldilocks_columns([True, False, False, False, False],
                                     [100, 90, 80, 99, 100], [0, 110, 100, 100, 101], 0, "adjust")
    assert action.tolist() == [CTI_EMIT, EMIT_ADJUSTED, DROP_LATE, DROP_LATE, EMIT]
    assert cti.tolist() == [100] * 5


def test_validation():
    with pytest.raises(InputError, match="on_late='clip'.*'drop' or 'adjust'"):
        goldilocks_columns([True], [0], [0], 0, "clip")
    with pytest.raises(InputError, match="delay.*negative"):
        goldilocks_columns([True], [0], [0], -1)
    with pytest.raises(InputError, match="one length"):
        goldilocks_columns([True, False], [0], [0, 1], 0)
    for bad in (MAX_TIME + 1, MIN_TIME - 1, 1.5, True):
        with pytest.raises(InputError, match="high="):
            goldilocks_columns([True], [0], [0], 0, high=bad)


def test_accepts_duration_strings():
    action, cti, _ = goldilocks_columns([True], [10 * M], [0], "5m")
    assert cti.tolist() == [5 * M]


delays = st.one_of(st.integers(0, 30),
                 st.sampled_from([2**62, MAX_TIME, 2**63, 2**63 + 7, 2**64 - 1, 2**64, 2**70]))


@settings(max_examples=800, deadline=None)
@given(arrivals_strategy(max_size=60), delays, st.sampled_from(["drop", "adjust"]))
def test_columns_equal_the_step(arrivals, delay, on_late):
    for policy in (goldilocks(Nanoseconds(delay), on_late=on_late), max_policy(on_late=on_late)):
        action, cti, state = policy.run_columns(*columns(arrivals))
        expected_action, expected_cti, expected_state = step_decisions(policy, arrivals)
        assert action.tolist() == expected_action
        assert cti.tolist() == expected_cti
        assert state == expected_state


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(MIN_TIME, MAX_TIME - 1),
                          st.integers(1, 2**40)), max_size=40),
       st.integers(0, 2**64), st.sampled_from(["drop", "adjust"]))
def test_columns_equal_the_step_over_the_whole_int64_range(rows, delay, on_late):
    arrivals = [Event.cti(s) if c else Event("interval", s, min(s + n, MAX_TIME), None, None)
                for c, s, n in rows]
    policy = goldilocks(Nanoseconds(delay), on_late=on_late)
    action, cti, state = policy.run_columns(*columns(arrivals))
    assert (action.tolist(), cti.tolist(), state) == step_decisions(policy, arrivals)


def run_in_chunks(policy, arrivals, cuts):
    """``run_columns`` over ``arrivals`` split at ``cuts``, the state carried chunk to chunk."""
    is_cti, start, end = columns(arrivals)
    bounds = [0, *sorted(cuts), len(arrivals)]
    state, actions, ctis = None, [], []
    for lo, hi in zip(bounds, bounds[1:]):
        action, cti, state = policy.run_columns(is_cti[lo:hi], start[lo:hi], end[lo:hi], state)
        actions += action.tolist()
        ctis += cti.tolist()
    return actions, ctis, policy.initial() if state is None else state


@settings(max_examples=500, deadline=None)
@given(st.data(), arrivals_strategy(max_size=60), delays, st.sampled_from(["drop", "adjust"]))
def test_columns_over_any_chunk_split_equal_the_step(data, arrivals, delay, on_late):
    # hypothesis chooses the split points, empty chunks included
    cuts = data.draw(st.lists(st.integers(0, len(arrivals)), max_size=8), label="cuts")
    for policy in (goldilocks(Nanoseconds(delay), on_late=on_late), max_policy(on_late=on_late)):
        assert run_in_chunks(policy, arrivals, cuts) == step_decisions(policy, arrivals)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.lists(st.tuples(st.booleans(), st.integers(MIN_TIME, MAX_TIME - 1),
                                     st.integers(1, 2**40)), max_size=40),
       st.integers(0, 2**64), st.sampled_from(["drop", "adjust"]))
def test_chunked_columns_equal_the_step_over_the_whole_int64_range(data, rows, delay, on_late):
    # the carried high-water mark may be MIN_TIME or near MAX_TIME: no sentinel, no overflow
    arrivals = [Event.cti(s) if c else Event("interval", s, min(s + n, MAX_TIME), None, None)
                for c, s, n in rows]
    cuts = data.draw(st.lists(st.integers(0, len(arrivals)), max_size=6), label="cuts")
    policy = goldilocks(Nanoseconds(delay), on_late=on_late)
    assert run_in_chunks(policy, arrivals, cuts) == step_decisions(policy, arrivals)


def test_state_is_the_steps_state_and_unchanged_when_time_does_not_advance():
    p = goldilocks(0)
    _, _, s1 = p.run_columns([True], [10], [0])
    assert s1 == HighState(10)
    _, _, s2 = p.run_columns([False, True], [11, 5], [12, 0], s1)
    assert s2 is s1  # a suppressed CTI leaves the state as it was, like ``step``
    action, cti, s3 = p.run_columns([False], [9], [10], s1)
    assert action.tolist() == [DROP_LATE] and cti.tolist() == [10] and s3 is s1
