"""The robust combine rules (TS §2.5, §2.6): ``quantile_policy`` and ``goldilocks(…,
max_ahead=…)`` — against brute-force references, through the union and replay, and against
a runaway clock."""

from __future__ import annotations


import pytest
from hypothesis import given, settings, strategies as st

from engine import CallbackSubscriber, Event
from engine.errors import InputError
from engine.event import CTI
from engine.times import Nanoseconds
from operators import Union, goldilocks, quantile_policy
from operators.policies import resolve_policy
from operators.robust import GOLDILOCKS, MAX_AHEAD, QUANTILE
from tests.reference import (arrivals_strategy, guarded_rule, quantile_rule,
                             reference_goldilocks, reference_live, run_steps)

H = 3_600 * 10**9
M = 60 * 10**9
T0 = 1_795_334_400 * 10**9  # 2026-11-22T08:00:00Z


_quantile = quantile_rule  # the reference's rules (TS §2.5, §2.6)
_guarded = guarded_rule


@settings(max_examples=300, deadline=None)
@given(arrivals=arrivals_strategy(markers=True), k=st.integers(1, 4),
       delay=st.integers(0, 10), on_late=st.sampled_from(["drop", "adjust"]))
def test_ts_2_5_quantile_steps_match_the_reference(arrivals, k, delay, on_late):
    got = run_steps(quantile_policy(k, Nanoseconds(delay), on_late), arrivals)
    assert got == reference_live(arrivals, delay, _quantile(k), on_late)


@settings(max_examples=300, deadline=None)
@given(arrivals=arrivals_strategy(markers=True), max_ahead=st.integers(0, 30),
       delay=st.integers(0, 10), on_late=st.sampled_from(["drop", "adjust"]))
def test_ts_2_6_max_ahead_steps_match_the_reference(arrivals, max_ahead, delay, on_late):
    got = run_steps(goldilocks(Nanoseconds(delay), on_late, max_ahead=Nanoseconds(max_ahead)),
                    arrivals)
    assert got == reference_live(arrivals, delay, _guarded(max_ahead), on_late)


def _devices(runaway: bool):
    """Three devices reporting every minute for an hour, a few readings late by 10 minutes;
    with ``runaway``, a fourth whose clock is an hour ahead."""
    arrivals = []
    for minute in range(60):
        for d, name in enumerate("ABC"):
            t = T0 + minute * M + d * 1_000
            start = t - 10 * M if (minute * 3 + d) % 17 == 5 else t
            arrivals.append(Event.point(start, payload=(name, minute), source=name))
            arrivals.append(Event.cti(t, source=name))
        if runaway:
            arrivals.append(Event.point(T0 + minute * M + H, payload=("R", minute), source="R"))
            arrivals.append(Event.cti(T0 + minute * M + H, source="R"))
    return arrivals


def _through_union(policy, arrivals):
    out = []
    union = Union(policy)
    union.subscribe(CallbackSubscriber(out.append, prefetch=1 << 20))
    emitters = {}
    for e in arrivals:  # an input opens as its first event arrives, as a log's source does
        if e.source not in emitters:
            emitters[e.source] = union.open_input(e.source)
        assert emitters[e.source].try_send(e)
    return union, out


@pytest.mark.parametrize("policy", [quantile_policy(2, "2m"), goldilocks("2m", max_ahead="1m")],
                         ids=["quantile", "max_ahead"])
def test_ts_2_5_one_input_an_hour_ahead_loses_the_others_nothing(policy):
    """The others lose exactly what they lose without the runaway input; it is flagged."""
    plain, _ = reference_goldilocks(_devices(False), 2 * M)
    lost_without = sorted(r.event.payload for r in reference_goldilocks(
        _devices(False), 2 * M)[1])
    assert lost_without and plain  # the workload makes some late on its own
    union, out = _through_union(policy, _devices(True))
    late = union.late.drain()
    assert sorted(r.event.payload for r in late if r.input != "R") == lost_without
    assert {r.reason for r in late} <= {QUANTILE, GOLDILOCKS, MAX_AHEAD}
    stats = union.stats()
    assert stats.input("R").ahead
    assert not any(stats.input(n).ahead for n in "ABC")
    # plain goldilocks over the same arrivals: the runaway clock makes everyone late
    _, dragged = reference_goldilocks(_devices(True), 2 * M)
    assert sum(r.input != "R" for r in dragged) > 100


def test_ts_2_6_a_runaway_is_trusted_once_corroborated():
    p = goldilocks(0, max_ahead=Nanoseconds(10))
    s = p.initial()
    s, out = p.step(s, Event.cti(100, source="A"))
    assert out == (Event.cti(100),)
    s, out = p.step(s, Event.cti(1_000, source="R"))   # 900 ahead of A: capped at 110
    assert out == (Event.cti(110),) and p.ahead(s) == {"R"}
    s, out = p.step(s, Event.point(105, source="A"))
    assert out[0].reason == MAX_AHEAD and out[0].cti == 110
    s, out = p.step(s, Event.cti(995, source="A"))      # A corroborates R
    assert out == (Event.cti(1_000),) and p.ahead(s) == frozenset()
    s, out = p.step(s, Event.point(990, source="A"))
    assert out[0].reason == GOLDILOCKS


def test_the_same_rules_through_union_and_replay(tmp_path):
    from goldilocks.replay import replay
    from eventlog.format import encode_event

    arrivals = _devices(True)
    log = tmp_path / "devices.jsonl"
    log.write_bytes(b"".join(encode_event(e) for e in arrivals))
    for policy in (quantile_policy(2, "2m"), goldilocks("2m", max_ahead="1m")):
        union, out = _through_union(policy, arrivals)
        replay([str(log)], policy=policy, out=str(tmp_path / "out.jsonl"),
               late=str(tmp_path / "late.jsonl"))
        written = (tmp_path / "out.jsonl").read_bytes()
        assert written == b"".join(encode_event(e) for e in out)
        assert len((tmp_path / "late.jsonl").read_bytes().splitlines()) == len(
            union.late.drain())


def test_quantile_is_a_builtin_and_its_options_are_checked():
    assert resolve_policy("quantile", k=2, delay="1m").delay == M
    with pytest.raises(InputError, match="k="):
        quantile_policy(0, 0)
    with pytest.raises(InputError, match="max_ahead"):
        goldilocks(0, max_ahead=-1)
    assert quantile_policy(2, 0).run_columns(None, None, None) is None
