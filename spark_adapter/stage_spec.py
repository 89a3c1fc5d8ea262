"""The watermarking stage's options as a task sees them: the ``StageSpec`` fixed at plan
time, the policy and generator options checked, the plan chosen, and the codes a decision
gives each row (kind, late action, reason). No pyspark import.

``spark_adapter.streaming`` builds the spec on the driver; it is pickled with the function
``mapInArrow`` ships, and every task reads it (``stage_rows``, ``stage_core``,
``stage_task``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Sequence

from engine.codes import Action, Reason, texts
from engine.times import DurationLike, Nanoseconds, format_duration_ns, to_duration_ns
from engine.errors import InputError
from engine.policy import Policy
from eventlog import CTI as CTI_CODE
from eventlog import INSERT, JOIN, KIND_NAMES, LEAVE
from operators import AdvanceTime, GoldilocksPolicy, HighState
from operators.policies import resolve_policy

__all__ = [
    "StageSpec",
    "TaskInfo",
    "build_policy",
    "build_advance",
    "check_keys",
    "choose_plan",
    "running_max_policy",
    "KIND_NAMES",
    "INSERT",
    "KIND_CTI",
    "JOIN",
    "LEAVE",
    "ACTIONS",
    "ON_TIME",
    "ADJUSTED",
    "DROPPED",
    "REJECTED",
    "OK",
    "NULL_TIME",
    "TIME_RANGE",
    "NULL_SOURCE",
    "NULL_KIND",
    "UNKNOWN_KIND",
    "BAD_END",
    "UNSCALED_REASON",
    "SOURCE_CTI",
    "MERGED_CTI",
    "RULE_QUANTILE",
    "RULE_MAX_AHEAD",
    "RULE_GOLDILOCKS",
    "merged_reason",
    "PUBLISHED",
    "IDLE_SOURCE",
    "policy_family",
    "restart_identity",
    "identity_changes",
    "readable_duration",
    "fingerprint_lines",
    "TIME_FAULTS",
    "reason_text",
    "WM",
    "LATE_COUNT",
    "BAD_COUNT",
]

# Row kinds as int8 codes: the event log's column form (-1 marks a row whose kind is missing
# or unknown); KIND_CTI, since engine.event's CTI is an event's kind.
KIND_CTI = CTI_CODE

# Late-side actions (``late_action``, ``engine.codes.Action``, as plain ints); 0 is a row on
# time. ``ACTIONS``: their text by code.
ON_TIME, ADJUSTED, DROPPED, REJECTED = (int(a) for a in (Action.ON_TIME, Action.ADJUSTED,
                                                         Action.DROPPED, Action.REJECTED))
ACTIONS = texts(Action, none=Action.ON_TIME)

# Reasons (``late_reason``, ``engine.codes.Reason``). Rejected rows: their data is unusable.
# Late rows: the CTI broken.
OK = int(Reason.NONE)
NULL_TIME, TIME_RANGE = int(Reason.NULL_TIME), int(Reason.TIME_RANGE)
UNSCALED_S, UNSCALED_MS, UNSCALED_US = (int(Reason.UNSCALED_S), int(Reason.UNSCALED_MS),
                                        int(Reason.UNSCALED_US))
NULL_SOURCE, NULL_KIND = int(Reason.NULL_SOURCE), int(Reason.NULL_KIND)
UNKNOWN_KIND, BAD_END = int(Reason.UNKNOWN_KIND), int(Reason.BAD_END)
SOURCE_CTI, MERGED_CTI, PUBLISHED = (int(Reason.SOURCE_CTI), int(Reason.MERGED_CTI),
                                     int(Reason.PUBLISHED))
#: late at the merge after its source was idle (TS §4.8: time moved on without it)
IDLE_SOURCE = int(Reason.IDLE_SOURCE)
# Late at the merge, when the policy's late record names the rule that set the CTI
# (``LateRecord.reason``: the robust rules, TS §2.5, §2.6)
RULE_QUANTILE, RULE_MAX_AHEAD, RULE_GOLDILOCKS = (int(Reason.QUANTILE), int(Reason.MAX_AHEAD),
                                                  int(Reason.GOLDILOCKS))
_RULE_REASONS = {r.text: int(r) for r in (Reason.QUANTILE, Reason.MAX_AHEAD, Reason.GOLDILOCKS)}
UNSCALED_REASON = {"s": UNSCALED_S, "ms": UNSCALED_MS, "us": UNSCALED_US}
TIME_FAULTS = (NULL_TIME, TIME_RANGE, UNSCALED_S, UNSCALED_MS, UNSCALED_US, BAD_END)
_REASONS = {
    NULL_TIME: "null time",
    TIME_RANGE: "time outside the nanosecond range of the engine (years 1677 to 2262)",
    NULL_SOURCE: "null source",
    NULL_KIND: "null kind",
    BAD_END: "end not after start",
    SOURCE_CTI: "starts before its source's CTI",
    MERGED_CTI: "starts before the merged CTI",
    RULE_QUANTILE: "starts before the merged CTI (set by the quantile rule)",
    RULE_MAX_AHEAD: "starts before the merged CTI (held back by max_ahead)",
    RULE_GOLDILOCKS: "starts before the merged CTI (goldilocks, not held back by max_ahead)",
    PUBLISHED: "starts before the watermark already published (its clock group is behind)",
    IDLE_SOURCE: "starts before the merged CTI (its source was idle: time moved on without it)",
}
EDGE_KINDS = ("start", "end")  # the event log's edge kinds (TS §7), which the stage rejects
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}

#: Internal columns of the decided frame (marker rows only; null on every other row).
WM = "_gl_wm"
LATE_COUNT = "_gl_late"
BAD_COUNT = "_gl_bad"


def merged_reason(rule: str | None) -> int:
    """The reason code of a row late at the merge, from its late record's ``reason``: the
    rule's own when it names one, else ``MERGED_CTI``."""
    return _RULE_REASONS.get(rule, MERGED_CTI) if rule is not None else MERGED_CTI


def reason_text(code: int, value: Any = None, kinds: Sequence[str] = ()) -> str:
    """The ``late_reason`` of a reason code (``value``: the row's kind, for unknown kinds)."""
    text = _REASONS.get(code)
    if text is not None:
        return text
    for unit, c in UNSCALED_REASON.items():
        if c == code:
            return (f"integer time looks like {_UNIT_WORDS[unit]} since the epoch, not "
                    f"nanoseconds: give time_unit={unit!r} (or 'ns' if they are nanoseconds)")
    if code == UNKNOWN_KIND:
        if value in EDGE_KINDS and "insert" in kinds:  # TS §7.9: the event log's edges
            return (f"an edge row (kind {value!r}, TS §7) has no form in the watermark stage; "
                    "replay the log with spark_adapter.replay or goldilocks replay, which "
                    "decide edges")
        return f"unknown kind {value!r}; expected one of {', '.join(map(repr, kinds))}"
    return f"reason {code}"


# -- policy and generator options ---------------------------------------------------------

def build_policy(policy: str | Policy, delay: DurationLike | None, on_late: str, who: str
                 ) -> Policy:
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
                         f"{format_duration_ns(policy.delay)}; pass one or the other")
    return policy


#: ``advance_time``'s keywords that mean something in Spark (the others shape a publisher).
_ADVANCE_KEYS = ("every_events", "every", "delay", "on_late")


def check_keys(value: object, role: str, allowed: Sequence[str], who: str, what: str) -> None:
    """``value`` is a dict whose keys are all in ``allowed``; else an ``InputError`` naming
    the option (``role``), the keys it does not know and those it does."""
    if not isinstance(value, dict):
        raise InputError(f"{who}: {role}={value!r}; expected a dict {what}")
    unknown = [k for k in value if k not in allowed]
    if unknown:
        raise InputError(f"{who}: {role} has {', '.join(map(repr, unknown))}; expected "
                         f"one of {', '.join(allowed)}")


def build_advance(advance: object, on_late: str, who: str) -> tuple[tuple[str, Any], ...]:
    """``advance`` (the keyword arguments of ``operators.advance_time``) checked and
    normalised: durations in nanoseconds, ``on_late`` defaulting to the stage's."""
    check_keys(advance, "advance", _ADVANCE_KEYS, who,
               "of advance_time's keyword arguments, e.g. {'every_events': 1} or "
               "{'every': '10 seconds'}")
    assert isinstance(advance, dict)
    options = {"on_late": on_late, **advance}
    AdvanceTime(**options)  # the engine's own checks and messages
    every = options.get("every")
    return (("every_events", options.get("every_events")),
            ("every", None if every is None
             else Nanoseconds(to_duration_ns(every, what=f"{who}: every"))),
            ("delay", Nanoseconds(to_duration_ns(options.get("delay", 0),
                                                 what=f"{who}: advance delay"))),
            ("on_late", options["on_late"]))


def policy_family(policy: Policy) -> str:
    """What a restart of the stage must keep of its policy: the shape of its state. The
    running-maximum policies (goldilocks, max) share one, whatever their delay; a quantile
    rule is its k; anything else its name."""
    if running_max_policy(policy):
        return "goldilocks or max"
    k = getattr(policy, "k", None)
    if k is not None:
        return f"quantile:{k}"
    if getattr(policy, "max_ahead", None) is not None:
        return "goldilocks with max_ahead"
    return str(getattr(policy, "name", type(policy).__name__))


def restart_identity(*, policy: Policy, policy_text: str, advance: tuple | None,
                     advance_text: str, kind_col: str | None, group_cols: Sequence[str],
                     order_by: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    """The options a restart from the same state must keep, as ``(option, what is compared,
    what the user gave)``: those whose change would give the state another meaning. The
    others (``delay``, ``advance``'s ``delay`` and ``on_late``, ``on_late``, ``idle_after``)
    may change: the CTI never goes back (``docs/spark.md``, "Restarts")."""
    opts = dict(advance or ())
    every = opts.get("every")
    generation = None if advance is None else (opts["every_events"],
                                               None if every is None else int(every))
    return (("policy", policy_family(policy), policy_text),
            ("advance", repr(generation), advance_text),
            ("kind_col", repr(kind_col is not None), repr(kind_col)),
            ("group_col", repr(tuple(group_cols)), repr(tuple(group_cols) or None)),
            ("order_by", repr(tuple(order_by)), repr(tuple(order_by) or None)))


def identity_changes(stored: str, current: str) -> list[str]:
    """What differs between two stages' ``fingerprint()``s, in the user's terms
    (``"policy: 'goldilocks' → 'min'"``); empty when they agree."""
    try:
        before = {name: (key, text) for name, key, text in ast.literal_eval(stored)}
        after = {name: (key, text) for name, key, text in ast.literal_eval(current)}
    except (ValueError, SyntaxError, TypeError):
        return [] if stored == current else [f"options: {stored} → {current}"]
    changes = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, ("?", "?")), after.get(name, ("?", "?"))
        if old[0] != new[0]:
            changes.append(f"{name}: {old[1]} → {new[1]}")
    return changes


def fingerprint_lines(fingerprint: str) -> str:
    """A ``fingerprint()`` as the JVM functions compare it: a line per option, ``name TAB
    what is compared TAB as given`` (``StageTask.changes``)."""
    rows = ast.literal_eval(fingerprint)
    return "\n".join("\t".join(str(v).replace("\t", " ").replace("\n", " ") for v in row)
                     for row in rows)


def readable_duration(ns: int | None) -> str:
    """A duration for a message: ``5s``, ``1m30s`` (``None``: none)."""
    return "none" if ns is None else format_duration_ns(int(ns))


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
    idle_after: int | None = None
    identity: tuple[tuple[str, str, str], ...] = ()
    #: the Arrow schema of the rows a task gets (a task without rows still reports the CTI)
    input_schema: Any = None

    @property
    def name_of(self) -> dict:
        return dict(self.names)

    @property
    def source_delay(self) -> int:
        """How far a source's CTI trails its newest reading (``advance``'s delay), ns."""
        return int(dict(self.advance or ()).get("delay", 0) or 0)

    @property
    def lag(self) -> int:
        """How far the merged CTI trails the newest reading it follows: the source's delay
        and the policy's, ns. A downstream operator that keeps state "within the watermark"
        (``dropDuplicatesWithinWatermark``) keeps it this long, as after
        ``withWatermark(time_col, lag)``."""
        return self.source_delay + int(getattr(self.policy, "delay", 0) or 0)

    def fingerprint(self) -> str:
        """What the state's meaning depends on (``restart_identity``), with the values the
        user gave: a restart whose ``identity_changes`` against the state's are not empty
        must not reuse it."""
        identity = self.identity or restart_identity(
            policy=self.policy, policy_text=repr(self.policy), advance=self.advance,
            advance_text=repr(dict(self.advance)) if self.advance else "None",
            kind_col=self.kind_col, group_cols=self.group_cols, order_by=self.order_by)
        return repr(identity)

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

