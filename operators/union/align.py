"""Alignment through demand and idleness: which inputs get no new credit for being ahead
(TS §4.6), and which are idle (TS §4.7).

An input's *progress* is its latest CTI, or, until it sends one, the latest start of its
inserts; it is noted as events arrive (``Input.saw``). The *floor* is the least progress
among live inputs that are not idle and have shown any. An input whose progress is more than
``max_drift`` beyond the floor is *paused*: credit granting (``Intake.grant``) skips it, so
its producer waits for demand as it would behind a slow subscriber, until the floor rises to
within ``max_drift`` of it. Nothing is dropped or buffered for being early: the input simply
is not asked for more, and what it sends with the credit it already holds (at most its
``prefetch``) is merged as usual.

No input waits on one that cannot move: the inputs at the floor are never paused, nor is an
input that has shown no progress yet (it holds credit, so it can send); an input that left
(completed, failed, removed) is not live, and an idle one does not count for the floor. A
live input that has shown no progress yet may be anywhere in time: until it shows some (or
goes idle), every input that has shown progress is paused — as a split without a watermark
holds back Flink's aligned sources. An input is idle once it has held credit for
``idle_after`` without sending anything (time on the union's injected clock); its next
arrival resumes it. While an input is paused or could go idle, an alarm on the clock reviews
the inputs when the next one would become idle, so a paused input is released even when
nothing arrives at all.

Everything here runs under the intake's lock (``review``) or on the arriving input's own
signals (``Input.saw``), and touches only the alignment fields of ``Input``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.clock import WALL, Clock
from engine.times import MIN_TIME, DurationLike, Nanoseconds, to_duration_ns

__all__ = ["Alignment", "aligning", "DEFAULT_IDLE_AFTER"]

#: ``idle_after`` of a union given ``max_drift`` alone: one second on its clock
DEFAULT_IDLE_AFTER = Nanoseconds(10**9)


def _duration(who: str, what: str, value: DurationLike) -> int:
    return to_duration_ns(value, what=f"{who}: {what}")  # negative: refused there


def aligning(who: str, max_drift: DurationLike | None, idle_after: DurationLike | None,
             clock: Clock | None) -> Alignment | None:
    """The ``Alignment`` for a union's ``max_drift``/``idle_after``/``clock`` (durations as
    ``engine.times.to_duration_ns`` reads them), or ``None`` when it has neither."""
    if max_drift is None and idle_after is None:
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"{who}: clock must have now() and call_at(t, fn), got {clock!r}")
        return None
    drift = None if max_drift is None else _duration(who, "max_drift", max_drift)
    idle = (DEFAULT_IDLE_AFTER if idle_after is None
            else _duration(who, "idle_after", idle_after))
    if idle == 0:
        raise ValueError(f"{who}: idle_after must be > 0, got {idle_after!r}")
    if clock is None:
        clock = WALL
    elif not isinstance(clock, Clock):
        raise TypeError(f"{who}: clock must have now() and call_at(t, fn), got {clock!r}")
    return Alignment(drift, idle, clock, _nothing)


def _nothing() -> None:
    """The alarm's target until the union gives its own."""


class Alignment:
    """The union's alignment and idleness settings and the review behind them.

    ``max_drift``: ns, or ``None`` (no alignment, idleness only). ``idle_after``: ns, or
    ``None`` (no input is ever idle). ``clock``: where idleness is measured. ``alarm``: the
    clock time of the pending review, if one is scheduled; ``wake``: what the alarm calls
    (the intake's ``grant``).
    """

    __slots__ = ("max_drift", "idle_after", "clock", "alarm", "wake", "floor")

    def __init__(self, max_drift: int | None, idle_after: int | None, clock: Clock,
                 wake: Callable[[], None]) -> None:
        self.max_drift = max_drift
        self.idle_after = idle_after
        self.clock = clock
        self.wake = wake
        self.alarm: int | None = None
        self.floor: int | None = None  # the floor at the latest review (for stats)

    def now(self) -> int:
        return self.clock.now()

    def review(self, live: Sequence[Any], now: int) -> bool:
        """Mark idle inputs (TS §4.7), find the floor, mark paused inputs (TS §4.6); return
        whether any input is paused. Schedules the alarm for the next input to go idle.
        ``live``: the live ``operators.union.inputs.Input``s (this module sits below it)."""
        idle_after = self.idle_after
        floor: int | None = None
        unknown = False  # a live input that is not idle has shown no progress yet
        soonest: int | None = None
        for inp in live:
            if idle_after is not None and not inp.idle:
                if inp.requested > inp.received:  # it could send: quiet time counts
                    due = inp.heard + idle_after
                    if now >= due:
                        inp.went_idle()
                    elif soonest is None or due < soonest:
                        soonest = due
            if inp.idle:
                continue
            progress = inp.progress
            if progress is None:
                unknown = True
            elif floor is None or progress < floor:
                floor = progress
        self.floor = None if unknown else floor
        paused = False
        drift = self.max_drift
        if drift is not None:
            # An input whose time is not known yet may be anywhere: every input that has
            # shown progress waits until it shows its own, or goes idle.
            limit = None if floor is None else (MIN_TIME if unknown else floor + drift)
            for inp in live:
                progress = inp.progress
                ahead = limit is not None and progress is not None and progress > limit
                if ahead:
                    paused = True
                    if not inp.paused:
                        inp.pauses += 1
                inp.paused = ahead
        if soonest is not None and (self.alarm is None or soonest < self.alarm or
                                    self.alarm <= now):
            self.alarm = soonest
            self.clock.call_at(soonest, self._ring)
        return paused

    def _ring(self) -> None:
        self.alarm = None
        self.wake()

    def __repr__(self) -> str:
        return f"Alignment(max_drift={self.max_drift}, idle_after={self.idle_after})"
