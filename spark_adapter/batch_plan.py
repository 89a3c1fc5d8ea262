"""Batch replay as a parallel prefix scan over key ranges: the engine's columnar kernel in a
scalar Arrow UDF after a shuffle into arrival-ordered ranges (``strategy="ranges"``, and
``"scan"`` when the input's own partitions are not arrival ranges: ``batch_splits``).

The Goldilocks state over a recorded log is ``high``, the running maximum of the delayed CTIs
``d = max(start - delay, MIN_TIME)`` in arrival order (TS §2.2). A running maximum is a
prefix scan, so the log is cut into arrival-ordered *ranges*, each decided by its own task
with the state carried in from the ranges before it::

    job 1   min, max of the order key, row count              one row
    job 2   per fine bucket of the key: rows, max(d)          ranges x 64 rows (per group:
            (per group: a third job, max(d) per group, range)  one row per group and range)
    driver  buckets -> ranges of equal row counts; the carried-in state of every
            (range, group) = max(d) over the group's earlier ranges
    pass 2  rows -> their range (a shuffle), sorted by (group, order) inside it; a scalar
            Arrow UDF over (cell, kind code, start, end) -- only those columns cross into
            Python; Spark keeps the rest of each row and zips the result back -- runs, per
            (range, group) segment, ``policy.run_columns`` (the engine's kernel,
            ``operators.columnar``) from the carried-in state

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
import operator
import warnings
from functools import reduce
from typing import Any, Iterator, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from engine.codes import Decision, Kind
from engine.errors import InputError
from engine.policy import Policy
from engine.times import MAX_TIME, MIN_TIME
from spark_adapter.schema import KIND_CTI, KIND_INSERT, KIND_JOIN, KIND_LEAVE
from spark_adapter.session import default_parallelism

__all__ = ["scan_decided", "delayed_cti", "kind_code", "refuse_null_order", "row_named", "kernel_udf", "decided_columns",
           "run_kernel", "KIND_CODES", "ACTION", "CTI_AFTER", "NO_ACTION"]

#: ``kind`` travels through the scan as a byte: its code (``engine.codes.Kind``, the index here).
KIND_CODES = (KIND_INSERT, KIND_CTI, KIND_JOIN, KIND_LEAVE)
#: Columns pass 2 adds: the engine's action code (``engine.policy``), and the CTI in force
#: after the row (for a late insert: the CTI it violated; null while no CTI was emitted).
ACTION = "_gl_action"
CTI_AFTER = "_gl_cti"
#: The action of a ``join``/``leave`` row: the policy takes no decision on it.
NO_ACTION = int(Decision.NONE)

_RID = "_gl_rid"
_GID = "_gl_gid"
_CELL = "_gl_cell"
_CODE = "_gl_code"
_OUT = "_gl_out"
_OUT_TYPE = f"struct<{ACTION}: tinyint, {CTI_AFTER}: bigint>"
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


#: What a row without its order key lacks, in the refusals of every plan.
NULL_ORDER = ("every row needs its place in arrival order: fill the column or drop those "
              "rows before the replay")


def row_named(order: Sequence[str]) -> Column:
    """A row named by its order columns, ``"order_key=4, file_index=0, line=11"``."""
    return F.concat_ws(", ", *[F.concat(F.lit(f"{c}="), F.coalesce(F.col(c).cast("string"),
                                                                    F.lit("null")))
                               for c in order])


def _no_key(order: Sequence[str]) -> Column:
    """True where one of the ``order`` columns is null (one column or several)."""
    return reduce(operator.or_, [F.col(c).isNull() for c in order])


def refuse_null_order(value: Column, order: Sequence[str]) -> Column:
    """``value``, or the job fails naming the row when one of its ``order`` columns is null:
    such a row has no place in arrival order (the engine's readers refuse a record without
    its order key, TS §5.3). Evaluated per row, inside the plan: no extra pass."""
    return F.when(_no_key(order), F.raise_error(F.concat(
        F.lit("replay: a row has a null order column ("), row_named(order),
        F.lit(f"); {NULL_ORDER}")))).otherwise(value)


def kind_code(order: Sequence[str]) -> Column:
    """``kind`` as its index in ``KIND_CODES``. Any other value, or an insert or CTI without
    ``start``, fails the job with a message naming the row by its order columns."""
    where = row_named(order)
    bad = F.raise_error(F.concat(
        F.lit("replay: kind "), F.coalesce(F.concat(F.lit("'"), F.col("kind"), F.lit("'")),
                                           F.lit("null")),
        F.lit(" at "), where, F.lit(f"; expected one of {', '.join(KIND_CODES)}")))
    code: Any = F
    for i, name in enumerate(KIND_CODES):
        guard = F.col("kind") == F.lit(name)
        if i < 2:  # insert, cti: a decision needs the start
            code = code.when(guard & F.col("start").isNull(), F.raise_error(F.concat(
                F.lit(f"replay: a row of kind '{name}' has no start ("), where,
                F.lit("); expected an instant in ns"))).cast("byte"))
        code = code.when(guard, F.lit(int(Kind.of(name))).cast("byte"))
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
    no_key = F.count(F.when(_no_key(order), 1))
    span = rows.agg(F.min(key), F.max(key), F.count(F.lit(1)), no_key).first()  # job 1
    assert span is not None  # an aggregate without grouping has one row
    lo, hi, n, missing = span
    if missing:  # an event log's record has its order key (docs/event-log.md, TS §5.3)
        raise InputError(f"replay: {missing} row(s) have a null order column "
                         f"({', '.join(order)}); {NULL_ORDER}")
    if lo is None:
        lo = hi = 0
    if ranges is None:
        cores = default_parallelism(spark)
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
    rid = F.element_at(lookup, (bucket - F.lit(first_bucket) + 1).cast("int"))
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
    n_groups = len(gids) if groups else 1
    carried = _carried(maxima, ranges)

    cell = F.col(_RID).cast("long") * F.lit(n_groups) + F.col(_GID)
    staged = rows.select(*df.columns, _RID, cell.alias(_CELL), kind_code(order).alias(_CODE))
    staged = staged.repartitionById(ranges, _RID)  # range r goes to partition r
    # A range is an interval of the key, so sorting by (cell, order) keeps each (range, group)
    # contiguous. Without groups, by the order alone: the
    # cell is then the range id, constant in a partition, and Spark's sorter compares a prefix
    # of the first key only.
    staged = staged.sortWithinPartitions(*([_CELL] if groups else []), *order)
    carried_by_cell = {rid * n_groups + gid: high
                       for (rid, gid), high in carried.items()}
    return decided_columns(staged, kernel_udf(_RangeDecide(policy, carried_by_cell))(
        F.col(_CELL), F.col(_CODE), F.col("start"), F.col("end")), df.columns)


def decided_columns(staged: DataFrame, decisions: Column, columns: list[str]) -> DataFrame:
    """``columns`` of ``staged`` with ``ACTION`` and ``CTI_AFTER`` from ``decisions`` (a
    ``kernel_udf`` call): one evaluation of the UDF, its two fields selected after it."""
    out = staged.withColumn(_OUT, decisions)
    return out.select(*columns, F.col(_OUT)[ACTION].alias(ACTION),
                      F.col(_OUT)[CTI_AFTER].alias(CTI_AFTER))


def kernel_udf(decide: Any) -> Any:
    """``decide`` (a picklable callable from an iterator of Arrow column tuples to an iterator
    of ``(action, cti)`` numpy pairs) as a scalar Arrow UDF returning ``struct<ACTION,
    CTI_AFTER>``. Only the columns passed to it cross into Python; Spark keeps the row's other
    columns on the JVM side and zips the result back (a ``mapInArrow`` carried every column
    across and back: measured 6.5 s against 3.7 s of CPU for 2M rows)."""
    from pyspark.sql.functions import arrow_udf

    def run(batches: Iterator[tuple[Any, ...]]) -> Iterator[Any]:
        import pyarrow as pa

        for action, cti, valid in decide(batches):
            yield pa.StructArray.from_arrays(
                [pa.array(action, pa.int8()), pa.array(cti, pa.int64(), mask=~valid)],
                names=[ACTION, CTI_AFTER])

    from pyspark.util import PythonEvalType

    # Nondeterministic, so the optimiser keeps it where it is: a deterministic UDF let a
    # filter on its result be pushed (with a copy of the UDF) below the sort, where it ran on
    # unsorted rows. # TS §5.1: each row is decided after the earlier ones
    with warnings.catch_warnings():  # "preferred to specify type hints": the type is exact
        warnings.simplefilter("ignore", UserWarning)
        made = arrow_udf(run, _OUT_TYPE, PythonEvalType.SQL_SCALAR_ARROW_ITER_UDF)
    return made.asNondeterministic()


def run_kernel(policy: Policy, code: Any, start_col: Any, end_col: Any, cuts: list[int],
               state_of: Any, keep: Any) -> tuple[Any, Any, Any]:
    """Pass 2's decisions over one Arrow batch: ``code`` (``KIND_CODES`` indices), ``start``
    and ``end`` columns; ``cuts`` the row offsets where a new segment (a (range, group), a
    split) begins; ``state_of(i)`` the state the segment starting at row ``i`` starts from,
    ``keep(i, state)`` told the state it leaves. Returns ``(action, cti, valid)``: numpy
    arrays, ``valid`` false where no CTI is in force yet (``CTI_AFTER`` null)."""
    import numpy as np
    import pyarrow.compute as pc

    n = len(code)
    is_cti = code == Kind.CTI
    timed = code <= Kind.CTI  # join/leave rows: no decision (as in the engine's columnar replay)
    start = pc.fill_null(start_col, 0).to_numpy()
    end = pc.fill_null(pc.coalesce(end_col, start_col), 0).to_numpy()
    action = np.full(n, NO_ACTION, np.int8)
    cti = np.zeros(n, np.int64)
    valid = timed.copy()
    run = policy.run_columns  # type: ignore[attr-defined]
    bounds = [0, *cuts, n]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        state = state_of(lo)
        rows = np.arange(lo, hi) if timed[lo:hi].all() else np.flatnonzero(timed[lo:hi]) + lo
        if not len(rows):
            continue
        a, c, after = run(is_cti[rows], start[rows], end[rows], state)
        action[rows] = a
        cti[rows] = c
        if state.high is None:  # no CTI yet: the rows before the first have none in force
            first = int(np.argmax(is_cti[rows])) if is_cti[rows].any() else len(rows)
            valid[rows[:first]] = False
        keep(lo, after)
    return action, cti, valid


class _RangeDecide:
    """Pass 2 of the range plan, on the executors: one task's batches of ``(cell, code, start,
    end)`` in (cell, order) order, each cell (a (range, group)) decided from the state the
    cell's earlier rows left (carried in from earlier ranges, then across this task's
    batches). Picklable: the policy and the carried states, one per cell."""

    def __init__(self, policy: Policy, carried: dict[int, Any]) -> None:
        self.policy = policy
        self.carried = carried

    def __call__(self, batches: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, Any, Any]]:
        import numpy as np

        from operators.policies import HighState

        states: dict[int, Any] = {}
        for cell_col, code_col, start_col, end_col in batches:
            cell = cell_col.to_numpy()
            cuts = (np.flatnonzero(cell[1:] != cell[:-1]) + 1).tolist()

            def state_of(i: int) -> Any:
                key = int(cell[i])
                if key not in states:
                    states[key] = HighState(self.carried.get(key))
                return states[key]

            def keep(i: int, state: Any) -> None:
                states[int(cell[i])] = state

            yield run_kernel(self.policy, code_col.to_numpy(zero_copy_only=False), start_col,
                             end_col, cuts, state_of, keep)
