"""Brute-force reference models of the CTI policies, written from the rules (TS §2, §3).

Deliberately naive and O(n²): for each arrival the CTI in force is recomputed from scratch by
scanning every earlier arrival, so each function can be checked against the rules by reading
it. Tests of the policies, the union, replay and the Spark adapter compare against these.

Arrivals
    A list, in arrival order. Each item is an ``Event`` whose ``source`` names its input, or —
    for ``reference_min`` and ``run_steps`` only — a marker tuple ``("join", name)`` or
    ``("leave", name)`` for an input joining or leaving the merge. ``reference_goldilocks`` and
    ``reference_max`` ignore markers (joining and leaving change nothing for them).

Results
    ``(emitted, late)``: ``emitted`` is the output stream in order — inserts (adjusted ones
    clipped) and CTIs (``source=None``); ``late`` lists one ``LateRecord`` per late insert in
    arrival order (TS §3.3).

>>> from engine.event import Event
>>> m = 60 * 10**9
>>> emitted, late = reference_goldilocks(
...     [Event.point(5 * m, source="A"), Event.cti(8 * m, source="A"),
...      Event.point(1 * m, source="B")], 5 * m)
>>> [(e.kind, e.start // m) for e in emitted], [(r.input, r.cti // m, r.action) for r in late]
([('point', 5), ('cti', 3)], [('B', 3, 'dropped')])
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from engine.event import CTI, Event, LateRecord
from engine.times import MIN_TIME

__all__ = [
    "Arrival",
    "reference_goldilocks",
    "reference_max",
    "reference_min",
    "run_steps",
    "split_outputs",
    "is_marker",
    "arrivals_strategy",
]

Arrival = Any  # Event | tuple[str, str]  (("join" | "leave", input name))


def is_marker(item: Arrival) -> bool:
    """``True`` for a ``("join", name)`` or ``("leave", name)`` marker."""
    return isinstance(item, tuple)


def _late_outputs(event: Event, cti: int, on_late: str) -> tuple[list[Event], LateRecord]:
    """What happens to an insert that starts before the CTI in force ``cti`` (TS §3.1–§3.3)."""
    if on_late == "adjust" and event.kind != "point" and event.end > cti:  # TS §3.2
        clipped = Event(event.kind, cti, event.end, event.payload, event.source)
        return [clipped], LateRecord(event.source, event, cti, "adjusted", clipped)
    return [], LateRecord(event.source, event, cti, "dropped")  # TS §3.1, §3.2 (points)


def reference_goldilocks(arrivals: Sequence[Arrival], delay: int,
                         on_late: str = "drop") -> tuple[list[Event], list[LateRecord]]:
    """The Goldilocks policy (DESIGN §5) by brute force. ``delay`` is int ns >= 0.

    Row i, a CTI at t: its delayed value is max(t - delay, MIN_TIME) (TS §2.2); it is emitted
    iff no earlier row was a CTI or it exceeds every earlier delayed CTI (TS §2.1).
    Row i, an insert at s: the CTI in force is the largest delayed CTI among rows < i; the
    insert is late iff that exists and s < it (TS §2.4).
    """
    def delayed(e: Event) -> int:
        return max(e.start - delay, MIN_TIME)

    emitted: list[Event] = []
    late: list[LateRecord] = []
    for i, item in enumerate(arrivals):
        if is_marker(item):
            continue
        earlier = [delayed(e) for e in arrivals[:i] if not is_marker(e) and e.kind == CTI]
        in_force = max(earlier) if earlier else None
        if item.kind == CTI:
            d = delayed(item)
            if in_force is None or d > in_force:
                emitted.append(Event(CTI, d, None, None, None))
        elif in_force is not None and item.start < in_force:
            out, record = _late_outputs(item, in_force, on_late)
            emitted.extend(out)
            late.append(record)
        else:
            emitted.append(item)
    return emitted, late


def reference_max(arrivals: Sequence[Arrival],
                  on_late: str = "drop") -> tuple[list[Event], list[LateRecord]]:
    """The max policy: ``reference_goldilocks`` with delay 0."""
    return reference_goldilocks(arrivals, 0, on_late)


def _live_ctis(arrivals: Sequence[Arrival], upto: int) -> dict[Any, int]:
    """Live inputs after rows ``0..upto`` and each one's latest CTI, by rescanning.

    An input is live from its last ``join`` marker or event not followed by a ``leave``; its
    latest CTI is the largest CTI it sent since then (``MIN_TIME`` if none).
    """
    live: dict[Any, int] = {}
    for item in arrivals[:upto + 1]:
        if is_marker(item):
            verb, name = item
            if verb == "leave":
                live.pop(name, None)
            else:
                live.setdefault(name, MIN_TIME)
        else:
            live.setdefault(item.source, MIN_TIME)
            if item.kind == CTI:
                live[item.source] = max(live[item.source], item.start)
    return live


def reference_min(arrivals: Sequence[Arrival],
                  on_late: str = "drop") -> tuple[list[Event], list[LateRecord]]:
    """The min policy (DESIGN §5) by brute force; arrivals may hold join/leave markers.

    After row i the candidate CTI is the minimum of the live inputs' latest CTIs (none when
    no input is live). The CTI in force before row i is the largest candidate of rows < i,
    or MIN_TIME (a CTI at MIN_TIME promises nothing and is never emitted). Row i emits a CTI
    at its candidate iff the candidate exceeds the CTI in force before it (TS §2.1); an insert
    at row i is late iff it starts before the CTI in force before it (TS §2.4).
    """
    candidates: list[int | None] = []
    for i in range(len(arrivals)):
        live = _live_ctis(arrivals, i)
        candidates.append(min(live.values()) if live else None)

    emitted: list[Event] = []
    late: list[LateRecord] = []
    for i, item in enumerate(arrivals):
        in_force = max([MIN_TIME] + [c for c in candidates[:i] if c is not None])
        if not is_marker(item) and item.kind != CTI:
            if item.start < in_force:
                out, record = _late_outputs(item, in_force, on_late)
                emitted.extend(out)
                late.append(record)
            else:
                emitted.append(item)
        c = candidates[i]
        if c is not None and c > in_force:
            emitted.append(Event(CTI, c, None, None, None))
    return emitted, late


def split_outputs(outputs: Iterable[Any]) -> tuple[list[Event], list[LateRecord]]:
    """Split a policy's outputs into (emitted events, late records), keeping each order."""
    emitted: list[Event] = []
    late: list[LateRecord] = []
    for item in outputs:
        (late if isinstance(item, LateRecord) else emitted).append(item)
    return emitted, late


def run_steps(policy: Any, arrivals: Sequence[Arrival]) -> tuple[list[Event], list[LateRecord]]:
    """Drive ``policy`` element by element over ``arrivals`` (markers call join/leave)."""
    state = policy.initial()
    outputs: list[Any] = []
    for item in arrivals:
        if is_marker(item):
            verb, name = item
            state, out = (policy.join if verb == "join" else policy.leave)(state, name)
        else:
            state, out = policy.step(state, item)
        outputs.extend(out)
    return split_outputs(outputs)


def arrivals_strategy(*, min_sources: int = 2, max_sources: int = 5, max_size: int = 40,
                      markers: bool = False, extremes: bool = True):
    """A hypothesis strategy for arrival lists: 2–5 inputs ``"A"``…, interleaving points,
    intervals and CTIs at small times (so collisions, ties and late events are common), and
    with ``extremes`` CTIs near ``MIN_TIME``/``MAX_TIME``; with ``markers``, also join/leave
    markers. Imported lazily so the reference models need no hypothesis."""
    from hypothesis import strategies as st

    from engine.times import MAX_TIME

    names = "ABCDE"
    times = st.integers(-20, 60)
    if extremes:
        times = st.one_of(times, st.sampled_from([MIN_TIME, MIN_TIME + 1, MIN_TIME + 7,
                                                  MAX_TIME - 1, MAX_TIME]))
    insert_times = st.integers(-20, 60)

    @st.composite
    def build(draw):
        k = draw(st.integers(min_sources, max_sources))
        source = st.sampled_from(names[:k])
        point = st.builds(lambda s, t: Event.point(t, source=s), source, insert_times)
        interval = st.builds(lambda s, t, n: Event.interval(t, t + n, source=s),
                             source, insert_times, st.integers(1, 30))
        cti = st.builds(lambda s, t: Event.cti(t, source=s), source, times)
        kinds = [point, interval, cti, cti]
        if markers:
            kinds.append(st.tuples(st.sampled_from(["join", "leave"]), source))
        return draw(st.lists(st.one_of(kinds), max_size=max_size))

    return build()
