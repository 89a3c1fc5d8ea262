"""The wire protocol: frames, their JSON encoding, and a strict decoder (``docs/protocol.md``).

A frame is one JSON object (UTF-8, encoded with orjson). On WebSocket a frame is one message;
on TCP it is a 4-byte big-endian length followed by that many bytes. Every frame names its
``type``; all but ``setup``, ``ok`` and ``keepalive`` name a ``stream`` (a positive integer
chosen by the client; 0 is the connection itself, for connection-level ``error`` frames).

Events travel as arrays ``[kind, start, end, payload]`` (``kind`` is ``"point"``,
``"interval"`` or ``"cti"``; times are int nanoseconds since the epoch, UTC), with a fifth
element, the source, on the merged output. Edge events (TS §7: ``kind`` ``"start"`` or
``"end"``) carry their id as one more element, last: ``[kind, start, end, payload, id]`` from
a device, ``[kind, start, end, payload, source, id]`` on the merged output. A ``next`` frame
carries one event or a batch.

``decode_frame`` and ``decode_events`` raise nothing but ``ProtocolError`` (fuzzed), whose
``code`` says what kind of fault it was and whose message names what was wrong and what was
expected. ``event_refusals`` names the well-formed events that are beyond the limits an event
must meet to be written again (a payload nested over ``MAX_DEPTH``; a row too large for an
output frame). Nothing here logs, and a ``Frame``'s ``repr`` never shows the token.

>>> frame = decode_frame(encode_request(3, 64))
>>> frame.type, frame.stream, frame.n
('request', 3, 64)
>>> decode_events([["point", 1_795_334_400_000_000_000, None, {"v": 1}]], "A")
[Event.point('2026-11-22T08:00:00Z', payload={'v': 1}, source='A')]
"""

from __future__ import annotations

import struct
from operator import attrgetter
from typing import Any

import orjson

from engine.contracts import MAX_DEMAND
from engine.errors import GoldilocksError
from engine.event import CTI, END, INTERVAL, POINT, START, Event
from engine.times import (MAX_TIME, MIN_TIME, TIME_UNITS, UNSCALED_RANGES, format_instant,
                          looks_unscaled)

__all__ = [
    "VERSION",
    "SUPPORTED_VERSIONS",
    "DEFAULT_MAX_FRAME",
    "MAX_BATCH",
    "MAX_NAME",
    "FRAME_TYPES",
    "ProtocolError",
    "RemoteError",
    "ConnectionLost",
    "Frame",
    "decode_frame",
    "decode_events",
    "encode_setup",
    "encode_ok",
    "encode_publish",
    "encode_subscribe",
    "encode_request",
    "encode_cancel",
    "encode_next",
    "encode_next_raw",
    "encode_complete",
    "encode_error",
    "encode_keepalive",
    "encode_durable",
    "event_row",
    "LENGTH",
    "length_prefix",
    "MAX_DEPTH",
    "MAX_SETUP_FRAME",
    "EVENT_ENVELOPE",
    "event_refusals",
    "OPEN",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
]

#: The protocol version this code speaks; ``setup`` names it, the server refuses others.
#: Version 2 adds the ``durable`` frame (positions: ``docs/protocol.md``, "Exactly once");
#: a version-1 connection never gets one, and everything else is the same.
VERSION = 2
SUPPORTED_VERSIONS = frozenset({1, 2})
#: Largest frame either side accepts by default, in bytes (1 MiB).
DEFAULT_MAX_FRAME = 1 << 20
#: Most events in one ``next`` frame.
MAX_BATCH = 65_536
#: Longest device name (characters).
MAX_NAME = 256
#: Deepest nesting of arrays and objects in an event's payload (a number, string, ``true``,
#: ``false`` or ``null`` is 0 deep, ``[1]`` and ``{"a": 1}`` are 1 deep). A payload must be
#: written again (to subscribers, files) by an encoder that stops at 255 levels in all; 64
#: leaves room for the frame or record around it. Deeper payloads are refused on input.
MAX_DEPTH = 64
#: Largest frame the server reads before a connection's setup succeeds (a setup frame is
#: small: the version and a token).
MAX_SETUP_FRAME = 4096
#: The TCP length prefix: 4 bytes, big-endian, unsigned.
LENGTH = struct.Struct(">I")
#: A stream's states, on either side: open, then ended one of three ways.
OPEN = "open"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"

FRAME_TYPES = ("setup", "ok", "publish", "subscribe", "request", "cancel", "next", "complete",
               "error", "keepalive", "durable")
_CONNECTION_TYPES = frozenset({"setup", "ok", "keepalive"})
#: The kinds the device rows' fast path takes (rows of four elements); edges take the checked
#: path, which knows them all.
_KINDS = {"point": POINT, "interval": INTERVAL, "cti": CTI}
_ALL_KINDS = {**_KINDS, "start": START, "end": END}
_EDGE_NAME = {START: "a start edge", END: "an end edge"}
_MAX_STREAM = 2**31 - 1
#: Bytes an output ``next`` frame adds around one event's row, at most: the envelope with the
#: largest stream id, and room for the event's start to grow to 20 digits (an adjusted
#: interval starts at the CTI). An event fits an output frame when its row, with its source,
#: is at most ``max_frame - EVENT_ENVELOPE`` bytes.
EVENT_ENVELOPE = len(b'{"type":"next","stream":2147483647,"events":[]}') + 20
#: What an end edge may grow by beyond ``EVENT_ENVELOPE``: both its times may change (its
#: start to its start edge's, its end moved to the CTI, TS §7.3), each to 20 characters.
_END_EDGE_GROWTH = 20

_dumps = orjson.dumps
_loads = orjson.loads


class ProtocolError(GoldilocksError):
    """A peer broke the protocol; the connection is closed.

    ``code`` is one of ``malformed``, ``oversized``, ``out_of_order``, ``overrun``,
    ``unsupported_version``, ``unauthorized``, ``idle_timeout``, ``too_many``; ``stream`` is
    the stream concerned (0: the connection). ``rule`` names the Reactive Streams rule the
    fault breaks, when there is one.
    """

    def __init__(self, code: str, message: str, *, stream: int = 0,
                 rule: str | None = None) -> None:
        super().__init__(f"{rule}: {message}" if rule else message)
        self.code = code
        self.stream = stream
        self.rule = rule


class RemoteError(GoldilocksError):
    """The peer sent an ``error`` frame: ``code`` and the peer's message, verbatim;
    ``position``, when the frame has one: where to take the stream up again from
    (``too_slow``, ``gap``, ``closing``)."""

    def __init__(self, code: str, message: str, *, stream: int = 0,
                 position: int | None = None) -> None:
        super().__init__(f"remote error {code!r} on stream {stream}: {message}")
        self.code = code
        self.stream = stream
        self.remote_message = message
        self.position = position


class ConnectionLost(GoldilocksError):
    """The connection ended without the stream ending first (reset, closed, or gone silent)."""


class Frame:
    """One decoded frame. Fields not used by its ``type`` are ``None``."""

    __slots__ = ("type", "stream", "n", "device", "events", "code", "message", "version",
                 "token", "info", "size", "position", "first")

    def __init__(self, type: str, stream: int = 0) -> None:
        self.type = type
        self.stream = stream
        self.size = 0  # bytes of the encoded frame
        self.n: int | None = None
        self.device: str | None = None
        self.events: list | None = None
        self.code: str | None = None
        self.message: str | None = None
        self.version: int | None = None
        self.token: str | None = None
        self.info: dict | None = None
        self.position: int | None = None  # request (the publish acknowledgement), durable
        self.first: int | None = None     # ``from``: next (its first event), subscribe

    def __repr__(self) -> str:
        extra = ""
        if self.n is not None:
            extra += f", n={self.n}"
        if self.device is not None:
            extra += f", device={self.device!r}"
        if self.events is not None:
            extra += f", events=<{len(self.events)}>"
        if self.code is not None:
            extra += f", code={self.code!r}"
        if self.version is not None:
            extra += f", version={self.version}"
        if self.position is not None:
            extra += f", position={self.position}"
        if self.first is not None:
            extra += f", from={self.first}"
        if self.token is not None:
            extra += ", token=<redacted>"
        return f"Frame({self.type!r}, stream={self.stream}{extra})"


def _malformed(message: str, stream: int = 0) -> ProtocolError:
    return ProtocolError("malformed", message, stream=stream)


def _field(obj: dict, name: str, kind: type, what: str, frame_type: str,
           stream: int = 0) -> Any:
    value = obj.get(name)
    if value is None:
        raise _malformed(f"{frame_type} frame: missing field {name!r}; expected {what}", stream)
    if value.__class__ is not kind:
        raise _malformed(f"{frame_type} frame: field {name!r} is {type(value).__name__} "
                         f"{_short(value)}; expected {what}", stream)
    return value


def _count(obj: dict, name: str, frame_type: str, stream: int, what: str) -> int | None:
    """An optional count field (``from``, ``position``): ``None`` when absent, else an
    integer from 0 to 2**63 - 1."""
    value = obj.get(name)
    if value is None:
        return None
    if value.__class__ is not int or not 0 <= value <= MAX_DEMAND:
        raise _malformed(f"{frame_type} frame on stream {stream}: {name!r} is "
                         f"{_short(value)}; expected {what} (an integer >= 0)", stream)
    return value


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def decode_frame(data: bytes | bytearray | memoryview | str,
                 max_frame: int = DEFAULT_MAX_FRAME) -> Frame:
    """Decode and validate one frame; raise ``ProtocolError`` naming what was wrong.

    Events of a ``next`` frame are checked for shape here (a non-empty list of at most
    ``MAX_BATCH`` arrays) and converted by ``decode_events``.
    """
    try:
        size = len(data)
    except Exception as err:  # not bytes-like at all
        raise _malformed(f"frame is {type(data).__name__}; expected bytes") from err
    if size > max_frame:
        raise ProtocolError("oversized", f"frame of {size} bytes exceeds the maximum of "
                            f"{max_frame} bytes")
    try:
        obj = _loads(data)
    except Exception as err:  # orjson.JSONDecodeError, or a type orjson refuses
        raise _malformed(f"frame is not valid UTF-8 JSON ({err}); expected one JSON object") \
            from err
    if obj.__class__ is not dict:
        raise _malformed(f"frame is a JSON {type(obj).__name__}; expected a JSON object "
                         "with a 'type'")
    ftype = obj.get("type")
    if ftype.__class__ is not str or ftype not in FRAME_TYPES:
        raise _malformed(f"frame type {_short(ftype)}; expected one of "
                         f"{', '.join(FRAME_TYPES)}")
    if ftype in _CONNECTION_TYPES:
        stream = obj.get("stream", 0)
        if stream != 0 or stream.__class__ is not int:
            raise _malformed(f"{ftype} frame: stream {_short(stream)}; expected 0 (a "
                             "connection frame)")
    else:
        stream = obj.get("stream")
        if stream.__class__ is not int or stream < 0 or stream > _MAX_STREAM:
            raise _malformed(f"{ftype} frame: stream {_short(stream)}; expected an integer "
                             f"from 1 to {_MAX_STREAM} (0 only for a connection error)")
        if stream == 0 and ftype != "error":
            raise _malformed(f"{ftype} frame on stream 0; stream 0 is the connection itself, "
                             "expected a stream id from 1")
    frame = Frame(ftype, stream)
    frame.size = size
    if ftype == "next":
        events = obj.get("events")
        if events.__class__ is not list or not events:
            raise _malformed(f"next frame on stream {stream}: 'events' is "
                             f"{_short(events)}; expected a non-empty list of events", stream)
        if len(events) > MAX_BATCH:
            raise _malformed(f"next frame on stream {stream}: {len(events)} events; expected "
                             f"at most {MAX_BATCH} per frame", stream)
        frame.events = events
        frame.first = _count(obj, "from", ftype, stream, "the number of its first event")
    elif ftype == "request":
        n = _field(obj, "n", int, "an integer n >= 1", ftype, stream)
        if n < 1:  # RS §3.9 on the wire: non-positive requests are illegal
            raise ProtocolError("malformed", f"request frame on stream {stream}: n={n}; "
                                "expected n >= 1", stream=stream, rule="RS §3.9")
        frame.n = n if n < MAX_DEMAND else MAX_DEMAND  # RS §3.17: saturate
        frame.position = _count(obj, "position", ftype, stream,
                                "how many of the device's events the server has")
    elif ftype == "durable":
        frame.position = _count(obj, "position", ftype, stream, "a position")
        if frame.position is None:
            raise _malformed(f"durable frame on stream {stream}: missing field 'position'; "
                             "expected an integer >= 0", stream)
    elif ftype == "subscribe":
        frame.first = _count(obj, "from", ftype, stream,
                             "the position of the merged stream to start from")
    elif ftype == "publish":
        device = _field(obj, "device", str, "a device name (a non-empty string)", ftype, stream)
        if not device or len(device) > MAX_NAME:
            raise _malformed(f"publish frame on stream {stream}: device name of "
                             f"{len(device)} characters; expected 1 to {MAX_NAME}", stream)
        frame.device = device
    elif ftype == "error":
        frame.code = _field(obj, "code", str, "an error code (a string)", ftype, stream)
        message = obj.get("message", "")
        if message.__class__ is not str:
            raise _malformed(f"error frame: 'message' is {type(message).__name__}; expected "
                             "a string", stream)
        frame.message = message
        frame.position = _count(obj, "position", ftype, stream, "a position")
    elif ftype == "setup":
        frame.version = _field(obj, "version", int, "the protocol version (an integer)", ftype)
        token = obj.get("token")
        if token is not None and token.__class__ is not str:
            raise _malformed(f"setup frame: 'token' is {type(token).__name__}; expected a "
                             "string")  # never echo the value: it is a secret
        frame.token = token
    elif ftype == "ok":
        frame.version = _field(obj, "version", int, "the protocol version (an integer)", ftype)
        frame.info = {k: v for k, v in obj.items() if k not in ("type", "version")}
    return frame


def decode_events(rows: list, source: str | None, *, stream: int = 0,
                  with_source: bool = False) -> list[Event]:
    """Convert a ``next`` frame's event rows into ``Event`` objects with ``source``.

    With ``with_source`` (the merged output) a fifth element, the event's source, is read
    instead. Raises ``ProtocolError`` naming the event (by position) and what was expected.

    Device rows take a fast path that accepts exactly what the checked path accepts and
    gives up at the first row it does not like; the checked path then finds and names it.
    """
    if not with_source:
        try:
            out = _decode_device_rows(rows, source)
        except (ValueError, KeyError, TypeError):  # not 4 elements; not a kind; unhashable
            out = None
        if out is not None:
            return out
    return _decode_checked(rows, source, stream, with_source)


#: the span of the integers ``looks_unscaled`` refuses (one comparison passes today's ns)
_UNSCALED_LO = UNSCALED_RANGES[0][1]
_UNSCALED_HI = UNSCALED_RANGES[-1][2]
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}


def _unscaled(i: int, stream: int, what: str, value: int) -> ProtocolError | None:
    """The error for a device's time that is implausible as nanoseconds (TS §1.6: epoch
    seconds, milliseconds or microseconds, as the event-log readers refuse them), or
    ``None``."""
    unit = looks_unscaled(value) if _UNSCALED_LO <= value < _UNSCALED_HI else None
    if unit is None:
        return None
    return _malformed(f"event {i} on stream {stream}: {what} {value} looks like "
                      f"{_UNIT_WORDS[unit]} since the epoch "
                      f"({format_instant(value * TIME_UNITS[unit])}), not nanoseconds "
                      f"({format_instant(value)}); expected integer nanoseconds since the "
                      "epoch (in Python, Event.point(t) with an int t is nanoseconds: pass "
                      "t * 10**9, a datetime or ISO-8601 text)", stream)


def _decode_device_rows(rows: list, source: str | None) -> list[Event] | None:
    """The hot path of ``decode_events`` for device rows: ``None`` (or an exception) at the
    first row that would be refused, the events otherwise. O(rows), one pass."""
    out: list[Event] = []
    append = out.append
    kinds = _KINDS
    for row in rows:
        if row.__class__ is not list:
            return None
        kind, start, end, payload = row
        if kind.__class__ is not str:
            return None
        kind = kinds[kind]
        if start.__class__ is not int or start < MIN_TIME or start > MAX_TIME:
            return None
        if _UNSCALED_LO <= start < _UNSCALED_HI and looks_unscaled(start):  # TS §1.6
            return None
        if kind is POINT:
            if start == MAX_TIME:  # TS §1.3: no tick of lifetime left
                return None
            if end is None:
                end = start + 1
            elif end.__class__ is not int or end != start + 1:
                return None
        elif kind is INTERVAL:
            if end.__class__ is not int or end <= start or end > MAX_TIME:
                return None
            if _UNSCALED_LO <= end < _UNSCALED_HI and looks_unscaled(end):  # TS §1.6
                return None
        elif end is not None:
            return None
        append(Event(kind, start, end, payload, source))
    return out


def _decode_checked(rows: list, source: str | None, stream: int,
                    with_source: bool) -> list[Event]:
    out: list[Event] = []
    append = out.append
    kinds = _ALL_KINDS
    for i, row in enumerate(rows):
        if row.__class__ is not list or not 4 <= len(row) <= 6:
            raise _malformed(f"event {i} on stream {stream} is {_short(row)}; expected "
                             "[kind, start, end, payload] (an edge: with its id after "
                             "them)", stream)
        kind = kinds.get(row[0]) if row[0].__class__ is str else None
        start = row[1]
        end = row[2]
        if kind is None:
            raise _malformed(f"event {i} on stream {stream}: kind {_short(row[0])}; expected "
                             "'point', 'interval', 'cti', 'start' or 'end'", stream)
        if start.__class__ is not int or not MIN_TIME <= start <= MAX_TIME:
            raise _malformed(f"event {i} on stream {stream}: start {_short(start)}; expected "
                             "an integer of nanoseconds since the epoch (int64)", stream)
        if not with_source:  # TS §1.6: a device's times, as they enter
            refused = _unscaled(i, stream, "start", start)
            if refused is not None:
                raise refused
        edge = kind is START or kind is END
        # the elements after the payload: the source on the merged output, then an edge's id
        extra = (1 if with_source else 0) + (1 if edge else 0)
        if len(row) != 4 + extra and not (with_source and len(row) == 4 and not edge):
            if edge:
                layout = ("[kind, start, end, payload, source, id]" if with_source
                          else "[kind, start, end, payload, id]")
                raise _malformed(f"event {i} on stream {stream}: {_EDGE_NAME[kind]} of "
                                 f"{len(row)} elements; expected {layout} (the id is the "
                                 "edge's name, a string or an integer)", stream)
            if not with_source:
                raise _malformed(f"event {i} on stream {stream} has {len(row)} elements; "
                                 "expected [kind, start, end, payload] on a device stream "
                                 "(the device name is the source; only an edge adds its "
                                 "id)", stream)
            raise _malformed(f"event {i} on stream {stream} has {len(row)} elements; "
                             "expected [kind, start, end, payload, source] (only an edge "
                             "adds its id)", stream)
        if kind is POINT:
            if start == MAX_TIME:  # TS §1.3, as Event.point and the event-log readers
                raise _malformed(f"event {i} on stream {stream}: a point at {start}, the "
                                 "latest instant, leaves no room for its one-tick lifetime; "
                                 "expected a start before 9223372036854775807", stream)
            if end is None:
                end = start + 1
            elif end != start + 1 or end.__class__ is not int:
                raise _malformed(f"event {i} on stream {stream}: a point at {start} with end "
                                 f"{_short(end)}; expected null or start + 1", stream)
        elif kind is INTERVAL or kind is END:
            if end.__class__ is not int or not start < end <= MAX_TIME:
                what = "an interval" if kind is INTERVAL else "an end edge"
                raise _malformed(f"event {i} on stream {stream}: {what} from {start} "
                                 f"with end {_short(end)}; expected an integer end > start",
                                 stream)
            refused = None if with_source else _unscaled(i, stream, "end", end)  # TS §1.6
            if refused is not None:
                raise refused
        elif kind is START:
            if end is not None:
                raise _malformed(f"event {i} on stream {stream}: a start edge with end "
                                 f"{_short(end)}; expected null (its end edge says when it "
                                 "ends)", stream)
            if start == MAX_TIME:  # TS §1.3: an open lifetime needs a tick
                raise _malformed(f"event {i} on stream {stream}: a start edge at {start}, "
                                 "the latest instant, leaves no room for a lifetime; "
                                 "expected a start before 9223372036854775807", stream)
            end = MAX_TIME  # open (TS §7.1)
        elif end is not None:
            raise _malformed(f"event {i} on stream {stream}: a cti with end {_short(end)}; "
                             "expected null", stream)
        src = source
        if with_source and len(row) > 4:
            src = row[4]
            if src is not None and src.__class__ is not str:
                raise _malformed(f"event {i} on stream {stream}: source {_short(src)}; "
                                 "expected a string or null", stream)
        if edge:
            id = row[-1]
            if id.__class__ is not str and id.__class__ is not int:
                raise _malformed(f"event {i} on stream {stream}: {_EDGE_NAME[kind]}'s id "
                                 f"{_short(id)}; expected a string or an integer (the last "
                                 "element)", stream)
            append(Event(kind, start, end, row[3], src, id))
        else:
            append(Event(kind, start, end, row[3], src))
    return out


# -- limits --------------------------------------------------------------------------------

#: Most bytes a source adds to an event's row: a comma, quotes, and a name of ``MAX_NAME``
#: characters, each escaped to at most 6 bytes.
_SOURCE_ROW = 3 + 6 * MAX_NAME
#: Re-encoding a decoded payload lengthens it only through numbers: a float written ``1e15``
#: (4 bytes) comes back as ``1000000000000000.0`` (18). Strings and whitespace only shrink.
_GROWTH = 5
#: Bytes a payload nested ``MAX_DEPTH + 1`` levels takes at least: a frame smaller than this
#: cannot hold one.
_DEEP_BYTES = 2 * (MAX_DEPTH + 1)


def event_refusals(events: list[Event], frame_size: int, max_frame: int, *,
                   stream: int = 0) -> list[tuple[int, str, str]]:
    """The events of a device's ``next`` frame that the server must refuse although they are
    well formed: ``(position, code, message)`` for each, in order; usually ``[]``.

    - ``too_deep``: a payload nested more than ``MAX_DEPTH`` levels (it could not be written
      again to subscribers and files);
    - ``too_large``: an event whose row, with its source, can never fit in an output frame of
      ``max_frame`` bytes (``EVENT_ENVELOPE``).

    Cost: nothing for a frame too small to hold either (a payload nested 65 deep takes 130
    bytes); otherwise the payloads are written once by the encoder, inside a shell that makes
    it stop exactly where ``MAX_DEPTH`` does (``_too_deep``), and the sizes are measured only
    for a frame large enough that one of its events might not fit (``frame_size`` more than
    about a fifth of ``max_frame``).
    """
    room = max_frame - EVENT_ENVELOPE
    large = _GROWTH * frame_size + _SOURCE_ROW > room
    if frame_size < _DEEP_BYTES and not large:
        return []  # the usual case for small frames: nothing to look at
    refused: dict[int, tuple[str, str]] = {}
    if frame_size >= _DEEP_BYTES:
        payloads = list(map(_PAYLOAD, events))
        if _too_deep(payloads):
            for i, payload in enumerate(payloads):
                if _deeper(payload, MAX_DEPTH):
                    refused[i] = ("too_deep", f"event {i} on stream {stream}: payload nested "
                                  f"more than {MAX_DEPTH} levels deep; expected at most "
                                  f"{MAX_DEPTH}")
    if large:
        rows = [event_row(e, True) for i, e in enumerate(events) if i not in refused]
        ends = sum(1 for e in events if e.kind == END)
        if len(_dumps(rows)) + _END_EDGE_GROWTH * ends > room:  # measure each
            for i, e in enumerate(events):
                if i in refused:
                    continue
                size = len(_dumps(event_row(e, True)))
                grows = ""
                if e.kind == END:  # its start and end may both grow (TS §7.3)
                    size += _END_EDGE_GROWTH
                    grows = f" (with {_END_EDGE_GROWTH} for an end edge's times to grow)"
                if size > room:
                    refused[i] = ("too_large", f"event {i} on stream {stream}: its row, with "
                                  f"the source added, is {size} bytes{grows} and can never "
                                  "fit in an "
                                  f"output frame of at most {max_frame} bytes; expected at "
                                  f"most {room} bytes")
    if not refused:
        return []
    return [(i, *refused[i]) for i in sorted(refused)]


def _encoder_limit() -> int | None:
    """The nesting at which ``orjson.dumps`` gives up (255 levels in orjson 3), found once by
    trying: a shell of lists around the payloads then makes it give up at ``MAX_DEPTH``."""
    def fails(depth: int) -> bool:
        value: Any = 0
        for _ in range(depth):
            value = [value]
        try:
            _dumps(value)
        except orjson.JSONEncodeError:
            return True
        return False

    if not fails(4096):
        return None
    low, high = MAX_DEPTH + 2, 4096  # fails(high); and the encoder goes deeper than ours
    while low < high:
        middle = (low + high) // 2
        if fails(middle):
            high = middle
        else:
            low = middle + 1
    return high


_ENCODER_LIMIT = _encoder_limit()
_PAYLOAD = attrgetter("payload")


def _too_deep(payloads: list) -> bool:
    """Whether any of ``payloads`` nests more than ``MAX_DEPTH`` levels. The list of them,
    wrapped in enough lists that the encoder gives up just beyond ``MAX_DEPTH``, is encoded
    once (C speed, 3 to 6 times faster than looking in Python): if it goes through, none
    does. Otherwise (or without such an encoder) their containers are looked into level by
    level."""
    kinds = set(map(type, payloads))
    if dict not in kinds and list not in kinds:
        return False
    if _ENCODER_LIMIT is not None:
        shell: Any = payloads  # 1 level, and each payload's own below it
        for _ in range(_ENCODER_LIMIT - MAX_DEPTH - 2):
            shell = [shell]
        try:
            _dumps(shell)
        except orjson.JSONEncodeError:
            pass  # too deep, or something else it refuses (an int beyond 64 bits): look
        else:
            return False
    level = [p for p in payloads if p.__class__ is dict or p.__class__ is list]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return True
        deeper: list[Any] = []
        append = deeper.append
        for container in level:
            for v in (container.values() if container.__class__ is dict else container):
                if v.__class__ is dict or v.__class__ is list:
                    append(v)
        level = deeper
    return False


def _deeper(value: Any, room: int) -> bool:
    """Whether ``value`` nests more than ``room`` levels (stops looking at ``room``)."""
    if value.__class__ is not dict and value.__class__ is not list:
        return False
    if room <= 0:
        return True
    return any(_deeper(v, room - 1)
               for v in (value.values() if value.__class__ is dict else value))


# -- encoding ----------------------------------------------------------------------------


def event_row(event: Event, with_source: bool = False) -> list:
    """An event as its wire row. A point's end is sent as ``null``: it is ``start + 1`` by
    definition, and would not fit in int64 for a point at the latest instant; so is an open
    start edge's (its end edge says when it ends). An edge's id comes last (TS §7.1)."""
    kind = event.kind
    end = None if kind == POINT or kind == START else event.end
    row = [kind, event.start, end, event.payload]
    if with_source:
        row.append(event.source)
    if event.id is not None:
        row.append(event.id)
    return row


def encode_setup(token: str | None, version: int = VERSION) -> bytes:
    return _dumps({"type": "setup", "version": version, "token": token})


def encode_ok(version: int = VERSION, **info: Any) -> bytes:
    return _dumps({"type": "ok", "version": version, **info})


def encode_publish(stream: int, device: str) -> bytes:
    return _dumps({"type": "publish", "stream": stream, "device": device})


def encode_subscribe(stream: int, first: int | None = None) -> bytes:
    """``first``: the position of the merged stream to start from (``from``)."""
    if first is None:
        return _dumps({"type": "subscribe", "stream": stream})
    return _dumps({"type": "subscribe", "stream": stream, "from": first})


def encode_request(stream: int, n: int, position: int | None = None) -> bytes:
    """``position``: on the publish acknowledgement, how many of the device's events the
    server has."""
    if position is None:
        return b'{"type":"request","stream":%d,"n":%d}' % (stream, n)
    return b'{"type":"request","stream":%d,"n":%d,"position":%d}' % (stream, n, position)


def encode_durable(stream: int, position: int) -> bytes:
    return b'{"type":"durable","stream":%d,"position":%d}' % (stream, position)


def encode_cancel(stream: int) -> bytes:
    return b'{"type":"cancel","stream":%d}' % stream


def encode_next(stream: int, events: list[Event], with_source: bool = False,
                first: int | None = None) -> bytes:
    """A ``next`` frame for ``events`` (one or a batch); rows as ``event_row`` makes them
    (a point's end is ``null``); ``first``: the number (a device's) or position (the merged
    stream's) of the first event, as ``from``. Raises ``orjson.JSONEncodeError`` for a
    payload nested deeper than the encoder goes (see ``MAX_DEPTH``)."""
    if with_source:
        rows = [[e.kind, e.start, None if e.kind == POINT else e.end, e.payload, e.source]
                if e.id is None else event_row(e, True) for e in events]
    else:
        rows = [[e.kind, e.start, None if e.kind == POINT else e.end, e.payload]
                if e.id is None else event_row(e) for e in events]
    if first is None:
        return _dumps({"type": "next", "stream": stream, "events": rows})
    return _dumps({"type": "next", "stream": stream, "from": first, "events": rows})


def encode_next_raw(stream: int, rows: list) -> bytes:
    """A ``next`` frame for rows already in wire form (tests send malformed ones this way)."""
    return _dumps({"type": "next", "stream": stream, "events": rows})


def encode_complete(stream: int) -> bytes:
    return b'{"type":"complete","stream":%d}' % stream


def encode_error(stream: int, code: str, message: str, position: int | None = None) -> bytes:
    """``position``: where the stream was, for a stream that may be taken up again from
    there (``too_slow``, ``gap``)."""
    if position is None:
        return _dumps({"type": "error", "stream": stream, "code": code, "message": message})
    return _dumps({"type": "error", "stream": stream, "code": code, "message": message,
                   "position": position})


_KEEPALIVE = b'{"type":"keepalive"}'


def encode_keepalive() -> bytes:
    return _KEEPALIVE


def length_prefix(payload: bytes) -> bytes:
    """The TCP framing of one frame: its length (4 bytes, big-endian), then the frame."""
    return LENGTH.pack(len(payload)) + payload
