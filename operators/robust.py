"""Combine rules that one runaway clock cannot drag: ``quantile_policy`` and
``goldilocks(delay, max_ahead=…)`` (TS §2.5, §2.6).

Both are pure scan steps over a small frozen state, like the policies in
``operators.policies``: ``high``, the last emitted CTI, and ``ctis``, ``(input, latest CTI)``
for every live input in the order they became live (``MIN_TIME`` until an input's first
CTI). An input is live from ``join`` or its first event until ``leave``. Their decisions
depend on which input sent each CTI, so ``run_columns`` (inserts and CTIs without their
input) returns ``None``; their columnar form is ``run_source_columns``, over the rows with
their input and the joins and leaves (``operators.robust_columns``), which replay's columnar
path runs (the Spark stage runs the steps, one task per clock group).

- ``quantile_policy(k, delay)``: the CTI follows the k-th most advanced live input (the least
  advanced when fewer than k are live), delayed by ``delay``: k − 1 inputs whose clocks run
  ahead cannot move time at all.
- ``goldilocks(delay, max_ahead=m)``: an input's latest CTI counts for at most the median of
  the other live inputs' latest CTIs plus ``m``; beyond that it is not trusted until the
  others corroborate it by catching up. The CTI is the largest trusted value, delayed.

Late records say which rule set the CTI they violated (``LateRecord.reason``): ``"quantile"``,
or ``"max_ahead"`` when the CTI in force was held back by the guard (``"goldilocks"`` when it
was not). ``ahead(state)``: the inputs flagged ahead now, which the union shows in
``stats()``.

Time per CTI, join or leave: O(k log k) with k live inputs; per insert O(1) once its input is
live. Memory: O(k).

>>> p = quantile_policy(2, 0)
>>> s, _ = p.step(p.initial(), Event.point(5, source="A"))
>>> s, out = p.step(s, Event.cti(3_600, source="runaway"))
>>> out
()
>>> s, out = p.step(s, Event.cti(10, source="A"))
>>> [(e.kind, e.start) for e in out]
[('cti', 10)]
>>> sorted(p.ahead(s))
['runaway']
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median_low
from typing import Any, Sequence

from engine.errors import InputError
from engine.event import CTI, Event
from engine.times import MIN_TIME, DurationLike, format_duration_ns, to_duration_ns
from operators.lateness import PolicyBase, check_on_late as _check_on_late, late_outputs as _late
from operators.robust_columns import GOLDILOCKS, MAX_AHEAD, QUANTILE, live_columns

__all__ = ["quantile_policy", "guarded_goldilocks", "QuantilePolicy", "GuardedPolicy",
           "LiveState", "QUANTILE", "MAX_AHEAD", "GOLDILOCKS"]


_NONE: tuple = ()


@dataclass(frozen=True, slots=True)
class LiveState:
    """``high``: the last emitted CTI (``None`` before); ``ctis``: ``(input, latest CTI)``
    per live input (``MIN_TIME`` before its first); ``reason``: the rule behind ``high``."""

    high: int | None = None
    ctis: tuple[tuple[Any, int], ...] = ()
    reason: str | None = None


_INITIAL = LiveState()


def _with(ctis: tuple[tuple[Any, int], ...], source: Any, t: int | None
          ) -> tuple[tuple[Any, int], ...] | None:
    """``ctis`` with ``source`` live and its latest CTI raised to ``t`` (``None``: made live
    only); ``None`` if nothing changed."""
    for i, (name, latest) in enumerate(ctis):
        if name == source:
            if t is None or t <= latest:
                return None
            return ctis[:i] + ((name, t),) + ctis[i + 1:]
    return ctis + ((source, MIN_TIME if t is None else t),)


class _LivePolicy(PolicyBase):
    """What both rules share: liveness, lateness, the CTI emitted when the rule's value rises."""

    __slots__ = ()

    def initial(self) -> LiveState:
        return _INITIAL

    def value(self, ctis: tuple[tuple[Any, int], ...]) -> tuple[int | None, str]:
        """The rule: the time the CTI follows (``None``: none yet), and the reason."""
        raise NotImplementedError

    def ahead(self, state: LiveState) -> frozenset:
        """The inputs flagged ahead in ``state``."""
        raise NotImplementedError

    def step(self, state: LiveState, event: Event) -> tuple[LiveState, tuple]:
        source = event.source
        if event.kind != CTI:
            ctis = _with(state.ctis, source, None)
            if ctis is not None:
                state = LiveState(state.high, ctis, state.reason)
            high = state.high
            if high is None or event.start >= high:  # TS §2.4
                return state, (event,)
            outputs = _late(event, high, self._adjust)
            outputs[-1].reason = state.reason  # which rule set the CTI it violated
            return state, outputs
        ctis = _with(state.ctis, source, event.start)
        if ctis is None:
            return state, _NONE
        return self._advance(state, ctis)

    def join(self, state: LiveState, source: str) -> tuple[LiveState, tuple]:
        ctis = _with(state.ctis, source, None)
        if ctis is None:
            return state, _NONE
        return self._advance(state, ctis)

    def leave(self, state: LiveState, source: str) -> tuple[LiveState, tuple]:
        ctis = tuple(pair for pair in state.ctis if pair[0] != source)
        if len(ctis) == len(state.ctis):
            return state, _NONE
        return self._advance(state, ctis)

    def _advance(self, state: LiveState, ctis: tuple[tuple[Any, int], ...]
                 ) -> tuple[LiveState, tuple]:
        value, reason = self.value(ctis)
        high = state.high
        if value is not None:
            d = value - self.delay
            if d < MIN_TIME:
                d = MIN_TIME  # TS §2.2
            # TS §2.1; a CTI at MIN_TIME promises nothing and is not emitted (as under min)
            if d > MIN_TIME and (high is None or d > high):
                return LiveState(d, ctis, reason), (Event(CTI, d, None, None, None),)
        return LiveState(high, ctis, state.reason), _NONE

    def run_columns(self, is_cti: Any, start: Any, end: Any, state: Any = None) -> None:
        """``None``: the rule depends on which input sent each CTI, which these columns do
        not say; ``run_source_columns`` is its columnar form."""
        return None

    def _rule(self) -> tuple[str, int]:
        raise NotImplementedError

    def run_source_columns(self, is_cti: Any, change: Any, source: Any, start: Any, end: Any,
                           names: Sequence[Any], state: LiveState | None = None,
                           ) -> tuple[Any, Any, Any, LiveState]:
        """The rule over columns of consecutive arrivals, joins and leaves included
        (``operators.robust_columns``): ``(action, cti, reason, state)``, the decisions of
        ``step``/``join``/``leave`` row by row; ``reason`` is a code per row into
        ``robust_columns.REASONS`` (a late row's ``LateRecord.reason``). ``state``:
        ``step``'s (``None``: ``initial()``); the returned one is what ``step`` would hold
        after the rows, so chunks run one after another decide as one run."""
        if state is None:
            state = _INITIAL
        rule, parameter = self._rule()
        action, cti, why, high, ctis, reason = live_columns(
            rule, parameter, self.delay, self._adjust, is_cti, change, source, start, end,
            names, state.high, state.ctis, state.reason)
        if high == state.high and ctis == state.ctis and reason == state.reason:
            return action, cti, why, state
        return action, cti, why, LiveState(high, ctis, reason)


class QuantilePolicy(_LivePolicy):
    """The CTI follows the k-th most advanced live input (TS §2.5); see the module."""

    __slots__ = ("k",)

    def __init__(self, k: int, delay: int, on_late: str) -> None:
        super().__init__("quantile", delay, on_late)
        self.k = k

    def __repr__(self) -> str:
        return (f"quantile(k={self.k}, delay={format_duration_ns(self.delay)!r}, "
                f"on_late={self.on_late!r})")

    def _rule(self) -> tuple[str, int]:
        return "quantile", self.k

    def value(self, ctis: tuple[tuple[Any, int], ...]) -> tuple[int | None, str]:
        if not ctis:
            return None, QUANTILE
        latest = sorted((t for _, t in ctis), reverse=True)
        return latest[min(self.k, len(latest)) - 1], QUANTILE

    def ahead(self, state: LiveState) -> frozenset:
        """Inputs whose latest CTI, delayed, is beyond the k-th: those the rule keeps from
        dragging time."""
        value, _ = self.value(state.ctis)
        if value is None:
            return frozenset()
        return frozenset(name for name, t in state.ctis if t - self.delay > value)


class GuardedPolicy(_LivePolicy):
    """Goldilocks whose inputs count for at most the others' median plus ``max_ahead``
    (TS §2.6); see the module."""

    __slots__ = ("max_ahead",)

    def __init__(self, delay: int, on_late: str, max_ahead: int) -> None:
        super().__init__("goldilocks", delay, on_late)
        self.max_ahead = max_ahead

    def __repr__(self) -> str:
        return (f"goldilocks(delay={format_duration_ns(self.delay)!r}, "
                f"on_late={self.on_late!r}, max_ahead={format_duration_ns(self.max_ahead)!r})")

    def _rule(self) -> tuple[str, int]:
        return "guarded", self.max_ahead

    def _trusted(self, ctis: tuple[tuple[Any, int], ...]) -> list[tuple[Any, int, int]]:
        """``(input, latest, trusted)`` for every input that has sent a CTI."""
        sent = [(name, t) for name, t in ctis if t > MIN_TIME]
        out = []
        for name, t in sent:
            others = [u for other, u in sent if other != name]
            cap = median_low(others) + self.max_ahead if others else t
            out.append((name, t, t if t <= cap else cap))
        return out

    def value(self, ctis: tuple[tuple[Any, int], ...]) -> tuple[int | None, str]:
        trusted = self._trusted(ctis)
        if not trusted:
            return None, GOLDILOCKS
        best = max(row[2] for row in trusted)
        # the guard decided only if no input reaches ``best`` on its own word
        return best, (GOLDILOCKS if any(t == best for _, t, _ in trusted) else MAX_AHEAD)

    def ahead(self, state: LiveState) -> frozenset:
        """Inputs whose latest CTI is more than ``max_ahead`` beyond the others' median."""
        return frozenset(name for name, t, trusted in self._trusted(state.ctis) if t > trusted)


def quantile_policy(k: int = 2, delay: DurationLike = 0, on_late: str = "drop"
                    ) -> QuantilePolicy:
    """The CTI follows the k-th most advanced live input, delayed by ``delay`` (TS §2.5).

    ``k``: an int >= 1 (1 is goldilocks over live inputs; 2, the default, ignores one
    runaway clock: what ``--policy quantile`` runs).
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError(f"quantile policy: k={k!r}; expected an int >= 1")
    ns = to_duration_ns(delay, what="quantile policy: delay")
    return QuantilePolicy(k, ns, _check_on_late("quantile policy", on_late))


def guarded_goldilocks(delay: DurationLike, on_late: str, max_ahead: DurationLike
                       ) -> GuardedPolicy:
    """``goldilocks(delay, on_late, max_ahead=…)`` (TS §2.6)."""
    ns = to_duration_ns(max_ahead, what="goldilocks: max_ahead")
    if ns < 0:
        raise InputError(f"goldilocks: max_ahead={max_ahead!r}; expected a duration >= 0")
    return GuardedPolicy(to_duration_ns(delay, what="goldilocks: delay"),
                         _check_on_late("goldilocks", on_late), ns)
