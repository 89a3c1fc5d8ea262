"""The robust rules' columnar form (``run_source_columns``, ``operators.robust_columns``)
decides as their steps do, row for row, late reasons and the state included, wherever the
columns are cut; and as the brute-force reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from engine.event import CTI, INTERVAL, Event, LateRecord
from engine.policy import CTI_EMIT, CTI_SUPPRESS, DROP_LATE, EMIT, EMIT_ADJUSTED
from engine.times import Nanoseconds
from operators import goldilocks, quantile_policy
from operators.robust_columns import JOIN_ROW, LEAVE_ROW, REASONS
from tests.operators.test_robust_policies import _guarded, _quantile
from tests.reference import (arrivals_strategy, is_marker, reference_live, run_steps,
                             step_through)


def _columns(arrivals):
    """The arrivals as columns: is_cti, change, source code, start, end; and the names."""
    names = sorted({item[1] if is_marker(item) else item.source for item in arrivals})
    code = {name: i for i, name in enumerate(names)}
    is_cti, change, source, start, end = [], [], [], [], []
    for item in arrivals:
        if is_marker(item):
            verb, name = item
            is_cti.append(False)
            change.append(JOIN_ROW if verb == "join" else LEAVE_ROW)
            source.append(code[name])
            start.append(0)
            end.append(0)
        else:
            is_cti.append(item.kind == CTI)
            change.append(0)
            source.append(code[item.source])
            start.append(item.start)
            end.append(item.end if item.kind != CTI else 0)
    return (np.array(is_cti, bool), np.array(change, np.int8), np.array(source, np.int64),
            np.array(start, np.int64), np.array(end, np.int64), names)


def _outputs(arrivals, action, cti, why):
    """The step's outputs rebuilt from the columnar decisions."""
    emitted, late = [], []
    for item, a, c, w in zip(arrivals, action.tolist(), cti.tolist(), why.tolist()):
        if a == CTI_EMIT:
            emitted.append(Event(CTI, c, None, None, None))
        elif is_marker(item) or item.kind == CTI:
            assert a == CTI_SUPPRESS
        elif a == EMIT:
            emitted.append(item)
        elif a == EMIT_ADJUSTED:
            clipped = Event(INTERVAL, c, item.end, item.payload, item.source)
            emitted.append(clipped)
            late.append(LateRecord(item.source, item, c, "adjusted", clipped, REASONS[w]))
        else:
            assert a == DROP_LATE
            late.append(LateRecord(item.source, item, c, "dropped", None, REASONS[w]))
    return emitted, late


def _run_in_pieces(policy, arrivals, cuts):
    cols = _columns(arrivals)
    names = cols[-1]
    state = None
    parts = []
    bounds = [0, *sorted(set(cuts)), len(arrivals)]
    for lo, hi in zip(bounds, bounds[1:]):
        action, cti, why, state = policy.run_source_columns(
            *(c[lo:hi] for c in cols[:-1]), names, state)
        parts.append((action, cti, why))
    if not parts:
        return _outputs(arrivals, *(np.zeros(0, t) for t in (np.int8, np.int64, np.int8))), state
    joined = [np.concatenate([p[k] for p in parts]) for k in range(3)]
    return _outputs(arrivals, *joined), state


_POLICIES = st.one_of(
    st.builds(quantile_policy, st.integers(1, 4), st.integers(0, 10).map(Nanoseconds),
              st.sampled_from(["drop", "adjust"])),
    st.builds(lambda m, d, o: goldilocks(d, o, max_ahead=m), st.integers(0, 30).map(Nanoseconds),
              st.integers(0, 10).map(Nanoseconds), st.sampled_from(["drop", "adjust"])))


@settings(max_examples=400, deadline=None)
@given(arrivals=arrivals_strategy(markers=True), policy=_POLICIES,
       cuts=st.lists(st.integers(0, 40), max_size=4))
def test_ts_2_5_2_6_columns_decide_as_the_steps_wherever_cut(arrivals, policy, cuts):
    cuts = [c for c in cuts if c <= len(arrivals)]
    got, state = _run_in_pieces(policy, arrivals, cuts)
    assert got == run_steps(policy, arrivals)
    assert state == step_through(policy, arrivals)[0] or (
        state is None and not arrivals)


@settings(max_examples=200, deadline=None)
@given(arrivals=arrivals_strategy(markers=True), k=st.integers(1, 4),
       max_ahead=st.integers(0, 30).map(Nanoseconds), delay=st.integers(0, 10).map(Nanoseconds),
       on_late=st.sampled_from(["drop", "adjust"]))
def test_ts_2_5_2_6_columns_match_the_reference(arrivals, k, max_ahead, delay, on_late):
    got, _ = _run_in_pieces(quantile_policy(k, delay, on_late), arrivals, [])
    assert got == reference_live(arrivals, delay, _quantile(k), on_late)
    got, _ = _run_in_pieces(goldilocks(delay, on_late, max_ahead=max_ahead), arrivals, [])
    assert got == reference_live(arrivals, delay, _guarded(max_ahead), on_late)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=9), st.integers(0, 40))
def test_the_guarded_value_is_the_largest_trusted_latest(latest, max_ahead):
    """The closed form of ``guarded_value`` against the rule as written (TS §2.6)."""
    from sortedcontainers import SortedList

    from operators.robust_columns import guarded_value

    ctis = {f"s{i}": t for i, t in enumerate(latest)}
    want = _guarded(max_ahead)(ctis)
    value, code = guarded_value(max_ahead, SortedList(latest))
    assert (value, REASONS[code]) == want
