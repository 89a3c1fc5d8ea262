"""Windows closed by CTIs: tumbling and hopping windows over event time, keyed or not.

A window ``[start, end)`` holds the inserts whose *start* falls in it; windows are aligned
on ``offset`` (the epoch by default): a tumbling window of ``size`` starts at every multiple
of ``size``, a hopping window of ``size`` at every multiple of ``hop``, so an insert belongs
to about ``size / hop`` of them. Each window folds its inserts with one or more folds —
``count``, ``sum``, ``mean``, ``min``, ``max`` of a payload field, or any user fold, a pure
step ``step(acc, value) -> acc`` like the policies — and its result is emitted exactly once,
when the clock passes its end (TS §6.1): a CTI at ``t >= end`` promises that no later insert
starts in it. An insert for a window already closed is late: it goes to the late side output
with the action ``"window_closed"`` (TS §6.2) and is added only to the windows it still finds
open (a hopping window of the same insert may still be open).

Marble timeline, tumbling windows of 10, ``count`` (``|t`` a CTI, ``W[s,e)=n`` a result)::

    in:   3  7  12 |10  15  4  |25            (4 arrives after CTI 10: W[0,10) is closed)
    out:          W[0,10)=2 |10    x  W[10,20)=2 |25

The clock: by default the input's own CTIs (any source), for a stream already given one
clock — a ``Union``'s output, ``cti_sync``. With ``clocks=policy`` each *key* runs its own
copy of the policy's state over its own arrivals (TS §6.3), so a device's windows close by
that device's time (Trill's partitioned streams, bytewax's per-key clocks); without a key,
``clocks=policy`` is one clock for the whole stream. Keys whose time falls more than
``idle_after`` behind the most advanced key are evicted (TS §6.4).

A result is a point event at ``end - 1`` (it falls in its own window, so results can be
windowed again) whose payload is a ``WindowResult``; it is emitted before the CTI that closed
it. Results closed by one CTI come out by ``(end, key)``. Where there is one clock (no
``clocks``, or no key) the advancing CTIs are passed on after the results; per-key clocks
have no single time, so that output carries no CTIs.

Memory: O(open windows), bounded by ``max_open`` (a stream that would hold more fails with an
``InputError`` that says so), plus O(keys) for per-key clocks, bounded by ``max_keys`` (the
longest-idle key is evicted to make room). Time: O(log w) per insert and window, O(log w)
per window closed.

>>> w = Windows(tumbling_spec("10ns"), (parse_fold("count"),))
>>> [w.step(e) for e in (Event.point(3), Event.point(7))]
[(), ()]
>>> out = w.step(Event.cti(10))
>>> (r := out[0].payload).start, r.end, r.count, r.values, out[1].start
(0, 10, 2, {'count': 2}, 10)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sortedcontainers import SortedDict, SortedList

from engine.codes import Action
from engine.errors import InputError
from engine.event import CTI, END, POINT, Event, LateRecord
from engine.policy import Policy
from engine.times import (MAX_TIME, DurationLike, format_duration_ns, format_instant,
                          readable_repr, to_duration_ns)

from operators.checkpoint import (CheckpointError, check_policy, decode_state,
                                  describe_policy, encode_state)
from operators.late import LateOutput
from operators.temporal import TemporalOperator, split_late

__all__ = [
    "WINDOW_CLOSED",
    "FOLD_KINDS",
    "WindowSpec",
    "Fold",
    "fold",
    "parse_fold",
    "number",
    "WindowResult",
    "WindowStats",
    "Windows",
    "WindowOperator",
    "tumbling",
    "hopping",
    "tumbling_spec",
    "hopping_spec",
]

#: the late action of an insert that arrived for a window already closed (TS §6.2)
WINDOW_CLOSED = Action.WINDOW_CLOSED.text

#: the built-in folds, by the name ``parse_fold`` and the command line take
FOLD_KINDS = ("count", "sum", "mean", "min", "max")

_NONE: tuple = ()
_MISSING = object()


# -- where an insert falls --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class WindowSpec:
    """Windows ``[start, start + size)`` starting at ``offset + k * hop`` for every int ``k``
    (tumbling: ``hop == size``). Times are int ns (TS §1.1)."""

    size: int
    hop: int
    offset: int = 0

    def __post_init__(self) -> None:
        if self.size <= 0 or self.hop <= 0:
            raise InputError(f"windows: size={format_duration_ns(self.size)}, "
                             f"hop={format_duration_ns(self.hop)}; expected both > 0")
        if self.hop > self.size:
            raise InputError(f"windows: hop {format_duration_ns(self.hop)} is longer than the "
                             f"size {format_duration_ns(self.size)}; expected hop <= size "
                             "(gaps would lose inserts)")

    @property
    def per_insert(self) -> int:
        """The most windows one insert can fall in: ``ceil(size / hop)``."""
        return -(-self.size // self.hop)

    def starts(self, t: int) -> list[int]:
        """The starts of the windows holding an insert that starts at ``t``, ascending."""
        if t > MAX_TIME - self.size:
            raise InputError(f"windows: an insert at {format_instant(t)} would open a window "
                             "ending after the latest instant (MAX_TIME); expected earlier "
                             "times")
        last = t - (t - self.offset) % self.hop
        first = last - (self.per_insert - 1) * self.hop
        if first + self.size <= t:
            first += self.hop
        return list(range(first, last + 1, self.hop))


def tumbling_spec(size: DurationLike, *, offset: DurationLike = 0) -> WindowSpec:
    """Tumbling windows of ``size`` (a duration, ``engine.times.DurationLike``: ``"1m"``,
    ``timedelta``, seconds, ``Nanoseconds``)."""
    ns = to_duration_ns(size, what="windows: size")
    return WindowSpec(ns, ns, to_duration_ns(offset, what="windows: offset"))


def hopping_spec(size: DurationLike, hop: DurationLike, *, offset: DurationLike = 0
                 ) -> WindowSpec:
    """Hopping windows of ``size``, one starting every ``hop``."""
    return WindowSpec(to_duration_ns(size, what="windows: size"),
                      to_duration_ns(hop, what="windows: hop"),
                      to_duration_ns(offset, what="windows: offset"))


# -- folds ------------------------------------------------------------------------------------

def number(payload: Any, field: str) -> Any:
    """The payload's ``field`` as a float, or ``_MISSING`` when absent or not a number.

    Every path reads values through this one function, so they fold the same floats (an int
    becomes its float; ``-0.0`` becomes ``0.0``, so that min/max and sums agree bit for bit).
    """
    if payload.__class__ is dict:
        v = payload.get(field, _MISSING)
        if v.__class__ is float or (v.__class__ is int):
            return float(v) + 0.0
    return _MISSING


class Fold:
    """One aggregate of a window: a pure step over an accumulator, like a policy (design.md §4).

    ``label`` names it in results; ``initial`` is the empty accumulator; ``step(acc, value)``
    returns the next one (never mutates ``acc``); ``result(acc)`` the value reported;
    ``value(event)`` what an insert contributes (``_MISSING`` to skip it). ``kind`` and
    ``field`` are set for the built-ins (``FOLD_KINDS``), which also run vectorised on a
    recorded log; a user fold (``kind`` None) runs element by element only.
    """

    __slots__ = ("label", "initial", "step", "result", "value", "kind", "field")

    def __init__(self, label: str, initial: Any, step: Callable[[Any, Any], Any],
                 result: Callable[[Any], Any] | None = None,
                 value: Callable[[Event], Any] | None = None, *, kind: str | None = None,
                 field: str | None = None) -> None:
        self.label = label
        self.initial = initial
        self.step = step
        self.result = result if result is not None else _identity
        self.value = value if value is not None else _payload
        self.kind = kind
        self.field = field

    def __repr__(self) -> str:
        return f"Fold({self.label!r})"


def _identity(acc: Any) -> Any:
    return acc


def _payload(event: Event) -> Any:
    return event.payload


def fold(label: str, initial: Any, step: Callable[[Any, Any], Any],
         result: Callable[[Any], Any] | None = None,
         value: Callable[[Event], Any] | None = None) -> Fold:
    """A user fold: ``step(acc, value) -> acc`` from ``initial`` over each insert's
    ``value(event)`` (default: its payload), reported as ``result(acc)`` under ``label``.

    >>> longest = fold("longest", 0, lambda acc, e: max(acc, e.end - e.start),
    ...                value=lambda e: e)
    >>> longest.step(longest.initial, Event.interval(0, 7))
    7
    """
    if not isinstance(label, str) or not label:
        raise InputError(f"fold: label={label!r}; expected a non-empty name")
    return Fold(label, initial, step, result, value)


def _count_step(acc: int, value: Any) -> int:
    return acc + 1


def _sum_step(acc: tuple[int, float], value: float) -> tuple[int, float]:
    return acc[0] + 1, acc[1] + value


def _min_step(acc: float | None, value: float) -> float:
    return value if acc is None or value < acc else acc


def _max_step(acc: float | None, value: float) -> float:
    return value if acc is None or value > acc else acc


def _sum_result(acc: tuple[int, float]) -> float | None:
    return acc[1] if acc[0] else None


def _mean_result(acc: tuple[int, float]) -> float | None:
    return acc[1] / acc[0] if acc[0] else None


def parse_fold(spec: str | Fold) -> Fold:
    """A built-in fold from ``"count"``, ``"count:FIELD"``, ``"sum:FIELD"``,
    ``"mean:FIELD"``, ``"min:FIELD"`` or ``"max:FIELD"`` (FIELD: a payload field, read as a
    float; inserts without it are skipped by that fold). A ``Fold`` is returned as is.

    Labels in results: ``count`` (every insert of the window), else ``KIND_FIELD``
    (``mean_celsius``). Empty: ``count`` 0; ``sum``/``mean``/``min``/``max`` ``None``.
    """
    if isinstance(spec, Fold):
        return spec
    if not isinstance(spec, str):
        raise InputError(f"aggregate {spec!r}: expected 'KIND:FIELD' or a Fold")
    kind, _, field = spec.partition(":")
    if kind not in FOLD_KINDS:
        raise InputError(f"aggregate {spec!r}: unknown kind {kind!r}; expected one of "
                         f"{', '.join(FOLD_KINDS)} (as KIND:FIELD, e.g. mean:temperature)")
    if not field:
        if kind != "count":
            raise InputError(f"aggregate {spec!r}: {kind} needs a payload field; expected "
                             f"{kind}:FIELD, e.g. {kind}:temperature")
        return Fold("count", 0, _count_step, None, _one, kind="count")

    def value(event: Event, field: str = field) -> Any:
        return number(event.payload, field)

    label = f"{kind}_{field}"
    if kind == "count":
        return Fold(label, 0, _count_step, None, value, kind=kind, field=field)
    if kind in ("sum", "mean"):
        return Fold(label, (0, 0.0), _sum_step, _sum_result if kind == "sum" else _mean_result,
                    value, kind=kind, field=field)
    return Fold(label, None, _min_step if kind == "min" else _max_step, None, value,
                kind=kind, field=field)


def _one(event: Event) -> int:
    return 1


# -- results and stats ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, repr=False)
class WindowResult:
    """A closed window: ``[start, end)`` (instants, int ns; the repr shows RFC 3339 text),
    its ``key`` (``None`` unkeyed), the inserts folded into it (``count``), and each fold's
    result by label (``values``)."""

    start: int
    end: int
    key: Any
    count: int
    values: dict[str, Any]

    def __repr__(self) -> str:
        return readable_repr(self, instants=("start", "end"))


@dataclass(frozen=True, slots=True)
class WindowStats:
    """A window operator's accounting (TS §6.1–§6.4).

    ``open``/``peak_open``/``max_open``: windows open now, at most, and the bound; ``keys``/
    ``max_keys``: keys holding a clock (per-key clocks) and that bound; ``inserts``: inserts
    folded into at least one window; ``late``: inserts that found a window closed;
    ``emitted``: results emitted; ``evicted``: idle keys evicted, ``closed_by_eviction``: the
    windows they still held, emitted at eviction.
    """

    open: int
    peak_open: int
    max_open: int
    keys: int
    max_keys: int
    inserts: int
    late: int
    emitted: int
    evicted: int
    closed_by_eviction: int


# -- the state of one subscription -------------------------------------------------------------

class _Group:
    """A key's clock (per-key clocks, or the one clock of ``clocks=policy`` without key)."""

    __slots__ = ("state", "clock", "seen", "windows")

    def __init__(self, state: Any, clock: int | None) -> None:
        self.state = state          # the policy's state for this key
        self.clock = clock          # the CTI in force for this key's windows
        self.seen = clock           # the latest time of this key (clock or insert start)
        self.windows: SortedDict = SortedDict()  # end -> accumulators, this key's open ones


class Windows:
    """The window state of one subscription: ``step(event) -> outputs`` (``Event`` results
    and CTIs, ``LateRecord`` for late inserts), ``stats()``, ``_check()``.

    ``key``: ``None`` (one window per interval), ``"source"`` (the event's input), or a
    function of the event returning the key. ``clocks``: ``None`` (the input's CTIs are the
    clock) or a ``Policy`` run per key (TS §6.3). ``idle_after``: with per-key clocks, a key
    whose latest time is more than this behind the most advanced key's clock is evicted.
    """

    def __init__(self, spec: WindowSpec, folds: Sequence[Fold], *, key: Any = None,
                 clocks: Policy | None = None, idle_after: DurationLike | None = None,
                 max_open: int = 100_000, max_keys: int = 100_000) -> None:
        if not folds:
            raise InputError("windows: no aggregate given; expected at least one "
                             "(e.g. 'count' or 'mean:temperature')")
        labels = [f.label for f in folds]
        if len(set(labels)) != len(labels):
            raise InputError(f"windows: aggregates {labels} repeat a label; expected each once")
        if any(f.label == "count" and (f.kind != "count" or f.field) for f in folds):
            raise InputError("windows: a fold labelled 'count' that is not the built-in count; "
                             "expected another label ('count' is every window's insert count)")
        if max_open <= 0 or max_keys <= 0:
            raise InputError(f"windows: max_open={max_open}, max_keys={max_keys}; expected "
                             "both > 0")
        if idle_after is not None and clocks is None:
            raise InputError("windows: idle_after needs per-key clocks (clocks=policy); with "
                             "the input's CTIs as the clock every window closes by them")
        self.spec = spec
        self.folds = tuple(folds)
        self.key = _key_function(key)
        self.clocks = clocks
        self.idle_after = (None if idle_after is None
                           else to_duration_ns(idle_after, what="windows: idle_after"))
        self.max_open = max_open
        self.max_keys = max_keys
        self._keyed = key is not None
        # one clock: the input's CTIs (clocks None); windows of every key in one table
        self._clock: int | None = None
        self._open: SortedDict = SortedDict()  # (end, key) -> accumulators
        # per-key clocks
        self._groups: dict[Any, _Group] = {}
        self._by_seen: SortedList = SortedList()  # (seen, order, key): idle keys first
        self._order: dict[Any, int] = {}
        self._made = 0
        self._fleet_time: int | None = None    # the most advanced key's clock
        self._floor: int | None = None         # a new or returning key's clock (TS §6.4)
        # accounting
        self._n_open = 0
        self._peak = 0
        self._inserts = 0
        self._late = 0
        self._emitted = 0
        self._evicted = 0
        self._closed_by_eviction = 0

    # ------------------------------------------------------------------ the step
    def step(self, event: Event) -> tuple:
        """One arrival; the results, CTIs and late records it causes, in order."""
        if event.kind == END:  # TS §7.8: an edge event counts once, by its start edge
            return _NONE
        if self.clocks is None:
            if event.kind == CTI:
                return self._advance_global(event.start)
            return self._insert(event, self._key_of(event), None)
        key = self._key_of(event)
        group = self._groups.get(key)
        out: tuple = _NONE
        if group is None:
            if len(self._groups) >= self.max_keys:  # TS §6.4: room for one more key
                out = tuple(self._evict(self._by_seen[0][2]))
            group = self._new_group(key)
        state, outs = self.clocks.step(group.state, event)
        group.state = state
        if event.kind != CTI:
            out = out + self._insert(event, key, group)
        for o in outs:
            if o.__class__ is Event and o.kind == CTI and (group.clock is None
                                                          or o.start > group.clock):
                out = out + self._advance_group(key, group, o.start)
        return out

    def _key_of(self, event: Event) -> Any:
        if not self._keyed:
            return None
        k = self.key(event)
        if not isinstance(k, str):
            raise InputError(f"windows: the key of {event!r} is {k!r}; expected a str "
                             "(keys are ordered and written as text)")
        return k

    def _insert(self, event: Event, key: Any, group: _Group | None) -> tuple:
        clock = self._clock if group is None else group.clock
        table = self._open if group is None else group.windows
        size = self.spec.size
        late = False
        added = False
        for ws in self.spec.starts(event.start):
            end = ws + size
            if clock is not None and end <= clock:  # TS §6.2: this window is closed
                late = True
                continue
            slot = (end, key) if group is None else end
            accs = table.get(slot)
            if accs is None:
                if self._n_open >= self.max_open:
                    raise InputError(
                        f"windows: {self.max_open} windows are open at once (max_open); "
                        "expected CTIs often enough to close them (raise max_open, or "
                        "generate CTIs with advance_time)")
                accs = table[slot] = [0] + [f.initial for f in self.folds]
                self._n_open += 1
                if self._n_open > self._peak:
                    self._peak = self._n_open
            accs[0] += 1
            for i, f in enumerate(self.folds, 1):
                v = f.value(event)
                if v is not _MISSING:
                    accs[i] = f.step(accs[i], v)
            added = True
        if added:
            self._inserts += 1
        if group is not None and (group.seen is None or event.start > group.seen):
            self._touch(key, group, event.start)
        if late:
            assert clock is not None  # a window is closed only by a clock
            self._late += 1
            return (LateRecord(event.source, event, clock, WINDOW_CLOSED),)  # TS §6.2, §3.3
        return _NONE

    def _result(self, end: int, key: Any, accs: list) -> Event:
        values = {f.label: f.result(a) for f, a in zip(self.folds, accs[1:])}
        self._emitted += 1
        self._n_open -= 1
        result = WindowResult(end - self.spec.size, end, key, accs[0], values)
        return Event(POINT, end - 1, end, result, key if isinstance(key, str) else None)

    def _advance_global(self, t: int) -> tuple:
        if self._clock is not None and t <= self._clock:
            return _NONE  # TS §2.1: only a CTI that advances time is passed on
        self._clock = t
        table = self._open
        out = []
        while table:
            (end, key), accs = table.peekitem(0)
            if end > t:
                break
            del table[(end, key)]
            out.append(self._result(end, key, accs))  # TS §6.1: once, when the CTI passes
        out.append(Event(CTI, t, None, None, None))
        return tuple(out)

    # ------------------------------------------------------------------ per-key clocks
    def _new_group(self, key: Any) -> _Group:
        assert self.clocks is not None  # only per-key clocks have groups
        group = self._groups[key] = _Group(self.clocks.initial(), self._floor)
        self._made += 1
        self._order[key] = self._made
        self._by_seen.add((_seen_key(group.seen), self._made, key))
        return group

    def _touch(self, key: Any, group: _Group, seen: int) -> None:
        order = self._order[key]
        self._by_seen.remove((_seen_key(group.seen), order, key))
        group.seen = seen
        self._by_seen.add((_seen_key(seen), order, key))

    def _advance_group(self, key: Any, group: _Group, t: int) -> tuple:
        group.clock = t
        if group.seen is None or t > group.seen:
            self._touch(key, group, t)
        table = group.windows
        out = []
        while table:
            end, accs = table.peekitem(0)
            if end > t:
                break
            del table[end]
            out.append(self._result(end, key, accs))  # TS §6.1, by this key's clock (§6.3)
        if not self._keyed:
            out.append(Event(CTI, t, None, None, None))  # the one clock: passed on
        if self._fleet_time is None or t > self._fleet_time:
            self._fleet_time = t
        if self.idle_after is not None:
            out.extend(self._evict_idle())
        return tuple(out)

    def _evict_idle(self) -> list:
        limit = self._fleet_time - self.idle_after  # type: ignore[operator]
        out: list = []
        while self._by_seen:
            seen, _, key = self._by_seen[0]
            if seen >= limit:
                break
            out.extend(self._evict(key))
        return out

    def _evict(self, key: Any) -> list:
        """Drop ``key``'s clock; its open windows are emitted now (TS §6.4)."""
        group = self._groups.pop(key)
        self._by_seen.remove((_seen_key(group.seen), self._order.pop(key), key))
        out = []
        floor = group.clock
        for end, accs in group.windows.items():
            out.append(self._result(end, key, accs))
            self._closed_by_eviction += 1
            floor = end if floor is None or end > floor else floor
        if floor is not None and (self._floor is None or floor > self._floor):
            self._floor = floor  # TS §6.4: a key that returns cannot reopen what was emitted
        self._evicted += 1
        return out

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> dict[str, Any]:
        """This window state as JSON values, for a checkpoint (TS §8.1): the open windows
        and their accumulators, the clock or every key's clock and policy state, and the
        accounting. A user fold's accumulator must be a JSON value (a tuple comes back as
        one when the fold's ``initial`` is a tuple, else as a list)."""
        clocks = self.clocks
        return {
            "spec": [self.spec.size, self.spec.hop, self.spec.offset],
            "folds": [f.label for f in self.folds], "keyed": self._keyed,
            "clocks": None if clocks is None else describe_policy(clocks),
            "idle_after": self.idle_after, "clock": self._clock,
            "open": [[end, key, accs] for (end, key), accs in self._open.items()],
            "groups": [[key, self._order[key],
                        encode_state(clocks, g.state),  # type: ignore[arg-type]
                        g.clock, g.seen, [[end, accs] for end, accs in g.windows.items()]]
                       for key, g in self._groups.items()],
            "made": self._made, "fleet_time": self._fleet_time, "floor": self._floor,
            "counts": [self._n_open, self._peak, self._inserts, self._late, self._emitted,
                       self._evicted, self._closed_by_eviction]}

    def load(self, obj: Any, where: str = "checkpoint: windows") -> None:
        """Take the state ``snapshot`` wrote, into windows of the same definition (size,
        hop, offset, fold labels, key or not, the clocks' policy); ``CheckpointError``
        naming what differs, and nothing changed, otherwise."""
        def want(name: str, value: Any) -> None:
            if obj.get(name) != value:
                raise CheckpointError(f"{where}: taken with {name} {obj.get(name)!r}, "
                                      f"restored into windows with {value!r}; expected the "
                                      "same definition")

        if not isinstance(obj, dict):
            raise CheckpointError(f"{where}: malformed: {obj!r}")
        want("spec", [self.spec.size, self.spec.hop, self.spec.offset])
        want("folds", [f.label for f in self.folds])
        want("keyed", self._keyed)
        want("idle_after", self.idle_after)
        clocks = self.clocks
        if clocks is None:
            want("clocks", None)
        else:
            check_policy(clocks, obj.get("clocks"), f"{where}: clocks")
        tuples = [isinstance(f.initial, tuple) for f in self.folds]

        def accs_of(value: Any) -> list:
            if (not isinstance(value, list) or len(value) != len(tuples) + 1
                    or not isinstance(value[0], int)):
                raise CheckpointError(f"{where}: malformed accumulators {value!r}")
            return [value[0]] + [tuple(a) if t and isinstance(a, list) else a
                                 for t, a in zip(tuples, value[1:])]

        try:
            opened = SortedDict({(end, key): accs_of(accs) for end, key, accs in obj["open"]})
            groups: dict[Any, _Group] = {}
            order: dict[Any, int] = {}
            by_seen = SortedList()
            for key, made, state, clock, seen, windows in obj["groups"]:
                assert clocks is not None
                group = groups[key] = _Group(decode_state(clocks, state, where), clock)
                group.seen = seen
                group.windows = SortedDict({end: accs_of(a) for end, a in windows})
                order[key] = made
                by_seen.add((_seen_key(seen), made, key))
            counts = [int(c) for c in obj["counts"]]
            scalars = [obj[k] for k in ("clock", "made", "fleet_time", "floor")]
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{where}: malformed: {err!r}") from None
        if len(counts) != 7 or any(not isinstance(v, (int, type(None))) for v in scalars):
            raise CheckpointError(f"{where}: malformed counts {obj.get('counts')!r}")
        held = len(opened) + sum(len(g.windows) for g in groups.values())
        if held != counts[0] or held > self.max_open or len(groups) > self.max_keys:
            raise CheckpointError(f"{where}: {held} open windows and {len(groups)} keys "
                                  f"restored into windows bounded by max_open="
                                  f"{self.max_open}, max_keys={self.max_keys} (the "
                                  f"checkpoint counts {counts[0]} open)")
        self._clock, self._made, self._fleet_time, self._floor = scalars
        self._open, self._groups, self._order, self._by_seen = opened, groups, order, by_seen
        (self._n_open, self._peak, self._inserts, self._late, self._emitted, self._evicted,
         self._closed_by_eviction) = counts

    # ------------------------------------------------------------------ accounting
    def stats(self) -> WindowStats:
        return WindowStats(self._n_open, self._peak, self.max_open, len(self._groups),
                           self.max_keys, self._inserts, self._late, self._emitted,
                           self._evicted, self._closed_by_eviction)

    def _check(self) -> None:
        """Invariants: the open count is the windows held; it is within its bound; every
        open window ends after its clock (a window whose end the clock passed was emitted);
        the idle index holds exactly the keys."""
        held = len(self._open) + sum(len(g.windows) for g in self._groups.values())
        assert held == self._n_open <= self.max_open, (held, self._n_open)
        if self._clock is not None:
            assert all(end > self._clock for end, _ in self._open.keys())
        for g in self._groups.values():
            if g.clock is not None:
                assert all(end > g.clock for end in g.windows.keys())
        assert len(self._by_seen) == len(self._groups) == len(self._order)


def _seen_key(seen: int | None) -> float | int:
    return -math.inf if seen is None else seen


def _key_function(key: Any) -> Callable[[Event], Any]:
    if key is None or key == "source":
        return _source
    if callable(key):
        return key
    raise InputError(f"windows: key={key!r}; expected None, 'source' or a function of the "
                     "event")


def _source(event: Event) -> Any:
    return event.source


# -- the pipe operator -------------------------------------------------------------------------

class WindowOperator(TemporalOperator):
    """A pipe operator (``Publisher → Publisher``) computing windows per subscription, with a
    late side output ``late`` and ``stats()`` of the latest subscription's windows."""

    def __init__(self, name: str, make: Callable[[], Windows], *, late: LateOutput,
                 prefetch: int) -> None:
        make()  # validate the arguments now, not at subscribe time
        super().__init__(name, self._make_step, late=late, prefetch=prefetch)
        self._make = make
        self._latest: Windows | None = None
        self._restored: Windows | None = None  # loaded from a checkpoint, for the next run

    def _make_step(self) -> Callable[[Event], tuple]:
        windows = self._restored or self._make()
        self._latest, self._restored = windows, None
        late = self.late
        step = windows.step

        def run(event: Event) -> tuple:
            return split_late(late, step(event))  # TS §6.2, §3.3
        return run

    def snapshot(self) -> dict[str, Any]:
        """The window state of the latest subscription (empty before the first), for a
        checkpoint (``Windows.snapshot``, TS §8.1)."""
        return (self._latest if self._latest is not None else self._make()).snapshot()

    def load(self, obj: Any, where: str = "checkpoint: windows") -> None:
        """The next subscription starts from the state ``snapshot`` wrote (checked as
        ``Windows.load`` checks it; nothing changed if it is refused)."""
        windows = self._make()
        windows.load(obj, where)
        self._restored = windows

    def stats(self) -> WindowStats | None:
        """The windows of the latest subscription, or ``None`` before the first."""
        return None if self._latest is None else self._latest.stats()

    def __repr__(self) -> str:
        return self.name


def _operator(name: str, spec: WindowSpec, aggregates: Sequence[str | Fold], key: Any,
              clocks: Policy | None, idle_after: DurationLike | None, max_open: int,
              max_keys: int,
              late_capacity: int, prefetch: int) -> WindowOperator:
    folds = tuple(parse_fold(a) for a in (aggregates or ("count",)))

    def make() -> Windows:
        return Windows(spec, folds, key=key, clocks=clocks, idle_after=idle_after,
                       max_open=max_open, max_keys=max_keys)

    return WindowOperator(name, make, late=LateOutput(late_capacity, name=f"{name}.late"),
                          prefetch=prefetch)


def tumbling(size: DurationLike, *aggregates: str | Fold, key: Any = None,
             clocks: Policy | None = None, idle_after: DurationLike | None = None,
             offset: DurationLike = 0,
             max_open: int = 100_000, max_keys: int = 100_000, late_capacity: int = 10_000,
             prefetch: int = 64) -> WindowOperator:
    """Tumbling windows of ``size`` closed by CTIs, as a pipe operator (module docstring).

    ``aggregates``: ``"count"``, ``"mean:FIELD"``… or ``Fold`` objects (default ``count``).

    >>> from engine import collect, from_iterable, pipe
    >>> events = [Event.point(3, {"t": 1.0}), Event.point(7, {"t": 2.0}), Event.cti(10)]
    >>> [e.payload.values for e in collect(pipe(from_iterable(events),
    ...                                         tumbling("10ns", "mean:t"))) if not e.is_cti]
    [{'mean_t': 1.5}]
    """
    spec = tumbling_spec(size, offset=offset)
    return _operator(f"tumbling({format_duration_ns(spec.size)})", spec, aggregates, key,
                     clocks, idle_after, max_open, max_keys, late_capacity, prefetch)


def hopping(size: DurationLike, hop: DurationLike, *aggregates: str | Fold, key: Any = None,
            clocks: Policy | None = None, idle_after: DurationLike | None = None,
            offset: DurationLike = 0,
            max_open: int = 100_000, max_keys: int = 100_000, late_capacity: int = 10_000,
            prefetch: int = 64) -> WindowOperator:
    """Hopping windows of ``size``, one every ``hop``, closed by CTIs (see ``tumbling``)."""
    spec = hopping_spec(size, hop, offset=offset)
    name = f"hopping({format_duration_ns(spec.size)}, {format_duration_ns(spec.hop)})"
    return _operator(name, spec, aggregates, key, clocks, idle_after, max_open, max_keys,
                     late_capacity, prefetch)
