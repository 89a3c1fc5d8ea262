"""The watermarking stage for Structured Streaming: the engine's policy in Spark's state store.

``watermark_stage(stream_df, delay=...)`` runs the time policy over a streaming DataFrame of
event-log rows (``EVENT_LOG_SCHEMA``, e.g. from the ``"goldilocks"`` source) with
``applyInPandasWithState`` (append mode, no timeout, the default state store). Per clock
group and micro-batch, the rows are sorted by arrival (``order_by``) and fed to the policy
(DESIGN §1: the same policy object as the engine's; goldilocks/max through its columnar
kernel, any other policy — ``min`` included — through its ``step``). The policy state is kept
in the state store, so it survives a restart from a checkpoint.

Every row that the engine would emit or report comes out, with the input columns and:

- ``cti``: the CTI in force after the row (the last emitted CTI; null before the first);
- ``late_action``: null on time, ``"dropped"`` or ``"adjusted"`` for a late insert (TS §3.3);
- ``original_start``: the start as it arrived (differs from ``start`` when adjusted);
- ``event_time``: ``start`` as a timestamp (microseconds, floored);
- ``cti_time``: ``cti`` as a timestamp (1970-01-01 before the first CTI: Spark's "none").

Emitted CTIs are rows with ``kind="cti"``, their delayed time in ``start`` and no source;
CTIs that do not advance time, ``join`` and ``leave`` rows produce nothing.

Spark's watermark follows the CTI: the stage declares ``withWatermark("cti_time", "1
millisecond")`` (a CTI keeps an event at its time; Spark's watermark does not), so Spark's
watermark is exactly ``cti_to_watermark_ms(cti)`` — reported in
``query.lastProgress["eventTime"]["watermark"]`` from the batch after the one that emitted the
CTI. Spark allows one watermark per linear plan, so ``event_time`` is marked as an event-time
column of that same watermark (Spark's column metadata): downstream aggregations may group by
``window("event_time", …)`` in append mode, and Spark closes those windows as the CTI passes
their end — never by max(event time).

Limits: one task per clock group per micro-batch (a group's rows of one batch are in memory
in that task); groups run in parallel. See ``docs/spark.md``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (BooleanType, ByteType, IntegerType, LongType, ShortType,
                               StructField, StructType)

from engine.errors import InputError
from engine.policy import Policy
from operators.policies import resolve_policy
from spark_adapter.schema import KIND_CTI, ORDER_COLUMNS, WATERMARK_THRESHOLD
from spark_adapter.session import use_driver_python

__all__ = ["watermark_stage", "split_late", "StageConfig", "run_stage_batch"]

_CLOCK = "_gl_clock"
_NULL = "_gl_null_"
_STATE_SCHEMA = "cti BIGINT, blob BINARY"
_INTEGRAL = (LongType, IntegerType, ShortType, ByteType)
_DELAY_KEY = "spark.watermarkDelayMs"  # Spark's EventTimeWatermark.delayKey
_THRESHOLD_MS = 1  # WATERMARK_THRESHOLD in ms


@dataclass(frozen=True)
class StageConfig:
    """What the executor-side function needs; pickled with it to every task.

    ``policy``: a registered name (rebuilt on the executor with ``delay``/``on_late``) or a
    built policy object (pickled). ``order``: the sort columns within a micro-batch.
    ``integral``: nullable integer columns shipped as (value, is-null) pairs, because pandas
    would turn them into float64 and lose nanoseconds.
    """

    policy: Any
    delay: int
    on_late: str
    order: tuple[str, ...]
    integral: tuple[str, ...]

    def build(self) -> Policy:
        if isinstance(self.policy, str):
            return resolve_policy(self.policy, delay=self.delay, on_late=self.on_late)
        return self.policy


def _columnar(policy: Policy) -> bool:
    import numpy as np

    run = getattr(policy, "run_columns", None)
    if run is None:
        return False
    empty = np.zeros(0, np.int64)
    return run(np.zeros(0, np.bool_), empty, empty) is not None


def run_stage_batch(config: StageConfig, pdf: Any, cti: int | None, blob: bytes | None,
                    policy: Policy | None = None) -> tuple[Any, int | None, bytes | None]:
    """One clock group's micro-batch: ``(output frame, cti, blob)``. Runs on an executor.

    ``pdf`` is the group's rows (pandas, integral columns as value/null pairs); ``cti`` the
    last emitted CTI and ``blob`` the pickled policy state (``None`` before the first batch).
    Policies with a columnar form (goldilocks, max) run ``run_columns`` with that state; the
    others run ``step`` row by row. Pure: the same inputs give the same outputs.
    """
    import numpy as np
    import pandas as pd

    from engine.event import CTI, INTERVAL, POINT, Event, LateRecord
    from engine.policy import CTI_EMIT, CTI_SUPPRESS, DROP_LATE, EMIT_ADJUSTED

    policy = policy or config.build()
    pdf = pdf.sort_values(list(config.order), kind="stable").reset_index(drop=True)
    n = len(pdf)
    kind = pdf["kind"].to_numpy(dtype=object)
    start = pdf["start"].to_numpy(dtype=np.int64)
    has_end = ~pdf[_NULL + "end"].to_numpy(dtype=bool)
    end_v = pdf["end"].to_numpy(dtype=np.int64)
    keep = np.zeros(n, dtype=bool)
    new_start = start.copy()
    action = np.full(n, None, dtype=object)
    cti_after = np.zeros(n, dtype=np.int64)
    has_cti = np.zeros(n, dtype=bool)
    emits_cti = np.zeros(n, dtype=bool)

    state = pickle.loads(blob) if blob is not None else policy.initial()
    if _columnar(policy):
        idx = np.flatnonzero((kind == "insert") | (kind == KIND_CTI))  # join/leave: no-ops
        is_cti = kind[idx] == KIND_CTI
        s = start[idx]
        e = np.where(has_end[idx], end_v[idx], s + 1)
        codes, after, state = policy.run_columns(is_cti, s, e, state)  # type: ignore[attr-defined]
        seen = (np.cumsum(is_cti) > 0) | (cti is not None)
        keep[idx] = codes != CTI_SUPPRESS
        # an emitted CTI starts at its delayed time, an adjusted insert at the CTI it
        # violated; ``after`` holds both (operators.columnar)
        new_start[idx] = np.where((codes == CTI_EMIT) | (codes == EMIT_ADJUSTED), after, s)
        act = np.full(len(idx), None, dtype=object)
        act[codes == DROP_LATE] = "dropped"
        act[codes == EMIT_ADJUSTED] = "adjusted"
        action[idx] = act
        emits_cti[idx] = codes == CTI_EMIT
        # the CTI in force after every row: that of the latest insert/CTI row at or before it
        last = np.searchsorted(idx, np.arange(n), side="right") - 1
        some = last >= 0
        cti_after[some] = after[last[some]]
        has_cti[some] = seen[last[some]]
        if cti is not None:
            cti_after[~some] = cti
            has_cti[:] = True
        new_cti = int(cti_after[-1]) if n and has_cti[-1] else cti
        new_blob = pickle.dumps(state)
    else:
        source = pdf["source"].to_numpy(dtype=object)
        current = cti
        for i in range(n):
            k = kind[i]
            if k == "insert":
                ev = (Event(INTERVAL, int(start[i]), int(end_v[i]), None, source[i]) if has_end[i]
                      else Event(POINT, int(start[i]), int(start[i]) + 1, None, source[i]))
                state, out = policy.step(state, ev)
            elif k == KIND_CTI:
                state, out = policy.step(state, Event(CTI, int(start[i]), None, None, source[i]))
            elif k == "join":
                state, out = policy.join(state, source[i])
            else:
                state, out = policy.leave(state, source[i])
            for item in out:
                if isinstance(item, LateRecord):
                    keep[i] = True
                    action[i] = item.action
                    if item.adjusted is not None:
                        new_start[i] = item.adjusted.start
                elif item.kind == CTI:
                    keep[i] = True
                    emits_cti[i] = True
                    new_start[i] = item.start
                    current = item.start
                else:
                    keep[i] = True
                    new_start[i] = item.start
            if current is not None:
                cti_after[i] = current
                has_cti[i] = True
        new_cti = current
        new_blob = pickle.dumps(state)

    out = pdf.copy()
    out["original_start"] = start
    out["start"] = new_start
    out[_NULL + "original_start"] = pdf[_NULL + "start"]
    out["late_action"] = action
    out["cti"] = cti_after
    out[_NULL + "cti"] = ~has_cti
    if emits_cti.any():  # an emitted CTI has no source, end or payload (merged-stream CTI)
        out["kind"] = np.where(emits_cti, KIND_CTI, kind)
        for col in ("source", "payload"):
            if col in out.columns:
                out[col] = out[col].where(~emits_cti, None)
        out[_NULL + "end"] = out[_NULL + "end"] | emits_cti
        out[_NULL + "start"] = out[_NULL + "start"] & ~emits_cti
    return out[keep].reset_index(drop=True), new_cti, new_blob


def _floor_micros(col: str) -> Column:
    """ns -> µs rounding down, without overflow (``div`` alone rounds toward zero)."""
    return F.expr(f"`{col}` div 1000 - if(`{col}` % 1000 < 0, 1, 0)")


def watermark_stage(stream_df: DataFrame, *, delay: object = None,
                    policy: str | Policy = "goldilocks", on_late: str = "drop",
                    group_col: str | None = None,
                    order_by: Sequence[str] | None = None) -> DataFrame:
    """The policy as a stateful streaming stage; returns the marked stream (module docstring).

    Runs on the driver and builds the plan; the per-group function runs on executors and is
    pickled with a ``StageConfig`` (the policy by name, or the policy object: it must be
    picklable). ``delay``/``policy``/``on_late`` as in ``replay`` (``None`` delay: the engine's
    default), but every policy works here, ``min`` included. ``group_col``: one independent
    clock per value (one task per group per micro-batch); default one clock. ``order_by``: the
    arrival order within a micro-batch, default ``ORDER_COLUMNS`` (else ``seq``); across
    micro-batches the order is the source's.

    The result is append-only; pass it to ``split_late`` to send late rows to a second sink.
    """
    from pyspark.sql.streaming.state import GroupStateTimeout

    if not stream_df.isStreaming:
        raise InputError("watermark_stage: expected a streaming DataFrame (spark.readStream…); "
                         "for a recorded log use spark_adapter.replay")
    use_driver_python(stream_df.sparkSession)  # before per_group is shipped with its Python
    if isinstance(policy, str):  # the engine's defaults (goldilocks.replay)
        if delay is None:
            delay = "5m" if policy == "goldilocks" else 0
        built = resolve_policy(policy, delay=delay, on_late=on_late)
        config_policy: Any = policy
    else:
        built = policy
        config_policy = policy
    if order_by is None:
        order = tuple(ORDER_COLUMNS) if ORDER_COLUMNS[0] in stream_df.columns else ("seq",)
    else:
        order = tuple(order_by)
    needed = ["kind", "start", "end", "source", *order] + ([group_col] if group_col else [])
    missing = [c for c in needed if c not in stream_df.columns]
    if missing:
        raise InputError(f"watermark_stage: the stream lacks column(s) {', '.join(missing)}; "
                         "expected the event-log schema (spark_adapter.schema.EVENT_LOG_SCHEMA)")
    taken = [c for c in ("cti", "late_action", "original_start", "event_time", "cti_time")
             if c in stream_df.columns] + [c for c in stream_df.columns if c.startswith("_gl_")]
    if taken:
        raise InputError(f"watermark_stage: input column(s) {taken} clash with the stage's")

    integral = tuple(f.name for f in stream_df.schema.fields if isinstance(f.dataType, _INTEGRAL))
    config = StageConfig(config_policy, built.delay, built.on_late, order, integral)

    # Integral columns travel as (value, is-null): pandas would make nullable ints float64.
    shipped = stream_df.select(
        *[F.coalesce(F.col(c), F.lit(0).cast(stream_df.schema[c].dataType)).alias(c)
          if c in integral else F.col(c) for c in stream_df.columns],
        *[F.col(c).isNull().alias(_NULL + c) for c in integral])
    key = group_col or _CLOCK
    if group_col is None:
        shipped = shipped.withColumn(_CLOCK, F.lit(0))
    fields = list(shipped.schema.fields)
    fields += [StructField("cti", LongType(), False), StructField("late_action", stream_df.schema["kind"].dataType, True),
               StructField("original_start", LongType(), False)]
    fields += [StructField(_NULL + c, BooleanType(), False) for c in ("cti", "original_start")]
    out_schema = StructType(fields)

    def per_group(group: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        cti, blob = state.get if state.exists else (None, None)
        pdf = pd.concat(list(frames), ignore_index=True)
        out, cti, blob = run_stage_batch(config, pdf, cti, blob, policy=_policy_cache(config))
        state.update((cti, blob))
        yield out[[f.name for f in out_schema.fields]]

    staged = shipped.groupBy(key).applyInPandasWithState(
        per_group, out_schema, _STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)
    restored = {c: F.when(F.col(_NULL + c), F.lit(None).cast(staged.schema[c].dataType))
                .otherwise(F.col(c)).alias(c) for c in (*integral, "cti", "original_start")}
    keep = [c for c in staged.columns if not c.startswith(_NULL) and c != _CLOCK or c == group_col]
    staged = staged.select(*[restored.get(c, F.col(c)) for c in keep])
    cti_time = F.timestamp_micros(F.coalesce(_floor_micros("cti"), F.lit(0).cast("bigint")))
    staged = staged.select("*", cti_time.alias("cti_time")).withWatermark(
        "cti_time", WATERMARK_THRESHOLD)
    # ``event_time`` is marked as an event-time column of that same watermark (Spark's
    # metadata key), so downstream aggregations may group by ``window("event_time", …)``:
    # Spark then closes event-time windows by the CTI, not by max(event time).
    marked = {_DELAY_KEY: _THRESHOLD_MS}
    return staged.select(
        *[c for c in staged.columns if c != "cti_time"],
        F.timestamp_micros(_floor_micros("start")).alias("event_time", metadata=marked),
        "cti_time")


_POLICIES: dict = {}


def _policy_cache(config: StageConfig) -> Policy:
    """The built policy, once per Python worker (executor side)."""
    key = (repr(config.policy), config.delay, config.on_late)
    found = _POLICIES.get(key)
    if found is None:
        found = _POLICIES[key] = config.build()
    return found


def split_late(staged: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(events, late)`` from ``watermark_stage``'s output, for two sinks.

    ``events``: what the engine emits (on-time and adjusted inserts, emitted CTIs) with the
    input columns, ``cti``, ``event_time`` and ``cti_time``. ``late``: every late insert as it
    arrived (``start`` is the original), with ``cti`` (the CTI it violated), ``action`` and
    ``adjusted_start`` — the shape of ``replay``'s late frame and the engine's late file. Each
    is a lazy view of the same stream: starting both runs the stage once per query (give each
    its own checkpoint), or write both from one ``foreachBatch``. Runs on the driver.
    """
    missing = [c for c in ("late_action", "original_start", "cti") if c not in staged.columns]
    if missing:
        raise InputError(f"split_late: expected watermark_stage's output; lacks {missing}")
    action = F.col("late_action")
    events = staged.where(action.isNull() | (action == F.lit("adjusted"))).drop(
        "late_action", "original_start")
    columns = [c for c in staged.columns if c not in ("late_action", "original_start")]
    late = staged.where(action.isNotNull()).select(
        *[F.col("original_start").alias("start") if c == "start" else F.col(c) for c in columns],
        action.alias("action"),
        F.when(action == F.lit("adjusted"), F.col("start")).alias("adjusted_start"))
    return events, late
