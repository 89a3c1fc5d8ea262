"""The frame codec: round trips, every refusal names what was wrong, and a fuzzed decoder
from which nothing but ``ProtocolError`` escapes."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.event import Event
from engine.times import MAX_TIME
from goldilocks.net.protocol import (
    MAX_BATCH,
    VERSION,
    ProtocolError,
    decode_events,
    decode_frame,
    encode_cancel,
    encode_complete,
    encode_error,
    encode_keepalive,
    encode_next,
    encode_ok,
    encode_publish,
    encode_request,
    encode_setup,
    encode_subscribe,
)


def test_every_frame_round_trips():
    events = [Event.point(5, {"v": 1}), Event.interval(1, 9, "x"), Event.cti(4)]
    frame = decode_frame(encode_next(3, events))
    assert (frame.type, frame.stream) == ("next", 3)
    assert decode_events(frame.events, "A", stream=3) == [e.with_source("A") for e in events]
    out = decode_frame(encode_next(2, [e.with_source("B") for e in events], with_source=True))
    assert decode_events(out.events, None, with_source=True)[0].source == "B"
    assert decode_frame(encode_request(1, 64)).n == 64
    assert decode_frame(encode_publish(7, "thermo-1")).device == "thermo-1"
    assert decode_frame(encode_subscribe(9)).type == "subscribe"
    assert decode_frame(encode_cancel(1)).type == "cancel"
    assert decode_frame(encode_complete(1)).type == "complete"
    err = decode_frame(encode_error(0, "overrun", "too many"))
    assert (err.code, err.message, err.stream) == ("overrun", "too many", 0)
    assert decode_frame(encode_keepalive()).type == "keepalive"
    setup = decode_frame(encode_setup("secret-token"))
    assert setup.token == "secret-token" and setup.version == VERSION
    assert decode_frame(encode_ok(1, max_frame=10)).info == {"max_frame": 10}


def test_a_frame_repr_never_shows_the_token():
    frame = decode_frame(encode_setup("hunter2-token"))
    assert "hunter2" not in repr(frame) and "<redacted>" in repr(frame)


def test_request_saturates_at_max_demand():  # RS §3.17
    assert decode_frame(b'{"type":"request","stream":1,"n":%d}' % (2**64 - 1)).n == 2**63 - 1


@pytest.mark.parametrize("data, code, words", [
    (b"not json", "malformed", "not valid UTF-8 JSON"),
    (b"[1,2]", "malformed", "expected a JSON object"),
    (b'{"type":"hello"}', "malformed", "frame type 'hello'"),
    (b'{"type":"next","stream":1,"events":[]}', "malformed", "non-empty list"),
    (b'{"type":"next","stream":"1","events":[]}', "malformed", "stream '1'"),
    (b'{"type":"request","stream":1}', "malformed", "missing field 'n'"),
    (b'{"type":"request","stream":1,"n":0}', "malformed", "RS §3.9"),
    (b'{"type":"request","stream":1,"n":true}', "malformed", "field 'n' is bool"),
    (b'{"type":"publish","stream":1,"device":""}', "malformed", "device name"),
    (b'{"type":"publish","stream":0,"device":"a"}', "malformed", "stream 0"),
    (b'{"type":"keepalive","stream":3}', "malformed", "expected 0"),
    (b'{"type":"setup","version":"1"}', "malformed", "field 'version' is str"),
])
def test_malformed_frames_are_refused_naming_the_fault(data, code, words):
    with pytest.raises(ProtocolError) as info:
        decode_frame(data)
    assert info.value.code == code
    assert words in str(info.value)


def test_a_bad_token_type_is_refused_without_echoing_it():
    with pytest.raises(ProtocolError) as info:
        decode_frame(b'{"type":"setup","version":1,"token":["my-secret"]}')
    assert "my-secret" not in str(info.value)


def test_oversized_frames_are_refused_before_parsing():
    with pytest.raises(ProtocolError) as info:
        decode_frame(b" " * 200, max_frame=100)
    assert info.value.code == "oversized" and "200 bytes" in str(info.value)


def test_too_many_events_in_one_frame():
    rows = [["point", 1, None, None]] * (MAX_BATCH + 1)
    with pytest.raises(ProtocolError, match="at most"):
        decode_frame(orjson.dumps({"type": "next", "stream": 1, "events": rows}),
                     max_frame=1 << 24)


@pytest.mark.parametrize("row, words", [
    ("x", "expected [kind, start, end, payload]"),
    (["blip", 1, None, None], "kind 'blip'"),
    (["point", 1.5, None, None], "start 1.5"),
    (["point", True, None, None], "start True"),
    (["point", 2**63, None, None], "int64"),
    (["point", 1, 5, None], "expected null or start + 1"),
    (["interval", 5, 5, None], "end > start"),
    (["cti", 5, 6, None], "a cti with end 6"),
    (["point", 1, None, None, "B"], "has 5 elements"),
])
def test_bad_events_are_refused_naming_the_event(row, words):
    with pytest.raises(ProtocolError) as info:
        decode_events([["point", 0, None, None], row], "A", stream=4)
    assert "event 1 on stream 4" in str(info.value) and words in str(info.value)


@pytest.mark.parametrize("row, unit, words", [
    (["point", 1_795_334_400_123, None, None], "milliseconds", "2026-11-22T08:00:00.123Z"),
    (["cti", 1_795_334_401, None, None], "seconds", "2026-11-22T08:00:01Z"),
    (["interval", 0, 1_795_334_400_123_456, None], "microseconds",
     "2026-11-22T08:00:00.123456Z"),
])
def test_times_implausible_as_nanoseconds_are_refused_naming_the_unit(row, unit, words):
    # TS §1.6: a device publishing Event.point(1795334400.123 s as ms) would be silently late
    with pytest.raises(ProtocolError) as info:
        decode_events([["point", 1_795_334_400 * 10**9, None, None], row], "A", stream=4)
    message = str(info.value)
    assert info.value.code == "malformed"
    assert "event 1 on stream 4" in message and f"looks like {unit} since the epoch" in message
    assert words in message and "not nanoseconds" in message
    # whole seconds as nanoseconds (a relative clock) and today's nanoseconds pass
    assert decode_events([["point", 2_000_000_000, None, None],
                          ["point", 1_795_334_400_123_456_789, None, None]], "A")


def test_edges_of_time_are_accepted():
    events = decode_events([["cti", MAX_TIME, None, None], ["point", -(2**63), None, None]],
                           "A")
    assert events[0].start == MAX_TIME and events[1].end == -(2**63) + 1


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["type", "stream", "n", "events", "device", "code",
                                       "message", "version", "token", "x"]), inner,
                      max_size=5),
    max_leaves=20)
_types = st.sampled_from(["setup", "ok", "publish", "subscribe", "request", "cancel", "next",
                          "complete", "error", "keepalive", "nope"])


@st.composite
def _frames(draw):
    """Near-valid frames (a real type, fields of random shape) and plain garbage."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=64))
    obj = draw(st.dictionaries(st.sampled_from(["stream", "n", "events", "device", "code",
                                                "message", "version", "token"]), _json,
                               max_size=4))
    obj["type"] = draw(_types)
    if draw(st.booleans()):
        obj["events"] = draw(st.lists(st.lists(_json, max_size=6), min_size=1, max_size=4))
    data = json.dumps(obj).encode()  # the standard library: integers of any size
    cut = draw(st.integers(min_value=0, max_value=len(data)))
    return data if draw(st.booleans()) else data[:cut]


@settings(max_examples=400, deadline=None)
@given(_frames(), st.booleans())
def test_fuzz_only_protocol_errors_escape_the_decoder(data, with_source):
    try:
        frame = decode_frame(data, max_frame=512)
        if frame.events is not None:
            decode_events(frame.events, "dev", stream=frame.stream, with_source=with_source)
    except ProtocolError as err:
        assert err.code in ("malformed", "oversized") and str(err)


_edge_times = st.sampled_from([-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1])
_times = st.integers(min_value=-(2**63), max_value=2**63 - 1) | _edge_times


@st.composite
def _valid_row(draw):
    kind = draw(st.sampled_from(["point", "interval", "cti"]))
    start = draw(_times)
    if kind == "point":
        end = draw(st.sampled_from([None, start + 1]))
    elif kind == "interval":
        end = draw(st.integers(min_value=start + 1, max_value=min(start + 10, 2**63 - 1))
                   if start < 2**63 - 1 else st.just(start + 1))
    else:
        end = None
    return [kind, start, end, draw(_json)]


_misses = [
    lambda r: r[:3], lambda r: r + ["src"], tuple, lambda r: "x",
    lambda r: ["Point", *r[1:]], lambda r: [1, *r[1:]], lambda r: [[r[0]], *r[1:]],
    lambda r: [r[0], float(r[1]), *r[2:]], lambda r: [r[0], True, *r[2:]],
    lambda r: [r[0], 2**63, *r[2:]], lambda r: [r[0], -(2**63) - 1, *r[2:]],
    lambda r: [r[0], str(r[1]), *r[2:]], lambda r: [r[0], None, *r[2:]],
    lambda r: [*r[:2], r[1], r[3]], lambda r: [*r[:2], r[1] + 2, r[3]],
    lambda r: [*r[:2], r[1] - 1, r[3]], lambda r: [*r[:2], 2**63, r[3]],
    lambda r: [*r[:2], True, r[3]], lambda r: [*r[:2], float(r[1] + 1), r[3]],
    lambda r: [*r[:2], None, r[3]], lambda r: [*r[:2], r[1] + 1, r[3]],
]


@st.composite
def _rows(draw):
    """Valid rows of every kind (times at the edges of int64 included), and in some frames
    one near miss: a wrong length or type, a kind that is not one, a start or an end one off
    or out of range, an end the kind may not take (some of these misses are valid rows)."""
    rows = draw(st.lists(_valid_row(), min_size=1, max_size=6))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(rows) - 1))
        rows[at] = draw(st.sampled_from(_misses))(rows[at])
    return rows


@settings(max_examples=600, deadline=None)
@given(_rows())
def test_the_fast_device_decoder_agrees_with_the_checked_one(rows):
    """The hot path accepts exactly what the checked path accepts, with the same events."""
    from goldilocks.net.protocol import _decode_checked

    try:
        expected = [(e.kind, e.start, e.end, e.payload, e.source)
                    for e in _decode_checked(rows, "dev", 3, False)]
    except ProtocolError as err:
        expected = err.code
    try:
        got = [(e.kind, e.start, e.end, e.payload, e.source)
               for e in decode_events(rows, "dev", stream=3)]
    except ProtocolError as err:
        got = err.code
    assert got == expected


# ------------------------------------------------------------------------------ limits
def _nested(depth: int) -> object:
    value: object = 0
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_the_documented_limits():  # docs/protocol.md, "Limits"
    from goldilocks.net.protocol import EVENT_ENVELOPE, MAX_DEPTH, MAX_SETUP_FRAME

    assert (MAX_DEPTH, MAX_SETUP_FRAME, EVENT_ENVELOPE) == (64, 4096, 67)


def test_payloads_nested_beyond_the_limit_are_named_one_by_one():
    from goldilocks.net.protocol import event_refusals

    events = [Event.point(1, _nested(64), "A"), Event.point(2, _nested(65), "A"),
              Event.point(3, {"a": [1, {"b": _nested(63)}]}, "A"), Event.point(4, "x", "A")]
    refused = event_refusals(events, 10_000, 1 << 20, stream=7)
    assert [(i, code) for i, code, _ in refused] == [(1, "too_deep"), (2, "too_deep")]
    assert "event 1 on stream 7" in refused[0][2] and "at most 64" in refused[0][2]


def test_an_event_that_cannot_fit_an_output_frame_is_named_and_the_others_are_not():
    from goldilocks.net.protocol import EVENT_ENVELOPE, event_refusals

    max_frame = 4096
    room = max_frame - EVENT_ENVELOPE
    fits = len(orjson.dumps(["point", 2, None, "", "dev"]))
    events = [Event.point(1, "x" * (room - fits + 1), "dev"),   # one byte too many
              Event.point(2, "x" * (room - fits), "dev"),       # just fits
              Event.interval(3, 9, "y" * 100, "dev")]
    refused = event_refusals(events, max_frame, max_frame, stream=1)
    assert [(i, code) for i, code, _ in refused] == [(0, "too_large")]
    # a frame that is small enough cannot hold such an event, and is not measured
    assert event_refusals(events[2:], 200, max_frame) == []
    data = encode_next(1, [events[1]], with_source=True)
    assert len(data) + 20 <= max_frame  # room left for a start of 20 digits


def test_a_float_grows_when_written_again_which_the_size_check_allows_for():
    from goldilocks.net.protocol import _GROWTH

    assert orjson.dumps(orjson.loads(b"1e15")) == b"1000000000000000.0"
    assert len(b"1000000000000000.0") <= _GROWTH * len(b"1e15")


def test_a_point_at_the_latest_instant_is_refused_and_points_are_sent_without_an_end():
    with pytest.raises(ProtocolError) as info:
        decode_events([["point", MAX_TIME, None, None]], "A", stream=2)
    assert "latest instant" in str(info.value) and info.value.code == "malformed"
    data = encode_next(1, [Event.point(5), Event.interval(5, 9)])
    assert b'["point",5,null,null]' in data and b'["interval",5,9,null]' in data
    assert decode_events(decode_frame(data).events, "A")[0].end == 6


_shallow = st.none() | st.integers() | st.text(max_size=3)


@st.composite
def _nesting(draw):
    """A payload whose deepest branch is about MAX_DEPTH levels (either side of it), with
    arrays and objects mixed, and shallow siblings on the way."""
    depth = draw(st.integers(min_value=0, max_value=70))
    value = draw(_shallow)
    for _ in range(depth):
        siblings = draw(st.lists(_shallow, max_size=2))
        if draw(st.booleans()):
            value = [*siblings, value] if draw(st.booleans()) else [value, *siblings]
        else:
            value = {**{f"s{i}": s for i, s in enumerate(siblings)}, "deep": value}
    return value


@settings(max_examples=300, deadline=None)
@given(st.lists(_nesting(), min_size=1, max_size=4))
def test_the_encoder_shell_finds_exactly_the_payloads_nested_too_deep(payloads):
    """The frame-level check (the encoder, stopping where MAX_DEPTH does) agrees with looking
    into each payload, at the boundary and around it."""
    from goldilocks.net.protocol import MAX_DEPTH, _deeper, _too_deep

    assert _too_deep(payloads) == any(_deeper(p, MAX_DEPTH) for p in payloads)
