"""The engine's answer for the watermarking stage's documented semantics (docs/spark.md).

A stream of rows (``Row``) arrives in micro-batches. The engine takes each micro-batch in the
stage's documented order — arrival order when the stream has one, else event-time order (joins
first, leaves last, ties by source, kind with CTIs first, then the row's id) — and feeds every
row, in that order, to its source's CTI generator (``operators.AdvanceTime``, the step of
``advance_time``) when CTIs are generated, and what comes out to a real ``operators.Union``
under the policy, one union per clock group. Each row's id travels as the event's payload, so
every output and late record names its row.

``engine_stage`` returns, per row id, what became of it (``Outcome``) and, per micro-batch,
each group's CTI when it began and ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from engine import CallbackSubscriber
from engine.event import CTI, INTERVAL, POINT, Event, LateRecord
from operators import AdvanceTime, Union

__all__ = ["Row", "Outcome", "EngineRun", "engine_stage", "documented_order", "KIND_RANK"]

KIND_RANK = {"cti": 0, "insert": 1}


@dataclass(frozen=True)
class Row:
    """One input row: ``id`` unique; ``time``/``end`` in ns (``end`` None: a point)."""

    id: int
    source: str
    time: int | None
    kind: str = "insert"
    end: int | None = None
    group: Any = ()
    arrival: int = 0


@dataclass(frozen=True)
class Outcome:
    """``action``: None (on time), "adjusted", "dropped"; ``start``: the start emitted (for
    kept rows); ``cti``: the CTI a late row broke; ``level``: "source" or "merge";
    ``reason``: a merge-late row's ``LateRecord.reason``."""

    action: str | None
    start: int | None
    cti: int | None = None
    level: str | None = None
    reason: str | None = None  # the late record's reason (the rule that set the CTI)


@dataclass
class EngineRun:
    outcomes: dict = field(default_factory=dict)        # row id -> Outcome
    began: list = field(default_factory=list)            # per batch: {group: CTI at start}
    ended: list = field(default_factory=list)            # per batch: {group: CTI at end}


def documented_order(rows: Iterable[Row], arrival: bool = False) -> list[Row]:
    if arrival:
        return sorted(rows, key=lambda r: (r.arrival, r.id))
    phase = {"join": 0, "leave": 2}
    return sorted(rows, key=lambda r: (phase.get(r.kind, 1),
                                       r.time if r.kind not in phase else 0,
                                       r.source, KIND_RANK.get(r.kind, 1), r.id))


class _Group:
    def __init__(self, policy: Any, advance: dict | None, idle_after: int | None = None) -> None:
        self.union = Union(policy)
        self.out: list = []
        self.union.subscribe(CallbackSubscriber(self.out.append, prefetch=1 << 20))
        self.inputs: dict = {}
        self.generators: dict = {}
        self.advance = advance
        self.cti: int | None = None
        self.idle_after = idle_after
        self.seen: dict = {}  # source -> latest time (TS §4.8)

    def _idleness(self, row: Row, run: EngineRun) -> None:
        """TS §4.8 by brute force: after each row, every source more than ``idle_after``
        behind the most advanced one leaves the union (a new input when it is back)."""
        self.seen[row.source] = max(self.seen.get(row.source, row.time), row.time)
        fleet = max(self.seen.values())
        for source, t in list(self.seen.items()):
            if t < fleet - self.idle_after and source in self.inputs:  # type: ignore[operator]
                self.inputs.pop(source).complete()
                self.generators.pop(source, None)
                self._collect(run)

    def _input(self, source: str) -> Any:
        emitter = self.inputs.get(source)
        if emitter is None:
            emitter = self.inputs[source] = self.union.open_input(source)
            if self.advance is not None:
                self.generators[source] = AdvanceTime(**self.advance)
        return emitter

    def feed(self, row: Row, run: EngineRun) -> None:
        if row.kind == "join":
            self._input(row.source)
            return
        if row.kind == "leave":
            emitter = self.inputs.pop(row.source, None)
            self.generators.pop(row.source, None)
            self.seen.pop(row.source, None)
            if emitter is not None:
                emitter.complete()
            self._collect(run)
            return
        emitter = self._input(row.source)
        if row.kind == "cti":
            arrivals: tuple = (Event(CTI, row.time, None, None, row.source),)
        elif row.end is None:
            arrivals = (Event(POINT, row.time, row.time + 1, row.id, row.source),)
        else:
            arrivals = (Event(INTERVAL, row.time, row.end, row.id, row.source),)
        generator = self.generators.get(row.source)
        if generator is not None:
            arrivals = generator.step(arrivals[0])
        for item in arrivals:
            if isinstance(item, LateRecord):
                run.outcomes[row.id] = Outcome(item.action, None if item.adjusted is None
                                               else item.adjusted.start, item.cti, "source")
        for item in arrivals:
            if not isinstance(item, LateRecord):
                assert emitter.try_send(item), "the inline union always has credit"
        self._collect(run)
        if self.idle_after is not None:
            self._idleness(row, run)

    def _collect(self, run: EngineRun) -> None:
        for record in self.union.late.drain():
            e = record.event
            start = record.adjusted.start if record.adjusted is not None else None
            run.outcomes[e.payload] = Outcome(record.action, start, record.cti, "merge",
                                              record.reason)
        for e in self.out:
            if e.kind == CTI:
                self.cti = e.start
            else:
                before = run.outcomes.get(e.payload)
                if before is None:
                    run.outcomes[e.payload] = Outcome(None, e.start)
                elif before.action == "adjusted" and before.level == "source":
                    run.outcomes[e.payload] = Outcome("adjusted", e.start, before.cti, "source")
        self.out.clear()


def engine_stage(batches: Sequence[Sequence[Row]], *, policy: Any, advance: dict | None,
                 arrival: bool = False, idle_after: int | None = None) -> EngineRun:
    """Feed the micro-batches to the engine in the documented order (module docstring);
    with ``idle_after``, a source that falls that far behind its group leaves it until its
    next row (TS §4.8)."""
    run = EngineRun()
    groups: dict = {}
    for batch in batches:
        run.began.append({g: grp.cti for g, grp in groups.items()})
        for row in documented_order(batch, arrival):
            grp = groups.get(row.group)
            if grp is None:
                grp = groups[row.group] = _Group(policy, advance, idle_after)
            grp.feed(row, run)
        run.ended.append({g: grp.cti for g, grp in groups.items()})
    return run
