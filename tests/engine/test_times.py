"""Time at the edge (TS §1.1, §1.2): instants and durations in, integer nanoseconds out."""

from __future__ import annotations

import datetime as dt

import pendulum
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError, TimeFormatError
from engine.times import (
    MAX_TIME,
    MIN_TIME,
    NS_PER_MS,
    NS_PER_S,
    NS_PER_US,
    Nanoseconds,
    format_duration_ns,
    format_instant,
    format_ns,
    format_rfc3339,
    fraction_digits,
    to_duration_ns,
    to_ns,
    to_seconds,
)

UTC = dt.timezone.utc
T0 = 1_795_334_400 * NS_PER_S  # 2026-11-22T08:00:00Z
MIN = 60 * NS_PER_S


# -- instants (TS §1.1) -----------------------------------------------------------------------

@pytest.mark.parametrize("value, ns", [
    (0, 0),
    (-1, -1),
    (T0, T0),
    (dt.datetime(2026, 11, 22, 8, 0, tzinfo=UTC), T0),
    (dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.timezone(dt.timedelta(hours=1))), T0),
    (dt.datetime(2026, 11, 22, 8, 0, 0, 250, tzinfo=UTC), T0 + 250 * NS_PER_US),
    (dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), -NS_PER_US),
    (pendulum.datetime(2026, 11, 22, 9, 0, tz="Europe/Paris"), T0),
    (pendulum.datetime(2026, 11, 22, 3, 0, tz="America/New_York"), T0),
    ("2026-11-22T08:00:00Z", T0),
    ("2026-11-22T09:00:00+01:00", T0),
    ("2026-11-22T03:00:00-05:00", T0),
    ("2026-11-22T09:00:00+0100", T0),
    ("2026-11-22T09:00:00+01", T0),
    ("2026-11-22 09:00:00+01:00", T0),
    ("2026-11-22T08:00Z", T0),
    ("  2026-11-22T08:00:00Z  ", T0),
    ("2026-11-22T08:00:00.5Z", T0 + 500 * NS_PER_MS),
    ("2026-11-22T08:00:00.000001Z", T0 + 1_000),
    ("2026-11-22T08:00:00.000000001Z", T0 + 1),
    ("2026-11-22T08:00:00.123456789Z", T0 + 123_456_789),
    ("2026-11-22T08:00:00.0000009Z", T0 + 900),
    ("1970-01-01T00:00:00.000000001Z", 1),
    ("1969-12-31T23:59:59.999999999Z", -1),
])
def test_to_ns_accepts(value, ns):
    assert to_ns(value) == ns


def test_int_subclass_is_a_plain_int():
    class Ticks(int):
        pass

    result = to_ns(Ticks(5))
    assert result == 5 and type(result) is int


def _error(fn, value, **kwargs):
    with pytest.raises(TimeFormatError) as info:
        fn(value, **kwargs)
    assert isinstance(info.value, InputError) and isinstance(info.value, ValueError)
    return str(info.value)


def test_naive_datetime_is_refused():  # TS §1.2
    message = _error(to_ns, dt.datetime(2026, 11, 22, 8, 0), what="start of event 12")
    assert message.startswith("start of event 12: naive datetime '2026-11-22T08:00:00'")
    assert "expected an aware datetime" in message


@pytest.mark.parametrize("text", ["2026-11-22T08:00:00", "2026-11-22 08:00:00",
                                  "2026-11-22T08:00:00.123"])
def test_string_without_offset_is_refused(text):  # TS §1.2
    message = _error(to_ns, text, what="--until")
    assert message.startswith(f"--until: {text!r} has no UTC offset")
    assert "expected 'Z' or an offset" in message


def test_date_only_is_refused():
    message = _error(to_ns, "2026-11-22")
    assert "'2026-11-22' is a date, not an instant" in message
    assert "expected a date and time with an offset" in message


@pytest.mark.parametrize("text", ["garbage", "", "2026-13-40T08:00:00Z", "yesterday"])
def test_unparseable_string_is_refused(text):
    message = _error(to_ns, text)
    assert f"cannot parse {text!r} as an ISO-8601 instant" in message
    assert "expected e.g." in message


@pytest.mark.parametrize("text", ["2026-11-22T08:00:00+24:00", "2026-11-22T08:00:00.1234567-24:00",
                                  "2026-11-22T08:00:00.5+23:60"])
def test_offset_of_a_day_or_more_is_refused_as_a_time_error(text):
    # datetime refuses such an offset with a ValueError: it must not escape as one
    message = _error(to_ns, text, what="start")
    assert f"start: {text!r} has an offset of a day or more" in message
    assert "expected an offset between -23:59 and +23:59" in message


@pytest.mark.parametrize("value, type_name", [(None, "NoneType"),
                                              (dt.date(2026, 11, 22), "date")])
def test_other_types_are_refused(value, type_name):
    message = _error(to_ns, value)
    assert f"{value!r} of type {type_name} is not an instant" in message
    assert "expected int nanoseconds" in message


def test_a_float_instant_is_refused_saying_an_int_is_nanoseconds():
    # time.time() gives seconds as a float: say what an int instant is and how to convert
    message = _error(to_ns, 1795334400.123, what="point event time")
    assert message.startswith("point event time: 1795334400.123 is a float; an instant is int "
                              "nanoseconds since the epoch (time.time_ns(), not time.time())")
    assert "datetime.fromtimestamp(t, timezone.utc)" in message


def test_bool_is_refused():
    assert "True is a bool; expected an instant" in _error(to_ns, True)


def test_parse_error_keeps_its_cause():
    with pytest.raises(TimeFormatError) as info:
        to_ns("garbage")
    assert info.value.__cause__ is not None


# -- durations --------------------------------------------------------------------------------

@pytest.mark.parametrize("value, ns", [
    (0, 0),
    (250, 250 * NS_PER_S),  # a bare number is seconds, as time.sleep takes it
    (1.5, 1500 * NS_PER_MS),
    (0.1, 100 * NS_PER_MS),  # rounded to the nanosecond, not truncated below it
    (1e-9, 1),
    (Nanoseconds(250), 250),  # already nanoseconds
    (Nanoseconds(2**70), 2**70),
    ("5m", 5 * MIN),
    ("5min", 5 * MIN),
    ("1h30m", 90 * MIN),
    ("1h 30m", 90 * MIN),
    ("PT5M", 5 * MIN),
    ("pt5m", 5 * MIN),
    ("PT1H30M", 90 * MIN),
    ("P1DT2H", 26 * 60 * MIN),
    ("PT0.5S", 500 * NS_PER_MS),
    ("250ms", 250 * NS_PER_MS),
    ("1.5s", 1500 * NS_PER_MS),
    ("10us", 10 * NS_PER_US),
    ("10µs", 10 * NS_PER_US),
    ("7ns", 7),
    ("2d", 2 * 86400 * NS_PER_S),
    ("0s", 0),
    (dt.timedelta(minutes=5), 5 * MIN),
    (dt.timedelta(microseconds=1), NS_PER_US),
    (pendulum.duration(hours=1, minutes=30), 90 * MIN),
])
def test_to_duration_ns_accepts(value, ns):
    assert to_duration_ns(value) == ns


@pytest.mark.parametrize("value", [-1, -0.5, Nanoseconds(-1), dt.timedelta(seconds=-1),
                                   pendulum.duration(minutes=-5), "-5m", " -PT5M", "-300"])
def test_negative_duration_is_refused(value):
    message = _error(to_duration_ns, value, what="goldilocks: delay")
    assert message.startswith(f"goldilocks: delay: {value!r} must not be negative")
    assert "expected a duration >= 0 such as '5m'" in message


@pytest.mark.parametrize("text", ["5x", "m5", "5m garbage", "five minutes", "1h30",
                                  "5 minutes later", "5 mins 3", "interval", "5 m s",
                                  "3 fortnights"])
def test_unparseable_duration_is_refused(text):
    message = _error(to_duration_ns, text, what="--delay")
    assert message.startswith(f"--delay: cannot parse {text!r} as a duration")
    assert "expected ISO-8601 ('PT5M'), a compact form" in message
    assert "or words such as '5 minutes'" in message


@pytest.mark.parametrize("text, forms", [
    ("300", "'300s', '5m', 'PT5M' or '300ns'"),
    (" 42 ", "'42s', '5m', 'PT5M' or '42ns'"),
    ("1.5", "'1.5s', '5m' or 'PT5M'"),
    ("+7", "'7s', '5m', 'PT5M' or '7ns'"),
])
def test_a_number_in_a_string_without_its_unit_is_refused_naming_the_forms(text, forms):
    # seconds or nanoseconds? a command line or a config file cannot say: the unit is required
    message = _error(to_duration_ns, text, what="--delay")
    assert message == (f"--delay: {text!r} has no unit; expected a duration with its unit, "
                       f"e.g. {forms}")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_infinite_seconds_are_refused(value):
    assert "is not a duration; expected a finite number of seconds" in _error(
        to_duration_ns, value)


def test_nanoseconds_passed_as_a_bare_number_are_caught_when_they_cannot_be_seconds():
    # goldilocks(300_000_000_000), meant as 5 minutes in ns, is 9,500 years as seconds
    message = _error(to_duration_ns, 300_000_000_000, what="goldilocks: delay")
    assert message.startswith("goldilocks: delay: 300000000000 seconds is longer than")
    assert "a bare number is seconds: pass integer nanoseconds as " \
           "engine.times.Nanoseconds(ns)" in message
    assert to_duration_ns(Nanoseconds(300_000_000_000)) == 5 * MIN


def test_nanoseconds_is_an_int_that_shows_its_unit():
    n = Nanoseconds(5 * MIN)
    assert isinstance(n, int) and n == 5 * MIN and repr(n) == "Nanoseconds(300000000000)"
    assert type(n + 1) is int  # arithmetic gives plain ints: the unit is not carried on
    import pickle
    assert pickle.loads(pickle.dumps(n)) == n and type(pickle.loads(pickle.dumps(n))) is Nanoseconds


def test_to_seconds_reads_every_form():
    assert to_seconds("1m30s") == 90.0 and to_seconds(2) == 2.0 and to_seconds(0.25) == 0.25
    assert to_seconds(Nanoseconds(5 * NS_PER_MS)) == 0.005
    assert to_seconds(dt.timedelta(milliseconds=1500)) == 1.5
    assert "must not be negative" in _error(to_seconds, "-1s")


@pytest.mark.parametrize("value, ns", [
    ("0", 0),  # zero is zero in every unit: no unit needed
    (" 0.0 ", 0),
    ("5 minutes", 5 * MIN),  # Spark's interval words
    ("5 minute", 5 * MIN),
    ("5 min", 5 * MIN),
    ("5 mins", 5 * MIN),
    ("5 Minutes", 5 * MIN),
    ("interval 5 minutes", 5 * MIN),
    ("1 hour 30 minutes", 90 * MIN),
    ("10 seconds", 10 * NS_PER_S),
    ("10 secs", 10 * NS_PER_S),
    ("1.5 seconds", 1500 * NS_PER_MS),
    ("250 milliseconds", 250 * NS_PER_MS),
    ("10 microseconds", 10 * NS_PER_US),
    ("7 nanoseconds", 7),
    ("2 days", 2 * 86400 * NS_PER_S),
    ("1 week", 7 * 86400 * NS_PER_S),
    ("2w", 14 * 86400 * NS_PER_S),
    ("5ms", 5 * NS_PER_MS),  # m is a minute and ms a millisecond, spelled out or not
    ("5m", 5 * MIN),
])
def test_durations_in_words_and_integer_strings(value, ns):
    assert to_duration_ns(value) == ns


@pytest.mark.parametrize("text", ["5 months", "1 year", "2y", "3mo"])
def test_durations_of_varying_length_are_refused_by_name(text):
    assert "uses years or months, whose length varies" in _error(to_duration_ns, text)


def test_empty_and_iso_errors_name_the_value():
    assert "empty string is not a duration; expected e.g. '5m'" in _error(to_duration_ns, "  ")
    message = _error(to_duration_ns, "PTxM")
    assert "cannot parse 'PTxM' as an ISO-8601 duration (expected e.g. 'PT5M')" in message
    message = _error(to_duration_ns, "P1M")
    assert "'P1M' uses years or months" in message and "expected days or smaller" in message


def test_duration_of_other_types_is_refused():
    assert "[1] of type list is not a duration" in _error(to_duration_ns, [1])
    assert "False is a bool; expected a duration" in _error(to_duration_ns, False)


# -- formatting -------------------------------------------------------------------------------

def test_format_ns():
    assert format_ns(0) == "1970-01-01T00:00:00.000000000Z"
    assert format_ns(T0 + 1) == "2026-11-22T08:00:00.000000001Z"
    assert format_ns(-1) == "1969-12-31T23:59:59.999999999Z"
    assert (format_ns(MIN_TIME), format_ns(MAX_TIME)) == ("-inf", "+inf")


def test_format_instant():
    assert format_instant(T0) == "2026-11-22T08:00:00Z"
    assert format_instant(T0 + 1) == "2026-11-22T08:00:00.000000001Z"
    assert (format_instant(MIN_TIME), format_instant(MAX_TIME)) == ("-inf", "+inf")


def test_format_duration_ns():
    assert format_duration_ns(0) == "0s"
    assert format_duration_ns(90 * MIN) == "1h30m"
    assert format_duration_ns(86400 * NS_PER_S + 250 * NS_PER_MS + 3) == "1d250ms3ns"


@settings(max_examples=500, deadline=None)
@given(st.integers(MIN_TIME + 1, MAX_TIME - 1))
def test_format_ns_round_trips(ns):
    assert to_ns(format_ns(ns)) == ns


@settings(max_examples=500, deadline=None)
@given(st.integers(MIN_TIME, MAX_TIME))
def test_format_rfc3339_round_trips_over_int64(ns):
    text = format_rfc3339(ns)
    assert to_ns(text) == ns
    # a fraction only as needed, in groups of three digits
    fraction = text[20:-1]
    assert len(fraction) in (0, 3, 6, 9) and not fraction.endswith("000")


def test_format_rfc3339_with_fixed_digits_and_one_precision_for_a_column():
    assert format_rfc3339(T0) == "2026-11-22T08:00:00Z"
    assert format_rfc3339(T0, 3) == "2026-11-22T08:00:00.000Z"
    assert format_rfc3339(T0 + 123_456_789, 3) == "2026-11-22T08:00:00.123Z"  # truncated
    assert fraction_digits([T0, T0 + 250 * NS_PER_MS]) == 3
    assert fraction_digits([T0, T0 + 250 * NS_PER_US]) == 6
    assert fraction_digits([T0 + 1, T0]) == 9 and fraction_digits([T0]) == 0


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6 * 86400 * NS_PER_S))
def test_format_duration_ns_round_trips(ns):
    assert to_duration_ns(format_duration_ns(ns)) == ns


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1678, 1, 1), max_value=dt.datetime(2261, 12, 31),
                    timezones=st.just(UTC)))
def test_aware_datetime_and_its_iso_string_agree(value):
    assert to_ns(value) == to_ns(value.isoformat())
    assert to_ns(value) == to_ns(pendulum.instance(value))


@pytest.mark.parametrize("text", ["2026-11-22T08:00:00z", "2026-11-22t08:00:00Z",
                                  "2026-11-22t08:00:00z", "2026-11-22 08:00:00z"])
def test_lower_case_t_and_z_are_read_as_rfc_3339_allows(text):
    # event-log.md lists 'z' among the accepted forms
    assert to_ns(text) == T0
