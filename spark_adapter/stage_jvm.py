"""The watermark stage's JVM plan: the parallel plan's decisions made by JVM functions, with no
row crossing into Python (driver side; the functions are ``spark_adapter/java``).

Spark's cost for the Python plans is not the decisions but the round trip of every row
through a Python worker (``docs/decisions.md``). For the most common stage — one clock, a
device's every reading its own CTI (``every_events=1``), goldilocks or max, points in a
timestamp column — the decision needs two columns, a running maximum per device and the CTI
at the start of the micro-batch, and runs as scalar JVM functions in Spark's generated code.
The plan::

    input ─▶ project(…, code = decide(source, unix_micros(time)))
          ─▶ project(_gl_wm = the CTI known after the row: judged(code), or for an on-time
                     row the later of that and time − (source delay + delay),
                     _gl_kept = code = 0 OR keepLate(struct(user columns), code,
                                                     broke(source, code)))
          ─▶ withWatermark(_gl_wm, 1 ms) ─▶ observe(name, cti, rows, late, rejected)
          ─▶ where(_gl_kept)
          ─▶ select(user columns, cti = judged(code))    (the time column marked for windows)

- ``decide`` judges a row against the state at the start of the micro-batch, exactly as the
  parallel plan (``stage_core.ParallelDecider``) does for these options, and returns its
  reason code (0: on time); state lives in side files (``StageTask.java``). ``judged`` is
  the CTI in force (the same for every row of a task), ``broke`` the CTI a late row broke.
- ``_gl_wm`` is the CTI known after each row, so Spark's watermark — the maximum over the
  micro-batch, never moving back — and the ``cti`` metric are the CTI at the end of the
  micro-batch, as the Python plan's marker rows make them.
- Late and rejected rows are written by the deciding task to ``late_path`` as Parquet, in the
  Python plan's layout and columns (``LateWriter.java``), or kept in the stream with
  ``late_action`` and ``late_reason`` (``keep_late=True``, without ``_gl_kept``). Written
  before the watermark, where every column is at hand, so that the rows after it carry
  only the columns the user's query reads (Spark prunes the others there).
- ``observe`` stands between the watermark and whatever the user does next: Spark pushes no
  filter through it, so every row reaches the decision and the watermark.
"""

from __future__ import annotations

import os
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DateType, DoubleType,
                               FloatType, IntegerType, LongType, ShortType, StringType,
                               TimestampType)

from spark_adapter.jvm import stage_functions
from spark_adapter.stage_spec import (ACTIONS, DROPPED, MERGED_CTI, NULL_SOURCE, NULL_TIME,
                                      REJECTED, SOURCE_CTI, TIME_RANGE, WM, StageSpec,
                                      fingerprint_lines, reason_text)
from spark_adapter.stage_state import options_record

__all__ = ["jvm_refusal", "options_refusal", "session_refusal", "jvm_stage", "CODE", "LATE_TYPES",
           "ROW_GROUP_BYTES"]

#: the JVM plan's internal columns: the row's reason code (0: on time), and whether it stays
#: in the stream (with ``late_path``: on time)
CODE = "_gl_code"
KEPT = "_gl_kept"
#: the late writer's row group: its memory per task (Parquet buffers one row group)
ROW_GROUP_BYTES = 4 << 20
#: the column types the JVM late writer writes, by their name in ``LateWriter.java``
LATE_TYPES = {StringType: "string", LongType: "long", IntegerType: "int", ShortType: "short",
              ByteType: "byte", DoubleType: "double", FloatType: "float",
              BooleanType: "boolean", TimestampType: "timestamp", DateType: "date",
              BinaryType: "binary"}
_LATE_CODES = {NULL_TIME: REJECTED, TIME_RANGE: REJECTED, NULL_SOURCE: REJECTED,
               SOURCE_CTI: DROPPED, MERGED_CTI: DROPPED}


def jvm_refusal(spec: StageSpec, df: DataFrame) -> str | None:
    """Why the JVM plan cannot run this stage (``None``: it can): an option it has no form
    for, or the session (``session_refusal``). Driver."""
    why = options_refusal(spec, df)
    return why if why is not None else session_refusal(df)


def session_refusal(df: DataFrame) -> str | None:
    """Why the session cannot run the JVM plan (no jar, another version, Spark Connect), or
    ``None``. Driver."""
    _, why = stage_functions(df.sparkSession)
    return why


def options_refusal(spec: StageSpec, df: DataFrame) -> str | None:
    """Which of the stage's options the JVM plan has no form for (``None``: none). Driver."""
    if not spec.streaming:
        return "a batch DataFrame (the JVM plan keeps state per micro-batch of a stream)"
    if spec.plan != "parallel":
        return "the options need the sequential plan (order_by, or a policy or generator " \
               "whose CTIs a micro-batch can pass)"
    if spec.kind_col is not None:
        return "kind_col (the JVM plan has inserts only)"
    if spec.end_col is not None:
        return "end_col (the JVM plan has points only)"
    if spec.group_cols:
        return "group_col (the JVM plan has one clock)"
    if not spec.time_is_timestamp:
        return "an integer time_col (the JVM plan reads a timestamp column)"
    if spec.advance is None:
        return "no CTI generation"
    if not spec.keep_late:
        for field in df.schema.fields:
            if type(field.dataType) not in LATE_TYPES:
                return (f"column {field.name!r} is {field.dataType.simpleString()}: the JVM "
                        "plan writes late rows of flat columns (strings, numbers, booleans, "
                        "timestamps, dates, binary)")
    return None


def _ns_to_timestamp(ns: Column) -> Column:
    """A value of ns since the epoch as a timestamp (floor to µs, as the Python plan)."""
    return F.timestamp_micros(F.call_function("div", ns - F.pmod(ns, F.lit(1000)), F.lit(1000)))


def jvm_stage(df: DataFrame, spec: StageSpec, event_metadata: dict | None) -> DataFrame:
    """The stage's JVM plan over ``df`` (``jvm_refusal`` returned ``None``). Driver."""
    spark = df.sparkSession
    functions, why = stage_functions(spark)
    assert functions is not None, why
    names = spec.name_of
    jvm = spark._jvm
    assert jvm is not None  # stage_functions found the jar through it
    policy_delay = int(spec.policy.delay or 0)
    source_delay = int(dict(spec.advance or ()).get("delay", 0) or 0)
    state_dir = spec.state_dir
    assert state_dir is not None
    late_path = None if spec.keep_late else spec.late_path
    late_names = list(spec.user_columns) + [names["cti"], names["late_action"],
                                            names["late_reason"]]
    late_types = [LATE_TYPES.get(type(f.dataType), "string") for f in df.schema.fields]
    late_types += ["timestamp", "string", "string"]
    reasons = {code: reason_text(code) for code in _LATE_CODES}
    actions = {code: ACTIONS[action] for code, action in _LATE_CODES.items()}
    conf = jvm.goldilocks.spark.StageConf(
        spec.name, _absolute(state_dir), None if late_path is None else _absolute(late_path),
        policy_delay, source_delay, fingerprint_lines(spec.fingerprint()),
        options_record(spec, "jvm"), reasons, actions, late_names, late_types,
        ROW_GROUP_BYTES)
    # a session with a JVM is a classic one: its columns wrap JVM columns
    from pyspark.sql.classic.column import Column as JvmColumn
    from pyspark.sql.classic.column import _to_java_column

    udfs = {role: getattr(functions, role)(conf)
            for role in ("decide", "judged", "broke", "keepLate")}

    def call(role: str, *args: Column) -> Column:
        """The stage's function ``role`` of ``args`` (not registered by name: see
        ``Functions.java`` on why the names are fixed)."""
        return JvmColumn(functions.call(udfs[role], *(_to_java_column(a) for a in args)))

    source = F.col(spec.source_col).cast("string")
    time = F.col(spec.time_col)
    delay_us = -(-(policy_delay + source_delay) // 1000)  # ceil: floor of (ns - delay) / 1000
    decided = df.select("*", call("decide", source, F.unix_micros(time)).alias(CODE))
    code = F.col(CODE)
    judged = call("judged", code)  # evaluated only where a branch needs it
    # the CTI known after a row: the one in force, or an on-time row's start less the delays
    # if that is later; the maximum over the micro-batch is the CTI at its end (the Python
    # plan's marker value, which the `cti` metric reports)
    in_force = _ns_to_timestamp(judged)
    decided = decided.withColumn(
        WM, F.when(code == 0, F.greatest(
            F.timestamp_micros(F.unix_micros(time) - F.lit(delay_us)), in_force))
        .otherwise(in_force))
    user = [F.col(c) for c in spec.user_columns]
    if not spec.keep_late:
        # a late row is written here, where every column is at hand (module docstring)
        decided = decided.withColumn(KEPT, (code == 0) | call(
            "keepLate", F.struct(*user), code, call("broke", source, code)))
    # one sum counts both kinds of late row: late ones in the low 32 bits, rejected above
    packed = F.coalesce(F.sum(F.when(code.isin(SOURCE_CTI, MERGED_CTI), F.lit(1))
                              .when(code != 0, F.lit(1 << 32)).otherwise(F.lit(0))),
                        F.lit(0))
    late = packed % (1 << 32)
    rejected = F.shiftright(packed, 32)
    rows = F.count(F.lit(1))
    decided = decided.withWatermark(WM, "1 millisecond").observe(
        spec.name, F.unix_millis(F.max(WM)).alias("cti"),
        (rows if spec.keep_late else rows - late - rejected).alias("rows"),
        late.alias("late"), rejected.alias("rejected"))
    if spec.keep_late:
        # an on-time row's: the judged CTI. A column, since the conversion below reads it
        # twice and Spark evaluates a nondeterministic function at every use
        kept = decided.withColumn("_gl_broke", call("broke", source, code))
        cti = _ns_to_timestamp(F.col("_gl_broke"))
        action = F.lit(None).cast("string")
        reason = F.lit(None).cast("string")
        for c, a in _LATE_CODES.items():
            action = F.when(code == c, F.lit(ACTIONS[a])).otherwise(action)
            reason = F.when(code == c, F.lit(reasons[c])).otherwise(reason)
        extra = [cti.alias(names["cti"]), action.alias(names["late_action"]),
                 reason.alias(names["late_reason"])]
    else:
        kept = decided.where(F.col(KEPT))
        extra = [_ns_to_timestamp(judged).alias(names["cti"])]
    out = [F.col(c).alias(c, metadata=event_metadata)
           if c == spec.time_col and event_metadata is not None else F.col(c)
           for c in spec.user_columns]
    return kept.select(*out, *extra)


def _absolute(path: str) -> str:
    """A local path made absolute (the JVM and the driver may not share a working
    directory); a URI as given."""
    return path if "://" in path or path.startswith("file:") else os.path.abspath(path)
