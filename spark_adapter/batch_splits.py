"""Batch replay with no shuffle: the input's own partitions, when they are arrival ranges.

A log written in arrival order (one ordered file, the parts of a rolling sink, a Spark job's
output of a sorted frame) is read by Spark as partitions that each hold consecutive rows of
the log, in order. Then the range plan's shuffle and sort (``spark_adapter.batch_plan``) are
not needed: each partition is decided where it was read, from the state the partitions
before it leave::

    pass 1  per input partition, a mapInArrow over the order columns, the kind and the
            delayed CTI: its *segments*, the maximal runs of rows in non-decreasing order
            (a partition packed from several files has one per file), each with its row
            count, first and last order key and max(d); at most _MAX_SEGMENTS per partition
    driver  the segments sorted by first key must be disjoint (last(i) < first(i+1)): the
            log is their concatenation in that order. The state carried into each segment =
            max(d) over the segments before it
    pass 2  over the same partitions, no exchange: a scalar Arrow UDF over (order, kind
            code, start, end) cuts its rows into the same segments and runs the engine's
            kernel (``policy.run_columns``) over each from its carried-in state

When the segments overlap (interleaved files, per-device logs), hold a null order key (which
the range plan refuses), are
too many, or the replay has clock groups, ``splits_decided`` returns ``None`` and the range
plan runs instead. Pass 2 checks that it sees exactly the segments pass 1 summarised (count,
first and last key of each, in order) and fails the job naming the partition if not: an input
whose partitions change between two reads (a non-deterministic source) cannot give a wrong
answer silently. Those checks suffice: the segments are disjoint key intervals covering the
log, so a segment with the same count inside the same interval holds the same rows.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BooleanType, IntegerType, LongType, StructField,
                               StructType)

from engine.errors import InputError
from engine.policy import Policy
from spark_adapter.batch_plan import (decided_columns, delayed_cti, kernel_udf, kind_code,
                                      run_kernel)

__all__ = ["splits_decided"]

_CODE = "_gl_code"
_SPLIT = "_gl_split"  # the input split (file, block) of a row, hashed: segments end with it
_D = "_gl_d"
_MAX_SEGMENTS = 256  # per partition: more means the partition is not an arrival range
_INTEGER_TYPES = ("long", "integer", "short", "byte")
_SUMMARY = StructType([
    StructField("part", IntegerType(), False),
    StructField("seg", IntegerType(), False),
    StructField("rows", LongType(), False),
    StructField("first", ArrayType(LongType(), False), False),
    StructField("last", ArrayType(LongType(), False), False),
    StructField("max_d", LongType(), True),
    StructField("ok", BooleanType(), False),  # false: not an arrival range (fall back)
])


def _breaks(split: Any, keys: list[Any], previous: tuple[int, ...] | None) -> tuple[Any, bool]:
    """Row offsets (in a batch) where a new segment begins: where the input split changes
    (``split``: a hash of the file and the block) or a row's order key is below the row
    before it (lexicographically). ``previous``: the split and the key of the batch's row
    before, or ``None``. Also whether the batch's first row continues ``previous``'s segment."""
    import numpy as np

    up = split[:-1] == split[1:]  # same split, and row i <= row i + 1
    tie = np.ones(len(split) - 1, bool)
    for col in reversed(keys):
        tie = (col[:-1] < col[1:]) | ((col[:-1] == col[1:]) & tie)
    cuts = np.flatnonzero(~(up & tie)) + 1
    first = (int(split[0]), *(int(col[0]) for col in keys))
    continues = (previous is not None and previous[0] == first[0]
                 and previous[1:] <= first[1:])
    return cuts, continues


def _row(split: Any, keys: list[Any], i: int) -> tuple[int, ...]:
    return (int(split[i]), *(int(col[i]) for col in keys))


def _key_columns(columns: list[Any]) -> list[Any] | None:
    """The order columns of a batch as int64 numpy arrays; ``None`` if one holds a null."""
    if any(col.null_count for col in columns):
        return None
    return [col.to_numpy(zero_copy_only=False).astype("int64", copy=False) for col in columns]


class _Summarise:
    """Pass 1, on the executors: one partition's segments (``_SUMMARY`` rows)."""

    def __init__(self, order: list[str]) -> None:
        self.order = order

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()  # type: ignore[union-attr]
        segs: list[list[Any]] = []  # [rows, first, last, max_d]
        previous: tuple[int, ...] | None = None
        ok = True
        for batch in batches:
            if not ok or not batch.num_rows:
                continue  # drained: Spark's writer thread expects the input read
            keys = _key_columns([batch.column(c) for c in self.order])
            if keys is None:
                ok = False
                continue
            split = batch.column(_SPLIT).to_numpy()
            cuts, continues = _breaks(split, keys, previous)
            d = batch.column(_D)
            bounds = [0, *cuts.tolist(), batch.num_rows]
            for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
                m = pc.max(d.slice(lo, hi - lo)).as_py()
                first = [int(col[lo]) for col in keys]
                last = [int(col[hi - 1]) for col in keys]
                if i == 0 and continues:
                    seg = segs[-1]
                    seg[0] += hi - lo
                    seg[2] = last
                    seg[3] = m if seg[3] is None else (seg[3] if m is None else max(seg[3], m))
                else:
                    segs.append([hi - lo, first, last, m])
            previous = _row(split, keys, batch.num_rows - 1)
            if len(segs) > _MAX_SEGMENTS:
                ok = False
        if not ok:
            yield pa.RecordBatch.from_pylist(
                [{"part": part, "seg": 0, "rows": 0, "first": [], "last": [], "max_d": None,
                  "ok": False}], schema=_arrow_summary())
            return
        rows = [{"part": part, "seg": i, "rows": s[0], "first": s[1], "last": s[2],
                 "max_d": s[3], "ok": True} for i, s in enumerate(segs)]
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=_arrow_summary())


def _arrow_summary() -> Any:
    import pyarrow as pa

    return pa.schema([
        pa.field("part", pa.int32(), False), pa.field("seg", pa.int32(), False),
        pa.field("rows", pa.int64(), False),
        pa.field("first", pa.list_(pa.field("element", pa.int64(), False)), False),
        pa.field("last", pa.list_(pa.field("element", pa.int64(), False)), False),
        pa.field("max_d", pa.int64(), True), pa.field("ok", pa.bool_(), False)])


class _SplitDecide:
    """Pass 2, on the executors: one partition's batches of (order..., code, start, end), cut
    into the segments pass 1 found, each decided from its carried-in state; every segment
    checked against pass 1's summary. Picklable: the policy, the summary, the carried states."""

    def __init__(self, policy: Policy, segments: dict[tuple[int, int], tuple], width: int
                 ) -> None:
        self.policy = policy
        self.segments = segments  # (part, seg) -> (rows, first, last, carried high)
        self.width = width  # how many order columns

    def _refuse(self, part: int, what: str) -> InputError:
        return InputError(
            f"replay: input partition {part} changed between the two reads of the log ({what});"
            " the plan decides each partition from what the first read found. Cache or write"
            " the input first, or pass strategy='ranges'")

    def __call__(self, batches: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, Any, Any]]:
        from pyspark import TaskContext

        from operators.policies import HighState

        part = TaskContext.get().partitionId()  # type: ignore[union-attr]
        seg = -1  # the current segment, its rows so far, its last key, its state
        seen = 0
        last: tuple[int, ...] | None = None
        previous: tuple[int, ...] | None = None  # the split and the key of the last row
        state: Any = None
        for columns in batches:
            keys = _key_columns(list(columns[1:1 + self.width]))
            if keys is None:
                raise self._refuse(part, "a null order key")
            split = columns[0].to_numpy()
            code_col, start_col, end_col = columns[1 + self.width:]
            n = len(keys[0])
            if not n:
                yield run_kernel(self.policy, code_col.to_numpy(zero_copy_only=False),
                                 start_col, end_col, [], lambda lo: state, lambda lo, s: None)
                continue
            cuts, continues = _breaks(split, keys, previous)
            opens = set(cuts.tolist()) if continues else {0, *cuts.tolist()}
            edges = sorted({0, n, *opens})
            end_of = dict(zip(edges[:-1], edges[1:]))

            def state_of(lo: int) -> Any:
                nonlocal seg, seen, last, state
                if lo in opens:  # a new segment
                    self._close(part, seg, seen, last)
                    seg += 1
                    want = self.segments.get((part, seg))
                    first = tuple(int(col[lo]) for col in keys)
                    if want is None or want[1] != first:
                        raise self._refuse(part, f"segment {seg} starts at {first}")
                    seen = 0
                    state = HighState(want[3])
                hi = end_of[lo]
                seen += hi - lo
                last = tuple(int(col[hi - 1]) for col in keys)
                return state

            def keep(lo: int, after: Any) -> None:
                nonlocal state
                state = after

            yield run_kernel(self.policy, code_col.to_numpy(zero_copy_only=False), start_col,
                             end_col, edges[1:-1], state_of, keep)
            previous = _row(split, keys, n - 1)
        self._close(part, seg, seen, last)
        if (part, seg + 1) in self.segments:
            raise self._refuse(part, f"{seg + 1} segment(s) read, more summarised")

    def _close(self, part: int, seg: int, seen: int, last: tuple[int, ...] | None) -> None:
        if seg < 0:
            return
        rows, _, want_last, _ = self.segments[(part, seg)]
        if seen != rows or want_last != last:
            raise self._refuse(part, f"segment {seg}: {seen} rows up to {last}, "
                                     f"summarised {rows} up to {want_last}")


def splits_decided(df: DataFrame, policy: Policy, groups: list[str], order: list[str]
                   ) -> DataFrame | None:
    """``df``'s rows with ``ACTION`` and ``CTI_AFTER``, decided in its own partitions, or
    ``None`` when they are not disjoint arrival ranges (then the range plan applies).

    Runs pass 1 (one job over the order columns, the kind and the start) on the driver.
    """
    if groups or any(df.schema[c].dataType.typeName() not in _INTEGER_TYPES for c in order):
        return None
    code = kind_code(order)
    split = F.xxhash64(F.input_file_name(), F.input_file_block_start())
    narrow = df.select(split.alias(_SPLIT), *order, code.alias(_CODE),
                       delayed_cti(policy.delay).alias(_D))
    summary = narrow.mapInArrow(_Summarise(order), _SUMMARY).collect()
    if not all(r["ok"] for r in summary):
        return None
    ordered = sorted(summary, key=lambda r: tuple(r["first"]))
    if any(tuple(a["last"]) >= tuple(b["first"]) for a, b in zip(ordered, ordered[1:])):
        return None
    segments: dict[tuple[int, int], tuple] = {}
    high: int | None = None
    for r in ordered:
        segments[(r["part"], r["seg"])] = (r["rows"], tuple(r["first"]), tuple(r["last"]), high)
        if r["max_d"] is not None:
            high = r["max_d"] if high is None else max(high, r["max_d"])
    staged = df.withColumn(_SPLIT, split).withColumn(_CODE, code)
    decide = kernel_udf(_SplitDecide(policy, segments, len(order)))
    return decided_columns(staged, decide(F.col(_SPLIT), *[F.col(c) for c in order], F.col(_CODE),
                                          F.col("start"), F.col("end")), df.columns)
