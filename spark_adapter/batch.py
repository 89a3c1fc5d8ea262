"""Batch replay of a recorded event log in Spark, with no single-partition step.

The default plan, ``strategy="scan"``, runs the engine's columnar kernel in parallel tasks
over arrival ranges: over the input's own partitions when they are arrival ranges
(``spark_adapter.batch_splits``, no shuffle), else over key ranges Spark shuffles and sorts
(``spark_adapter.batch_plan``; ``strategy="ranges"`` asks for it by name). The bucketed
two-pass below, in plain Spark SQL, and ``strategy="global"``, one window, are kept by name
for comparison (docs/performance.md). This module builds the ``(events, late)`` frames of
all of them, and ``write_replay`` writes both from one decision of every row.

Over a recorded log the Goldilocks state is one number: ``high``, the running maximum of the
delayed CTIs ``d = max(cti - delay, MIN_TIME)`` in arrival order (TS §2.2). Everything a
row needs follows from ``prior``, the running maximum *before* the row (null before the first
CTI): a CTI is emitted iff ``prior`` is null or ``d > prior`` (TS §2.1); an insert is late iff
``prior`` is set and ``start < prior`` (TS §2.4), and is then dropped (TS §3.1) or, under
``adjust``, emitted from ``prior`` when it is an interval that still overlaps (TS §3.2).

A running maximum is a prefix scan over an associative operator, so it splits (the bucketed
two-pass)::

    bucket  = order_key div width                      # monotone in arrival order
    pass 1  = max(d) per (group, bucket)               # one row per bucket
    prefix  = max over earlier buckets of the group    # a window over the bucket rows only
    pass 2  = greatest(prefix, max(d) over the earlier rows of the bucket)

Pass 2 is a window partitioned by (group, bucket): every bucket is sorted and scanned by its
own task, in parallel. The only step that sees all buckets of a group at once works on one
row per bucket. ``strategy="global"`` is the textbook alternative kept for comparison: one
window ordered by arrival, which Spark runs in a single partition.

Time: two shuffles of the log plus one of the bucket rows; memory per task: one bucket.
Everything is lazy; the log's plan is evaluated three times (bucket widths, bucket maxima,
rows), so cache an expensive input first.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from engine.errors import InputError
from engine.policy import Policy
from operators.policies import resolve_policy
from engine.policy import CTI_EMIT, DROP_LATE, EMIT, EMIT_ADJUSTED
from engine.times import DurationLike, format_duration_ns, to_duration_ns
from spark_adapter.batch_edges import (EDGE_KIND, EDGE_LATE_COLUMNS, SIDE, EdgePlan,
                                       decide_edges, edge_plan, inner_policy, mask_edges,
                                       refuse_edges)
from spark_adapter.batch_plan import (ACTION, CTI_AFTER, delayed_cti, refuse_null_order,
                                      scan_decided)
from spark_adapter.batch_splits import splits_decided
from spark_adapter.schema import KIND_CTI, KIND_INSERT, ORDER_COLUMNS

__all__ = ["read_event_log", "replay", "write_replay", "resolve_spark_policy", "STRATEGIES",
           "LATE_COLUMNS"]

#: ``replay(strategy=...)``: the engine's kernel over arrival ranges (the input's partitions
#: when they are ranges, else shuffled key ranges), the shuffled key ranges by name, the
#: bucketed two-pass (plain SQL), and the single window.
STRATEGIES = ("scan", "ranges", "bucketed", "global")
#: The plan ``replay`` runs unless told: the fastest measured at local[2] (docs/performance.md).
DEFAULT_STRATEGY = "scan"
#: Columns the late frame adds to the input's.
LATE_COLUMNS = ("cti", "action", "adjusted_start")

_PRIOR = "_gl_prior"
_DELAYED = "_gl_d"
_BUCKET = "_gl_bucket"
_BEFORE_BUCKET = "_gl_before_bucket"
_WIDTH = "_gl_w"
_ROWS_PER_BUCKET = 250_000
_MIN_BUCKETS = 8


def resolve_spark_policy(policy: str | Policy, delay: DurationLike | None, on_late: str
                         ) -> Policy:
    """The policy object for ``policy`` (a name or a built policy), checked for batch use.

    Runs on the driver. Raises ``NotImplementedError`` naming the rule for a policy whose
    state is not a running maximum (``min``, ``quantile``, ``goldilocks(max_ahead=…)``): it
    has no prefix-scan form.
    """
    if isinstance(policy, str):  # the engine's defaults (goldilocks.replay): goldilocks 5m, else 0
        family = policy.partition(":")[0]
        if family in ("min", "quantile"):  # no batch form, whatever the delay: say that first
            built = resolve_policy(policy, on_late=on_late)
            delay = None
        elif delay is None:
            delay = "5m" if policy == "goldilocks" else 0
        if delay is not None:
            built = resolve_policy(policy, delay=delay, on_late=on_late)
    else:
        if delay is not None and to_duration_ns(delay, what="replay: delay") != policy.delay:
            raise InputError(
                f"replay: delay={delay!r} disagrees with the given policy's delay "
                f"{format_duration_ns(policy.delay)}; pass one or the other"
            )
        built = policy
    inner, _ = inner_policy(built)  # with_edges(policy): the plans run the policy it wraps
    if inner.name == "min":
        raise NotImplementedError(
            "replay: the 'min' policy has no Spark batch form. Its CTI is the minimum over the "
            "latest CTIs of the inputs live at each row (inputs join and leave), so a row's "
            "CTI depends on every input's history, not on a running maximum: there is no "
            "associative prefix scan to split over buckets. Replay it with goldilocks.replay, or "
            "stream it through spark_adapter.watermark_stage, which runs the policy's own step."
        )
    if callable(getattr(inner, "run_source_columns", None)):  # quantile, max_ahead
        rule = ("goldilocks(max_ahead=…)" if inner.name == "goldilocks"
                else f"the {inner.name!r} rule")
        raise NotImplementedError(
            f"replay: {rule} has no Spark batch form. Its CTI is an order statistic over the "
            "latest CTIs of the inputs live at each row (TS §2.5, §2.6): which input sent "
            "each CTI matters, so it is not a running maximum and does not split into a "
            "prefix scan over buckets. Replay the log with goldilocks.replay (its columnar "
            "path runs the rule), or run it in Spark through "
            "spark_adapter.watermark_stage(..., policy=...), one task per clock group."
        )
    if inner.name not in ("goldilocks", "max"):
        raise NotImplementedError(
            f"replay: policy {inner.name!r} has no Spark batch form; only running-maximum "
            "policies ('goldilocks', 'max') split into a bucketed prefix scan"
        )
    return built


def _check_columns(df: DataFrame, needed: Sequence[str], who: str) -> None:
    missing = [name for name in needed if name not in df.columns]
    if missing:
        raise InputError(
            f"{who}: the DataFrame lacks column(s) {', '.join(missing)}; expected the event-log "
            f"schema (spark_adapter.schema.EVENT_LOG_SCHEMA), got {', '.join(df.columns)}"
        )


def _bucketed_prior(df: DataFrame, groups: list[str], order: list[str],
                    buckets: int | None) -> DataFrame:
    """Add ``_PRIOR`` by the two-pass bucketed prefix maximum."""
    key = F.col(order[0])
    spark = df.sparkSession
    if buckets is None:
        shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
        target = F.greatest(F.lit(max(_MIN_BUCKETS, 2 * shuffle)),
                            F.ceil(F.count(F.lit(1)) / F.lit(_ROWS_PER_BUCKET)))
    else:
        target = F.lit(buckets)
    # The key range split into ``target`` equal widths. Decimal arithmetic: the span of an
    # int64 key can exceed int64. One row; joined to every row as a broadcast constant.
    span = F.max(key).cast("decimal(20,0)") - F.min(key).cast("decimal(20,0)")
    width = df.agg(
        F.greatest(F.lit(1), F.floor(span / target) + F.lit(1)).cast("bigint").alias(_WIDTH))
    # ``div`` rounds toward zero: still monotone in the key, and it cannot overflow.
    rows = df.crossJoin(F.broadcast(width)).withColumn(
        _BUCKET, F.expr(f"`{order[0]}` div {_WIDTH}"))

    by = [F.col(g) for g in groups]
    # The width is one value per replay, computed from the data: grouping by it changes no
    # group, and partitioning by it gives the window over the bucket rows a key Spark cannot
    # fold away. Without group columns those rows still go to one task, as intended (one row
    # per bucket); an empty or constant key (``lit(0)``, which the optimiser removes) made
    # Spark warn "No Partition Defined for Window operation" at every action — a warning
    # about moving all the data to one partition, while the log rows never take this path.
    maxima = rows.groupBy(*by, F.col(_BUCKET), F.col(_WIDTH)).agg(
        F.max(_DELAYED).alias("_gl_bmax"))
    earlier_buckets = (Window.partitionBy(*by, F.col(_WIDTH)).orderBy(_BUCKET)
                       .rowsBetween(Window.unboundedPreceding, -1))
    prefix = maxima.select(*by, F.col(_BUCKET),
                           F.max("_gl_bmax").over(earlier_buckets).alias(_BEFORE_BUCKET))
    join_on = [*groups, _BUCKET]
    if not groups:
        prefix = F.broadcast(prefix)
    rows = rows.drop(_WIDTH).join(prefix, on=join_on, how="inner")

    earlier_rows = (Window.partitionBy(*by, F.col(_BUCKET)).orderBy(*order)
                    .rowsBetween(Window.unboundedPreceding, -1))
    prior = F.greatest(F.col(_BEFORE_BUCKET), F.max(_DELAYED).over(earlier_rows))
    return rows.withColumn(_PRIOR, prior).drop(_BUCKET, _BEFORE_BUCKET)


def _global_prior(df: DataFrame, groups: list[str], order: list[str]) -> DataFrame:
    """Add ``_PRIOR`` by one window over the whole log (per group): the reference strategy.
    Without groups Spark warns "No Partition Defined for Window operation", and rightly: it
    moves every row to one partition, which is what this strategy is kept to show."""
    window = Window.orderBy(*order).rowsBetween(Window.unboundedPreceding, -1)
    if groups:
        window = window.partitionBy(*groups)
    return df.withColumn(_PRIOR, F.max(_DELAYED).over(window))


def replay(df: DataFrame, *, delay: DurationLike | None = None,
           policy: str | Policy = "goldilocks",
           on_late: str = "drop", group_col: str | Sequence[str] | None = None,
           order_by: Sequence[str] | None = None, buckets: int | None = None,
           strategy: str = DEFAULT_STRATEGY, ranges: int | None = None
           ) -> tuple[DataFrame, DataFrame]:
    """Replay an event-log DataFrame under a time policy; return ``(events, late)``.

    ``strategy="scan"`` (default): runs one small job on the driver (per input partition,
    its runs in arrival order); when the partitions are disjoint arrival ranges, pass 2
    decides each where it was read (``spark_adapter.batch_splits``), else the range plan
    runs (``strategy="ranges"``, ``spark_adapter.batch_plan``: two or three more small jobs,
    then a shuffle into key ranges, each sorted). Pass 2 is lazy: a scalar Arrow UDF over
    the kind, start and end (and the order, or the range) runs the engine's columnar kernel
    from each range's carried-in state (the policy object is pickled to the executors).
    ``strategy="bucketed"`` and ``"global"`` only build plain Spark SQL plans, evaluated
    lazily; no Python runs on the executors. All give the same rows, and all refuse a row
    with a null order column (the SQL plans when the job runs, naming the row).

    ``df``: the event-log schema (``read_event_log``) or any frame with ``kind``, ``start``,
    ``end`` and the order columns. ``delay``: a duration (``"5m"``, ``timedelta``, seconds:
    ``engine.times.DurationLike``);
    ``None`` means the engine's default (5 minutes for goldilocks, 0 for ``max``).
    ``policy``: ``"goldilocks"`` (default), ``"max"`` (delay 0), or a built policy object;
    ``"min"`` raises ``NotImplementedError`` (no prefix-scan form; see the message).
    ``on_late``: ``"drop"`` or ``"adjust"``. ``group_col``: one or more columns, each value an
    independent clock (a fleet, a site) replayed in parallel. ``order_by``: the arrival order,
    by default ``ORDER_COLUMNS`` when present, else ``seq``; its first column must be an
    integer (it is bucketed); rows must be unique under it within a group. ``ranges``: how
    many key ranges the range plan decides in parallel (default: 4 per core, at least one
    per million rows); given, it selects the range plan. ``buckets``: how many key-range buckets the bucketed plan uses (default:
    enough for the shuffle partitions and ~250k rows each).

    ``events`` holds what the engine emits, each row with every input column plus ``cti``, the
    CTI in force after it (null before the first CTI): on-time inserts unchanged, adjusted
    inserts with ``start`` clipped, and each emitted CTI as ``kind="cti"`` with its delayed
    time in ``start`` and no ``source``, ``end`` or ``payload``. ``join``/``leave`` rows and
    CTIs that do not advance time are not emitted. ``late`` holds every late insert as it
    arrived, plus ``cti`` (the CTI it violated), ``action`` (``"dropped"``/``"adjusted"``) and
    ``adjusted_start`` (for ``"adjusted"``). A frame with an ``id`` column (every
    ``read_event_log`` frame) may hold edges (TS §7; ``spark_adapter.batch_edges``): under the
    scan and range plans they are decided as the engine's replay decides them, emitted edges
    in ``events``, and ``late`` has two more columns, ``adjusted_end`` and ``reason``, for the
    edges' records (``unmatched`` ones included, the start edges never closed as they went
    out); the other plans, and a frame without ``id``, fail on an edge row with the reason.
    Neither frame is sorted: order by ``order_by``.
    The two frames share their plan, so writing both decides the log twice: ``write_replay``
    decides it once.
    """
    decided, split = _decided(df, delay=delay, policy=policy, on_late=on_late,
                              group_col=group_col, order_by=order_by, buckets=buckets,
                              strategy=strategy, ranges=ranges)
    return split(decided)


def _decided(df: DataFrame, *, delay: DurationLike | None, policy: str | Policy, on_late: str,
             group_col: str | Sequence[str] | None, order_by: Sequence[str] | None,
             buckets: int | None, strategy: str, ranges: int | None
             ) -> tuple[DataFrame, Callable[[DataFrame], tuple[DataFrame, DataFrame]]]:
    """``replay``'s checks and plan: every row with its decision, and the function that
    selects ``(events, late)`` from such rows."""
    built = resolve_spark_policy(policy, delay, on_late)
    if strategy not in STRATEGIES:
        raise InputError(f"replay: strategy={strategy!r}; expected one of {STRATEGIES}")
    groups = [group_col] if isinstance(group_col, str) else list(group_col or ())
    if order_by is None:
        order = list(ORDER_COLUMNS) if ORDER_COLUMNS[0] in df.columns else ["seq"]
    else:
        order = list(order_by)
    _check_columns(df, ["kind", "start", "end", *order, *groups], "replay")
    first = df.schema[order[0]].dataType.typeName()
    if first not in ("long", "integer", "short", "byte"):
        raise InputError(
            f"replay: order column {order[0]!r} has type {first}; expected an integer "
            "(the arrival order is bucketed by ranges of it)"
        )
    internal = [c for c in df.columns if c.startswith("_gl_")]
    if internal:
        raise InputError(f"replay: column name(s) {internal} use the reserved prefix '_gl_'")

    if ranges is not None and (type(ranges) is not int or ranges < 1):
        raise InputError(f"replay: ranges={ranges!r}; expected a count >= 1")
    if buckets is not None and buckets < 1:
        raise InputError(f"replay: buckets={buckets!r}; expected a count >= 1")
    inner, max_open = inner_policy(built)
    columns = df.columns
    edged = "id" in columns  # TS §7.1: edges are matched by (source, id)
    if not edged:
        df = refuse_edges(df, "replay: an edge row (kind 'start' or 'end') needs an 'id' column "
                              "(TS §7.1: an end edge closes the start edge of its source with "
                              "its id); the frame has none")
    elif strategy not in ("scan", "ranges"):
        df = refuse_edges(df, f"replay: strategy={strategy!r} has no form for edge rows (kind "
                              "'start' or 'end', TS §7.9); replay them with strategy='scan' or "
                              "'ranges'")
    if strategy in ("scan", "ranges"):
        plan = edge_plan(df, inner, max_open, groups, order) if edged else None
        if plan is not None and plan.edges:
            df = mask_edges(df, order)  # TS §7: decided after pass 2, per (source, id)
        else:
            plan = None
        decided = None
        if strategy == "scan" and ranges is None:  # no shuffle when the partitions allow it
            decided = splits_decided(df, inner, groups, order)
        if decided is None:
            decided = scan_decided(df, inner, groups, order, ranges)
        return decided, partial(_split_decided, columns=columns, edged=edged, plan=plan,
                                policy=inner, max_open=max_open, groups=groups, order=order)
    # A null order key would sort first in these plans' windows, decided before every
    # other row; the scan plans refuse such a row, and so do these, per row. # TS §5.3
    rows = df.withColumn(_DELAYED, refuse_null_order(delayed_cti(inner.delay), order))
    if strategy == "bucketed":
        rows = _bucketed_prior(rows, groups, order, buckets)
    else:
        rows = _global_prior(rows, groups, order)
    return rows, partial(_split, columns=columns, adjust=inner.on_late == "adjust",
                         edged=edged)


def write_replay(df: DataFrame, events_path: str, late_path: str, *, format: str = "parquet",
                 mode: str = "errorifexists", **options: Any) -> None:
    """``replay(df, **options)`` with both outputs written, deciding every row once.

    ``replay`` returns two lazy frames over the same decisions, so writing one and then the
    other decides the log twice (the whole plan runs per action). Here the decided rows are
    persisted (memory, spilling to disk) while the events are written, the late rows are
    written from them, and they are released. ``format`` and ``mode`` are the
    ``DataFrameWriter``'s (``"noop"`` computes every row and writes nothing).
    """
    from pyspark import StorageLevel

    if mode == "errorifexists":  # Spark's other name of "error", which Spark Connect lacks
        mode = "error"
    decided, split = _decided(df, **{**_REPLAY_DEFAULTS, **options})
    decided = decided.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        events, late = split(decided)
        events.write.format(format).mode(mode).save(events_path)
        late.write.format(format).mode(mode).save(late_path)
    finally:
        decided.unpersist()


#: ``replay``'s keyword defaults, for ``write_replay``.
_REPLAY_DEFAULTS: dict[str, Any] = {
    "delay": None, "policy": "goldilocks", "on_late": "drop", "group_col": None,
    "order_by": None, "buckets": None, "strategy": DEFAULT_STRATEGY, "ranges": None}


def _edge_late_columns(late: DataFrame, edged: bool) -> DataFrame:
    """The late frame of a frame that can hold edges has ``EDGE_LATE_COLUMNS`` too: null on
    the inserts (their records have no reason under the batch form's policies)."""
    if not edged:
        return late
    return late.select("*", F.lit(None).cast("bigint").alias("adjusted_end"),
                       F.lit(None).cast("string").alias("reason"))


def _split(rows: DataFrame, columns: list[str], adjust: bool, edged: bool = False
           ) -> tuple[DataFrame, DataFrame]:
    prior = F.col(_PRIOR)
    d = F.col(_DELAYED)
    kind = F.col("kind")
    is_cti = kind == F.lit(KIND_CTI)
    is_insert = kind == F.lit(KIND_INSERT)
    late = is_insert & prior.isNotNull() & (F.col("start") < prior)  # TS §2.4
    if adjust:  # TS §3.2: an interval that still overlaps; a point (no end) never does
        clipped = late & F.col("end").isNotNull() & (F.col("end") > prior)
    else:
        clipped = F.lit(False)
    emitted_cti = is_cti & (prior.isNull() | (d > prior))  # TS §2.1
    keep = (is_insert & ~late) | clipped | emitted_cti

    replaced = {
        "source": F.when(is_cti, F.lit(None).cast("string")).otherwise(F.col("source")),
        "start": F.when(is_cti, d).when(clipped, prior).otherwise(F.col("start")),
        "end": F.when(is_cti, F.lit(None).cast("bigint")).otherwise(F.col("end")),
        "payload": F.when(is_cti, F.lit(None).cast("string")).otherwise(F.col("payload")),
    }
    event_cols = [replaced[c].alias(c) if c in replaced else F.col(c) for c in columns]
    cti_after = F.when(is_cti, F.greatest(prior, d)).otherwise(prior)
    events = rows.where(keep).select(*event_cols, cti_after.alias("cti"))

    action = F.when(clipped, F.lit("adjusted")).otherwise(F.lit("dropped"))
    late_rows = rows.where(late).select(
        *[F.col(c) for c in columns], prior.alias("cti"), action.alias("action"),
        F.when(clipped, prior).alias("adjusted_start"))
    return events, _edge_late_columns(late_rows, edged)


def _split_decided(decided: DataFrame, columns: list[str], edged: bool = False,
                   plan: EdgePlan | None = None, policy: Policy | None = None,
                   max_open: int = 0, groups: Sequence[str] = (), order: Sequence[str] = ()
                   ) -> tuple[DataFrame, DataFrame]:
    """``(events, late)`` from rows the scan decided (``ACTION``, ``CTI_AFTER``): the same
    columns and values as ``_split`` gives from the SQL plans. With a ``plan`` (the log has
    edges), the edge rows are decided per key (``batch_edges``) and joined to the others."""
    if plan is None:
        events, late = _split_inserts(decided, columns)
        return events, _edge_late_columns(late, edged)
    assert policy is not None
    events, late = _split_inserts(decided.where(F.col(EDGE_KIND).isNull()), columns)
    edges = decide_edges(decided, policy, max_open, list(groups), list(order), columns, plan)
    side = F.col(SIDE)
    events = events.unionByName(edges.where(side == 0).select(*columns, "cti"))
    late = _edge_late_columns(late, True).unionByName(edges.where(side == 1).select(
        *columns, *LATE_COLUMNS, *EDGE_LATE_COLUMNS))
    return events, late


def _split_inserts(decided: DataFrame, columns: list[str]) -> tuple[DataFrame, DataFrame]:
    """``(events, late)`` of the rows of ``decided`` that are not edges."""
    action = F.col(ACTION)
    cti = F.col(CTI_AFTER)
    is_cti = action == F.lit(CTI_EMIT)
    clipped = action == F.lit(EMIT_ADJUSTED)
    replaced = {
        "source": F.when(is_cti, F.lit(None).cast("string")).otherwise(F.col("source")),
        "start": F.when(is_cti | clipped, cti).otherwise(F.col("start")),
        "end": F.when(is_cti, F.lit(None).cast("bigint")).otherwise(F.col("end")),
        "payload": F.when(is_cti, F.lit(None).cast("string")).otherwise(F.col("payload")),
    }
    event_cols = [replaced[c].alias(c) if c in replaced else F.col(c) for c in columns]
    events = decided.where(action.isin(EMIT, EMIT_ADJUSTED, CTI_EMIT)).select(
        *event_cols, cti.alias("cti"))
    late = decided.where(action.isin(DROP_LATE, EMIT_ADJUSTED)).select(
        *[F.col(c) for c in columns], cti.alias("cti"),
        F.when(clipped, F.lit("adjusted")).otherwise(F.lit("dropped")).alias("action"),
        F.when(clipped, cti).alias("adjusted_start"))
    return events, late


def read_event_log(spark: SparkSession, path: str | Sequence[str], **options: Any) -> DataFrame:
    """Read event-log files into a DataFrame with ``EVENT_LOG_SCHEMA``.

    Runs on the driver (listing files, planning spans of large JSON Lines/CSV files); the
    files are parsed on the executors, a task per file or span, by the engine's own reader.
    See ``spark_adapter.source.read_event_log`` for the options.
    """
    from spark_adapter.source import read_event_log as _read

    return _read(spark, path, **options)
