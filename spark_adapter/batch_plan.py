"""Batch replay as a parallel prefix scan: the engine's columnar kernel in ``mapInArrow`` tasks.

The Goldilocks state over a recorded log is ``high``, the running maximum of the delayed CTIs
``d = max(start - delay, MIN_TIME)`` in arrival order (DESIGN §5). A running maximum is a
prefix scan, so the log is cut into arrival-ordered *ranges*, each decided by its own task
with the state carried in from the ranges before it::

    job 1   min, max of the order key, row count              one row
    job 2   per fine bucket of the key: rows, max(d)          ranges x 64 rows (per group:
            (per group: a third job, max(d) per group, range)  one row per group and range)
    driver  buckets -> ranges of equal row counts; the carried-in state of every
            (range, group) = max(d) over the group's earlier ranges
    pass 2  rows -> their range (a shuffle), sorted by (range, group, order) inside it;
            mapInArrow: per (range, group) segment, ``policy.run_columns`` (the engine's
            kernel, ``operators.columnar``) from the carried-in state

Every row is decided exactly as the engine's replay decides it (same rows, same late set and
reasons), because the kernel run from the state the earlier rows left is the kernel run over
the whole log (TS §5.1). Ranges are cut at bucket edges, and a bucket is a range of key values:
rows with one order key never straddle two ranges, and ties are broken by the rest of
``order`` inside the range. No task holds the whole log: a range is about a million rows at
most (``ranges`` sets the count), sorted by Spark (spilling if it must), and the Python side
sees Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows one at a time,
keeping one state per (range, group) it has seen. Per-group clocks are segments of the same
ranges: a big group spreads over many ranges, small groups share one, and no group waits for
another.

Supported: the policies whose state is the running maximum of delayed CTIs
(``GoldilocksPolicy``: ``goldilocks`` and ``max``), ``on_late`` drop and adjust. ``min`` has no
such form (its CTI is a minimum over the inputs live at each row; see
``spark_adapter.batch.resolve_spark_policy``).
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ByteType, LongType, StructField, StructType

from engine.errors import InputError
from engine.policy import Policy
from engine.times import MAX_TIME, MIN_TIME
from spark_adapter.schema import KIND_CTI, KIND_INSERT, KIND_JOIN, KIND_LEAVE

__all__ = ["scan_decided", "delayed_cti", "KIND_CODES", "ACTION", "CTI_AFTER", "NO_ACTION"]

#: ``kind`` travels through the scan as a byte: its index here.
KIND_CODES = (KIND_INSERT, KIND_CTI, KIND_JOIN, KIND_LEAVE)
#: Columns pass 2 adds: the engine's action code (``engine.policy``), and the CTI in force
#: after the row (for a late insert: the CTI it violated; null while no CTI was emitted).
ACTION = "_gl_action"
CTI_AFTER = "_gl_cti"
#: The action of a ``join``/``leave`` row: the policy takes no decision on it.
NO_ACTION = 9

_RID = "_gl_rid"
_GID = "_gl_gid"
_D = "_gl_d"
_FINE = 64  # fine buckets per range: ranges of near-equal row counts on skewed keys
_ROWS_PER_RANGE = 1_000_000
_RANGES_PER_CORE = 4  # more ranges than cores: the slowest task is a small part of the work


def delayed_cti(delay: int) -> Column:
    """``max(start - delay, MIN_TIME)`` on CTI rows, null elsewhere; overflow-free (TS §2.2)."""
    start = F.col("start")
    if delay > MAX_TIME:  # every delayed CTI lies below MIN_TIME
        value = F.lit(MIN_TIME)
    else:
        value = F.when(start < F.lit(MIN_TIME + delay), F.lit(MIN_TIME)).otherwise(
            start - F.lit(delay))
    return F.when(F.col("kind") == F.lit(KIND_CTI), value)


def _kind_code(order: Sequence[str]) -> Column:
    """``kind`` as its index in ``KIND_CODES``; any other value fails the job, naming the row."""
    where = F.concat_ws(", ", *[F.concat(F.lit(f"{c}="), F.coalesce(F.col(c).cast("string"),
                                                                      F.lit("null")))
                                for c in order])
    bad = F.raise_error(F.concat(
        F.lit("replay: kind "), F.coalesce(F.concat(F.lit("'"), F.col("kind"), F.lit("'")),
                                           F.lit("null")),
        F.lit(" at "), where, F.lit(f"; expected one of {', '.join(KIND_CODES)}")))
    code: Any = F
    for i, name in enumerate(KIND_CODES):
        code = code.when(F.col("kind") == F.lit(name), F.lit(i).cast("byte"))
    return code.otherwise(bad.cast("byte"))


def _ranges(n: int, counts: dict[int, int], first_bucket: int, buckets: int,
            ranges: int) -> list[int]:
    """The range of every bucket ``first_bucket + i`` (``i < buckets``): consecutive buckets,
    cut where the running row count crosses a multiple of ``n / ranges``."""
    out = []
    seen = 0
    for i in range(buckets):
        out.append(min(ranges - 1, seen * ranges // max(n, 1)))
        seen += counts.get(first_bucket + i, 0)
    return out


def _carried(maxima: dict[tuple[int, int], int | None], ranges: int) -> dict[tuple[int, int], Any]:
    """``(range, group) -> high`` before the range: the maximum of the group's earlier
    ranges' delayed CTIs (``None``: no CTI yet). A prefix over at most ranges x groups cells."""
    by_group: dict[int, dict[int, int | None]] = {}
    for (rid, gid), m in maxima.items():
        by_group.setdefault(gid, {})[rid] = m
    carried: dict[tuple[int, int], Any] = {}
    for gid, cells in by_group.items():
        high: int | None = None
        for rid in sorted(cells):
            carried[(rid, gid)] = high
            m = cells[rid]
            if m is not None:
                high = m if high is None else max(high, m)
    return carried


def scan_decided(df: DataFrame, policy: Policy, groups: list[str], order: list[str],
                 ranges: int | None = None) -> DataFrame:
    """``df``'s rows, each with ``ACTION`` and ``CTI_AFTER``, decided in parallel ranges.

    Runs on the driver: three small jobs (key span, per-bucket summaries, per-group summaries
    with ``groups``) and the plan of pass 2, which Spark runs lazily, one task per range.
    ``kind`` keeps its name and strings; ``policy`` must be a ``GoldilocksPolicy``.
    """
    spark = df.sparkSession
    key = F.col(order[0])
    rows = df.withColumn(_D, delayed_cti(policy.delay))
    span = rows.agg(F.min(key), F.max(key), F.count(F.lit(1))).first()  # job 1
    assert span is not None  # an aggregate without grouping has one row
    lo, hi, n = span
    if lo is None:
        lo = hi = 0
    if ranges is None:
        cores = spark.sparkContext.defaultParallelism
        ranges = max(_RANGES_PER_CORE * cores, math.ceil(n / _ROWS_PER_RANGE))
    ranges = max(1, min(ranges, n))
    fine = ranges * _FINE
    # ``div`` rounds toward zero: monotone in the key, and no int64 overflow however wide
    # the key's span (the width is computed here, in Python integers).
    width = max(1, (hi - lo) // fine + 1)
    first_bucket = lo // width if lo >= 0 else -((-lo) // width)
    last_bucket = hi // width if hi >= 0 else -((-hi) // width)
    bucket = F.expr(f"`{order[0]}` div {width}")

    if groups:  # job 2: rows per bucket, to cut the ranges
        counts = {r[0]: r[1] for r in rows.groupBy(bucket).count().collect()}
    else:  # job 2 also gives the delayed-CTI maximum of each bucket
        summary = rows.groupBy(bucket).agg(F.count(F.lit(1)), F.max(_D)).collect()
        counts = {r[0]: r[1] for r in summary}
    n_buckets = last_bucket - first_bucket + 1
    of_bucket = _ranges(n, counts, first_bucket, n_buckets, ranges)
    lookup = F.array(*[F.lit(r) for r in of_bucket])
    rid = F.coalesce(F.element_at(lookup, (bucket - F.lit(first_bucket) + 1).cast("int")),
                     F.lit(0))  # a null key sorts first: range 0
    rows = rows.withColumn(_RID, rid.cast("int"))

    maxima: dict[tuple[int, int], int | None] = {}
    if groups:  # job 3: the delayed-CTI maximum of every (group, range)
        cells = rows.groupBy(*groups, _RID).agg(F.max(_D).alias(_D)).collect()
        gids: dict[tuple, int] = {}
        for r in cells:
            g = tuple(r[c] for c in groups)
            gid = gids.setdefault(g, len(gids))
            maxima[(r[_RID], gid)] = r[_D]
        names = [f"_gl_g{i}" for i in range(len(groups))]
        table = spark.createDataFrame(
            [(*g, gid) for g, gid in gids.items()],
            StructType([StructField(name, df.schema[c].dataType, True)
                        for name, c in zip(names, groups)] + [StructField(_GID, LongType())]))
        on = [rows[c].eqNullSafe(table[name]) for c, name in zip(groups, names)]
        rows = rows.join(F.broadcast(table), on=on, how="inner").drop(*names)
    else:
        for r in summary:
            rid_of = of_bucket[r[0] - first_bucket] if r[0] is not None else 0
            m = r[2]
            old = maxima.get((rid_of, 0))
            maxima[(rid_of, 0)] = m if old is None else (old if m is None else max(old, m))
        rows = rows.withColumn(_GID, F.lit(0).cast("long"))
    carried = _carried(maxima, ranges)

    shipped = [_kind_code(order).alias("kind") if c == "kind" else F.col(c) for c in df.columns]
    staged = rows.select(*shipped, F.col(_RID), F.col(_GID))
    if hasattr(staged, "repartitionById"):  # Spark >= 4.1: range r goes to partition r
        staged = staged.repartitionById(ranges, _RID)
    else:  # pragma: no cover - Spark 4.0: hashed, several ranges may share a partition
        staged = staged.repartition(ranges, _RID)
    # A range is an interval of the key, so sorting by (group, order) keeps each (range,
    # group) contiguous even where ranges share a partition. Not by the range id first: it
    # is constant in a partition, and Spark's sorter compares a prefix of the first key only.
    staged = staged.sortWithinPartitions(*([_GID] if groups else []), *order)

    out_schema = StructType([f for f in staged.schema.fields if f.name not in (_RID, _GID)]
                            + [StructField(ACTION, ByteType(), False),
                               StructField(CTI_AFTER, LongType(), True)])
    decided = staged.mapInArrow(_Decide(policy, carried, list(df.columns)), out_schema)
    kinds = F.array(*[F.lit(k) for k in KIND_CODES])
    return decided.withColumn("kind", F.element_at(kinds, F.col("kind").cast("int") + 1))


class _Decide:
    """Pass 2, on the executors: the batches of one range in (range, group, order) order, each
    (range, group) segment decided by ``policy.run_columns`` from the state the segment's
    earlier rows left (carried in from earlier ranges, then across this task's batches).
    Picklable: the policy, the carried states (one per (range, group)), the column names."""

    def __init__(self, policy: Policy, carried: dict[tuple[int, int], Any],
                 columns: list[str]) -> None:
        self.policy = policy
        self.carried = carried
        self.columns = columns

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        from operators.policies import HighState

        states: dict[tuple[int, int], Any] = {}
        for batch in batches:
            if batch.num_rows:
                yield self._decide(batch, states, HighState)

    def _decide(self, batch: Any, states: dict, initial: Any) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n = batch.num_rows
        rid = batch.column(_RID).to_numpy()
        gid = batch.column(_GID).to_numpy()
        code = batch.column("kind").to_numpy()
        start_col = batch.column("start")
        is_cti = code == 1
        timed = code <= 1  # join/leave rows: no decision (as in the engine's columnar replay)
        if start_col.null_count:
            missing = np.flatnonzero(timed & start_col.is_null().to_numpy(zero_copy_only=False))
            if len(missing):
                at = int(missing[0])
                where = ", ".join(f"{c}={batch.column(c)[at].as_py()!r}" for c in self.columns
                                  if c not in ("kind", "payload"))
                raise InputError(f"replay: a row of kind {KIND_CODES[code[at]]!r} has no start "
                                 f"({where}); "
                                 "expected an instant in ns")
        start = pc.fill_null(start_col, 0).to_numpy()
        end = pc.fill_null(pc.coalesce(batch.column("end"), start_col), 0).to_numpy()
        action = np.full(n, NO_ACTION, np.int8)
        cti = np.zeros(n, np.int64)
        valid = timed.copy()
        run = self.policy.run_columns  # type: ignore[attr-defined]
        cuts = np.flatnonzero((rid[1:] != rid[:-1]) | (gid[1:] != gid[:-1])) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), n]):
            cell = (int(rid[lo]), int(gid[lo]))
            state = states.get(cell)
            if state is None:
                state = initial(self.carried.get(cell))
            rows = np.arange(lo, hi) if timed[lo:hi].all() else np.flatnonzero(timed[lo:hi]) + lo
            if not len(rows):
                continue
            a, c, after = run(is_cti[rows], start[rows], end[rows], state)
            action[rows] = a
            cti[rows] = c
            if state.high is None:  # no CTI yet: the rows before the first have none in force
                first = int(np.argmax(is_cti[rows])) if is_cti[rows].any() else len(rows)
                valid[rows[:first]] = False
            states[cell] = after
        columns = [batch.column(c) for c in self.columns]
        columns.append(pa.array(action, pa.int8()))
        columns.append(pa.array(cti, pa.int64(), mask=~valid))
        return pa.RecordBatch.from_arrays(columns, names=[*self.columns, ACTION, CTI_AFTER])

