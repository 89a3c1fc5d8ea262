"""CTI generation for a stream that has none of its own (StreamInsight's
``AdvanceTimeGenerationSettings``): the step logic behind the ``advance_time`` operator.

``AdvanceTime`` passes inserts through and, after every ``every_events`` inserts or whenever
event time has advanced by ``every`` past the last CTI it generated, emits a CTI at
``max(start seen) - delay`` (floored at ``MIN_TIME``, TS §2.2). Marble timeline with
``every_events=2, delay="2ns"`` (times in nanoseconds; ``|t`` a CTI; ``x`` late)::

    in:   5  3  9  6  4  8  ...
    out:  5  3 |3  9  6 |7  x  8 ...     (4 starts before CTI 7: late)

The CTI trails the most advanced event by ``delay`` so that events arriving at most ``delay``
out of order are still on time. It is emitted right after the event that triggered it, so it
never exceeds an event already passed and no passed event is made late by it; a later event
starting before it *is* late — that is the point of a CTI — and is dropped or clipped as
``on_late`` says (TS §3.1, §3.2), leaving a ``LateRecord`` in the outputs (TS §3.3). CTIs
arriving from upstream pass through when they advance time and are otherwise swallowed, so
the output's CTIs strictly increase (TS §2.1).

One ``AdvanceTime`` holds the state of one subscription: build a fresh one per subscriber.
Time O(1) per event, memory O(1).

>>> gen = AdvanceTime(every_events=2, delay="2ns")
>>> [[(e.kind, e.start) for e in gen.step(Event.point(t))] for t in (5, 3)]
[[('point', 5)], [('point', 3), ('cti', 3)]]
>>> gen.step(Event.point(1))[0].action
'dropped'
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import InputError
from engine.event import ADJUSTED, CTI, DROPPED, Event, LateRecord
from engine.times import (MAX_TIME, MIN_TIME, DurationLike, format_duration_ns, readable_repr,
                          to_duration_ns)

__all__ = ["AdvanceTime", "AdvanceStats"]

_NONE: tuple = ()


@dataclass(frozen=True, slots=True, repr=False)
class AdvanceStats:
    """An ``AdvanceTime``'s state, for ``stats()``: ``max_start``, the largest insert start
    seen, and ``last_cti``, the last CTI passed on (generated or from upstream) — instants,
    ``None`` before the first; ``since_cti``: inserts since the last generated CTI (fewer
    than ``every_events``); ``generated``: CTIs generated in all."""

    max_start: int | None
    last_cti: int | None
    since_cti: int
    generated: int

    def __repr__(self) -> str:
        return readable_repr(self, instants=("max_start", "last_cti"))


class AdvanceTime:
    """Generate CTIs for one stream from its events' start times.

    ``every_events``: generate after this many emitted inserts (int >= 1), or ``None``.
    ``every``: generate whenever ``max start - delay`` has advanced by at least this duration
    past the last CTI (the first insert generates the first CTI), or ``None``. At least one of
    the two is required; with both, whichever comes first (both counts restart).
    ``delay``: how far the CTI trails the largest start seen (a duration, >= 0).
    ``on_late``: ``"drop"`` or ``"adjust"`` for inserts that start before the last CTI.

    ``step(event)`` returns a tuple of outputs in order: ``Event`` items to emit and
    ``LateRecord`` items for the late side output (the policy-output convention of
    ``engine.policy``). ``flush()`` returns the final CTI, if any, at completion.
    """

    __slots__ = ("every_events", "every", "delay", "on_late", "_adjust", "_max_start",
                 "_count", "_last_cti", "_generated", "_last_generated")

    def __init__(self, every_events: int | None = None, every: DurationLike | None = None,
                 delay: DurationLike = 0, on_late: str = "drop") -> None:
        if every_events is None and every is None:
            raise InputError(
                "advance_time: neither every_events nor every was given; expected at least one "
                "(e.g. every_events=100 or every='1s')"
            )
        if every_events is not None and (
                isinstance(every_events, bool) or not isinstance(every_events, int)
                or every_events < 1):
            raise InputError(
                f"advance_time: every_events={every_events!r}; expected an int >= 1 or None"
            )
        if on_late not in ("drop", "adjust"):
            raise InputError(
                f"advance_time: on_late={on_late!r} is not a late policy; "
                "expected 'drop' or 'adjust'"
            )
        self.every_events = every_events
        self.every = None if every is None else to_duration_ns(every, what="advance_time: every")
        self.delay = to_duration_ns(delay, what="advance_time: delay")
        self.on_late = on_late
        self._adjust = on_late == "adjust"
        self._max_start: int | None = None  # largest start of an emitted insert
        self._count = 0                      # inserts emitted since the last generated CTI
        self._last_cti: int | None = None    # last CTI emitted (generated or passed through)
        self._generated = 0
        self._last_generated: int | None = None  # last CTI generated from event times

    def __repr__(self) -> str:
        every = None if self.every is None else format_duration_ns(self.every)
        return (f"AdvanceTime(every_events={self.every_events}, every={every!r}, "
                f"delay={format_duration_ns(self.delay)!r}, on_late={self.on_late!r})")

    def step(self, event: Event) -> tuple:
        """One event in; the events, CTIs and late records it causes, in order. O(1)."""
        last = self._last_cti
        if event.kind == CTI:
            if last is None or event.start > last:  # TS §2.1
                self._last_cti = event.start
                self._count = 0
                return (Event(CTI, event.start, None, None, None),)
            return _NONE
        if last is not None and event.start < last:  # TS §2.4: late
            if self._adjust and event.end > last:  # type: ignore[operator]  # TS §3.2 (an insert's end is an int)
                clipped = Event(event.kind, last, event.end, event.payload, event.source,
                                event.id)
                late: tuple = (clipped, LateRecord(event.source, event, last, ADJUSTED, clipped))
                event = clipped
            else:
                return (LateRecord(event.source, event, last, DROPPED),)  # TS §3.1, §3.3
        else:
            late = ()
        start = event.start
        if self._max_start is None or start > self._max_start:
            self._max_start = start
        self._count += 1
        out = late if late else (event,)
        cti = self._due()
        if cti is not None:
            return out + (Event(CTI, cti, None, None, None),)
        return out

    def _due(self) -> int | None:
        """The CTI to generate now, or ``None``; updates the bookkeeping when one is due."""
        n = self.every_events
        due = n is not None and self._count >= n
        candidate = self._max_start - self.delay  # type: ignore[operator]
        if candidate < MIN_TIME:
            candidate = MIN_TIME  # TS §2.2
        last = self._last_cti
        if not due and self.every is not None:
            due = last is None or candidate - last >= self.every
        if not due:
            return None
        self._count = 0
        if last is not None and candidate <= last:  # TS §2.1: would not advance time
            return None
        self._last_cti = self._last_generated = candidate
        self._generated += 1
        return candidate

    def flush(self, *, to_infinity: bool = False) -> tuple:
        """At completion: a last CTI at ``max start - delay`` (or at ``MAX_TIME`` with
        ``to_infinity``) if it advances time; otherwise nothing."""
        if to_infinity:
            candidate = MAX_TIME
        elif self._max_start is None:
            return _NONE
        else:
            candidate = max(self._max_start - self.delay, MIN_TIME)  # TS §2.2
        if self._last_cti is not None and candidate <= self._last_cti:  # TS §2.1
            return _NONE
        self._last_cti = candidate
        if not to_infinity:
            self._last_generated = candidate
        self._count = 0
        self._generated += 1
        return (Event(CTI, candidate, None, None, None),)

    def stats(self) -> AdvanceStats:
        """Where the generator stands: the largest start seen, the last CTI passed on, the
        inserts since it, and the CTIs generated in all."""
        return AdvanceStats(self._max_start, self._last_cti, self._count, self._generated)

    def _check(self) -> None:
        """Invariants: a generated CTI never exceeds the largest start passed less the delay
        (floored), so it never passes an event already emitted; the count stays below
        ``every_events``; the last CTI is at least the last generated one."""
        if self.every_events is not None:
            assert 0 <= self._count < self.every_events, self._count
        g = self._last_generated
        if g is not None:
            assert self._max_start is not None
            assert g <= max(self._max_start - self.delay, MIN_TIME), (g, self._max_start)
            assert self._last_cti is not None and self._last_cti >= g
