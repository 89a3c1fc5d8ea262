"""The watermarking stage's decisions inside a task: what each of a user's rows is, given the
state at the start of its micro-batch. No pyspark import.

``spark_adapter.streaming.watermark_stage`` builds the plan on the driver; the function it
ships to ``mapInArrow`` calls ``stage_task.run_task`` on an executor with the task's Arrow
record batches, the ``StageSpec`` (``stage_spec``: a frozen, picklable value) and the
micro-batch it belongs to; ``stage_rows`` reads the columns a decision needs, and the
deciders here decide them.

The engine's semantics (design.md §4): every row of a source goes through that source's CTI
generator (``operators.AdvanceTime``, the step behind ``advance_time``) when the stage
generates CTIs, and then through the time policy of its clock group (the union's step): an
insert that starts before its source's CTI is late at the source, one that starts before the
merged CTI is late at the merge (TS §2.4), and is dropped or adjusted (TS §3.1, §3.2).

Two plans, chosen at plan time (``choose_plan``):

``parallel``
    Every task decides its own rows, with no exchange, against the state at the start of the
    micro-batch, and writes a partial summary of what its rows did to the state. It is exact
    (the engine fed the micro-batch in event-time order decides the same) when no CTI made
    inside a micro-batch can pass a later row of it: rows in event-time order, a running-
    maximum policy (goldilocks, max), and a generator that makes a CTI after every insert
    (``every_events=1``), or none. Proof: a CTI generated after an insert at ``t`` is at most
    ``t - delay`` (the generator has already passed every larger start), an input CTI row at
    ``t`` sorts at ``t``, and the policy only ever lowers what it is given; so every CTI made
    inside the batch is at or below the start of every later row. The state after the batch
    folds the tasks' partials by maxima.
``sequential``
    One task holds all rows of a clock group, sorted by Spark (arrival order, or event-time
    order), and runs the engine's own steps row by row: any policy with a ``step`` (min,
    a quantile, a third party's), any generator settings, and rows in arrival order.

State between micro-batches lives in side files (``spark_adapter.stage_state``).

The rows out: the data rows (inserts on time, and adjusted inserts with their start clipped),
each with the user's columns, the CTI the row was judged against (``cti``), and — when the
time column is an integer — ``event_time``. Late and rejected rows go to the late side with
``late_action`` (``adjusted``, ``dropped``, ``rejected``) and ``late_reason``. CTI, join and
leave rows are control rows: they move the clock and leave no row. Each task also yields one
marker row whose watermark column carries the CTI the task knows to hold for every clock
group when the micro-batch ends (Spark's watermark is the maximum over them).
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from engine import MIN_TIME
from engine.event import CTI, INTERVAL, POINT, Event, LateRecord
from engine.policy import Policy
from spark_adapter.stage_rows import Rows
from spark_adapter.stage_spec import (ADJUSTED, DROPPED, IDLE_SOURCE, INSERT, JOIN, KIND_CTI,
                                      LEAVE, MERGED_CTI, PUBLISHED, REJECTED, SOURCE_CTI,
                                      StageSpec, merged_reason)

__all__ = [
    "Decided",
    "StageState",
    "GroupClock",
    "fold",
    "new_decider",
    "ParallelDecider",
    "SequentialDecider",
]


def _none_max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def _floor(value: int) -> int:
    return MIN_TIME if value < MIN_TIME else value



# -- decisions -----------------------------------------------------------------------------------

@dataclass
class Decided:
    """The outcome of every row of one record batch (numpy, one entry per row)."""

    keep: np.ndarray        # bool: a data row out (on time or adjusted)
    start: np.ndarray       # int64 ns: the data row's start (clipped where adjusted)
    adjusted: bool          # some row's start was clipped
    action: np.ndarray      # int8: ON_TIME, ADJUSTED, DROPPED, REJECTED
    reason: np.ndarray      # int8 reason codes
    late_cti: np.ndarray    # int64: the CTI a late row broke (MIN_TIME: none)
    row_cti: np.ndarray     # int64: the CTI a row was judged against (MIN_TIME: none)


@dataclass
class GroupClock:
    """One clock group in the sequential plan: the policy's state, each source's generator
    (``None`` without generation) and the last CTI the policy emitted (``None`` before).

    With ``idle_after`` (TS §4.8): ``seen``, each source's latest time (an insert's start or
    a CTI); ``idle``, the sources that left the policy for being more than ``idle_after``
    behind the most advanced one; ``resumed``, those back from idleness that have not sent
    a CTI since (their late rows say so)."""

    state: Any
    generators: dict | None
    high: int | None = None
    seen: dict = field(default_factory=dict)
    idle: set = field(default_factory=set)
    resumed: set = field(default_factory=set)


@dataclass
class StageState:
    """The state at the start of a micro-batch (``stage_state`` folds and stores it).

    ``groups``: per clock group, the parallel plan's ``high`` (an int or ``None``) or the
    sequential plan's ``GroupClock``. ``sources``: the parallel plan's per-(group, source)
    generator state ``[max_start, last_cti]``. ``published``: the largest CTI the markers have
    carried (Spark's watermark is this minus 1 ms). ``batch``: the last micro-batch folded in.
    """

    fingerprint: str
    groups: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    published: int | None = None
    batch: int = -1

    def judge(self, group: Any) -> int | None:
        """The CTI rows of ``group`` are judged against: its own, never below what Spark was
        told (a row behind Spark's watermark would be dropped downstream without a record)."""
        own = self.groups.get(group)
        high = own.high if isinstance(own, GroupClock) else own
        return _none_max(high, self.published)


def _high_of(value: Any) -> int | None:
    return value.high if isinstance(value, GroupClock) else value


class _Decider:
    """What both plans share: the state at the start, counts, and the marker's value."""

    def __init__(self, spec: StageSpec, state: StageState) -> None:
        self.spec = spec
        self.state = state
        self.policy: Policy = spec.policy
        self.counts = {"rows": 0, "on_time": 0, "adjusted": 0, "dropped": 0, "rejected": 0,
                       "ctis": 0, "control": 0}
        # the groups whose clock the published watermark must respect: those known when the
        # micro-batch began (without group columns, the one clock is always known)
        self.known = set(state.groups)
        if not spec.group_cols:
            self.known.add(())
        self._judge: dict = {}

    def decide(self, rows: Rows) -> Decided:
        """Every row of one record batch's columns, decided."""
        d = _new_decided(rows)
        if rows.n:
            self._decide(rows, d)
            self.count(d, rows)
        return d

    def _decide(self, rows: Rows, d: Decided) -> None:
        raise NotImplementedError

    def judge(self, group: Any) -> int:
        value = self._judge.get(group)
        if value is None:
            cti = self.state.judge(group)
            value = self._judge[group] = MIN_TIME if cti is None else cti
        return value

    def count(self, d: Decided, rows: Rows) -> None:
        c = self.counts
        c["rows"] += rows.n
        c["on_time"] += int(np.count_nonzero(d.keep)) - int(np.count_nonzero(d.action == ADJUSTED))
        c["adjusted"] += int(np.count_nonzero(d.action == ADJUSTED))
        c["dropped"] += int(np.count_nonzero(d.action == DROPPED))
        c["rejected"] += int(np.count_nonzero(d.action == REJECTED))
        good = rows.bad == 0
        c["ctis"] += int(np.count_nonzero(good & (rows.kind == KIND_CTI)))
        c["control"] += int(np.count_nonzero(good & ((rows.kind == JOIN) | (rows.kind == LEAVE))))

    def idle_groups(self) -> set:
        """The known clock groups that do not hold the watermark back (TS §4.8): those whose
        CTI when the micro-batch began was more than ``idle_after`` behind the most advanced
        group's (or that had none yet). Every task decides it from the same state, so the
        tasks, and a re-run of the micro-batch, agree."""
        idle_after = self.spec.idle_after
        if idle_after is None or len(self.known) < 2:
            return set()
        highs = {g: _high_of(self.state.groups.get(g)) for g in self.known}
        fleet = max((h for h in highs.values() if h is not None), default=None)
        if fleet is None:
            return set()
        return {g for g, h in highs.items() if h is None or h < fleet - idle_after}

    def marker(self, end_of_batch: dict) -> int | None:
        """The CTI this task knows every known clock group to hold once the micro-batch ends:
        ``end_of_batch[group]`` where the task knows it, the start-of-batch CTI elsewhere;
        idle groups left out (``idle_groups``). The maximum over the tasks never exceeds the
        true minimum over the groups that are not idle."""
        low: int | None = None
        idle = self.idle_groups()
        for group in self.known:
            if group in idle:
                continue
            value = _none_max(_high_of(self.state.groups.get(group)), end_of_batch.get(group))
            if value is None:
                return None  # a known group without any CTI holds everything back
            low = value if low is None else min(low, value)
        return low


def _new_decided(rows: Rows) -> Decided:
    n = rows.n
    action = np.zeros(n, np.int8)
    action[rows.bad != 0] = REJECTED
    return Decided(keep=np.zeros(n, bool), start=rows.start, adjusted=False, action=action,
                   reason=rows.bad.copy(), late_cti=np.full(n, MIN_TIME, np.int64),
                   row_cti=np.full(n, MIN_TIME, np.int64))


class ParallelDecider(_Decider):
    """The parallel plan: rows decided against the start-of-batch state, in any order.

    Per (group, source) the task gathers the largest start the generator accepted and the
    largest input CTI; per group, the delayed CTI those make. ``partial()`` is what the next
    micro-batch folds (by maxima) into the state.
    """

    def __init__(self, spec: StageSpec, state: StageState) -> None:
        super().__init__(spec, state)
        self.generate = spec.advance is not None
        adv = dict(spec.advance or ())
        self.gen_delay = adv.get("delay", 0)
        self.gen_adjust = adv.get("on_late") == "adjust"
        self.adjust = self.policy.on_late == "adjust"
        self.delay = self.policy.delay
        self.accepted: dict = {}   # (group, source) -> largest start accepted by the generator
        self.input_ctis: dict = {}  # (group, source) -> largest input CTI
        self.left: set = set()      # (group, source) that left: its generator ends with the batch
        self.groups_seen: set = set()

    def _decide(self, rows: Rows, d: Decided) -> None:
        keys = rows.pair_keys
        good = rows.bad == 0
        insert = good & (rows.kind == INSERT)
        start = rows.start
        judge = np.array([self.judge(g) for g in rows.group_keys], np.int64)[rows.group]
        d.row_cti = judge
        if good.any():
            present = np.bincount(rows.group[good], minlength=len(rows.group_keys))
            self.groups_seen.update(rows.group_keys[int(i)] for i in np.flatnonzero(present))
        pair = np.where(rows.pair < 0, 0, rows.pair)
        new_start = start
        if self.generate:
            sources = self.state.sources
            last = np.array([_last_or_min(sources.get(k)) for k in keys] or [MIN_TIME],
                            np.int64)[pair]
            late_src = insert & (start < last)  # TS §2.4 at the source
            accepted = insert & ~late_src
            if late_src.any():
                _drop(d, late_src, last, SOURCE_CTI)
                if self.gen_adjust and rows.has_end is not None:
                    clip, new_start = _clip(d, rows, late_src, last, start)
                    accepted |= clip
        else:
            accepted = insert
        gen_start = new_start
        late = accepted & (new_start < judge)  # TS §2.4 at the merge
        on_time = accepted & ~late
        if late.any():
            _drop(d, late, judge, MERGED_CTI)
            may_clip = late
            if self.state.published is not None:  # grouped: behind what Spark was told
                own = self._own_high(rows)
                behind = late & (new_start >= own)
                d.reason[behind] = PUBLISHED
                d.late_cti = np.where(late & ~behind, own, d.late_cti)  # its group's, first
                may_clip = late & (own >= judge)  # dropped, never clipped, behind it
            if self.adjust and rows.has_end is not None:
                clip, new_start = _clip(d, rows, may_clip, judge, new_start)
                on_time |= clip
        d.keep = on_time
        d.start = new_start
        # what the rows did to the state: the starts the generator accepted (clipped by the
        # generator only: it passed them on before the merge judged them), the input CTIs
        if accepted.any():
            _max_into(self.accepted, keys, pair[accepted], gen_start[accepted])
        cti_rows = good & (rows.kind == KIND_CTI)
        if cti_rows.any():
            _max_into(self.input_ctis, keys, pair[cti_rows], start[cti_rows])
        leaves = good & (rows.kind == LEAVE)  # leaves come last in a micro-batch
        if leaves.any():
            self.left.update(keys[int(i)] for i in np.unique(pair[leaves]))

    def _own_high(self, rows: Rows) -> np.ndarray:
        """Per row, its group's own CTI at the start (MIN_TIME: none)."""
        own = [_high_of(self.state.groups.get(g)) for g in rows.group_keys]
        return np.array([MIN_TIME if h is None else h for h in own], np.int64)[rows.group]

    def source_end(self, key: tuple) -> int | None:
        """The source's last CTI at the end of the batch, from this task's rows."""
        prev = self.state.sources.get(key)
        max_start, last = (None, None) if prev is None else prev
        max_start = _none_max(max_start, self.accepted.get(key))
        last = _none_max(last, self.input_ctis.get(key))
        if self.generate and max_start is not None:
            last = _none_max(last, _floor(max_start - self.gen_delay))
        return last

    def end_of_batch(self) -> dict:
        """Per group seen: the delayed CTI this task's rows make (``None``: none)."""
        made: dict = {g: None for g in self.groups_seen}
        for key in set(self.accepted) | set(self.input_ctis):
            last = self.source_end(key)
            if last is not None:
                made[key[0]] = _none_max(made.get(key[0]), _floor(last - self.delay))
        return made

    def partial(self) -> dict:
        made = self.end_of_batch()
        return {"groups": made,
                "sources": {k: (self.accepted.get(k), self.input_ctis.get(k))
                            for k in set(self.accepted) | set(self.input_ctis)},
                "left": sorted(self.left, key=repr),
                "marker": self.marker({g: v for g, v in made.items()}),
                "counts": dict(self.counts)}


def _drop(d: Decided, late: np.ndarray, cti: np.ndarray, reason: int) -> None:
    """The rows ``late`` start before ``cti`` (TS §2.4): dropped, with ``reason``."""
    d.late_cti = np.where(late, cti, d.late_cti)
    d.reason[late] = reason
    d.action[late] = DROPPED  # TS §3.1


def _clip(d: Decided, rows: Rows, late: np.ndarray, cti: np.ndarray,
          start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(clipped, new starts)``: the rows ``late`` whose interval ends after ``cti`` are
    adjusted, their start clipped to it (TS §3.2)."""
    assert rows.end is not None and rows.has_end is not None
    clip = late & rows.has_end & (rows.end > cti)
    if clip.any():
        start = np.where(clip, cti, start)
        d.action[clip] = ADJUSTED
        d.adjusted = True
    return clip, start


def _last_or_min(value: Any) -> int:
    if value is None or value[1] is None:
        return MIN_TIME
    return value[1]


def _max_into(target: dict, keys: list, index: np.ndarray, values: np.ndarray) -> None:
    """``target[keys[i]] = max(target[keys[i]], max of values where index == i)``."""
    acc = np.full(len(keys), MIN_TIME, np.int64)
    seen = np.zeros(len(keys), bool)
    np.maximum.at(acc, index, values)
    seen[index] = True
    for i in np.flatnonzero(seen):
        key = keys[i]
        value = int(acc[i])
        old = target.get(key)
        if old is None or value > old:
            target[key] = value


def fold_parallel(state: StageState, partials: Iterable[dict], spec: StageSpec) -> StageState:
    """The state after one micro-batch of the parallel plan, from its tasks' partials."""
    adv = dict(spec.advance or ())
    gen_delay = adv.get("delay", 0)
    groups = dict(state.groups)
    sources = dict(state.sources)
    published = state.published
    accepted: dict = {}
    ctis: dict = {}
    left: set = set()
    for part in partials:
        left.update(part["left"])
        for g, made in part["groups"].items():
            groups[g] = _none_max(groups.get(g), made)
        for key, (acc, cti) in part["sources"].items():
            accepted[key] = _none_max(accepted.get(key), acc)
            ctis[key] = _none_max(ctis.get(key), cti)
        published = _none_max(published, part["marker"])
    for key in set(accepted) | set(ctis):
        max_start, last = sources.get(key, (None, None))
        max_start = _none_max(max_start, accepted.get(key))
        last = _none_max(last, ctis.get(key))
        if spec.advance is not None and max_start is not None:
            last = _none_max(last, _floor(max_start - gen_delay))
        sources[key] = (max_start, last)
    for key in left:  # a source that left comes back as a new input, with a new generator
        sources.pop(key, None)
    return StageState(state.fingerprint, groups, sources, published, state.batch)


class SequentialDecider(_Decider):
    """The sequential plan: the engine's steps row by row, in the order Spark sorted them.

    Every insert goes through its source's generator (``AdvanceTime``) when CTIs are
    generated, then through its group's policy; CTIs (input or generated) go to the policy;
    join and leave rows to ``policy.join``/``leave`` (a source that leaves gets a fresh
    generator if it comes back, as a new input of the union would).
    """

    def __init__(self, spec: StageSpec, state: StageState) -> None:
        super().__init__(spec, state)
        self.clocks: dict = {}  # group -> GroupClock, for the groups this task ran
        self.due: dict = {}     # group -> heap of (latest time, source): who may go idle
        self.fleet: dict = {}   # group -> its most advanced source's latest time

    def _clock(self, group: Any) -> GroupClock:
        clock = self.clocks.get(group)
        if clock is None:
            before = self.state.groups.get(group)
            if before is None:
                clock = GroupClock(self.policy.initial(),
                                   {} if self.spec.advance is not None else None)
            else:  # a copy: the start-of-batch state stays as it was (for the marker)
                gens = None
                if before.generators is not None:
                    gens = {s: self._current(g) for s, g in before.generators.items()}
                clock = GroupClock(before.state, gens, before.high,
                                   dict(getattr(before, "seen", None) or {}),
                                   set(getattr(before, "idle", None) or ()),
                                   set(getattr(before, "resumed", None) or ()))
            self.clocks[group] = clock
            if self.spec.idle_after is not None:
                heap = [(t, repr(src), src) for src, t in clock.seen.items()
                        if src not in clock.idle]
                heapq.heapify(heap)
                self.due[group] = heap
                self.fleet[group] = max(clock.seen.values(), default=None)
        return clock

    def _current(self, gen: Any) -> Any:
        """A source's generator as the state left it, under this stage's options: a restart
        may change its delay and on_late (its last CTI stays: TS §2.1). A copy."""
        opts = dict(self.spec.advance or ())
        new = copy.copy(gen)
        new.delay = opts.get("delay", 0)
        new.on_late = opts.get("on_late", gen.on_late)
        new._adjust = new.on_late == "adjust"
        return new

    def _went_idle(self, group: Any, clock: GroupClock, now: int) -> None:
        """Every source of ``group`` more than ``idle_after`` behind ``now``, the group's most
        advanced time, leaves the policy (TS §4.8): a leave, which may release a CTI. It
        comes back with its next row, as a new input."""
        heap = self.due[group]
        limit = now - self.spec.idle_after  # type: ignore[operator]
        while heap and heap[0][0] < limit:
            t, _, source = heapq.heappop(heap)
            if source in clock.idle or clock.seen.get(source) != t:
                continue  # stale: the source moved on (its newer entry is in the heap)
            clock.idle.add(source)
            clock.resumed.discard(source)
            clock.state, outs = self.policy.leave(clock.state, source)
            clock.high = _emitted(outs, clock.high)
            if clock.generators is not None:
                clock.generators.pop(source, None)

    def _heard(self, group: Any, clock: GroupClock, source: Any, t: int) -> None:
        """A row of ``source`` at ``t`` (an insert's start or a CTI), before it is decided:
        its latest time, and its return from idleness (TS §4.8)."""
        latest = clock.seen.get(source)
        back = source in clock.idle
        if back:
            clock.idle.discard(source)
            clock.resumed.add(source)
        if latest is None or t > latest:
            clock.seen[source] = latest = t
            fleet = self.fleet.get(group)
            if fleet is None or t > fleet:
                self.fleet[group] = t
        elif not back:
            return
        heapq.heappush(self.due[group], (latest, repr(source), source))

    def _decide(self, rows: Rows, d: Decided) -> None:
        n = rows.n
        policy = self.policy
        spec = self.spec
        step = policy.step
        published = self.state.published
        start, end, has_end, kind = rows.start, rows.end, rows.has_end, rows.kind
        keep, new_start, action, reason = d.keep, d.start.copy(), d.action, d.reason
        late_cti, row_cti = d.late_cti, d.row_cti
        groups = rows.group_keys
        pair_keys = rows.pair_keys
        idle_after = spec.idle_after
        for i in range(n):
            if rows.bad[i]:
                continue
            group, source = pair_keys[rows.pair[i]]
            clock = self._clock(group)
            row_cti[i] = self.judge(group)
            k = kind[i]
            if idle_after is not None and (k == INSERT or k == KIND_CTI):
                self._heard(group, clock, source, int(start[i]))
            if k == INSERT:
                s = int(start[i])
                if has_end is not None and end is not None and has_end[i]:
                    arrivals: tuple = (Event(INTERVAL, s, int(end[i]), None, source),)
                else:
                    arrivals = (Event(POINT, s, s + 1, None, source),)
            elif k == KIND_CTI:
                arrivals = (Event(CTI, int(start[i]), None, None, source),)
            elif k == JOIN:
                clock.state, _ = policy.join(clock.state, source)
                continue
            else:  # LEAVE
                clock.state, outs = policy.leave(clock.state, source)
                if clock.generators is not None:
                    clock.generators.pop(source, None)
                clock.seen.pop(source, None)
                clock.idle.discard(source)
                clock.resumed.discard(source)
                clock.high = _emitted(outs, clock.high)
                continue
            if clock.generators is not None:
                gen = clock.generators.get(source)
                if gen is None:
                    gen = clock.generators[source] = spec.new_generator()
                arrivals = gen.step(arrivals[0])
                for item in arrivals:  # late at the source (TS §2.4); the merge may decide on
                    if isinstance(item, LateRecord):  # what the generator let through
                        late_cti[i] = item.cti
                        reason[i] = SOURCE_CTI
                        action[i] = ADJUSTED if item.adjusted is not None else DROPPED
            for item in arrivals:
                if isinstance(item, LateRecord):
                    continue
                if item.source != source:  # a generated CTI: the union names its input
                    item = Event(item.kind, item.start, item.end, item.payload, source)
                clock.state, outs = step(clock.state, item)
                if item.kind == CTI:
                    clock.resumed.discard(source)  # TS §4.8: back in step with the others
                for out in outs:
                    if isinstance(out, LateRecord):  # late at the merge (TS §2.4)
                        late_cti[i] = out.cti
                        reason[i] = (IDLE_SOURCE if source in clock.resumed  # TS §4.8
                                     else merged_reason(out.reason))  # the rule, if it says one
                        if out.adjusted is not None:
                            action[i] = ADJUSTED
                        else:
                            action[i] = DROPPED
                            keep[i] = False
                    elif out.kind == CTI:
                        clock.high = out.start
                    else:
                        keep[i] = True
                        if out.start != start[i]:
                            new_start[i] = out.start
                            d.adjusted = True
            if idle_after is not None and (k == INSERT or k == KIND_CTI):
                self._went_idle(group, clock, self.fleet[group])  # TS §4.8, after the row
            if keep[i] and published is not None and new_start[i] < published:
                keep[i] = False  # behind what Spark was told: it would drop it unrecorded
                action[i] = DROPPED
                reason[i] = PUBLISHED
                late_cti[i] = published
        d.start = new_start

    def partial(self) -> dict:
        return {"groups": dict(self.clocks),
                "marker": self.marker({g: c.high for g, c in self.clocks.items()}),
                "counts": dict(self.counts)}


def _emitted(outs: tuple, high: int | None) -> int | None:
    for out in outs:
        if not isinstance(out, LateRecord) and out.kind == CTI:
            high = out.start
    return high


def fold_sequential(state: StageState, partials: Iterable[dict], spec: StageSpec) -> StageState:
    """The state after one micro-batch of the sequential plan: each task's groups replace
    theirs (a group's rows are all in one task)."""
    groups = dict(state.groups)
    published = state.published
    for part in partials:
        groups.update(part["groups"])
        published = _none_max(published, part["marker"])
    return StageState(state.fingerprint, groups, state.sources, published, state.batch)


def fold(state: StageState, partials: list[dict], spec: StageSpec, batch: int) -> StageState:
    folded = (fold_parallel if spec.plan == "parallel" else fold_sequential)(state, partials, spec)
    folded.batch = batch
    return folded


def new_decider(spec: StageSpec, state: StageState) -> ParallelDecider | SequentialDecider:
    return (ParallelDecider if spec.plan == "parallel" else SequentialDecider)(spec, state)

