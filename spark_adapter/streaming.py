"""The watermarking stage: a better ``withWatermark`` for any DataFrame (design.md §11).

``watermark_stage(readings, delay="30 seconds", time_col="ts", source_col="device_id",
state_dir=...)`` takes a user's own stream — a timestamp column, a device column, no CTIs —
and gives back the same rows with a CTI on each, the late ones kept aside with their reason,
and a Spark watermark that follows the CTI whatever the user does downstream.

The plan it builds (driver; ``docs/spark.md`` says the same for users)::

    input ─[sequential plan: repartition per clock group]─▶ mapInArrow(decide)
          ─▶ withWatermark(_gl_wm, 1 ms) ─▶ observe(name, …) ─▶ where(not a marker)
          ─▶ select(user columns, [event_time], cti)          (time column marked for windows)

- ``mapInArrow`` runs ``stage_task.run_task`` in every task: the options fixed in a
  ``StageSpec`` (``stage_spec``), the rows read (``stage_rows``) and decided as the engine
  would (``stage_core``), the state between micro-batches in side files (``stage_state``),
  late rows written by the task. Each task ends with a marker row carrying the CTI in
  ``_gl_wm``.
- Spark's watermark is the maximum of ``_gl_wm`` over the rows that reach
  ``EventTimeWatermark``. Spark's optimizer pushes a user's filter below that node (every
  deterministic predicate that does not use the watermark column), so a filter that removed
  the marker rows would stop the watermark. ``observe`` (a ``CollectMetrics`` node) is not a
  node filters cross: the user's filters stay above it, the marker rows always reach the
  watermark, and the metrics (``cti``, ``rows``, ``late``, ``rejected``) show per micro-batch
  in ``query.lastProgress["observedMetrics"][name]``.
- The user's time column (or ``event_time``) is marked as an event-time column of that same
  watermark, so ``groupBy(window(time_col, …))`` works in append mode, and Spark closes a
  window once the CTI passes its end.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import uuid
from typing import Any, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DateType,
                               DecimalType, DoubleType, FloatType, IntegerType, LongType,
                               ShortType, StringType, StructField, StructType, TimestampNTZType,
                               TimestampType)

from engine.errors import InputError
from engine.policy import Policy
from engine.times import DurationLike, to_duration_ns
from eventlog import time_scale
from spark_adapter.session import is_connect, plan_text, use_driver_python
from spark_adapter.stage_state import stored_stages
from spark_adapter.stage_jvm import jvm_stage, options_refusal, session_refusal
from spark_adapter.stage_spec import (BAD_COUNT, KIND_NAMES, LATE_COUNT, WM, StageSpec,
                                      build_advance, build_policy, check_keys, choose_plan,
                                      identity_changes, restart_identity)
from spark_adapter.schema import WATERMARK_THRESHOLD

__all__ = ["watermark_stage", "split_late", "DEFAULT_NAMES", "EVENT_LOG_STAGE", "stage_plan",
           "default_state_dir", "STATE_FOLDER", "stage_metrics"]

#: The columns the stage adds, by role; ``names=`` renames any of them.
DEFAULT_NAMES = {"cti": "cti", "late_action": "late_action", "late_reason": "late_reason",
                 "event_time": "event_time"}

#: The options that run the stage over the event-log schema (``read_event_log`` and the
#: ``"goldilocks"`` source): ``watermark_stage(stream, delay=…, **EVENT_LOG_STAGE)``.
EVENT_LOG_STAGE = {"time_col": "start", "time_unit": "ns", "end_col": "end",
                   "source_col": "source", "kind_col": "kind",
                   "order_by": ("order_key", "file_index", "line")}

_INTEGRAL = (LongType, IntegerType, ShortType, ByteType)
_KEY_TYPES = (StringType, *_INTEGRAL, BooleanType, DateType, TimestampType)
_ORDERABLE = (StringType, *_INTEGRAL, BooleanType, DateType, TimestampType, TimestampNTZType,
              DoubleType, FloatType, DecimalType, BinaryType)
_DELAY_KEY = "spark.watermarkDelayMs"  # Spark's EventTimeWatermark.delayKey
_NS_PER_MS = 1_000_000
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WHO = "watermark_stage"
_LOG = logging.getLogger("goldilocks.spark")


def _fail(message: str) -> InputError:
    return InputError(f"{_WHO}: {message}")


def _column(df: DataFrame, name: str, role: str) -> StructField:
    if not isinstance(name, str) or not name:
        raise _fail(f"{role}={name!r}; expected a column name")
    try:
        return df.schema[name]
    except KeyError:
        raise _fail(f"{role}={name!r} is not a column of the DataFrame; it has "
                    f"{', '.join(df.columns)}") from None


def _type_name(t: DataType) -> str:
    return t.simpleString()


def _check_time(field: StructField, role: str, time_unit: str | None) -> tuple[bool, int | None]:
    """``(is a timestamp, ns per unit)`` of a time column, or a clear error."""
    t = field.dataType
    if isinstance(t, TimestampType):
        if time_unit is not None:
            raise _fail(f"time_unit={time_unit!r} is for integer time columns; {role} "
                        f"{field.name!r} is a timestamp (it carries its own unit)")
        return True, None
    if isinstance(t, _INTEGRAL):
        if time_unit is None:  # an integer says nothing of its unit: every row would be a guess
            raise _fail(f"{role} {field.name!r} is {_type_name(t)}, a count of some unit since "
                        "the epoch; say which: time_unit='s', 'ms', 'us' or 'ns' (or convert "
                        f"it, e.g. F.timestamp_millis('{field.name}'))")
        try:
            return False, time_scale(time_unit)
        except InputError as err:
            raise _fail(str(err)) from None
    if isinstance(t, TimestampNTZType):
        hint = (f"a timestamp without a time zone; say which zone its clock keeps, e.g. "
                f"F.to_utc_timestamp('{field.name}', 'Europe/Paris') (or 'UTC')")
    elif isinstance(t, (DoubleType, FloatType, DecimalType)):
        hint = (f"{_type_name(t)}; convert it, e.g. F.timestamp_seconds('{field.name}') for "
                "epoch seconds, or cast a whole number of units to bigint and give time_unit")
    elif isinstance(t, StringType):
        hint = f"a string; parse it, e.g. F.to_timestamp('{field.name}')"
    else:
        hint = _type_name(t)
    raise _fail(f"{role} {field.name!r} is {hint}; expected a timestamp, or an integer "
                "count of time_unit ('s', 'ms', 'us', 'ns') since the epoch")


def _kinds(kinds: Any) -> tuple[tuple[str, int], ...]:
    if kinds is None:
        return tuple((name, code) for code, name in enumerate(KIND_NAMES))
    if not isinstance(kinds, dict) or not kinds:
        raise _fail(f"kinds={kinds!r}; expected a dict from your kind values to "
                    f"{', '.join(KIND_NAMES)}, e.g. {{'reading': 'insert', 'heartbeat': 'cti'}}")
    out = []
    for value, kind in kinds.items():
        if not isinstance(value, str) or kind not in KIND_NAMES:
            raise _fail(f"kinds[{value!r}]={kind!r}; expected a string value mapped to one "
                        f"of {', '.join(KIND_NAMES)}")
        out.append((value, KIND_NAMES.index(kind)))
    return tuple(out)


def _names(names: Any, user_columns: Sequence[str], time_is_timestamp: bool) -> dict:
    if names is None:
        names = {}
    check_keys(names, "names", tuple(DEFAULT_NAMES), _WHO,
               "renaming the added columns, e.g. {'cti': 'stage_cti'}")
    chosen = {**DEFAULT_NAMES, **names}
    for role, name in chosen.items():
        if not isinstance(name, str) or not name or name.startswith("_gl_"):
            raise _fail(f"names[{role!r}]={name!r}; expected a column name (not starting "
                        "with the reserved '_gl_')")
    added = [r for r in chosen if r != "event_time" or not time_is_timestamp]
    values = [chosen[r] for r in added]
    if len(set(values)) != len(values):
        raise _fail(f"names gives two added columns one name: {chosen}")
    for role in added:
        if chosen[role] in user_columns:
            raise _fail(f"the DataFrame already has a column {chosen[role]!r}, which the "
                        f"stage adds ({role}); name the stage's with names={{{role!r}: "
                        "'another_name'}}")
    return chosen


def _as_list(value: Any, role: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _fail(f"{role}={value!r}; expected a column name or a list of them")


def _has_watermark(df: DataFrame) -> bool:
    """Whether ``df``'s plan has a watermark already. A classic session reads its analyzed
    plan; a Spark Connect session, which has no JVM handle here, its ``explain`` text (an
    analysis request, no job)."""
    if is_connect(df.sparkSession):
        return "EventTimeWatermark" in plan_text(df)
    return "EventTimeWatermark" in df._jdf.queryExecution().analyzed().toString()


_WARNED: set[str] = set()  # the session reasons already said at WARN, once per process

#: ``state_dir``'s default under ``spark.sql.streaming.checkpointLocation``
STATE_FOLDER = "goldilocks-stage"
_CHECKPOINT_ROOT = "spark.sql.streaming.checkpointLocation"


def default_state_dir(spark: Any, name: str) -> str:
    """``state_dir`` when a stream's stage is given none, as Spark defaults a query's
    checkpoint (driver). With ``spark.sql.streaming.checkpointLocation`` set:
    ``<that root>/goldilocks-stage``. The state inside is kept per query id (Spark's, stable
    while a query restarts from its checkpoint) and stage name, so a restarted query finds
    its clock again there, as Spark finds a named query's checkpoint under the same root.
    Without it: a new temporary directory, said at WARN, since a restart then starts a fresh
    clock (as Spark's memory and console sinks get a temporary checkpoint)."""
    root = spark.conf.get(_CHECKPOINT_ROOT, None)
    if root:
        return str(root).rstrip("/") + "/" + STATE_FOLDER
    path = os.path.join(tempfile.gettempdir(), f"goldilocks-stage-{uuid.uuid4().hex}")
    _LOG.warning("watermark_stage %r keeps its clock in a temporary directory, %s: neither "
                 "state_dir nor %s is set, so a restarted query starts a fresh clock. Give "
                 "state_dir=… (storage every executor reaches) or set %s to keep it", name,
                 path, _CHECKPOINT_ROOT, _CHECKPOINT_ROOT)
    return path


def _say_plan(spec: StageSpec, why: str, session: bool) -> None:
    """Say which Python plan runs and why not the JVM plan: once at WARN when the session is
    the reason (the jar: a fallback the user can undo), at INFO when an option is."""
    if not session:
        _LOG.info("watermark_stage %r: the %s plan in Python (not the JVM plan: %s)",
                  spec.name, spec.plan, why)
        return
    level = logging.INFO if why in _WARNED else logging.WARNING
    _WARNED.add(why)
    _LOG.log(level, "watermark_stage %r runs in Python (the %s plan), not as the stage's JVM "
             "functions: %s", spec.name, spec.plan, why)


def _restart_plan(spec: StageSpec, jvm: bool | None, shared: bool = False) -> str | None:
    """Check the stage against the states it may restart from (driver, when the plan is
    built): refuse, naming the options in the user's terms, when ``state_dir`` holds this
    stage's state only with other options (``stage_spec.restart_identity``: a restart may
    change the delays, ``on_late`` and ``idle_after``, not what the state means). Returns
    the plan (``"python"``, ``"jvm"``) that wrote every state this stage could restart
    from, or ``None``. ``shared``: ``state_dir`` is the default folder every query under the
    checkpoint root shares, where other queries' stages of this name are no restart of this
    one: not checked here (the tasks still refuse a state of their own query written with
    other options, or by the other plan)."""
    if not spec.streaming or spec.state_dir is None or shared:
        return None
    stored = stored_stages(spec.state_dir, spec.name)
    if not stored:
        return None
    mine = spec.fingerprint()
    fitting = [s for s in stored if not identity_changes(s.fingerprint, mine)]
    if not fitting:
        told = "; ".join(f"query {s.query}: {', '.join(identity_changes(s.fingerprint, mine))}"
                         for s in stored[:3])
        raise _fail(
            f"state_dir={spec.state_dir!r} holds the state of the stage name={spec.name!r} "
            f"with other options ({told}). A restart of that query must keep them (delay, "
            "advance's delay, on_late and idle_after may change); a new query (a new "
            "checkpoint) with these options needs its own state_dir")
    plans = {s.plan for s in fitting}
    ran = plans.pop() if len(plans) == 1 else None
    if ran == "python" and jvm is True:
        raise _fail(f"jvm=True, but state_dir={spec.state_dir!r} holds this stage's state as "
                    "its Python plan wrote it: restart that query with jvm=False (or give a "
                    "new query its own state_dir)")
    if ran == "jvm" and jvm is False:
        raise _fail(f"jvm=False, but state_dir={spec.state_dir!r} holds this stage's state as "
                    "its JVM plan wrote it: restart that query with the JVM plan (a session "
                    "with spark.jars=spark_adapter.stage_jar()), or give a new query its own "
                    "state_dir")
    return ran


def stage_plan(df: DataFrame, options: dict[str, Any]) -> StageSpec:
    """Check every option of ``watermark_stage`` (``options``: its keyword arguments) against
    the DataFrame (driver) and fix the stage's ``StageSpec``. Raises ``InputError`` naming
    the option and what was expected."""
    o = options
    delay, time_col, source_col, kind_col = o["delay"], o["time_col"], o["source_col"], o["kind_col"]
    advance, policy, on_late, group_col = o["advance"], o["policy"], o["on_late"], o["group_col"]
    order_by, end_col, time_unit, kinds = o["order_by"], o["end_col"], o["time_unit"], o["kinds"]
    names, state_dir, late_path = o["names"], o["state_dir"], o["late_path"]
    keep_late, name = o["keep_late"], o["name"]
    if not isinstance(df, DataFrame):
        raise _fail(f"expected a DataFrame, got {type(df).__name__}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _fail(f"name={name!r}; expected an identifier (it names the observed metrics "
                    "and the state)")
    columns = list(df.columns)
    reserved = [c for c in columns if c.startswith("_gl_")]
    if reserved:
        raise _fail(f"column name(s) {reserved} use the reserved prefix '_gl_'")
    time_field = _column(df, time_col, "time_col")
    is_ts, scale = _check_time(time_field, "time_col", time_unit)
    if end_col is not None:
        end_field = _column(df, end_col, "end_col")
        if type(end_field.dataType) is not type(time_field.dataType):
            raise _fail(f"end_col {end_col!r} is {_type_name(end_field.dataType)} but time_col "
                        f"{time_col!r} is {_type_name(time_field.dataType)}; expected one type")
    source_field = _column(df, source_col, "source_col")
    if not isinstance(source_field.dataType, _KEY_TYPES):
        raise _fail(f"source_col {source_col!r} is {_type_name(source_field.dataType)}; "
                    "expected a string or an integer (a device's name or number)")
    if kind_col is not None:
        kind_field = _column(df, kind_col, "kind_col")
        if not isinstance(kind_field.dataType, StringType):
            raise _fail(f"kind_col {kind_col!r} is {_type_name(kind_field.dataType)}; "
                        "expected a string (its values mapped by kinds=)")
    elif kinds is not None:
        raise _fail("kinds= maps the values of kind_col, but kind_col is None")
    groups = _as_list(group_col, "group_col")
    for g in groups:
        if not isinstance(_column(df, g, "group_col").dataType, _KEY_TYPES):
            raise _fail(f"group_col {g!r} is {_type_name(df.schema[g].dataType)}; expected a "
                        "string, integer, boolean, date or timestamp")
    order = _as_list(order_by, "order_by")
    for c in order:
        if not isinstance(_column(df, c, "order_by").dataType, _ORDERABLE):
            raise _fail(f"order_by column {c!r} is {_type_name(df.schema[c].dataType)}; "
                        "expected an orderable type (number, string, timestamp…)")
    chosen_names = _names(names, columns, is_ts)
    given_advance = advance
    if advance is None and kind_col is None and isinstance(policy, str):
        # withWatermark's one tolerance: a reading promises nothing older than itself less
        # delay from its device, and the policy merges those CTIs undelayed — the newest
        # reading less delay, as Spark's watermark, with a device's own jitter kept
        if delay is None:
            delay = "5m" if policy == "goldilocks" else 0
        built = build_policy(policy, 0, on_late, _WHO)
        advance = {"every_events": 1, "delay": delay}
    else:
        built = build_policy(policy, delay, on_late, _WHO)
        if advance is None and kind_col is None:  # a policy object: the engine's own parts
            advance = {"every_events": 1}
    adv = build_advance(advance, built.on_late, _WHO) if advance is not None else None
    plan = choose_plan(built, adv, order)
    idle = o.get("idle_after")
    if idle is not None:
        idle = to_duration_ns(idle, what=f"{_WHO}: idle_after")
        if idle <= 0:
            raise _fail(f"idle_after={o['idle_after']!r}; expected a duration > 0 (or None: "
                        "no device or clock group is ever idle)")
    identity = restart_identity(
        policy=built, policy_text=repr(policy) if isinstance(policy, str) else repr(built),
        advance=adv, advance_text="None (the default)" if given_advance is None
        else repr(given_advance), kind_col=kind_col, group_cols=groups, order_by=order)
    streaming = df.isStreaming
    if not isinstance(keep_late, bool):
        raise _fail(f"keep_late={keep_late!r}; expected True or False")
    for role, path in (("state_dir", state_dir), ("late_path", late_path)):
        if path is not None and not isinstance(path, str):
            raise _fail(f"{role}={path!r}; expected a path or URI string")
    if streaming and _has_watermark(df):
        raise _fail("the DataFrame already has a watermark (withWatermark); the stage "
                    "publishes its own — remove the withWatermark call before the stage")
    if streaming and state_dir is None:
        state_dir = default_state_dir(df.sparkSession, name)
    if late_path is None and not keep_late:
        if state_dir is None:
            raise _fail("where should late rows go? give late_path=… (a directory), or "
                        "keep_late=True to keep them in the output with late_action")
        late_path = state_dir.rstrip("/") + "/late"
    return StageSpec(
        name=name, plan=plan, streaming=streaming, time_col=time_col, time_is_timestamp=is_ts,
        time_scale=scale, end_col=end_col, source_col=source_col, kind_col=kind_col,
        kinds=_kinds(kinds) if kind_col is not None else (("insert", 0),),
        group_cols=groups, policy=built, advance=adv, names=tuple(chosen_names.items()),
        keep_late=keep_late, state_dir=state_dir, late_path=late_path,
        user_columns=tuple(columns), order_by=order, idle_after=idle, identity=identity,
        input_schema=_arrow_schema(df) if streaming else None)


def _arrow_schema(df: DataFrame) -> Any:
    """The Arrow schema Spark gives ``mapInArrow`` for ``df``'s rows (``None``: a type
    PySpark cannot say in Arrow; the plan then needs a row to know it)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        zone = df.sparkSession.conf.get("spark.sql.session.timeZone")
        return to_arrow_schema(df.schema, timezone=zone)
    except Exception:
        return None


def _decided_schema(spec: StageSpec, df: DataFrame) -> StructType:
    names = spec.name_of
    fields = [StructField(f.name, f.dataType, True) for f in df.schema.fields]
    if not spec.time_is_timestamp:
        fields.append(StructField(names["event_time"], TimestampType(), True))
    fields.append(StructField(names["cti"], TimestampType() if spec.time_is_timestamp
                              else LongType(), True))
    if spec.keep_late:
        fields += [StructField(names["late_action"], StringType(), True),
                   StructField(names["late_reason"], StringType(), True)]
    fields += [StructField(WM, TimestampType(), True), StructField(LATE_COUNT, LongType(), True),
               StructField(BAD_COUNT, LongType(), True)]
    return StructType(fields)


def _task_function(spec: StageSpec) -> Any:
    """The function ``mapInArrow`` ships (pickled with ``spec``); runs on executors."""

    def decide(batches: Any) -> Any:
        from pyspark import TaskContext

        from spark_adapter.stage_spec import TaskInfo
        from spark_adapter.stage_task import run_task

        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        run = context.getLocalProperty("spark.jobGroup.id") if context else None
        if not run and context is not None:
            found = re.search(r"runId = ([\w-]+)",
                              context.getLocalProperty("spark.job.description") or "")
            run = found.group(1) if found else None
        info = TaskInfo(
            batch=int(batch) if batch is not None else None,
            query=(context.getLocalProperty("sql.streaming.queryId") if context else None)
            or "batch",
            run=run or "run",
            partition=context.partitionId() if context else 0)
        yield from run_task(spec, batches, info)

    return decide


def watermark_stage(df: DataFrame, *, delay: DurationLike | None = None, time_col: str,
                    source_col: str,
                    kind_col: str | None = None, advance: dict | None = None,
                    policy: str | Policy = "goldilocks", on_late: str = "drop",
                    group_col: str | Sequence[str] | None = None,
                    order_by: Sequence[str] | None = None, end_col: str | None = None,
                    time_unit: str | None = None, kinds: dict | None = None,
                    names: dict | None = None, state_dir: str | None = None,
                    late_path: str | None = None, keep_late: bool = False,
                    name: str = "goldilocks", jvm: bool | None = None,
                    idle_after: DurationLike | None = None) -> DataFrame:
    """The time policy as a stage of any DataFrame; returns its data rows (driver).

    ``df``: streaming (``spark.readStream…``) or batch. ``time_col``: when the row happened —
    a timestamp, or an integer count of ``time_unit`` (``"s"``, ``"ms"``, ``"us"``, ``"ns"``;
    ``None``: nanoseconds, refusing values implausible as such). ``source_col``: who sent it
    (a device: one input of the merge). ``kind_col``: for streams that carry CTIs, a string
    column whose values ``kinds=`` maps to ``insert``, ``cti``, ``join``, ``leave`` (default:
    those words); ``None``: every row is an insert. ``end_col``: an interval's end (same type
    as ``time_col``; null: a point).

    ``delay``: how far a reading may be behind the newest one and still count, as
    ``withWatermark``'s delay: ``"30 seconds"``, ``"5m"``, ``"PT5M"``, a ``timedelta``, a
    number of seconds (``engine.times.DurationLike``; ``None``: 5 minutes for goldilocks, 0
    for the others). Without ``advance`` (and with a policy name) each device's CTI trails
    its newest reading by ``delay`` and the policy merges them undelayed, so a device's own
    jitter within ``delay`` is kept and Spark's watermark is native's; with ``advance``,
    ``delay`` is the policy's (the merged CTI's lag behind the devices' CTIs). ``policy``:
    ``"goldilocks"``, ``"max"``, ``"min"`` (over live sources), ``"quantile[:K]"``, or any
    policy object (``operators.goldilocks(delay, …)``, a third party's), run as the engine
    runs it. ``on_late``: ``"drop"`` or
    ``"adjust"`` (clip a late interval that still overlaps).

    ``advance``: CTI generation per source, the keyword arguments of the engine's
    ``advance_time``: ``{"every_events": 1}``, ``{"every_events": 100}``,
    ``{"every": "10 seconds"}``, plus ``"delay"`` (how far a device's own readings may be out
    of order, default 0) and ``"on_late"`` (default: the stage's); ``None`` without
    ``kind_col``: a CTI after every reading, ``delay`` behind it (above); ``None`` with
    ``kind_col``: the stream's own CTIs only. ``idle_after``: a duration after which a
    device, or a clock group, that has fallen that far behind the most advanced one stops
    holding the clock back (TS §4.8; decided from the rows, so a restart decides the same).

    ``group_col``: one clock per value (or per combination of several columns).
    ``order_by``: arrival-order columns: each micro-batch's rows in that order, as the engine
    takes them (one task per clock group); without, rows of a micro-batch are taken in
    event-time order and judged against the CTI at its start (``docs/spark.md``).

    ``state_dir``: where the clock lives between micro-batches, like a checkpoint location
    (``None`` for a stream: ``<spark.sql.streaming.checkpointLocation>/goldilocks-stage``
    when the session sets that root, where a restarted query finds its clock again; else a
    temporary directory, with a warning that a restart starts a fresh clock —
    ``default_state_dir``). ``late_path``: where late and rejected rows are written (default
    ``<state_dir>/late``); ``keep_late=True`` keeps them in the output instead, with
    ``late_action`` and ``late_reason`` (``split_late`` separates them). ``names``: rename the
    added columns (``cti``, ``late_action``, ``late_reason``, ``event_time``). ``name``: the
    observed metrics' name and the state's folder (two stages in one query need two names).
    ``jvm``: make the decisions in JVM functions, with no row through Python (``None``: when
    the session has the stage's jar and the options allow it; ``True``: that or an error
    saying why not; ``False``: never). ``stage_jar()`` is the jar, for ``spark.jars``.

    A restart from the same ``state_dir`` may change ``delay``, ``advance``'s delay and
    ``on_late``, ``on_late`` and ``idle_after`` (the CTI never goes back); a change of what
    the state means is refused here, naming the option (``_restart_plan``). A local classic
    session's Python workers run this interpreter whatever the plan
    (``spark_adapter.session.use_driver_python``).

    The result: the input's columns (every one nullable), ``event_time`` when ``time_col`` is
    an integer, and ``cti`` (the CTI the row was judged against; null before the first). A
    stream gets a watermark that follows the CTI (module docstring).
    """
    options = {k: v for k, v in locals().items() if k != "df"}  # the keywords, as given
    spec = stage_plan(df, options)
    if jvm not in (None, True, False):
        raise _fail(f"jvm={jvm!r}; expected True, False or None (when it can)")
    # one rule whatever the plan: a local session's Python workers run this interpreter
    # (spark_adapter.session), so the user's own Python functions see the same Python
    use_driver_python(df.sparkSession)
    event_metadata = None if spec.keep_late else {_DELAY_KEY: spec.lag // _NS_PER_MS}
    ran = _restart_plan(spec, jvm, shared=state_dir is None)  # the plan of the state, if said
    if ran == "python" and jvm is None:
        jvm = False
    if jvm is not False:
        why = options_refusal(spec, df)
        if why is None:
            why = session_refusal(df)
            if why is None:
                _LOG.info("watermark_stage %r: the JVM plan", name)
                return jvm_stage(df, spec, event_metadata)
            if not jvm:
                _say_plan(spec, why, session=True)
        elif not jvm:
            _say_plan(spec, why, session=False)
        if ran == "jvm":
            raise _fail(f"state_dir={spec.state_dir!r} holds this stage's state as the JVM "
                        f"plan wrote it, but the JVM plan cannot run this stage: {why}. A "
                        "restart of that query needs it; a new query (a new checkpoint) "
                        "needs its own state_dir")
        if jvm:
            raise _fail(f"jvm=True, but the JVM plan cannot run this stage: {why}")
    source = df
    if spec.plan == "sequential":  # a clock group's rows in one task, which sorts them
        source = df.repartition(*spec.group_cols) if spec.group_cols else df.repartition(1)
    decided = source.mapInArrow(_task_function(spec), _decided_schema(spec, df))
    if spec.streaming:
        decided = decided.withWatermark(WM, WATERMARK_THRESHOLD).observe(
            name,
            F.unix_millis(F.max(WM)).alias("cti"),
            F.count(F.when(F.col(LATE_COUNT).isNull(), 1)).alias("rows"),
            F.coalesce(F.sum(LATE_COUNT), F.lit(0)).alias("late"),
            F.coalesce(F.sum(BAD_COUNT), F.lit(0)).alias("rejected"))
    names_ = spec.name_of
    event_col = spec.time_col if spec.time_is_timestamp else names_["event_time"]
    out: list[Column] = []
    for c in decided.columns:
        if c in (WM, LATE_COUNT, BAD_COUNT):
            continue
        if spec.streaming and c == event_col and event_metadata is not None:
            # an event-time column of the same watermark, whose delay downstream operators
            # read as withWatermark(time_col, lag) gives it; with keep_late it is not one,
            # so no aggregation can take late rows for data (Spark refuses it in append mode)
            out.append(F.col(c).alias(c, metadata=event_metadata))
        else:
            out.append(F.col(c))
    return decided.where(F.col(LATE_COUNT).isNull()).select(*out)  # not a marker row


def stage_metrics(progress: Any, name: str = "goldilocks") -> dict | None:
    """The stage ``name``'s metrics in a streaming query's progress
    (``query.lastProgress``, an item of ``query.recentProgress``) as a dict: ``cti`` (the CTI
    at the end of the micro-batch, epoch milliseconds; ``None`` before the first), ``rows``,
    ``late``, ``rejected``; ``None`` when the progress has none (driver).

    The same on either kind of session: a classic session gives each observed row by field
    name, a Spark Connect session as ``Row(values=[…], schema={…})`` (its progress travels
    as JSON), which this reads by the schema's field names.
    """
    found = (progress.get("observedMetrics") or {}).get(name)
    if found is None:
        return None
    fields = found.asDict() if hasattr(found, "asDict") else dict(found)
    if set(fields) == {"values", "schema"}:  # Spark Connect's form
        return dict(zip((f["name"] for f in fields["schema"]["fields"]), fields["values"]))
    return fields


def split_late(staged: DataFrame, names: dict | None = None) -> tuple[DataFrame, DataFrame]:
    """``(events, late)`` from a ``watermark_stage(..., keep_late=True)`` frame (driver).

    ``events``: the data rows (on time, and adjusted ones clipped) without the two late
    columns; ``late``: every late or rejected row as it arrived, with ``cti`` (the CTI it
    broke), ``late_action`` and ``late_reason``. Both are views of one frame: in
    ``foreachBatch``, ``persist()`` the batch before writing both, or the stage runs twice.
    """
    chosen = {**DEFAULT_NAMES, **(names or {})}
    action, reason = chosen["late_action"], chosen["late_reason"]
    missing = [c for c in (action, reason) if c not in staged.columns]
    if missing:
        raise InputError(f"split_late: expected watermark_stage(..., keep_late=True)'s output; "
                         f"it lacks {missing}")
    events = staged.where(F.col(reason).isNull()).drop(action, reason)
    late = staged.where(F.col(reason).isNotNull())
    return events, late
