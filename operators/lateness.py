"""What every policy does with a late insert (TS §3.1–§3.3), written once: the accepted
``on_late`` values and the outputs for an insert that starts before the CTI in force."""

from __future__ import annotations

from engine.errors import InputError
from engine.event import ADJUSTED, DROPPED, Event, LateRecord

__all__ = ["ON_LATE", "check_on_late", "late_outputs", "PolicyBase"]

#: The accepted values of ``on_late``: drop late inserts (TS §3.1) or clip them (TS §3.2).
ON_LATE = ("drop", "adjust")


def check_on_late(who: str, on_late: object) -> str:
    """``on_late`` itself if it is one of ``ON_LATE``; else ``InputError`` naming ``who``."""
    if on_late not in ON_LATE:
        raise InputError(
            f"{who}: on_late={on_late!r} is not a late policy; expected 'drop' or 'adjust'"
        )
    return on_late


def late_outputs(event: Event, high: int, adjust: bool) -> tuple:
    """Outputs for an insert that starts before the CTI in force ``high`` (TS §2.4)."""
    # TS §3.2: still overlaps; a point [s, s+1) with s < high never does (an insert's end is an int)
    if adjust and event.end > high:  # type: ignore[operator]
        clipped = Event(event.kind, high, event.end, event.payload, event.source,
                        event.id)
        return clipped, LateRecord(event.source, event, high, ADJUSTED, clipped)  # TS §3.3
    return (LateRecord(event.source, event, high, DROPPED),)  # TS §3.1, §3.3


class PolicyBase:
    """What every built-in policy is described by: ``name``, ``delay`` (ns) and
    ``on_late`` (the ``engine.policy.Policy`` attributes)."""

    __slots__ = ("name", "delay", "on_late", "_adjust")

    name: str
    delay: int
    on_late: str

    def __init__(self, name: str, delay: int, on_late: str) -> None:
        self.name = name
        self.delay = delay
        self.on_late = on_late
        self._adjust = on_late == "adjust"
