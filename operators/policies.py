"""CTI policies as pure scan steps: ``goldilocks``, ``max_policy``, ``min_policy`` (and, from
``operators.robust``, ``quantile_policy`` and ``goldilocks(…, max_ahead=…)``).

A policy turns the arrivals of many inputs (``event.source`` names the input) into one stream
with one monotone clock. It is a pure step over a small frozen state (design.md §4.1, §4.2)::

    state = policy.initial()
    state, outputs = policy.step(state, event)    # outputs: Event (emit) | LateRecord (late)
    state, outputs = policy.join(state, "A")      # an input joined the merge
    state, outputs = policy.leave(state, "A")     # an input left the merge

Marble timeline of the worked example of the StreamInsight CTI synchronizing subject
(``goldilocks("5m")``, times in minutes, ``|t`` a CTI)::

    A:    5 ----- |5 ------- 7 -- |8 ---------
    B:    -- 0 ------ |0 ----------------- 1
    out:  5  0    |0         7    |3        (1 is late: LateRecord, cti=3, dropped)

Time per ``step``: O(1) for ``goldilocks``/``max_policy`` (an on-time insert costs two
comparisons and returns the state it was given); O(k) for a CTI, join or leave under
``min_policy`` with ``k`` live inputs, O(1) for its inserts. Memory: O(1) state for
``goldilocks``/``max_policy``, O(k) for ``min_policy``.

>>> p = goldilocks("5m")
>>> s = p.initial()
>>> s, out = p.step(s, Event.cti("2026-11-22T08:08:00Z", source="A"))
>>> out
(Event.cti('2026-11-22T08:03:00Z'),)
>>> s, out = p.step(s, Event.point("2026-11-22T08:01:00Z", source="B"))
>>> out[0].action, format_instant(out[0].cti)
('dropped', '2026-11-22T08:03:00Z')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable, overload

import numpy as np

from engine.errors import InputError
from engine.event import ADJUSTED, CTI, DROPPED, Event, LateRecord
from engine.policy import LateEntry, Policy
from engine.times import (MIN_TIME, DurationLike, Nanoseconds, format_duration_ns, format_instant,
                          to_duration_ns)
from operators.columnar import goldilocks_columns
from operators.lateness import (ON_LATE, PolicyBase, check_on_late as _check_on_late,
                                late_outputs as _late)
from operators.robust import GuardedPolicy, guarded_goldilocks, quantile_policy

__all__ = [
    "goldilocks",
    "max_policy",
    "min_policy",
    "quantile_policy",
    "GoldilocksPolicy",
    "MinPolicy",
    "HighState",
    "MinState",
    "ON_LATE",
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "policy_names",
    "resolve_policy",
]

_NONE: tuple = ()  # the shared empty output


# -- goldilocks / max --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HighState:
    """State of ``goldilocks``/``max_policy``: ``high``, the last emitted CTI (``None`` before)."""

    high: int | None = None


_INITIAL_HIGH = HighState()


class GoldilocksPolicy(PolicyBase):
    """The delayed-CTI policy (the StreamInsight CTI synchronizing subject, "Round 2";
    design.md §4.2). Build it with ``goldilocks``.

    A CTI at ``t`` from any input becomes ``d = max(t - delay, MIN_TIME)`` (TS §2.2) and is
    emitted only if it exceeds every CTI emitted so far (TS §2.1). An insert starting before
    the last emitted CTI is late (TS §2.4) and handled by ``on_late``. Inputs joining and
    leaving change nothing. A CTI at ``MAX_TIME`` is delayed like any other: one input closing
    its time does not close everyone's.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return (f"{self.name}(delay={format_duration_ns(self.delay)!r}, "
                f"on_late={self.on_late!r})")

    def initial(self) -> HighState:
        return _INITIAL_HIGH

    def step(self, state: HighState, event: Event) -> tuple[HighState, tuple]:
        """One arrival. O(1); an on-time insert returns ``state`` itself and ``(event,)``."""
        high = state.high
        if event.kind != CTI:
            if high is None or event.start >= high:  # TS §2.4: exactly at the CTI is on time
                return state, (event,)
            return state, _late(event, high, self._adjust)
        d = event.start - self.delay
        if d < MIN_TIME:
            d = MIN_TIME  # TS §2.2
        if high is None or d > high:  # TS §2.1: only a CTI that advances time is emitted
            return HighState(d), (Event(CTI, d, None, None, None),)
        return state, _NONE

    #: ``step`` keeps the promise ``engine.policy.on_time_at_high`` asks about: an insert
    #: starting at or after ``state.high`` (any, while it is ``None``) gives
    #: ``(state, (event,))``
    on_time_at_high = step

    def step_many(self, state: HighState, events: Sequence[Event],
                  ) -> tuple[HighState, list[Event], list[LateEntry], list[Event]]:
        """``step`` over consecutive arrivals, in one loop: ``(state, emitted, late, ctis)``.

        ``emitted`` is every ``Event`` the steps would output, in order; ``late`` the
        ``LateEntry`` of every ``LateRecord`` they would output, in order: its fields,
        ``LateRecord(*entry)`` being the record (an entry costs a third of an object, and a
        record is only built for an entry that is kept); ``ctis`` the arrivals that were
        CTIs, in order (for the caller's per-input accounting: noting them here costs
        nothing, finding them again would cost a pass). The same decisions as ``step`` event
        by event (a property test holds them equal); the union's batch path runs it once per
        batch of arrivals.
        """
        delay = self.delay
        adjust = self._adjust
        cti, dropped = CTI, DROPPED  # locals: this loop is the hot path
        entry, new = LateEntry, tuple.__new__  # an entry built without LateEntry's Python __new__
        emitted: list[Event] = []
        emit = emitted.append
        late: list[LateEntry] = []
        keep = late.append
        ctis: list[Event] = []
        arrivals = iter(events)
        high = state.high
        if high is None:  # until the first CTI every insert is on time
            for e in arrivals:
                if e.kind == cti:
                    ctis.append(e)
                    d = e.start - delay
                    high = d if d > MIN_TIME else MIN_TIME  # TS §2.2
                    emit(Event(cti, high, None, None, None))
                    break
                emit(e)
            else:
                return state, emitted, late, ctis
        for e in arrivals:
            if e.kind != cti:
                if e.start >= high:  # TS §2.4
                    emit(e)
                elif adjust and e.end > high:  # type: ignore[operator]  # TS §3.2
                    clipped = Event(e.kind, high, e.end, e.payload, e.source, e.id)
                    emit(clipped)
                    keep(new(entry, (e.source, e, high, ADJUSTED, clipped)))
                else:  # TS §3.1
                    keep(new(entry, (e.source, e, high, dropped, None)))
            else:
                ctis.append(e)
                d = e.start - delay
                if d > high:  # TS §2.1; high >= MIN_TIME, so d needs no clamping here
                    high = d
                    emit(Event(cti, d, None, None, None))
        return (state if high == state.high else HighState(high)), emitted, late, ctis

    def join(self, state: HighState, source: str) -> tuple[HighState, tuple]:
        return state, _NONE

    def leave(self, state: HighState, source: str) -> tuple[HighState, tuple]:
        return state, _NONE

    def run_columns(self, is_cti: Any, start: Any, end: Any, state: HighState | None = None,
                    ) -> tuple[np.ndarray, np.ndarray, HighState]:
        """The same policy over columns in arrival order (``operators.columnar``).

        ``state`` is the state ``step`` uses (``None``: ``initial()``); the returned state is
        the one ``step`` would hold after these rows, so consecutive chunks of a log, each run
        with the state the previous one returned, decide exactly as one run over the whole log
        (and as ``step`` row by row). It is ``state`` itself when no CTI advanced time.
        """
        if state is None:
            state = _INITIAL_HIGH
        action, cti, high = goldilocks_columns(is_cti, start, end, Nanoseconds(self.delay),
                                               self.on_late, state.high)
        return action, cti, (state if high == state.high else HighState(high))


@overload
def goldilocks(delay: DurationLike, on_late: str = "drop", *,
               max_ahead: None = None) -> GoldilocksPolicy: ...


@overload
def goldilocks(delay: DurationLike, on_late: str = "drop", *,
               max_ahead: DurationLike) -> GuardedPolicy: ...


def goldilocks(delay: DurationLike, on_late: str = "drop", *,
               max_ahead: DurationLike | None = None) -> GoldilocksPolicy | GuardedPolicy:
    """The Goldilocks policy: CTIs delayed by ``delay``, late inserts dropped or adjusted.

    ``delay``: a duration (``engine.times.DurationLike``): ``"5m"``, ``"PT5M"``,
    ``"5 minutes"``, a ``timedelta``, a number of seconds (``300``), ``Nanoseconds(ns)``;
    must be >= 0.
    ``on_late``: ``"drop"`` (TS §3.1) or ``"adjust"`` (TS §3.2).
    ``max_ahead``: a duration: an input's CTI counts for at most the other live inputs'
    median plus this much, until they corroborate it (TS §2.6, ``operators.robust``).
    """
    if max_ahead is not None:
        return guarded_goldilocks(delay, on_late, max_ahead)
    ns = to_duration_ns(delay, what="goldilocks: delay")
    return GoldilocksPolicy("goldilocks", ns, _check_on_late("goldilocks", on_late))


def max_policy(on_late: str = "drop", *, delay: DurationLike = 0) -> GoldilocksPolicy:
    """The loose policy: every CTI that advances time passes undelayed (goldilocks, delay 0).

    ``delay`` is accepted only as 0, so that ``resolve_policy("max", delay=0)`` works.
    """
    if to_duration_ns(delay, what="max policy: delay") != 0:
        raise InputError(
            f"max policy: delay={delay!r}; expected 0 (the max policy has no delay; "
            "use goldilocks(delay) for a delayed CTI)"
        )
    return GoldilocksPolicy("max", 0, _check_on_late("max policy", on_late))


# -- min ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MinState:
    """State of ``min_policy``.

    ``high``: the last emitted CTI (``MIN_TIME`` before the first: a CTI at ``MIN_TIME``
    promises nothing, so none is emitted). ``ctis``: ``(input, latest CTI)`` per live input in
    join order, ``MIN_TIME`` for an input without a CTI yet. ``live``: the same names, for O(1)
    membership.
    """

    high: int = MIN_TIME
    ctis: tuple[tuple[Any, int], ...] = ()
    live: frozenset = frozenset()


_INITIAL_MIN = MinState()


class MinPolicy:
    """The conservative policy: the output CTI is the minimum over live inputs' latest CTIs.

    An input is live from ``join`` or from its first event of any kind until ``leave``; until
    its first CTI it counts as ``MIN_TIME`` and holds time back. An input's latest CTI is the
    largest it has sent (a smaller CTI does not retract an earlier promise). A CTI is emitted
    whenever the minimum rises above the last emitted one (TS §2.1); ``leave`` may release one.
    With no live input there is no minimum and nothing is emitted. An input that leaves and
    comes back starts afresh, at ``MIN_TIME``.
    """

    __slots__ = ("name", "delay", "on_late", "_adjust")

    name: str
    delay: int
    on_late: str

    def __init__(self, on_late: str) -> None:
        self.name = "min"
        self.delay = 0
        self.on_late = on_late
        self._adjust = on_late == "adjust"

    def __repr__(self) -> str:
        return f"min(on_late={self.on_late!r})"

    def initial(self) -> MinState:
        return _INITIAL_MIN

    def step(self, state: MinState, event: Event) -> tuple[MinState, tuple]:
        """One arrival: O(1) for an insert from a live input, O(k) otherwise."""
        source = event.source
        if event.kind != CTI:
            if source not in state.live:
                state = MinState(state.high, state.ctis + ((source, MIN_TIME),),
                                 state.live | {source})
            high = state.high
            if event.start >= high:  # TS §2.4
                return state, (event,)
            return state, _late(event, high, self._adjust)
        t = event.start
        if source not in state.live:
            ctis = state.ctis + ((source, t),)
            return self._advance(state.high, ctis, state.live | {source})
        changed = False
        updated: list[tuple[str, int]] = []
        for name, latest in state.ctis:
            if name == source and t > latest:
                latest = t
                changed = True
            updated.append((name, latest))
        if not changed:
            return state, _NONE
        return self._advance(state.high, tuple(updated), state.live)

    def join(self, state: MinState, source: str) -> tuple[MinState, tuple]:
        """``source`` joins at ``MIN_TIME``: it holds time back until its first CTI."""
        if source in state.live:
            return state, _NONE
        return MinState(state.high, state.ctis + ((source, MIN_TIME),),
                        state.live | {source}), _NONE

    def leave(self, state: MinState, source: str) -> tuple[MinState, tuple]:
        """``source`` leaves; the minimum over the rest may rise and release a CTI."""
        if source not in state.live:
            return state, _NONE
        ctis = tuple(pair for pair in state.ctis if pair[0] != source)
        return self._advance(state.high, ctis, state.live - {source})

    @staticmethod
    def _advance(high: int, ctis: tuple, live: frozenset) -> tuple[MinState, tuple]:
        if ctis:
            low = min(latest for _, latest in ctis)
            if low > high:  # TS §2.1
                return MinState(low, ctis, live), (Event(CTI, low, None, None, None),)
        return MinState(high, ctis, live), _NONE

    def run_columns(self, is_cti: Any, start: Any, end: Any, state: Any = None) -> None:
        """``None``: the minimum depends on which input sent each row, so no columnar form."""
        return None


def min_policy(on_late: str = "drop", *, delay: DurationLike = 0) -> MinPolicy:
    """The conservative policy (design.md §4.3). ``delay`` is accepted only as 0."""
    if to_duration_ns(delay, what="min policy: delay") != 0:
        raise InputError(
            f"min policy: delay={delay!r}; expected 0 (the min policy has no delay)"
        )
    return MinPolicy(_check_on_late("min policy", on_late))


# -- policies by name ------------------------------------------------------------------

#: the built-in policies by the name the command line and Spark use
BUILTIN: dict[str, Callable[..., Policy]] = {
    "goldilocks": goldilocks,
    "min": min_policy,
    "max": max_policy,
    "quantile": quantile_policy,
}

#: the entry-point group through which other packages add policies (never the built-ins)
ENTRY_POINT_GROUP = "goldilocks.policies"


def _installed() -> dict[str, Any]:
    """Policies that other packages declare in ``ENTRY_POINT_GROUP`` (loaded on use)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)
            if ep.name not in BUILTIN}


def policy_names() -> list[str]:
    """The built-in policies' names, then those of installed third-party policies.

    >>> policy_names()[:3]
    ['goldilocks', 'max', 'min']
    """
    return sorted(BUILTIN) + sorted(_installed())


def resolve_policy(name: str, **options: Any) -> Policy:
    """Build the policy named ``name`` with ``options`` (``delay``, ``on_late``; ``max_ahead``
    for goldilocks, TS §2.6): a built-in one, or one a third-party package declares in the
    ``goldilocks.policies`` group. ``"quantile:K"`` is the quantile rule with k = K.

    >>> resolve_policy("goldilocks", delay="5m").delay
    300000000000
    >>> resolve_policy("quantile:3").k
    3
    """
    name, colon, k = name.partition(":")
    if colon:
        if name != "quantile" or not k.strip().isdigit() or int(k) < 1:
            raise InputError(f"policy {name + colon + k!r}: expected quantile:K with K an "
                             "integer >= 1 (e.g. quantile:3); other policies take no ':'")
        options["k"] = int(k)
    if options.get("max_ahead") is not None and name != "goldilocks":
        raise InputError(f"max_ahead={options['max_ahead']!r} goes with the goldilocks "
                         f"policy (TS §2.6), not {name!r}")
    if options.get("max_ahead", 0) is None:
        del options["max_ahead"]
    factory = BUILTIN.get(name)
    if factory is None:
        found = _installed().get(name)
        if found is None:
            raise ValueError(f"unknown policy {name!r}; expected one of "
                             f"{', '.join(policy_names())}")
        factory = found.load()
    return factory(**options)
