"""Temporal events: points, intervals, edges and CTIs.

An ``Event`` is a small ``__slots__`` record. Times are ``int`` nanoseconds since the epoch,
UTC (``engine.times``); the public constructors convert at the edge, the plain constructor
``Event(kind, start, end, payload, source)`` trusts its arguments and is what hot paths use.

Shapes (StreamInsight), as lifetimes ``[start, end)``:

- point: ``end == start + 1`` (one tick, one nanosecond);
- interval: ``end > start``;
- CTI (Current Time Increment): ``end is None``; a promise that no later event from the same
  stream starts before ``start``;
- edges (StreamInsight's edge events): a *start edge* opens an event whose end is not known
  yet (``end == MAX_TIME`` while it is open); its *end edge* closes it, ``[start, end)``.
  Both carry the edge's ``id``; an end edge closes the open start edge of the same
  ``source`` with the same ``id`` (TS §7.1, ``operators.edges``). Other events have
  ``id is None``.

>>> Event.point("2026-11-22T08:00:00Z", payload="x", source="A")
Event.point('2026-11-22T08:00:00Z', payload='x', source='A')
>>> Event.point(1_795_334_400_000_000_000).start      # an int is nanoseconds since the epoch
1795334400000000000
>>> Event.interval("1970-01-01T00:00:00Z", "1970-01-01T00:00:01Z").end
1000000000
>>> Event.cti(8).is_cti
True
>>> Event.start_edge("2026-11-22T08:00:00.5Z", "door-1", source="A")
Event.start_edge('2026-11-22T08:00:00.500Z', id='door-1', source='A')
>>> Event.end_edge(5, 9, "door-1", source="A").end
9

A repr shows times as RFC 3339 text, exact to the nanosecond (``to_ns`` reads it back), and
builds the same event.
"""

from __future__ import annotations

from typing import Any

from engine.errors import InputError
from engine.times import MAX_TIME, format_rfc3339, to_ns

__all__ = ["Event", "LateRecord", "POINT", "INTERVAL", "CTI", "START", "END", "KINDS",
           "EDGE_KINDS", "DROPPED", "ADJUSTED", "UNMATCHED"]

POINT = "point"
INTERVAL = "interval"
CTI = "cti"
START = "start"  # a start edge: opens an event whose end is not known yet (TS §7.1)
END = "end"      # an end edge: closes the open start edge with its source and id (TS §7.1)
KINDS = (POINT, INTERVAL, CTI, START, END)
EDGE_KINDS = (START, END)


def _lifetime(what: str, start: object, end: object) -> tuple[int, int]:
    """``(start, end)`` in ns of an interval or an end edge (``what``); ``end`` must be after
    ``start`` (TS §1.3), else ``InputError``."""
    s = to_ns(start, what=f"{what} start")
    e = to_ns(end, what=f"{what} end")
    if e <= s:
        raise InputError(
            f"{what if what != 'interval' else 'interval event'}: end {end!r} "
            f"({format_rfc3339(e)}) is not after start {start!r} ({format_rfc3339(s)}); "
            "expected end > start"
        )
    return s, e


def _instant(ns: object) -> str:
    """An instant as a repr shows it: quoted RFC 3339 (every int64 renders exactly)."""
    if type(ns) is not int:  # a hand-built Event holding something else: as it is
        return repr(ns)
    return repr(format_rfc3339(ns))


#: how deep a payload is checked here (deeper levels are the writers' and the wire's to judge:
#: the network refuses payloads nested too deep with its own message)
_DEPTH = 64


def _not_json(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not JSON data (``None``: it is): what a payload must be to be written
    to a log, a checkpoint or the network, so that it fails here, not there."""
    if value is None or isinstance(value, (str, bool)):
        return None
    if isinstance(value, int):
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return (f"{value!r} is not a JSON number (JSON has no NaN or infinity: use None "
                    "for a missing reading)")
        return None
    if depth >= _DEPTH:
        return None
    if isinstance(value, (list, tuple)):
        for item in value:
            why = _not_json(item, depth + 1)
            if why is not None:
                return why
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"the key {key!r} is a {type(key).__name__}, not a string"
            why = _not_json(item, depth + 1)
            if why is not None:
                return why
        return None
    hint = " (a numpy value: convert it with .item())" if type(value).__module__ == "numpy" \
        else ""
    return f"{value!r} is a {type(value).__name__}, which JSON cannot hold{hint}"


def _flat(payload: dict) -> bool:
    """A dict of string keys and JSON scalars (the fast check; ``False``: look closer)."""
    for key, value in payload.items():
        if type(key) is not str:
            return False
        kind = type(value)
        if kind is float:
            if value - value != 0.0:  # NaN or infinite
                return False
        elif not (value is None or kind is str or kind is int or kind is bool):
            return False
    return True


def _checked(what: str, payload: Any, source: Any) -> None:
    """``InputError`` for a payload that is not JSON data or a source that is not a name."""
    if source is not None and type(source) is not str:
        raise InputError(f"{what}: source {source!r} is a {type(source).__name__}; expected "
                         "a string naming the input (or None)")
    kind = type(payload)
    if payload is None or kind is str or kind is int or kind is bool:
        return
    if kind is float:
        if payload - payload == 0.0:  # not NaN, not infinite
            return
    elif kind is dict and _flat(payload):  # the common reading: a few scalars by name
        return
    why = _not_json(payload)
    if why is not None:
        raise InputError(f"{what}: payload {payload!r} is not JSON data: {why}; expected "
                         "None, a bool, a number, a string, or lists and dicts of them with "
                         "string keys (a payload is written to logs, checkpoints and the "
                         "network as JSON)")


def _edge_id(value: object, what: str) -> str | int:
    """An edge's id as given: a string or an int (not a bool), else ``InputError``."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise InputError(f"{what}: id {value!r} is not an edge id; expected a string or an integer")


class Event:
    """One temporal event. Treat instances as immutable: operators share them."""

    __slots__ = ("kind", "start", "end", "payload", "source", "id")

    kind: str
    start: int
    end: int | None
    payload: Any
    source: str | None
    id: str | int | None

    def __init__(self, kind: str, start: int, end: int | None, payload: Any = None,
                 source: str | None = None, id: str | int | None = None) -> None:
        self.kind = kind
        self.start = start
        self.end = end
        self.payload = payload
        self.source = source
        self.id = id  # an edge's id; None for every other kind

    # -- constructors that validate and convert at the edge -------------------------------
    @classmethod
    def point(cls, t: object, payload: Any = None, source: str | None = None) -> Event:
        """A point event at ``t`` (lifetime one tick).

        ``t`` is an instant: an aware ``datetime`` (pendulum's too), ISO-8601 text with an
        offset (``"2026-11-22T08:00:00Z"``), or an ``int`` of **nanoseconds** since the
        epoch — ``time.time_ns()``, not ``time.time()``: ``Event.point(1795334400)`` is 1.8 s
        after the epoch, in January 1970. (Where integer times enter from outside — a log,
        the wire — one that looks like epoch seconds, milliseconds or microseconds is refused,
        TS §1.6; in Python an ``int`` is nanoseconds, as everywhere inside the engine.)
        The same holds for every constructor here.
        """
        start = to_ns(t, what="point event time")
        if start >= MAX_TIME:  # TS §1.3: one tick of lifetime must fit
            raise InputError(f"point event at {t!r}: the latest instant leaves no room for a "
                             "one-tick lifetime; expected a time before MAX_TIME")
        _checked("point event", payload, source)
        return cls(POINT, start, start + 1, payload, source)

    @classmethod
    def interval(cls, start: object, end: object, payload: Any = None,
                 source: str | None = None) -> Event:
        """An interval event ``[start, end)``; ``end`` must be after ``start``."""
        s, e = _lifetime("interval", start, end)
        _checked("interval event", payload, source)
        return cls(INTERVAL, s, e, payload, source)

    @classmethod
    def start_edge(cls, start: object, id: str | int, payload: Any = None,
                   source: str | None = None) -> Event:
        """A start edge at ``start``: an event whose end is not known yet (TS §7.1)."""
        s = to_ns(start, what="start edge time")
        if s >= MAX_TIME:  # TS §1.3: an open lifetime must have room to end
            raise InputError(f"start edge at {start!r}: the latest instant leaves no room for "
                             "a lifetime; expected a time before MAX_TIME")
        _checked("start edge", payload, source)
        return cls(START, s, MAX_TIME, payload, source, _edge_id(id, "start edge"))

    @classmethod
    def end_edge(cls, start: object, end: object, id: str | int, payload: Any = None,
                 source: str | None = None) -> Event:
        """The end edge closing the start edge ``id`` of ``source``: ``[start, end)``, as an
        interval (``end`` after ``start``, TS §1.3)."""
        s, e = _lifetime("end edge", start, end)
        _checked("end edge", payload, source)
        return cls(END, s, e, payload, source, _edge_id(id, "end edge"))

    @classmethod
    def cti(cls, t: object, source: str | None = None) -> Event:
        """A CTI at ``t``: no later event of this stream starts before ``t``."""
        at = to_ns(t, what="CTI time")
        _checked("CTI", None, source)
        return cls(CTI, at, None, None, source)

    @classmethod
    def cti_infinity(cls, source: str | None = None) -> Event:
        """The advance-to-infinity CTI that closes a stream's time."""
        _checked("CTI", None, source)
        return cls(CTI, MAX_TIME, None, None, source)

    # -- derived views --------------------------------------------------------------------
    @property
    def is_cti(self) -> bool:
        return self.kind is CTI or self.kind == CTI

    def with_start(self, start: int) -> Event:
        """A copy whose lifetime starts at ``start`` (used by the ``adjust`` late policy)."""
        return Event(self.kind, start, self.end, self.payload, self.source, self.id)

    def with_source(self, source: str | None) -> Event:
        return Event(self.kind, self.start, self.end, self.payload, source, self.id)

    # -- value semantics ------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.kind, self.start, self.end, self.payload, self.source, self.id)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Event:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        try:
            return hash(self._key())
        except TypeError:  # an unhashable payload: hash by time and kind only
            return hash((self.kind, self.start, self.end, self.source, self.id))

    def __repr__(self) -> str:
        """The constructor call that makes this event, times as RFC 3339 text: readable and
        exact (``to_ns`` reads each back to its nanosecond)."""
        extra = ""
        if self.payload is not None:
            extra += f", payload={self.payload!r}"
        if self.source is not None:
            extra += f", source={self.source!r}"
        start = _instant(self.start)
        if self.kind == CTI:
            if self.start == MAX_TIME:
                return f"Event.cti_infinity({extra[2:]})"
            return f"Event.cti({start}{extra})"
        if self.kind == POINT:
            return f"Event.point({start}{extra})"
        if self.kind == START:
            return f"Event.start_edge({start}, id={self.id!r}{extra})"
        end = _instant(self.end)  # not a CTI: it has an end
        if self.kind == END:
            return f"Event.end_edge({start}, {end}, id={self.id!r}{extra})"
        return f"Event.interval({start}, {end}{extra})"

    def __reduce__(self):  # picklable for executors and Spark
        return (Event, self._key())


DROPPED = "dropped"
ADJUSTED = "adjusted"
UNMATCHED = "unmatched"  # an edge without its partner, reported (TS §7.5)


class LateRecord:
    """The trace a late event leaves on the late side output (TS §3.3): nothing vanishes.

    ``input``: the input (device) name; ``event``: the event as it arrived; ``cti``: the CTI it
    violated (its start was before it); ``action``: ``"dropped"``, ``"adjusted"`` or, for an
    edge without its partner, ``"unmatched"`` (TS §7.5);
    ``adjusted``: the clipped event that was emitted instead, for ``"adjusted"``;
    ``reason``: why it was late when more can be said than "before the CTI" — the rule that
    set that CTI (``"quantile"``, ``"max_ahead"``) or the input's own state (``"resumed"``:
    it had gone idle, and time moved on without it, TS §4.7); ``None`` otherwise.
    """

    __slots__ = ("input", "event", "cti", "action", "adjusted", "reason")

    def __init__(self, input: str | None, event: Event, cti: int, action: str,
                 adjusted: Event | None = None, reason: str | None = None) -> None:
        self.input = input
        self.event = event
        self.cti = cti
        self.action = action
        self.adjusted = adjusted
        self.reason = reason

    def _key(self) -> tuple:
        return (self.input, self.event, self.cti, self.action, self.adjusted, self.reason)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not LateRecord:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.input, self.cti, self.action, self.event.start))

    def __repr__(self) -> str:
        return (f"LateRecord(input={self.input!r}, event={self.event!r}, "
                f"cti={_instant(self.cti)}, "
                f"action={self.action!r}" + (f", adjusted={self.adjusted!r}" if self.adjusted
                                             else "")
                + (f", reason={self.reason!r})" if self.reason else ")"))

    def __reduce__(self):
        return (LateRecord, self._key())
