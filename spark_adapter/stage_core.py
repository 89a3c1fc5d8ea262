"""The watermarking stage's work inside a task: deciding a user's rows. No pyspark import.

``spark_adapter.streaming.watermark_stage`` builds the plan on the driver; the function it
ships to ``mapInArrow`` calls ``run_task`` on an executor with the task's Arrow record
batches, the ``StageSpec`` (a frozen, picklable value) and the micro-batch it belongs to.

The engine's semantics (DESIGN §1, §5): every row of a source goes through that source's CTI
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
    a clock-ahead guard, a quantile), any generator settings, and rows in arrival order.

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

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from engine import MAX_TIME, MIN_TIME, to_duration_ns
from engine.errors import InputError
from engine.event import CTI, INTERVAL, POINT, Event, LateRecord
from engine.policy import Policy
from engine.times import NS_PER_S, NS_PER_US, TIME_UNITS, UNSCALED_RANGES
from operators import AdvanceTime, GoldilocksPolicy, HighState
from operators.policies import resolve_policy

__all__ = [
    "StageSpec",
    "TaskInfo",
    "build_policy",
    "build_advance",
    "choose_plan",
    "running_max_policy",
    "KIND_NAMES",
    "INSERT",
    "KIND_CTI",
    "JOIN",
    "LEAVE",
    "ACTIONS",
    "reason_text",
    "TIME_FAULTS",
    "read_rows",
    "Rows",
    "Decided",
    "StageState",
    "GroupClock",
    "fold",
    "new_decider",
    "ParallelDecider",
    "SequentialDecider",
    "WM",
    "LATE_COUNT",
    "BAD_COUNT",
]

# Row kinds as int8 codes; -1 marks a row whose kind is missing or unknown.
INSERT, KIND_CTI, JOIN, LEAVE = 0, 1, 2, 3
KIND_NAMES = ("insert", "cti", "join", "leave")

# Late-side actions (``late_action``); 0 is a row on time.
_ON_TIME, _ADJUSTED, _DROPPED, _REJECTED = 0, 1, 2, 3
ACTIONS = (None, "adjusted", "dropped", "rejected")

# Reasons (``late_reason``). Rejected rows: their data is unusable. Late rows: the CTI broken.
_OK = 0
_NULL_TIME, _TIME_RANGE, _UNSCALED_S, _UNSCALED_MS, _UNSCALED_US = 1, 2, 3, 4, 5
_NULL_SOURCE, _NULL_KIND, _UNKNOWN_KIND, _BAD_END = 6, 7, 8, 9
_SOURCE_CTI, _MERGED_CTI, _PUBLISHED = 20, 21, 22
_UNSCALED = {"s": _UNSCALED_S, "ms": _UNSCALED_MS, "us": _UNSCALED_US}
TIME_FAULTS = (_NULL_TIME, _TIME_RANGE, _UNSCALED_S, _UNSCALED_MS, _UNSCALED_US, _BAD_END)
_REASONS = {
    _NULL_TIME: "null time",
    _TIME_RANGE: "time outside the nanosecond range of the engine (years 1677 to 2262)",
    _NULL_SOURCE: "null source",
    _NULL_KIND: "null kind",
    _BAD_END: "end not after start",
    _SOURCE_CTI: "starts before its source's CTI",
    _MERGED_CTI: "starts before the merged CTI",
    _PUBLISHED: "starts before the watermark already published (its clock group is behind)",
}
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}

#: Internal columns of the decided frame (marker rows only; null on every other row).
WM = "_gl_wm"
LATE_COUNT = "_gl_late"
BAD_COUNT = "_gl_bad"


def reason_text(code: int, value: Any = None, kinds: Sequence[str] = ()) -> str:
    """The ``late_reason`` of a reason code (``value``: the row's kind, for unknown kinds)."""
    text = _REASONS.get(code)
    if text is not None:
        return text
    for unit, c in _UNSCALED.items():
        if c == code:
            return (f"integer time looks like {_UNIT_WORDS[unit]} since the epoch, not "
                    f"nanoseconds: give time_unit={unit!r} (or 'ns' if they are nanoseconds)")
    if code == _UNKNOWN_KIND:
        return f"unknown kind {value!r}; expected one of {', '.join(map(repr, kinds))}"
    return f"reason {code}"


# -- policy and generator options ---------------------------------------------------------

def build_policy(policy: str | Policy, delay: object, on_late: str, who: str) -> Policy:
    """The policy object for a name (with the engine's defaults: delay 5 minutes for
    goldilocks, else 0) or a built policy (``delay`` must then be ``None`` or agree)."""
    if isinstance(policy, str):
        if delay is None:
            delay = "5m" if policy == "goldilocks" else 0
        try:
            return resolve_policy(policy, delay=delay, on_late=on_late)
        except ValueError as err:
            raise InputError(f"{who}: {err}") from None
    for attr in ("initial", "step", "join", "leave"):
        if not callable(getattr(policy, attr, None)):
            raise InputError(f"{who}: policy={policy!r} is neither a policy name nor a policy "
                             f"(it has no {attr}()); expected e.g. 'goldilocks' or goldilocks('5m')")
    if delay is not None and to_duration_ns(delay, what=f"{who}: delay") != policy.delay:
        raise InputError(f"{who}: delay={delay!r} disagrees with the given policy's delay "
                         f"{policy.delay} ns; pass one or the other")
    return policy


#: ``advance_time``'s keywords that mean something in Spark (the others shape a publisher).
_ADVANCE_KEYS = ("every_events", "every", "delay", "on_late")


def build_advance(advance: object, on_late: str, who: str) -> tuple[tuple[str, Any], ...]:
    """``advance`` (the keyword arguments of ``operators.advance_time``) checked and
    normalised: durations in nanoseconds, ``on_late`` defaulting to the stage's."""
    if not isinstance(advance, dict):
        raise InputError(f"{who}: advance={advance!r}; expected a dict of advance_time's "
                         "keyword arguments, e.g. {'every_events': 1} or {'every': '10 seconds'}")
    unknown = [k for k in advance if k not in _ADVANCE_KEYS]
    if unknown:
        raise InputError(f"{who}: advance has {', '.join(map(repr, unknown))}; expected "
                         f"advance_time's keywords {', '.join(_ADVANCE_KEYS)}")
    options = {"on_late": on_late, **advance}
    AdvanceTime(**options)  # the engine's own checks and messages
    every = options.get("every")
    return (("every_events", options.get("every_events")),
            ("every", None if every is None else to_duration_ns(every, what=f"{who}: every")),
            ("delay", to_duration_ns(options.get("delay", 0), what=f"{who}: advance delay")),
            ("on_late", options["on_late"]))


def running_max_policy(policy: Policy) -> bool:
    """True for a policy whose state is the running maximum of the delayed CTIs (goldilocks,
    max): the parallel plan folds it by maxima. Anything else runs its own ``step``."""
    return (isinstance(policy, GoldilocksPolicy) and policy.name in ("goldilocks", "max")
            and type(policy.initial()) is HighState
            and getattr(policy, "max_ahead", None) is None)


def choose_plan(policy: Policy, advance: tuple | None, order_by: Sequence[str]) -> str:
    """``"parallel"`` when it is exact (module docstring), else ``"sequential"``."""
    if order_by or not running_max_policy(policy):
        return "sequential"
    if advance is None:
        return "parallel"
    opts = dict(advance)
    return "parallel" if opts["every_events"] == 1 else "sequential"


# -- the spec shipped to every task --------------------------------------------------------

@dataclass(frozen=True)
class StageSpec:
    """What a task needs, fixed at plan time (pickled with the task function).

    ``time_scale``: for an integer time column, nanoseconds per unit (``None``: nanoseconds,
    refusing integers implausible as such, as the engine's readers do); ``None`` as well for
    a timestamp column (microseconds). ``kinds``: the user's kind values and their codes.
    ``policy``: the built policy (pickled). ``advance``: ``build_advance``'s value or
    ``None`` (no generation). ``names``: the output columns' names by role.
    """

    name: str
    plan: str
    streaming: bool
    time_col: str
    time_is_timestamp: bool
    time_scale: int | None
    end_col: str | None
    source_col: str
    kind_col: str | None
    kinds: tuple[tuple[str, int], ...]
    group_cols: tuple[str, ...]
    policy: Any
    advance: tuple | None
    names: tuple[tuple[str, str], ...]
    keep_late: bool
    state_dir: str | None
    late_path: str | None
    user_columns: tuple[str, ...]
    order_by: tuple[str, ...] = ()

    @property
    def name_of(self) -> dict:
        return dict(self.names)

    def fingerprint(self) -> str:
        """What the state depends on: a restart with other options must not reuse it."""
        return repr((self.plan, repr(self.policy), self.policy.delay, self.policy.on_late,
                     self.advance, self.group_cols, self.kind_col is not None))

    def new_generator(self) -> AdvanceTime:
        return AdvanceTime(**dict(self.advance))  # type: ignore[arg-type]


@dataclass(frozen=True)
class TaskInfo:
    """Where a task runs: its micro-batch (``None`` for a batch DataFrame), the query's id
    (stable across restarts from one checkpoint), the run's id (new at every start) and the
    partition."""

    batch: int | None
    query: str
    run: str
    partition: int


# -- reading the columns a decision needs ------------------------------------------------------

def _none_max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def _floor(value: int) -> int:
    return MIN_TIME if value < MIN_TIME else value


@dataclass
class Rows:
    """One record batch's columns as the decisions need them (numpy, nanoseconds)."""

    n: int
    start: np.ndarray            # int64 ns (0 where the row is bad)
    end: np.ndarray | None       # int64 ns, or None without an end column
    has_end: np.ndarray | None   # bool
    kind: np.ndarray             # int8 codes; -1 where bad
    bad: np.ndarray              # int8 reason codes (0: usable)
    kind_values: list | None     # the kind column's distinct values (for unknown-kind text)
    kind_index: np.ndarray | None
    pair: np.ndarray             # int per row: index into pair_keys (-1 where bad)
    pair_keys: list              # [(group, source)]
    group: np.ndarray            # int per row: index into group_keys
    group_keys: list             # [group]


_US_LIMIT = MAX_TIME // NS_PER_US


def _int64_values(arr: Any) -> np.ndarray:
    """The int64 values of an integer or timestamp Arrow array, zero-copy where possible
    (null slots hold whatever the buffer holds)."""
    import pyarrow as pa

    if pa.types.is_timestamp(arr.type):
        arr = arr.view(pa.int64())
    if arr.type != pa.int64():
        arr = arr.cast(pa.int64())
    if arr.null_count:
        import pyarrow.compute as pc

        arr = pc.fill_null(arr, 0)
    return arr.to_numpy(zero_copy_only=False)


def _nulls(arr: Any) -> np.ndarray | None:
    if not arr.null_count:
        return None
    return arr.is_null().to_numpy(zero_copy_only=False)


def _times(spec: StageSpec, arr: Any, bad: np.ndarray) -> np.ndarray:
    """Nanoseconds of a time column; marks null, out-of-range and unscaled rows in ``bad``."""
    values = _int64_values(arr)
    nulls = _nulls(arr)
    if nulls is not None:
        bad[nulls & (bad == 0)] = _NULL_TIME
    if spec.time_is_timestamp:
        limit, scale = _US_LIMIT, NS_PER_US
    elif spec.time_scale is None:
        limit, scale = MAX_TIME, 1
    else:
        scale = spec.time_scale
        limit = MAX_TIME // scale
    if len(values) and (values.min() < -limit or values.max() > limit):
        out = (values < -limit) | (values > limit)
        bad[out & (bad == 0)] = _TIME_RANGE
        values = np.where(out, 0, values)
    if not spec.time_is_timestamp and spec.time_scale is None and len(values):
        lo, hi = UNSCALED_RANGES[0][1], UNSCALED_RANGES[-1][2]
        if values.max() >= lo and values.min() < hi:  # engine.times.looks_unscaled, by columns
            whole = values % NS_PER_S == 0
            for unit, a, b in UNSCALED_RANGES:
                hit = (values >= a) & (values < b) & ~whole & (bad == 0)
                bad[hit] = _UNSCALED[unit]
    return values * scale if scale != 1 else values


def _encode(arr: Any, nulls_as_value: bool) -> tuple[np.ndarray, list]:
    """Dictionary codes (int64, -1 for null unless ``nulls_as_value``) and the values."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(arr, null_encoding="encode" if nulls_as_value else "mask")
    indices = encoded.indices
    codes = _int64_values(indices)
    nulls = _nulls(indices)
    if nulls is not None:
        codes = np.where(nulls, -1, codes)
    return codes, encoded.dictionary.to_pylist()


def read_rows(spec: StageSpec, batch: Any) -> Rows:
    """The columns of ``batch`` (a ``pyarrow.RecordBatch``) that the decisions need."""
    n = batch.num_rows
    bad = np.zeros(n, np.int8)
    start = _times(spec, batch.column(spec.time_col), bad)
    end = has_end = None
    if spec.end_col is not None:
        end_arr = batch.column(spec.end_col)
        ignored = np.zeros(n, np.int8)  # an end's own faults make the row bad below
        end = _times(spec, end_arr, ignored)
        has_end = ignored == 0
        nulls = _nulls(end_arr)
        if nulls is not None:
            has_end &= ~nulls
        bad[(ignored != 0) & (ignored != _NULL_TIME) & (bad == 0)] = _TIME_RANGE
        bad[has_end & (end <= start) & (bad == 0)] = _BAD_END

    kind_values = kind_index = None
    if spec.kind_col is None:
        kind = np.zeros(n, np.int8)
    else:
        kind_index, kind_values = _encode(batch.column(spec.kind_col), False)
        table = dict(spec.kinds)
        codes = np.array([table.get(v, -1) for v in kind_values] + [-2], np.int8)
        kind = codes[kind_index]  # -1 indexes the appended -2: a null kind
        bad[(kind == -2) & (bad == 0)] = _NULL_KIND
        bad[(kind == -1) & (bad == 0)] = _UNKNOWN_KIND
        # join and leave rows carry no time: only their source counts
        timeless = (kind == JOIN) | (kind == LEAVE)
        if timeless.any():
            bad[timeless & np.isin(bad, TIME_FAULTS)] = _OK
    src, src_keys = _encode(batch.column(spec.source_col), False)
    bad[(src < 0) & (bad == 0)] = _NULL_SOURCE

    if not spec.group_cols:
        group = np.zeros(n, np.int64)
        group_keys: list = [()]
        pair = src
        pair_keys: list = [((), s) for s in src_keys]
    else:
        parts = [_encode(batch.column(c), True) for c in spec.group_cols]
        if len(parts) == 1:
            group, values = parts[0]
            group_keys = [(v,) for v in values]
        else:
            stacked = np.stack([codes for codes, _ in parts], axis=1)
            uniq, group = np.unique(stacked, axis=0, return_inverse=True)
            group = group.reshape(-1)
            group_keys = [tuple(parts[j][1][int(c)] for j, c in enumerate(row)) for row in uniq]
        width = max(len(src_keys), 1)
        code = np.where(src < 0, -1, group * width + src)
        uniq_pairs, pair = np.unique(code, return_inverse=True)
        pair = pair.reshape(-1).astype(np.int64)
        pair_keys = [None if c < 0 else (group_keys[int(c) // width], src_keys[int(c) % width])
                     for c in uniq_pairs]
        pair[src < 0] = -1
    kind[bad != 0] = -1
    return Rows(n, start, end, has_end, kind, bad, kind_values, kind_index, pair, pair_keys,
                group, group_keys)


# -- decisions -----------------------------------------------------------------------------------

@dataclass
class Decided:
    """The outcome of every row of one record batch (numpy, one entry per row)."""

    keep: np.ndarray        # bool: a data row out (on time or adjusted)
    start: np.ndarray       # int64 ns: the data row's start (clipped where adjusted)
    adjusted: bool          # some row's start was clipped
    action: np.ndarray      # int8: _ON_TIME, _ADJUSTED, _DROPPED, _REJECTED
    reason: np.ndarray      # int8 reason codes
    late_cti: np.ndarray    # int64: the CTI a late row broke (MIN_TIME: none)
    row_cti: np.ndarray     # int64: the CTI a row was judged against (MIN_TIME: none)


@dataclass
class GroupClock:
    """One clock group in the sequential plan: the policy's state, each source's generator
    (``None`` without generation) and the last CTI the policy emitted (``None`` before)."""

    state: Any
    generators: dict | None
    high: int | None = None


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

    def judge(self, group: Any) -> int:
        value = self._judge.get(group)
        if value is None:
            cti = self.state.judge(group)
            value = self._judge[group] = MIN_TIME if cti is None else cti
        return value

    def count(self, d: Decided, rows: Rows) -> None:
        c = self.counts
        c["rows"] += rows.n
        c["on_time"] += int(np.count_nonzero(d.keep)) - int(np.count_nonzero(d.action == _ADJUSTED))
        c["adjusted"] += int(np.count_nonzero(d.action == _ADJUSTED))
        c["dropped"] += int(np.count_nonzero(d.action == _DROPPED))
        c["rejected"] += int(np.count_nonzero(d.action == _REJECTED))
        good = rows.bad == 0
        c["ctis"] += int(np.count_nonzero(good & (rows.kind == KIND_CTI)))
        c["control"] += int(np.count_nonzero(good & ((rows.kind == JOIN) | (rows.kind == LEAVE))))

    def marker(self, end_of_batch: dict) -> int | None:
        """The CTI this task knows every known clock group to hold once the micro-batch ends:
        ``end_of_batch[group]`` where the task knows it, the start-of-batch CTI elsewhere. The
        maximum over the tasks never exceeds the true minimum over the groups."""
        low: int | None = None
        for group in self.known:
            value = _none_max(_high_of(self.state.groups.get(group)), end_of_batch.get(group))
            if value is None:
                return None  # a known group without any CTI holds everything back
            low = value if low is None else min(low, value)
        return low


def _new_decided(rows: Rows) -> Decided:
    n = rows.n
    action = np.zeros(n, np.int8)
    action[rows.bad != 0] = _REJECTED
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

    def decide(self, rows: Rows) -> Decided:
        d = _new_decided(rows)
        n = rows.n
        if n == 0:
            return d
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
                d.late_cti = np.where(late_src, last, d.late_cti)
                d.reason[late_src] = _SOURCE_CTI
                d.action[late_src] = _DROPPED  # TS §3.1
                if self.gen_adjust and rows.has_end is not None:  # TS §3.2
                    assert rows.end is not None
                    clip = late_src & rows.has_end & (rows.end > last)
                    if clip.any():
                        new_start = np.where(clip, last, start)
                        accepted |= clip
                        d.action[clip] = _ADJUSTED
                        d.adjusted = True
        else:
            accepted = insert
        gen_start = new_start
        late = accepted & (new_start < judge)  # TS §2.4 at the merge
        on_time = accepted & ~late
        if late.any():
            d.late_cti = np.where(late, judge, d.late_cti)
            d.reason[late] = _MERGED_CTI
            d.action[late] = _DROPPED  # TS §3.1
            may_clip = late
            if self.state.published is not None:  # grouped: behind what Spark was told
                own = self._own_high(rows)
                behind = late & (new_start >= own)
                d.reason[behind] = _PUBLISHED
                d.late_cti = np.where(late & ~behind, own, d.late_cti)  # its group's, first
                may_clip = late & (own >= judge)  # dropped, never clipped, behind it
            if self.adjust and rows.has_end is not None:  # TS §3.2
                assert rows.end is not None
                clip = may_clip & rows.has_end & (rows.end > judge)
                if clip.any():
                    new_start = np.where(clip, judge, new_start)
                    d.action[clip] = _ADJUSTED
                    d.adjusted = True
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
        self.count(d, rows)
        return d

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

    def _clock(self, group: Any) -> GroupClock:
        clock = self.clocks.get(group)
        if clock is None:
            before = self.state.groups.get(group)
            if before is None:
                clock = GroupClock(self.policy.initial(),
                                   {} if self.spec.advance is not None else None)
            else:  # a copy: the start-of-batch state stays as it was (for the marker)
                gens = None if before.generators is None else dict(before.generators)
                clock = GroupClock(before.state, gens, before.high)
            self.clocks[group] = clock
        return clock

    def decide(self, rows: Rows) -> Decided:
        d = _new_decided(rows)
        n = rows.n
        if n == 0:
            return d
        policy = self.policy
        spec = self.spec
        step = policy.step
        published = self.state.published
        start, end, has_end, kind = rows.start, rows.end, rows.has_end, rows.kind
        keep, new_start, action, reason = d.keep, d.start.copy(), d.action, d.reason
        late_cti, row_cti = d.late_cti, d.row_cti
        groups = rows.group_keys
        pair_keys = rows.pair_keys
        for i in range(n):
            if rows.bad[i]:
                continue
            group, source = pair_keys[rows.pair[i]]
            clock = self._clock(group)
            row_cti[i] = self.judge(group)
            k = kind[i]
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
                        reason[i] = _SOURCE_CTI
                        action[i] = _ADJUSTED if item.adjusted is not None else _DROPPED
            for item in arrivals:
                if isinstance(item, LateRecord):
                    continue
                if item.source != source:  # a generated CTI: the union names its input
                    item = Event(item.kind, item.start, item.end, item.payload, source)
                clock.state, outs = step(clock.state, item)
                for out in outs:
                    if isinstance(out, LateRecord):  # late at the merge (TS §2.4)
                        late_cti[i] = out.cti
                        reason[i] = _MERGED_CTI
                        if out.adjusted is not None:
                            action[i] = _ADJUSTED
                        else:
                            action[i] = _DROPPED
                            keep[i] = False
                    elif out.kind == CTI:
                        clock.high = out.start
                    else:
                        keep[i] = True
                        if out.start != start[i]:
                            new_start[i] = out.start
                            d.adjusted = True
            if keep[i] and published is not None and new_start[i] < published:
                keep[i] = False  # behind what Spark was told: it would drop it unrecorded
                action[i] = _DROPPED
                reason[i] = _PUBLISHED
                late_cti[i] = published
        d.start = new_start
        self.count(d, rows)
        return d

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
