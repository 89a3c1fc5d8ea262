"""Brute-force reference models of the CTI policies, written from the rules (TS §2, §3).

Deliberately naive and O(n²): for each arrival the CTI in force is recomputed from scratch by
scanning every earlier arrival, so each function can be checked against the rules by reading
it. Tests of the policies, the union, replay and the Spark adapter compare against these.

Arrivals
    A list, in arrival order. Each item is an ``Event`` whose ``source`` names its input, or —
    for ``reference_min`` and ``run_steps`` only — a marker tuple ``("join", name)`` or
    ``("leave", name)`` for an input joining or leaving the merge. ``reference_goldilocks`` and
    ``reference_max`` ignore markers (joining and leaving change nothing for them).

Windows (TS §6)
    ``reference_windows(stream, size, hop, folds, key=..., clock_delay=...)`` recomputes each
    window's members, its closing CTI and its values from scratch, by the rules.

Edges (TS §7)
    ``reference_edges(arrivals, delay, on_late, finish=...)``: the Goldilocks policy over
    arrivals with start and end edges; each edge's partner is found by scanning back from it.

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

from statistics import median_low
from typing import Any, Iterable, Sequence

from engine.event import CTI, Event, LateRecord
from engine.times import MIN_TIME

__all__ = [
    "Arrival",
    "reference_goldilocks",
    "reference_max",
    "reference_min",
    "reference_live",
    "quantile_rule",
    "guarded_rule",
    "run_steps",
    "split_outputs",
    "is_marker",
    "arrivals_strategy",
    "reference_windows",
    "REFERENCE_FOLDS",
    "reference_edges",
    "edge_arrivals_strategy",
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
    """The Goldilocks policy (design.md §4.2) by brute force. ``delay`` is int ns >= 0.

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
        else:
            _insert(item, in_force, on_late, emitted, late)
    return emitted, late


def _insert(item: Event, in_force: int | None, on_late: str, emitted: list[Event],
            late: list[LateRecord]) -> None:
    """An insert under the CTI in force ``in_force``: emitted, or late (TS §2.4, §3)."""
    if in_force is not None and item.start < in_force:
        out, record = _late_outputs(item, in_force, on_late)
        emitted.extend(out)
        late.append(record)
    else:
        emitted.append(item)


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
    """The min policy (design.md §4.3) by brute force; arrivals may hold join/leave markers.

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


def reference_live(arrivals: Sequence[Arrival], delay: int, rule: Any,
                   on_late: str = "drop") -> tuple[list[Event], list[LateRecord]]:
    """A rule over the live inputs' latest CTIs (``quantile_policy``, ``goldilocks(…,
    max_ahead=…)``) by brute force; arrivals may hold join/leave markers.

    ``rule(latest)``: from ``{input: latest CTI}`` of the live inputs (``MIN_TIME`` before
    their first), ``(value, reason)`` or ``None``. After row i the candidate CTI is
    ``max(value - delay, MIN_TIME)``; the CTI in force before row i is the largest candidate
    of rows < i (``MIN_TIME`` if none: it promises nothing and is never emitted), and its
    reason is that of the first row that reached it. Row i emits its candidate iff it exceeds
    the CTI in force (TS §2.1); an insert is late iff it starts before it (TS §2.4), and its
    record carries the reason.
    """
    candidates: list[tuple[int, str] | None] = []
    for i in range(len(arrivals)):
        found = rule(_live_ctis(arrivals, i))
        candidates.append(None if found is None else (max(found[0] - delay, MIN_TIME), found[1]))

    emitted: list[Event] = []
    late: list[LateRecord] = []
    for i, item in enumerate(arrivals):
        in_force, reason = MIN_TIME, None
        for c in candidates[:i]:
            if c is not None and c[0] > in_force:
                in_force, reason = c
        if not is_marker(item) and item.kind != CTI:
            if item.start < in_force:
                out, record = _late_outputs(item, in_force, on_late)
                record.reason = reason
                emitted.extend(out)
                late.append(record)
            else:
                emitted.append(item)
        c = candidates[i]
        if c is not None and c[0] > in_force:
            emitted.append(Event(CTI, c[0], None, None, None))
    return emitted, late


def quantile_rule(k: int) -> Any:
    """``reference_live``'s rule for ``quantile_policy(k, …)`` (TS §2.5): the k-th most
    advanced live input's latest CTI (the least advanced when fewer than k are live)."""
    def rule(latest: dict[Any, int]) -> tuple[int, str] | None:
        if not latest:
            return None
        ordered = sorted(latest.values(), reverse=True)
        return ordered[min(k, len(ordered)) - 1], "quantile"
    return rule


def guarded_rule(max_ahead: int) -> Any:
    """``reference_live``'s rule for ``goldilocks(…, max_ahead=…)`` (TS §2.6): each input
    that sent a CTI counts for at most the median (low) of the others' plus ``max_ahead``; the
    largest such value, ``"goldilocks"`` when an input's own CTI, else ``"max_ahead"``."""
    def rule(latest: dict[Any, int]) -> tuple[int, str] | None:
        sent = {name: t for name, t in latest.items() if t > MIN_TIME}
        if not sent:
            return None
        trusted = {}
        for name, t in sent.items():
            others = [u for other, u in sent.items() if other != name]
            trusted[name] = min(t, median_low(others) + max_ahead) if others else t
        best = max(trusted.values())
        return best, "goldilocks" if best in sent.values() else "max_ahead"
    return rule


def split_outputs(outputs: Iterable[Any]) -> tuple[list[Event], list[LateRecord]]:
    """Split a policy's outputs into (emitted events, late records), keeping each order."""
    emitted: list[Event] = []
    late: list[LateRecord] = []
    for item in outputs:
        (late if isinstance(item, LateRecord) else emitted).append(item)
    return emitted, late


def step_through(policy: Any, arrivals: Sequence[Arrival]) -> tuple[Any, list[Any]]:
    """Drive ``policy`` element by element over ``arrivals`` (markers call join/leave):
    the state after them and every output, in order."""
    state = policy.initial()
    outputs: list[Any] = []
    for item in arrivals:
        if is_marker(item):
            verb, name = item
            state, out = (policy.join if verb == "join" else policy.leave)(state, name)
        else:
            state, out = policy.step(state, item)
        outputs.extend(out)
    return state, outputs


def run_steps(policy: Any, arrivals: Sequence[Arrival]) -> tuple[list[Event], list[LateRecord]]:
    """Drive ``policy`` element by element over ``arrivals`` (markers call join/leave)."""
    return split_outputs(step_through(policy, arrivals)[1])


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


# -- windows (TS §6) ------------------------------------------------------------------------

def _brute_windows(t: int, size: int, hop: int, offset: int) -> list[int]:
    """Every window start ``offset + k*hop`` with ``start <= t < start + size``, by trying
    every ``k`` near ``t`` (no modular arithmetic to get wrong)."""
    k0 = (t - offset) // hop
    return sorted(offset + k * hop for k in range(k0 - size // hop - 2, k0 + 2)
                  if offset + k * hop <= t < offset + k * hop + size)


def _fold_value(kind: str, field: str | None, payloads: list[Any]) -> Any:
    """A built-in fold by its definition over the members' payloads, in arrival order."""
    if kind == "count" and field is None:
        return len(payloads)
    values = []
    for p in payloads:
        v = p.get(field) if isinstance(p, dict) else None
        if type(v) in (int, float):
            values.append(float(v) + 0.0)
    if kind == "count":
        return len(values)
    if not values:
        return None
    if kind in ("sum", "mean"):
        total = 0.0
        for v in values:  # left to right, as every path adds
            total += v
        return total / len(values) if kind == "mean" else total
    return min(values) if kind == "min" else max(values)


#: the folds ``reference_windows`` knows: ``(kind, field)``
REFERENCE_FOLDS = (("count", None), ("count", "x"), ("sum", "x"), ("mean", "x"), ("min", "x"),
                   ("max", "x"))


def reference_windows(stream: Sequence[Event], size: int, hop: int,
                      folds: Sequence[tuple[str, str | None]], *, keyed: bool = False,
                      offset: int = 0, clock_delay: int | None = None,
                      ) -> tuple[list[Event], list[LateRecord]]:
    """Windows closed by CTIs (TS §6.1–§6.3) by brute force; keys are the events' sources.

    Clock: with ``clock_delay`` None the stream's own CTIs (any source) — the CTI in force
    before row i is the largest CTI among rows < i. With ``clock_delay`` set, each key's clock
    is the Goldilocks policy over that key's own CTIs (or, unkeyed, over all CTIs):
    ``reference_goldilocks`` of the rows < i of that key, its last emitted CTI.
    Row i, an insert: its windows are every window holding its start; those whose end is at
    or before its clock are closed and make it late (one record, action ``window_closed``);
    it joins the others. A window is emitted at the first row j whose clock (after row j)
    reaches its end, before the CTI of row j if one is passed on; windows closed at one row
    come out by (end, key). A CTI is passed on when there is one clock and it advances it.
    """
    def key_of(e: Event) -> Any:
        return e.source if keyed else None

    def clock_after(i: int, key: Any) -> int | None:
        """The clock of ``key`` after rows 0..i, by rescanning."""
        rows = stream[:i + 1]
        if clock_delay is None:
            ctis = [e.start for e in rows if e.kind == CTI]
            return max(ctis) if ctis else None
        mine = [e for e in rows if key_of(e) == key]
        out, _ = reference_goldilocks(mine, clock_delay)
        ctis = [e.start for e in out if e.kind == CTI]
        return ctis[-1] if ctis else None

    members: dict[tuple[Any, int], list[Event]] = {}
    late: list[LateRecord] = []
    opened_at: dict[tuple[Any, int], int] = {}
    for i, e in enumerate(stream):
        if e.kind == CTI:
            continue
        key = key_of(e)
        clock = clock_after(i - 1, key) if i else None
        missed = False
        for ws in _brute_windows(e.start, size, hop, offset):
            if clock is not None and ws + size <= clock:
                missed = True
                continue
            members.setdefault((key, ws), []).append(e)
            opened_at.setdefault((key, ws), i)
        if missed:
            late.append(LateRecord(e.source, e, clock, "window_closed"))
    closing: dict[int, list[tuple[int, Any, int]]] = {}
    for (key, ws), evs in members.items():
        for j in range(opened_at[(key, ws)], len(stream)):
            c = clock_after(j, key)
            if c is not None and c >= ws + size:
                closing.setdefault(j, []).append((ws + size, key, ws))
                break
    one_clock = clock_delay is None or not keyed
    emitted: list[Event] = []
    for j, e in enumerate(stream):
        for end, key, ws in sorted(closing.get(j, []), key=lambda c: (c[0], c[1] or "")):
            evs = members[(key, ws)]
            values = {(kind if field is None else f"{kind}_{field}"):
                      _fold_value(kind, field, [m.payload for m in evs]) for kind, field in folds}
            emitted.append(Event("point", end - 1, end, (ws, end, key, len(evs), values),
                                 key if isinstance(key, str) else None))
        if e.kind == CTI and one_clock:
            before = clock_after(j - 1, key_of(e)) if j else None
            after = clock_after(j, key_of(e))
            if after is not None and (before is None or after > before):
                emitted.append(Event(CTI, after, None, None, None))
    return emitted, late


# -- edges (TS §7) --------------------------------------------------------------------------

def reference_edges(arrivals: Sequence[Event], delay: int, on_late: str = "drop",
                    finish: bool = False) -> tuple[list[Event], list[LateRecord]]:
    """``with_edges(goldilocks(delay, on_late))`` by brute force, from the rules of TS §7.

    For each arrival the CTI in force is recomputed from every earlier CTI (as
    ``reference_goldilocks`` does); an edge's partner is found by scanning the earlier
    arrivals back from it (``held_before``). ``finish`` adds the reports of the start edges
    still open at the end (``"not_closed"``). No bound on the open edges (``max_open``).
    """
    def delayed(e: Event) -> int:
        return max(e.start - delay, MIN_TIME)

    def in_force(i: int) -> int | None:
        earlier = [delayed(e) for e in arrivals[:i] if e.kind == CTI]
        return max(earlier) if earlier else None

    def start_out(j: int) -> Event | None:
        """What start edge j went out as: itself, clipped (adjust) or None (dropped late)."""
        e, cti = arrivals[j], in_force(j)
        if cti is None or e.start >= cti:
            return e
        return Event("start", cti, e.end, e.payload, e.source, e.id) if on_late == "adjust" \
            else None

    def key_of(e: Event) -> tuple:
        return (e.source, e.id)

    def is_duplicate(j: int) -> bool:
        held = held_before(key_of(arrivals[j]), j)
        return held is not None and start_out(held) is not None

    def held_before(key: tuple, i: int) -> int | None:
        """The start edge of ``key`` held (open, or dropped and remembered) just before
        arrival i: the latest earlier edge of the key decides."""
        for k in range(i - 1, -1, -1):
            e = arrivals[k]
            if e.kind not in ("start", "end") or key_of(e) != key:
                continue
            if e.kind == "end":
                return None  # it closed what was held, or nothing was held before it either
            if is_duplicate(k):
                continue  # a refused duplicate changes nothing
            return k
        return None

    emitted: list[Event] = []
    late: list[LateRecord] = []
    for i, item in enumerate(arrivals):
        cti = in_force(i)
        floor = MIN_TIME if cti is None else cti
        if item.kind == CTI:
            d = delayed(item)
            if cti is None or d > cti:
                emitted.append(Event(CTI, d, None, None, None))
        elif item.kind == "start":
            if is_duplicate(i):
                late.append(LateRecord(item.source, item, floor, "unmatched", None, "duplicate"))
                continue
            out = start_out(i)
            if out is item:
                emitted.append(item)
            elif out is None:
                late.append(LateRecord(item.source, item, cti, "dropped"))
            else:
                emitted.append(out)
                late.append(LateRecord(item.source, item, cti, "adjusted", out))
        elif item.kind == "end":
            held = held_before(key_of(item), i)
            if held is None:
                late.append(LateRecord(item.source, item, floor, "unmatched", None, "no_start"))
                continue
            out = start_out(held)
            if out is None:
                late.append(LateRecord(item.source, item, floor, "dropped", None,
                                       "start_dropped"))
                continue
            end = max(item.end, out.start + 1)
            is_late = cti is not None and item.end < cti
            if is_late:
                end = max(end, cti)
            closed = Event("end", out.start, end, item.payload, item.source, item.id)
            emitted.append(closed)
            if end != item.end:
                late.append(LateRecord(item.source, item, cti if is_late else floor,
                                       "adjusted", closed, "end_edge"))
        else:
            _insert(item, cti, on_late, emitted, late)
    if finish:  # TS §7.5: the start edges emitted and never closed, in the order they came
        final = in_force(len(arrivals))
        for j, e in enumerate(arrivals):
            if (e.kind == "start" and held_before(key_of(e), len(arrivals)) == j
                    and start_out(j) is not None):
                late.append(LateRecord(e.source, start_out(j),
                                       MIN_TIME if final is None else final, "unmatched",
                                       None, "not_closed"))
    return emitted, late


def edge_arrivals_strategy(*, max_sources: int = 3, max_size: int = 40, ids: int = 3):
    """Arrival lists with points, intervals, CTIs, start and end edges over a few ids, so
    late edges, duplicates, unmatched and reopened ids are common (imported lazily)."""
    from hypothesis import strategies as st

    names = "ABCDE"
    times = st.integers(-20, 60)

    @st.composite
    def build(draw):
        k = draw(st.integers(1, max_sources))
        source = st.sampled_from(names[:k])
        ident = st.one_of(st.integers(0, ids - 1), st.sampled_from(["x", "y"]))
        point = st.builds(lambda s, t: Event.point(t, source=s), source, times)
        interval = st.builds(lambda s, t, n: Event.interval(t, t + n, source=s),
                             source, times, st.integers(1, 30))
        cti = st.builds(lambda s, t: Event.cti(t, source=s), source, times)
        start = st.builds(lambda s, t, i, p: Event.start_edge(t, i, payload=p, source=s),
                          source, times, ident, st.sampled_from([None, 1]))
        end = st.builds(lambda s, t, n, i, p: Event.end_edge(t, t + n, i, payload=p, source=s),
                        source, times, st.integers(1, 30), ident, st.sampled_from([None, 2]))
        return draw(st.lists(st.one_of(point, interval, cti, cti, start, start, end, end),
                             max_size=max_size))

    return build()
