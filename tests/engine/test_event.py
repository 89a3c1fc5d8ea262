"""The temporal event model: shapes, conversion at the edge (TS §1.1–§1.3), value semantics."""

from __future__ import annotations

import datetime as dt
import pickle

import pendulum
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError, TimeFormatError
from engine.event import (
    ADJUSTED,
    CTI,
    DROPPED,
    END,
    INTERVAL,
    KINDS,
    POINT,
    START,
    Event,
    LateRecord,
)
from engine.times import MAX_TIME, MIN_TIME, NS_PER_S

UTC = dt.timezone.utc


def test_point_lasts_one_tick():
    e = Event.point(5, payload="x", source="A")
    assert (e.kind, e.start, e.end, e.payload, e.source) == (POINT, 5, 6, "x", "A")
    assert not e.is_cti


def test_interval_and_cti_shapes():
    i = Event.interval(1, 10, payload=[1], source="B")
    assert (i.kind, i.start, i.end) == (INTERVAL, 1, 10)
    c = Event.cti(8, source="A")
    assert (c.kind, c.start, c.end, c.payload, c.is_cti) == (CTI, 8, None, None, True)
    assert Event.cti_infinity().start == MAX_TIME
    assert KINDS == (POINT, INTERVAL, CTI, START, END)


def test_constructors_convert_at_the_edge():  # TS §1.1
    t = dt.datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    ns = 1_795_334_400 * NS_PER_S
    assert Event.point(t).start == ns
    assert Event.point(pendulum.instance(t)).start == ns
    assert Event.cti("2026-11-22T09:00:00+01:00").start == ns
    assert Event.interval("2026-11-22T08:00:00Z", "2026-11-22T08:00:00.000000001Z").end == ns + 1


def test_naive_time_is_refused_naming_the_field():  # TS §1.2
    with pytest.raises(TimeFormatError, match="^point event time: naive datetime"):
        Event.point(dt.datetime(2026, 11, 22, 8, 0))
    with pytest.raises(TimeFormatError, match="^interval end: '2026-11-22T08:00:00' has no UTC"):
        Event.interval("2026-11-22T07:00:00Z", "2026-11-22T08:00:00")
    with pytest.raises(TimeFormatError, match="^CTI time: cannot parse 'soon'"):
        Event.cti("soon")


@pytest.mark.parametrize("start, end", [(5, 5), (5, 4), ("1970-01-01T00:00:01Z", 10**9)])
def test_interval_end_must_be_after_start(start, end):  # TS §1.3
    with pytest.raises(InputError) as info:
        Event.interval(start, end)
    message = str(info.value)
    assert f"end {end!r}" in message and f"start {start!r}" in message
    assert "expected end > start" in message


def test_equality_hash_and_repr():
    a = Event.point(5, payload="x", source="A")
    assert a == Event.point(5, payload="x", source="A")
    assert a != Event.point(5, payload="x", source="B")
    assert a != Event.interval(5, 6, payload="x", source="A")
    assert hash(a) == hash(Event.point(5, payload="x", source="A"))
    assert (a == (POINT, 5, 6, "x", "A")) is False
    assert repr(a) == "Event.point('1970-01-01T00:00:00.000000005Z', payload='x', source='A')"
    assert repr(Event.interval(1, 3)) == ("Event.interval('1970-01-01T00:00:00.000000001Z', "
                                          "'1970-01-01T00:00:00.000000003Z')")
    assert repr(Event.cti(7, source="A")) == "Event.cti('1970-01-01T00:00:00.000000007Z', " \
                                             "source='A')"


T = 1_795_334_400 * 10**9  # 2026-11-22T08:00:00Z


@pytest.mark.parametrize("event, text", [
    (Event.point(T + 300 * 10**9, payload=1.0, source="A"),
     "Event.point('2026-11-22T08:05:00Z', payload=1.0, source='A')"),
    (Event.cti(T + 250 * 10**6), "Event.cti('2026-11-22T08:00:00.250Z')"),
    (Event.cti_infinity(), "Event.cti_infinity()"),
    (Event.cti_infinity(source="A"), "Event.cti_infinity(source='A')"),
    (Event.interval(T, T + 1), "Event.interval('2026-11-22T08:00:00Z', "
                               "'2026-11-22T08:00:00.000000001Z')"),
    (Event.start_edge(T, "door", source="A"),
     "Event.start_edge('2026-11-22T08:00:00Z', id='door', source='A')"),
    (Event.end_edge(T, T + 10**9, 7), "Event.end_edge('2026-11-22T08:00:00Z', "
                                      "'2026-11-22T08:00:01Z', id=7)"),
    (Event.cti(MIN_TIME), "Event.cti('1677-09-21T00:12:43.145224192Z')"),
])
def test_a_repr_shows_readable_exact_times_and_builds_the_same_event(event, text):
    assert repr(event) == str(event) == text
    assert eval(text, {"Event": Event}) == event  # exact: all the digits that matter


def test_a_late_record_shows_the_cti_it_violated_as_an_instant():
    r = LateRecord("B", Event.point(T - 60 * 10**9), T, DROPPED)
    assert repr(r) == ("LateRecord(input='B', event=Event.point('2026-11-22T07:59:00Z'), "
                       "cti='2026-11-22T08:00:00Z', action='dropped')")


def test_unhashable_payload_still_hashes():
    e = Event.point(1, payload={"k": [1]})
    assert hash(e) == hash(Event.point(1, payload={"k": [1]}))


def test_copies():
    e = Event.interval(1, 10, payload="p", source="A")
    assert e.with_start(4) == Event.interval(4, 10, payload="p", source="A")
    assert e.with_source(None) == Event.interval(1, 10, payload="p")
    assert e == Event.interval(1, 10, payload="p", source="A")  # unchanged


def test_late_record():
    e = Event.interval(1, 10, source="B")
    clipped = e.with_start(5)
    r = LateRecord("B", e, 5, ADJUSTED, clipped)
    assert r == LateRecord("B", e, 5, ADJUSTED, clipped)
    assert r != LateRecord("B", e, 5, DROPPED)
    assert hash(r) == hash(LateRecord("B", e, 5, ADJUSTED, clipped))
    assert "action='adjusted'" in repr(r)
    assert "adjusted=Event.interval('1970-01-01T00:00:00.000000005Z'" in repr(r)
    assert repr(LateRecord("B", e, 5, DROPPED)).endswith("action='dropped')")


times = st.integers(MIN_TIME, MAX_TIME - 1)
events = st.one_of(
    st.builds(lambda t, s: Event.point(t, payload=s, source=s), times, st.none() | st.text(max_size=3)),
    st.builds(lambda t, n: Event.interval(t, min(t + n, MAX_TIME)), times, st.integers(1, 10**12)),
    st.builds(Event.cti, times),
)


@settings(max_examples=200, deadline=None)
@given(events)
def test_events_and_late_records_pickle(e):
    assert pickle.loads(pickle.dumps(e)) == e
    r = LateRecord(e.source, e, 0, DROPPED)
    assert pickle.loads(pickle.dumps(r)) == r


def test_an_int_instant_is_nanoseconds_as_the_docstring_says():
    # TS §1.1: in Python an int instant is nanoseconds since the epoch; the docstring says so
    assert "nanoseconds" in Event.point.__doc__ and "time.time_ns()" in Event.point.__doc__
    assert Event.point(1_795_334_400).start == 1_795_334_400  # 1.8 s after the epoch
    assert Event.point(1_795_334_400 * 10**9).start == \
        Event.point("2026-11-22T08:00:00Z").start


@pytest.mark.parametrize("make, words", [
    (lambda: Event.point(T, payload=object()), "payload <object object"),
    (lambda: Event.point(T, payload={1, 2}), "{1, 2} is a set, which JSON cannot hold"),
    (lambda: Event.point(T, payload=float("nan")), "JSON has no NaN or infinity: use None"),
    (lambda: Event.point(T, payload={"v": [1.0, float("inf")]}), "inf is not a JSON number"),
    (lambda: Event.point(T, payload={1: "a"}), "the key 1 is a int, not a string"),
    (lambda: Event.point(T, payload={"v": float("nan"), "w": 1}), "nan is not a JSON number"),
    (lambda: Event.point(T, payload={"v": -float("inf")}), "-inf is not a JSON number"),
    (lambda: Event.point(T, payload={"v": 1, "w": object()}), "is a object"),
    (lambda: Event.interval(T, T + 1, payload=b"raw"), "b'raw' is a bytes"),
    (lambda: Event.point(T, source=5), "source 5 is a int; expected a string"),
    (lambda: Event.cti(T, source=("A",)), "source ('A',) is a tuple"),
    (lambda: Event.start_edge(T, "d", payload=object()), "start edge: payload"),
])
def test_a_payload_that_is_not_json_or_a_source_that_is_not_a_name_is_refused_at_once(
        make, words):
    # before, these were accepted and failed later, at checkpoint or write time; a NaN sent
    # over the network arrived as null without a word
    with pytest.raises(InputError) as info:
        make()
    assert words in str(info.value)


def test_json_payloads_and_numpy_floats_are_taken():
    import numpy as np

    assert Event.point(T, payload={"v": [1, 2.5, None, True, "x"], "w": {"z": (1, 2)}})
    assert Event.point(T, payload=np.float64(2.5)).payload == 2.5
    with pytest.raises(InputError, match=r"convert it with \.item\(\)"):
        Event.point(T, payload={"v": np.int64(3)})


def test_a_callback_subscriber_without_on_error_warns_when_refused():
    """Subscribing twice to a union: refused through on_error, as Reactive Streams requires
    (RS §1.9: subscribe returns normally); with no on_error to take it, a RuntimeWarning
    says so besides the log."""
    from engine import CallbackSubscriber
    from operators import Union, goldilocks

    union = Union(goldilocks("2s"))
    union.subscribe(CallbackSubscriber(print))
    second = CallbackSubscriber(print)
    with pytest.warns(RuntimeWarning, match="already has a subscriber; use broadcast"):
        union.subscribe(second)
    assert "already has a subscriber" in str(second.error)
