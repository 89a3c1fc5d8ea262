"""Edge events (StreamInsight's start and end edges) under any time policy: ``with_edges``.

A *start edge* opens an event whose end is not known yet; its *end edge*, later, closes it.
The matching key is ``(source, id)``: an end edge closes the open start edge of the same
input with the same ``id`` (TS §7.1). ``with_edges(policy)`` wraps a policy so that edges are
decided by the rules of TS §7 and everything else exactly as the policy alone decides it:

- a start edge is an insert at its start: on time, or late by its start (TS §2.4) and then
  dropped or — under ``adjust`` — clipped to start at the CTI (its end is open, so it always
  overlaps, TS §7.2);
- an end edge is shown to the policy as an insert at its *end*: late when it would end the
  event before the CTI in force. The end edge of a start edge that was emitted is never
  dropped: it goes out with the start the start edge went out with, its end moved to the CTI
  when it was late (an ``"adjusted"`` record, reason ``"end_edge"``), whatever ``on_late``
  says (TS §7.3); the end edge of a start edge that was dropped is dropped with it (reason
  ``"start_dropped"``, TS §7.4);
- unmatched edges are reported, never emitted and never lost (TS §7.5): an end edge without
  an open start edge (``"no_start"``), a start edge whose id is already open for its input
  (``"duplicate"``), and every start edge still open when the stream ends (``finish``:
  ``"not_closed"``; the edge was emitted, the record only reports it) — ``LateRecord`` with
  the action ``"unmatched"``, counted in ``stats``;
- the open edges are bounded by ``max_open`` (TS §7.6): when the table is full a start edge
  takes the place of the oldest one that was dropped late (its end edge will be reported
  ``"no_start"``), and when none was, it is refused: reported (``"full"``), not emitted,
  counted. Every step keeps the union's accounting: each edge is emitted once or leaves one
  record that it was not (TS §3.4).

The state is the policy's state plus the table of open edges, a small frozen value like every
policy's (design.md §4): a step that meets an edge copies the table (O(open edges)); any other
arrival costs one call more than the policy's own step. Arrivals that are not edges go to the
policy's ``step_many`` and ``run_columns`` unchanged, so a replay of a log reads its blocks
without edges on the columnar path (TS §7.7).

>>> from operators.policies import goldilocks
>>> p = with_edges(goldilocks("2ns"))
>>> s = p.initial()
>>> s, out = p.step(s, Event.start_edge(5, "door", source="A"))
>>> s, out = p.step(s, Event.cti(20, source="A"))          # the CTI in force is now 18
>>> s, out = p.step(s, Event.end_edge(5, 9, "door", source="A"))  # ends before it: moved
>>> (out[0].kind, out[0].start, out[0].end, out[0].id), out[1].action, out[1].reason
(('end', 5, 18, 'door'), 'adjusted', 'end_edge')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from engine.codes import Reason
from engine.errors import InputError
from engine.event import (ADJUSTED, CTI, DROPPED, END, POINT, START, UNMATCHED, Event,
                          LateRecord)
from engine.policy import LateEntry, Policy, step_many
from engine.times import MIN_TIME

__all__ = ["with_edges", "EdgePolicy", "EdgeState", "EdgeStats", "EdgeCounts", "edge_stats",
           "NO_START", "DUPLICATE", "NOT_CLOSED", "FULL", "START_DROPPED", "END_EDGE",
           "DEFAULT_MAX_OPEN"]

# the reasons of the records edges leave (LateRecord.reason; engine.codes.Reason's text names)
NO_START = Reason.NO_START.text            # an end edge without an open start edge (TS §7.5)
DUPLICATE = Reason.DUPLICATE.text          # a start edge whose id is open for its input (TS §7.5)
NOT_CLOSED = Reason.NOT_CLOSED.text        # a start edge still open at the end (TS §7.5)
FULL = Reason.FULL.text                    # a start edge refused: max_open are open (TS §7.6)
START_DROPPED = Reason.START_DROPPED.text  # an end edge whose start edge was dropped (TS §7.4)
END_EDGE = Reason.END_EDGE.text            # an end edge whose end was moved to the CTI (TS §7.3)

DEFAULT_MAX_OPEN = 100_000


class _Counts(NamedTuple):
    opened: int = 0      # start edges emitted (adjusted ones included)
    closed: int = 0      # end edges emitted
    moved: int = 0       # end edges emitted with their end moved (TS §7.3)
    dropped: int = 0     # end edges dropped with their start edge (TS §7.4)
    no_start: int = 0    # end edges without an open start edge (TS §7.5)
    duplicate: int = 0   # start edges refused: their id was open (TS §7.5)
    full: int = 0        # start edges refused: max_open edges were open (TS §7.6)
    forgotten: int = 0   # dropped start edges forgotten to make room (TS §7.6)
    not_closed: int = 0  # start edges still open at the end (TS §7.5)
    peak: int = 0        # most entries ever open


_ZERO = _Counts()
EdgeCounts = _Counts  # the counts an EdgeState carries (a checkpoint writes them)


class EdgeState(NamedTuple):
    """``with_edges``'s state: the policy's own ``inner`` state, and ``open`` the edges by
    ``(source, id)`` — ``(emitted, arrived)``: the start edge as it went out (``None`` if it
    was dropped late) and as it arrived, in the order they opened — and the ``counts``. A
    table in a state is never changed: a step that changes it copies it."""

    inner: Any
    open: dict
    counts: _Counts


_new = tuple.__new__  # an EdgeState built without NamedTuple's Python __new__ (hot path)


@dataclass(frozen=True, slots=True)
class EdgeStats:
    """The edges' accounting (TS §7.5, §7.6), in ``Union.stats().edges`` and replay's stats."""

    open: int        # start edges open now (and dropped ones remembered for their end edge)
    peak: int        # the most ever open
    max_open: int    # the bound
    opened: int      # start edges emitted
    closed: int      # end edges emitted
    moved: int       # end edges emitted with their end moved to the CTI (TS §7.3)
    dropped: int     # end edges dropped with their start edge (TS §7.4)
    no_start: int    # end edges without an open start edge, reported (TS §7.5)
    duplicate: int   # start edges whose id was already open, reported (TS §7.5)
    full: int        # start edges refused because max_open were open, reported (TS §7.6)
    forgotten: int   # dropped start edges forgotten to make room (TS §7.6)
    not_closed: int  # start edges never closed by the end of the stream, reported (TS §7.5)

    @property
    def unmatched(self) -> int:
        """Edges reported without their partner: ``no_start + duplicate + full +
        not_closed``."""
        return self.no_start + self.duplicate + self.full + self.not_closed


def _record(event: Event, cti: int, action: str, adjusted: Event | None,
            reason: str) -> LateRecord:
    return LateRecord(event.source, event, cti, action, adjusted, reason)


class EdgePolicy:
    """A policy that also decides edges (TS §7). Build it with ``with_edges``."""

    __slots__ = ("policy", "max_open", "name", "delay", "on_late")

    def __init__(self, policy: Policy, max_open: int = DEFAULT_MAX_OPEN) -> None:
        self.policy = policy
        self.max_open = max_open
        self.name = policy.name
        self.delay = policy.delay
        self.on_late = policy.on_late

    def __repr__(self) -> str:
        return f"with_edges({self.policy!r}, max_open={self.max_open})"

    def initial(self) -> EdgeState:
        return EdgeState(self.policy.initial(), {}, _ZERO)

    # -- one arrival ----------------------------------------------------------------------
    def step(self, state: EdgeState, event: Event) -> tuple[EdgeState, tuple]:
        kind = event.kind
        if kind == START:
            return self._start(state, event)
        if kind == END:
            return self._end(state, event)
        inner, outputs = self.policy.step(state[0], event)
        if inner is state[0]:
            return state, outputs
        return _new(EdgeState, (inner, state[1], state[2])), outputs

    def _in_force(self, inner: Any, source: str | None) -> int:
        """The CTI in force under the policy's state ``inner`` (``MIN_TIME`` before any): what
        it says of an insert at ``MIN_TIME``; the state that answer leaves is not kept."""
        _, outputs = self.policy.step(inner, Event(POINT, MIN_TIME, MIN_TIME + 1, None, source))
        late = next((o for o in outputs if o.__class__ is LateRecord), None)
        return MIN_TIME if late is None else late.cti

    def cti_in_force(self, state: EdgeState) -> int:
        """The CTI in force in ``state`` (``MIN_TIME`` before any)."""
        return self._in_force(state.inner, None)

    def _start(self, state: EdgeState, event: Event) -> tuple[EdgeState, tuple]:
        key = (event.source, event.id)
        held = state.open.get(key)
        counts = state.counts
        if held is not None and held[0] is not None:  # TS §7.5: that id is open already
            return (EdgeState(state.inner, state.open,
                              counts._replace(duplicate=counts.duplicate + 1)),
                    (_record(event, self._in_force(state.inner, event.source), UNMATCHED,
                             None, DUPLICATE),))
        table = dict(state.open)
        if held is None and len(table) >= self.max_open:  # TS §7.6: no room for one more
            dropped_key = next((k for k, v in table.items() if v[0] is None), None)
            if dropped_key is None:  # every entry is an open edge: this one is refused
                return (EdgeState(state.inner, state.open,
                                  counts._replace(full=counts.full + 1)),
                        (_record(event, self._in_force(state.inner, event.source), UNMATCHED,
                                 None, FULL),))
            del table[dropped_key]  # the oldest dropped start edge's end will be "no_start"
            counts = counts._replace(forgotten=counts.forgotten + 1)
        inner, outputs = self.policy.step(state.inner, event)  # TS §7.2: late by its start
        emitted = next((o for o in outputs if o.__class__ is Event and o.kind == START), None)
        table.pop(key, None)  # a start edge dropped before, whose id comes back: reopened
        table[key] = (emitted, event)
        if emitted is not None:
            counts = counts._replace(opened=counts.opened + 1)
        if len(table) > counts.peak:
            counts = counts._replace(peak=len(table))
        return EdgeState(inner, table, counts), outputs

    def _end(self, state: EdgeState, event: Event) -> tuple[EdgeState, tuple]:
        # TS §7.3: an end edge is an insert at its end for the policy (late if it would end
        # the event before the CTI in force)
        at = event.end
        assert at is not None  # an end edge's end is an int (Event.end_edge)
        probe = Event(POINT, at, at + 1, None, event.source)
        inner, outputs = self.policy.step(state.inner, probe)
        late = next((o for o in outputs if o.__class__ is LateRecord), None)
        ctis = tuple(o for o in outputs if o.__class__ is Event and o.kind == CTI)
        key = (event.source, event.id)
        held = state.open.get(key)
        counts = state.counts
        if held is None:  # TS §7.5: nothing open to close
            counts = counts._replace(no_start=counts.no_start + 1)
            return (EdgeState(inner, state.open, counts),
                    ctis + (_record(event, self._in_force(inner, event.source), UNMATCHED,
                                    None, NO_START),))
        table = dict(state.open)
        del table[key]
        emitted_start = held[0]
        if emitted_start is None:  # TS §7.4: its start edge was dropped; so is it
            counts = counts._replace(dropped=counts.dropped + 1)
            return (EdgeState(inner, table, counts),
                    ctis + (_record(event, self._in_force(inner, event.source), DROPPED, None,
                                    START_DROPPED),))
        start = emitted_start.start
        end = max(at, start + 1)
        if late is not None and end < late.cti:
            end = late.cti  # TS §7.3: moved to the CTI, never dropped alone
        # the end edge goes out with the start its start edge went out with (TS §7.3)
        closed = Event(END, start, end, event.payload, event.source, event.id)
        counts = counts._replace(closed=counts.closed + 1)
        if end == at:
            return EdgeState(inner, table, counts), ctis + (closed,)
        counts = counts._replace(moved=counts.moved + 1)
        cti = late.cti if late is not None else self._in_force(inner, event.source)
        record = (_record(event, cti, ADJUSTED, closed, END_EDGE),)
        return EdgeState(inner, table, counts), ctis + (closed,) + record

    def join(self, state: EdgeState, source: str) -> tuple[EdgeState, tuple]:
        inner, outputs = self.policy.join(state.inner, source)
        return EdgeState(inner, state.open, state.counts), outputs

    def leave(self, state: EdgeState, source: str) -> tuple[EdgeState, tuple]:
        inner, outputs = self.policy.leave(state.inner, source)
        return EdgeState(inner, state.open, state.counts), outputs

    def finish(self, state: EdgeState) -> tuple[EdgeState, tuple]:
        """The end of the stream: every start edge still open is reported ``"not_closed"``
        (TS §7.5; it was emitted, and stays so) and forgotten; dropped ones are forgotten."""
        if not state.open:
            return state, ()
        records = tuple(_record(emitted, self._in_force(state.inner, emitted.source),
                                UNMATCHED, None, NOT_CLOSED)
                        for emitted, _ in state.open.values() if emitted is not None)
        counts = state.counts._replace(not_closed=state.counts.not_closed + len(records))
        return EdgeState(state.inner, {}, counts), records

    # -- many arrivals --------------------------------------------------------------------
    def step_many(self, state: EdgeState, events: Sequence[Event],
                  ) -> tuple[EdgeState, list[Event], list[LateEntry], list[Event]]:
        """``step`` over consecutive arrivals (``engine.policy.step_many``): the runs between
        edges go to the policy's own ``step_many``."""
        emitted: list[Event] = []
        late: list[LateEntry] = []
        ctis: list[Event] = []
        run: list[Event] = []

        def flush(state: EdgeState) -> EdgeState:
            if not run:
                return state
            inner, e, lt, c = step_many(self.policy, state.inner, run)
            emitted.extend(e)
            late.extend(lt)
            ctis.extend(c)
            run.clear()
            return EdgeState(inner, state.open, state.counts)

        for event in events:
            kind = event.kind
            if kind != START and kind != END:
                run.append(event)
                continue
            state = flush(state)
            state, outputs = self.step(state, event)
            for out in outputs:
                if out.__class__ is LateRecord:
                    late.append(LateEntry(out.input, out.event, out.cti, out.action,
                                          out.adjusted, out.reason))
                else:
                    emitted.append(out)
        return flush(state), emitted, late, ctis

    def run_columns(self, is_cti: np.ndarray, start: np.ndarray, end: np.ndarray,
                    state: EdgeState | None = None) -> tuple | None:
        """The policy's columnar form over rows without edges (the caller hands rows with
        edges to ``step``), ``None`` when it has none."""
        run = getattr(self.policy, "run_columns", None)
        if run is None:
            return None
        if state is None:
            state = self.initial()
        result = run(is_cti, start, end, state.inner)
        if result is None:
            return None
        action, cti, inner = result
        return action, cti, EdgeState(inner, state.open, state.counts)

    def ahead(self, state: EdgeState) -> frozenset:
        flag = getattr(self.policy, "ahead", None)
        return frozenset() if flag is None else flag(state.inner)

    def stats(self, state: EdgeState) -> EdgeStats:
        c = state.counts
        return EdgeStats(len(state.open), c.peak, self.max_open, c.opened, c.closed, c.moved,
                         c.dropped, c.no_start, c.duplicate, c.full, c.forgotten, c.not_closed)


class _SourceEdgePolicy(EdgePolicy):
    """``EdgePolicy`` over a rule with a columnar form that reads the inputs (the robust
    rules' ``run_source_columns``): a class of its own so that the method is there exactly
    when the policy has it (replay looks it up to choose its columnar path)."""

    __slots__ = ()

    def run_source_columns(self, is_cti: np.ndarray, change: np.ndarray, source: np.ndarray,
                           start: np.ndarray, end: np.ndarray, names: Sequence[Any],
                           state: EdgeState | None = None) -> tuple[Any, Any, Any, EdgeState]:
        """The policy's ``run_source_columns`` over rows without edges (the caller hands rows
        with edges to ``step``), the open edges and counts carried through unchanged."""
        if state is None:
            state = self.initial()
        action, cti, why, inner = self.policy.run_source_columns(  # type: ignore[attr-defined]
            is_cti, change, source, start, end, names, state.inner)
        if inner is state.inner:
            return action, cti, why, state
        return action, cti, why, EdgeState(inner, state.open, state.counts)


def with_edges(policy: Policy, *, max_open: int = DEFAULT_MAX_OPEN) -> EdgePolicy:
    """``policy`` deciding edge events too (TS §7); ``max_open`` bounds the open edges.
    A policy that already decides edges is returned as it is."""
    if isinstance(policy, EdgePolicy):
        return policy
    if not isinstance(max_open, int) or isinstance(max_open, bool) or max_open <= 0:
        raise InputError(f"with_edges: max_open={max_open!r}; expected an int > 0")
    if callable(getattr(policy, "run_source_columns", None)):  # the robust rules
        return _SourceEdgePolicy(policy, max_open)
    return EdgePolicy(policy, max_open)


def edge_stats(policy: Any, state: Any) -> EdgeStats | None:
    """``policy.stats(state)`` for a policy that decides edges, else ``None``."""
    return policy.stats(state) if isinstance(policy, EdgePolicy) else None
