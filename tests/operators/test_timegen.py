"""advance_time step logic: CTIs generated from event times, every N events or every duration."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.event import CTI, Event, LateRecord
from engine.times import MAX_TIME, MIN_TIME
from engine.times import Nanoseconds
from operators.timegen import AdvanceStats, AdvanceTime


def run(gen, events, *, flush=False, to_infinity=False):
    outputs = []
    for e in events:
        outputs.extend(gen.step(e))
        gen._check()
    if flush:
        outputs.extend(gen.flush(to_infinity=to_infinity))
        gen._check()
    emitted = [o for o in outputs if isinstance(o, Event)]
    late = [o for o in outputs if isinstance(o, LateRecord)]
    return emitted, late


def p(t, source=None):
    return Event.point(t, source=source)


def test_every_n_events_with_delay_marble():
    gen = AdvanceTime(every_events=2, delay=Nanoseconds(2))
    emitted, late = run(gen, [p(t) for t in (5, 3, 9, 6, 4, 8)])
    assert emitted == [p(5), p(3), Event.cti(3), p(9), p(6), Event.cti(7), p(8)]
    assert late == [LateRecord(None, p(4), 7, "dropped")]
    assert gen.stats() == AdvanceStats(max_start=9, last_cti=7, since_cti=1, generated=2)


def test_every_duration():
    gen = AdvanceTime(every="10ns")
    emitted, _ = run(gen, [p(t) for t in (0, 5, 9, 10, 12, 25, 26)])
    # the first insert generates the first CTI; then one whenever max start - delay >= last + 10
    assert emitted == [p(0), Event.cti(0), p(5), p(9), p(10), Event.cti(10), p(12), p(25),
                       Event.cti(25), p(26)]


def test_every_duration_and_count_whichever_first():
    gen = AdvanceTime(every_events=3, every=dt.timedelta(microseconds=1), delay="0s")
    emitted, _ = run(gen, [p(t) for t in (0, 1, 2, 3, 2000, 2001)])
    ctis = [e.start for e in emitted if e.kind == CTI]
    assert ctis == [0, 3, 2000]  # by time; after the 3rd insert since; by time again


def test_generated_cti_never_exceeds_an_event_already_passed():
    gen = AdvanceTime(every_events=1, delay=0)
    out = gen.step(p(10))
    assert out == (p(10), Event.cti(10))  # exactly at the CTI: still on time (TS §2.4)
    assert gen.step(p(10)) == (p(10),)  # no new CTI: 10 does not advance (TS §2.1)
    assert gen.step(p(9)) == (LateRecord(None, p(9), 10, "dropped"),)


def test_delay_floor_at_min_time():  # TS §2.2
    gen = AdvanceTime(every_events=1, delay=Nanoseconds(100))
    assert gen.step(p(MIN_TIME + 5)) == (p(MIN_TIME + 5), Event.cti(MIN_TIME))
    assert gen.step(p(MIN_TIME + 50)) == (p(MIN_TIME + 50),)  # still MIN_TIME: not emitted


def test_adjust_clips_late_intervals_and_drops_late_points():  # TS §3.2
    gen = AdvanceTime(every_events=1, on_late="adjust")
    gen.step(p(100))
    e = Event.interval(90, 120, payload="x", source="S")
    clipped = Event.interval(100, 120, payload="x", source="S")
    # the clipped interval starts at the CTI: no new CTI (it would not advance, TS §2.1)
    assert gen.step(e) == (clipped, LateRecord("S", e, 100, "adjusted", clipped))
    gen2 = AdvanceTime(every_events=5, on_late="adjust")
    gen2.step(Event.cti(100))
    assert gen2.step(e) == (clipped, LateRecord("S", e, 100, "adjusted", clipped))
    assert gen2.step(p(99)) == (LateRecord(None, p(99), 100, "dropped"),)


def test_upstream_ctis_pass_when_they_advance():  # TS §2.1
    gen = AdvanceTime(every_events=2)
    assert gen.step(Event.cti(5, source="up")) == (Event.cti(5),)
    assert gen.step(Event.cti(5)) == ()
    assert gen.step(Event.cti(3)) == ()
    assert gen.step(p(7)) == (p(7),)
    assert gen.step(p(6)) == (p(6), Event.cti(7))


def test_flush():
    gen = AdvanceTime(every_events=10, delay=Nanoseconds(1))
    assert gen.flush() == ()
    run(gen, [p(4), p(8)])
    assert gen.flush() == (Event.cti(7),)
    assert gen.flush() == ()
    assert gen.flush(to_infinity=True) == (Event.cti(MAX_TIME),)
    assert gen.flush(to_infinity=True) == ()


@pytest.mark.parametrize("kwargs, message", [
    ({}, "neither every_events nor every"),
    ({"every_events": 0}, "every_events=0; expected an int >= 1"),
    ({"every_events": True}, "every_events=True"),
    ({"every_events": 1.5}, "every_events=1.5"),
    ({"every": "-5m"}, "advance_time: every"),
    ({"every_events": 1, "delay": -1}, "advance_time: delay: -1 must not be negative"),
    ({"every_events": 1, "on_late": "keep"}, "on_late='keep'.*'drop' or 'adjust'"),
])
def test_validation(kwargs, message):
    with pytest.raises(InputError, match=message):
        AdvanceTime(**kwargs)


events = st.lists(st.one_of(
    st.builds(Event.point, st.integers(-50, 200)),
    st.builds(lambda s, n: Event.interval(s, s + n), st.integers(-50, 200), st.integers(1, 40)),
    st.builds(Event.cti, st.integers(-50, 200)),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(events, st.one_of(st.none(), st.integers(1, 5)),
       st.one_of(st.none(), st.integers(0, 30).map(Nanoseconds)),
       st.integers(0, 20).map(Nanoseconds), st.sampled_from(["drop", "adjust"]), st.booleans())
def test_output_rules(evs, every_events, every, delay, on_late, to_infinity):
    if every_events is None and every is None:
        every_events = 1
    gen = AdvanceTime(every_events=every_events, every=every, delay=delay, on_late=on_late)
    emitted, late = run(gen, evs, flush=True, to_infinity=to_infinity)
    ctis = [e.start for e in emitted if e.kind == CTI]
    assert all(a < b for a, b in zip(ctis, ctis[1:]))  # TS §2.1
    last = None
    max_start = None
    for e in emitted:
        if e.kind == CTI:
            last = e.start
        else:
            assert last is None or e.start >= last  # TS §2.3
            max_start = e.start if max_start is None else max(max_start, e.start)
    inserts = [e for e in evs if e.kind != CTI]
    out_inserts = [e for e in emitted if e.kind != CTI]
    dropped = [r for r in late if r.action == "dropped"]
    assert len(inserts) == len(out_inserts) + len(dropped)  # TS §3.4
    assert all(r.event.start < r.cti for r in late)  # TS §3.3
    # every CTI the generator made trails the largest start passed before it by >= delay
    seen = None
    upstream = {e.start for e in evs if e.kind == CTI}
    for e in emitted:
        if e.kind != CTI:
            seen = e.start if seen is None else max(seen, e.start)
        elif e.start not in upstream and e.start != MAX_TIME:
            assert seen is not None and e.start <= max(seen - delay, MIN_TIME)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-50, 200), max_size=60), st.integers(1, 5), st.integers(0, 20))
def test_every_n_matches_a_naive_model(starts, n, delay):
    """Naive model: after every n-th on-time insert, a CTI at max(start so far) - delay if it
    advances; an insert before the last CTI is dropped and not counted."""
    expected = []
    count = 0
    last = None
    top = None
    for s in starts:
        if last is not None and s < last:
            continue
        expected.append(p(s))
        top = s if top is None else max(top, s)
        count += 1
        if count == n:
            count = 0
            c = top - delay
            if last is None or c > last:
                last = c
                expected.append(Event.cti(c))
    emitted, _ = run(AdvanceTime(every_events=n, delay=Nanoseconds(delay)), [p(s) for s in starts])
    assert emitted == expected
