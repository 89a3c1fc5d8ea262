"""Windows closed by CTIs in Spark: the rows of ``goldilocks replay --window``, in parallel.

``windows(events, window="1m", aggregates=["mean:celsius"], key="source")`` takes the events
of ``replay`` (or any frame of inserts with a time, an arrival order and, for the clock, a
``cti`` column) and gives one row per window that the clock closed — the rows the engine
writes for the same log (TS §6.1, §6.5), the same floats bit for bit::

    inserts ─ explode: one row per window holding the insert (size / hop of them), windows
              the final clock has not passed dropped here
            ─ repartition by (window start, key), each partition sorted by (window start,
              arrival order)
            ─ mapInArrow: the engine's window kernel (``operators.window_columns``) folds
              each window's rows in arrival order, closing a window start once the next
              begins

A window's values are folded by the same kernel, from the same floats (``number``: an int
as its float, ``-0.0`` as ``0.0``), in the same order (arrival order inside the window), so
a sum adds exactly as the engine adds it; Spark's own ``sum``/``avg`` add in whatever order
partial aggregates meet and are not used. The key and the windows of an insert are computed
in Spark SQL; nothing else runs on the driver.

Which windows are written: with ``clock="cti"`` (default) those whose end the frame's last
CTI reached (``max(cti)``, per ``group_col``) — windows still open at the end of a replay
are not written, as the engine does not write them; ``clock=None``: every window (the input
is complete, as a final CTI at +infinity); an int: that CTI. Over ``replay``'s events no
insert is late for a window: each is at or after the CTI in force when it arrived, so every
window it falls in was still open (TS §6.2 never applies; the late rows are replay's).

Memory per task: one Arrow batch and the windows of one window start in it.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (DoubleType, LongType, StringType, StructField, StructType,
                               TimestampType)

from engine.errors import InputError
from engine.times import MAX_TIME, DurationLike, format_duration_ns
from operators.window_columns import WindowColumns
from operators.windows import (Fold, Windows, WindowSpec, hopping_spec, number, parse_fold,
                               tumbling_spec)
from spark_adapter.schema import KIND_INSERT, KIND_START, ORDER_COLUMNS

__all__ = ["windows", "window_stage", "WINDOW_COLUMNS"]

#: the columns of every window row, before the key, the group columns and the aggregates
WINDOW_COLUMNS = ("start", "end")

_WS = "_gl_ws"      # a window's start
_T = "_gl_t"        # the insert's time, ns
_K = "_gl_key"      # the window key (a string)
_CLOCK = "_gl_clock"
_ROWS = "_gl_rows"  # a window's rows (window_stage)
_NUMERIC = ("long", "integer", "short", "byte", "double", "float")
_WHO = "windows"


def _fail(message: str) -> InputError:
    return InputError(f"{_WHO}: {message}")


def windows(events: DataFrame, *, window: DurationLike, aggregates: Sequence[str] = ("count",),
            hop: DurationLike | None = None, key: str | None = None,
            offset: DurationLike = 0,
            time_col: str = "start", order_by: Sequence[str] | None = None,
            clock: Any = "cti", group_col: str | Sequence[str] | None = None,
            partitions: int | None = None) -> DataFrame:
    """One row per window closed by the clock: ``start``, ``end`` (ns), ``key`` (keyed
    windows), the group columns, ``count``, then each aggregate by its label (a double, null
    when no insert of the window had the field; ``count_FIELD`` a bigint). Unsorted: order by
    ``end``, then ``key`` (and the group columns) for the engine's order.

    ``events``: ``replay``'s events (rows of ``kind`` other than ``insert`` and ``start``
    are not windowed: an edge counts once, by its start edge, TS §7.8), or any frame of
    inserts. ``window``, ``hop``, ``offset``: as ``goldilocks
    replay --window/--hop`` (``"1m"``; ``engine.times.DurationLike``). ``aggregates``: ``"count"``,
    ``"mean:FIELD"``… (the built-in folds; FIELD is a numeric column of ``events``, else a
    field of its JSON ``payload``). ``key``: ``None`` (one window per interval), a string
    column (``"source"``), else a payload field holding a string. ``time_col``: int ns or a
    timestamp. ``order_by``: the arrival order the folds take inserts in (default
    ``ORDER_COLUMNS`` when present, else ``seq``); unique per row. ``clock``: ``"cti"``, an
    int CTI, or ``None`` (module docstring). ``group_col``: independent clocks, as
    ``replay(group_col=...)``. ``partitions``: the shuffle's width (default
    ``spark.sql.shuffle.partitions``).
    """
    spec, folds = _definition(window, hop, offset, aggregates)
    columns = events.columns
    groups = [group_col] if isinstance(group_col, str) else list(group_col or ())
    order = _order(events, order_by)
    _need(events, [time_col, *order, *groups], "")
    if partitions is not None and (type(partitions) is not int or partitions < 1):
        raise _fail(f"partitions={partitions!r}; expected a count >= 1")
    internal = [c for c in columns if c.startswith("_gl_")]
    if internal:
        raise _fail(f"column name(s) {internal} use the reserved prefix '_gl_'")

    rows = events
    if "kind" in columns:  # TS §7.8: an edge counts once, by its start edge
        rows = rows.where(F.col("kind").isin(KIND_INSERT, KIND_START))
    rows = rows.withColumn(_T, _nanoseconds(events, time_col))
    key_col, key_field = _key(events, key)
    sources = _sources(events, folds)
    # the windows of each insert (TS §6.1): starts offset + k*hop with start <= t < start+size
    last = F.col(_T) - F.pmod(F.col(_T) - F.lit(spec.offset), F.lit(spec.hop))
    first = last - F.lit((spec.per_insert - 1) * spec.hop)
    rows = rows.withColumn(_WS, F.explode(F.sequence(first, last, F.lit(spec.hop).cast("bigint"))))
    rows = rows.where(F.col(_WS) + F.lit(spec.size) > F.col(_T))
    rows = _closed_by_clock(events, rows, clock, groups, spec)

    by = [F.col(_WS), *[F.col(g) for g in groups]]
    if key_col is not None:
        by.append(F.col(key_col))
    elif key_field is not None:
        by.append(F.get_json_object(F.col("payload"), f"$.{key_field}"))
    width = partitions or int(events.sparkSession.conf.get("spark.sql.shuffle.partitions")
                              or 200)
    needed = [_WS, _T, *groups, *([key_col] if key_col else []),
              *sorted({s for s in sources if s is not None})]
    from_payload = any(f.field is not None and s is None for f, s in zip(folds, sources))
    if key_field is not None or from_payload:
        needed.append("payload")
    needed = list(dict.fromkeys(needed))
    shuffled = (rows.repartition(width, *by).sortWithinPartitions(_WS, *order)
                .select(*needed))
    schema = _schema(events, folds, key is not None, groups)
    task = _Fold(spec, folds, key_col, key_field, groups, sources,
                 {g: events.schema[g].dataType.simpleString() for g in groups})
    return _refuse_unseen_fields(shuffled.mapInArrow(task, schema), folds, sources)


def _refuse_unseen_fields(result: DataFrame, folds: Sequence[Fold],
                          sources: Sequence[str | None]) -> DataFrame:
    """``result``, failing its job with an error naming the field when an aggregate's
    payload field is in no insert of any window it holds — a misspelled field would
    otherwise give nulls (zero counts) everywhere, without a word. The check is a window
    over the result rows (one per window and key) and a filter on it, evaluated with them."""
    from pyspark.sql import Window

    fields = [f for f, s in zip(folds, sources) if f.field is not None and s is None]
    if not fields:
        return result
    everything = Window.partitionBy(F.lit(0))  # the window rows are few: one per window, key
    checks = []
    for f in fields:
        present = F.col(f.label) > 0 if f.kind == "count" else F.col(f.label).isNotNull()
        seen = F.max(F.when(present, 1).otherwise(0)).over(everything)
        message = (f"windows: aggregate {f.kind}:{f.field}: no insert of any window has a "
                   f"numeric payload field {f.field!r} (payload fields are read by name: is "
                   "it spelled as the payloads spell it?)")
        checks.append(F.when(seen == 0, F.raise_error(F.lit(message))))
    checked = result.withColumn("_gl_check", F.coalesce(*checks))
    return checked.where(F.col("_gl_check").isNull()).drop("_gl_check")  # a filter: kept


def _definition(window: DurationLike, hop: DurationLike | None, offset: DurationLike,
                aggregates: Sequence[str],
                ) -> tuple[WindowSpec, tuple[Fold, ...]]:
    """The windows and folds, checked as the engine checks them; built-in folds only."""
    spec = tumbling_spec(window, offset=offset) if hop is None else hopping_spec(
        window, hop, offset=offset)
    folds = tuple(parse_fold(a) for a in aggregates)
    Windows(spec, folds)  # the aggregates' own checks (labels, at least one)
    for f in folds:
        if f.kind is None:
            raise _fail(f"the fold {f.label!r} is a user fold; Spark runs the built-in ones "
                        "(count, sum, mean, min, max)")
    return spec, folds


def _order(df: DataFrame, order_by: Sequence[str] | None) -> list[str]:
    if order_by is not None:
        order = [order_by] if isinstance(order_by, str) else list(order_by)
        if not order:
            raise _fail("order_by=[]; expected the columns of the arrival order")
        return order
    if all(c in df.columns for c in ORDER_COLUMNS):
        return list(ORDER_COLUMNS)
    if "seq" in df.columns:
        return ["seq"]
    raise _fail("no arrival order: the frame has neither the order columns "
                f"{', '.join(ORDER_COLUMNS)} nor seq; expected order_by=[...], the columns "
                "that give the order the inserts arrived in (a sum adds in that order)")


def _need(df: DataFrame, names: Sequence[str], role: str) -> None:
    missing = [n for n in names if n not in df.columns]
    if missing:
        raise _fail(f"the DataFrame lacks column(s) {', '.join(missing)}{role}; it has "
                    f"{', '.join(df.columns)}")


def _nanoseconds(df: DataFrame, time_col: str) -> Column:
    t = df.schema[time_col].dataType
    if isinstance(t, TimestampType):
        return F.unix_micros(F.col(time_col)) * F.lit(1000)
    if t.typeName() in ("long", "integer", "short", "byte"):
        return F.col(time_col).cast("bigint")
    raise _fail(f"time_col {time_col!r} has type {t.simpleString()}; expected int ns or a "
                "timestamp")


def _key(df: DataFrame, key: str | None) -> tuple[str | None, str | None]:
    """``(column, None)`` for a key column, ``(None, field)`` for a payload field."""
    if key is None:
        return None, None
    if not isinstance(key, str) or not key:
        raise _fail(f"key={key!r}; expected None, a string column or a payload field")
    if key in df.columns:
        t = df.schema[key].dataType
        if not isinstance(t, StringType):
            raise _fail(f"key column {key!r} has type {t.simpleString()}; expected a string "
                        f"(keys are ordered and written as text: F.col({key!r}).cast('string'))")
        return key, None
    if "payload" not in df.columns:
        raise _fail(f"key {key!r} is neither a column nor a payload field (the frame has no "
                    f"payload); it has {', '.join(df.columns)}")
    return None, key


def _sources(df: DataFrame, folds: Sequence[Fold]) -> list[str | None]:
    """Where each fold's values come from: a numeric column's name, or ``None`` (the
    payload's JSON field)."""
    out: list[str | None] = []
    for f in folds:
        if f.field is None:
            out.append(None)
        elif f.field in df.columns:
            t = df.schema[f.field].dataType.typeName()
            if t not in _NUMERIC:
                raise _fail(f"aggregate {f.label!r}: column {f.field!r} has type {t}; "
                            "expected a number")
            out.append(f.field)
        elif "payload" in df.columns:
            out.append(None)
        else:
            raise _fail(f"aggregate {f.label!r}: {f.field!r} is neither a column nor a "
                        f"payload field (the frame has no payload); it has "
                        f"{', '.join(df.columns)}")
    return out


def _closed_by_clock(events: DataFrame, rows: DataFrame, clock: Any, groups: list[str],
                     spec: WindowSpec) -> DataFrame:
    """Only the windows whose end the clock reached (TS §6.1)."""
    end = F.col(_WS) + F.lit(spec.size)
    if clock is None:
        return rows
    if clock == "cti":
        _need(events, ["cti"], " (clock='cti' closes the windows by the frame's last CTI; "
              "clock=None closes every window)")
        last = events.groupBy(*groups).agg(F.max("cti").alias(_CLOCK))
        if groups:
            rows = rows.join(last, on=groups, how="inner")
        else:
            rows = rows.crossJoin(F.broadcast(last))
        return rows.where(F.col(_CLOCK).isNotNull() & (end <= F.col(_CLOCK))).drop(_CLOCK)
    if type(clock) is int:
        return rows.where(end <= F.lit(clock))
    raise _fail(f"clock={clock!r}; expected 'cti', an int CTI (ns) or None")


def _schema(df: DataFrame, folds: Sequence[Fold], keyed: bool, groups: list[str]) -> StructType:
    fields = [StructField("start", LongType(), False), StructField("end", LongType(), False)]
    if keyed:
        fields.append(StructField("key", StringType(), False))
    fields += [StructField(g, df.schema[g].dataType, True) for g in groups]
    fields.append(StructField("count", LongType(), False))
    fields += [StructField(f.label, LongType() if f.kind == "count" else DoubleType(), True)
               for f in folds if f.label != "count"]
    return StructType(fields)


class _Fold:
    """On the executors: a partition's window rows, sorted by (window start, arrival order),
    folded by the engine's kernel. The kernel sees each row at its window's start under
    tumbling windows of ``hop`` (one window per start), and a CTI at the batch's last start
    after each batch: every earlier start is complete (the rows are sorted by it) and closes."""

    def __init__(self, spec: WindowSpec, folds: Sequence[Fold], key_col: str | None,
                 key_field: str | None, groups: list[str], sources: list[str | None],
                 group_types: dict[str, str]) -> None:
        self.spec = spec
        self.folds = tuple(folds)
        self.key_col = key_col
        self.key_field = key_field
        self.groups = groups
        self.sources = sources
        self.group_types = group_types

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = self.spec
        keyed = self.key_col is not None or self.key_field is not None
        kernel = WindowColumns(WindowSpec(spec.hop, spec.hop, spec.offset % spec.hop),
                               self.folds, True, max_open=2**62)
        codes: dict[tuple, int] = {}
        combos: list[tuple] = []
        names: list[str] = []  # the kernel orders by name; the frame is unsorted anyway
        for batch in batches:
            if not batch.num_rows:
                continue
            t = batch.column(_T).to_numpy(zero_copy_only=False)
            if int(t.max()) > MAX_TIME - spec.size:
                raise _fail("an insert would open a window ending after the latest instant "
                            "(MAX_TIME); expected earlier times")
            ws = batch.column(_WS).to_numpy(zero_copy_only=False).astype(np.int64)
            combo = self._combos(batch, keyed)
            key = np.empty(len(combo), np.int32)
            for i, c in enumerate(combo):
                code = codes.get(c)
                if code is None:
                    code = codes[c] = len(combos)
                    combos.append(c)
                    names.append("")
                key[i] = code
            values = self._values(batch)
            n = batch.num_rows
            # the rows, then a CTI at the last start: the starts before it are complete
            closed = kernel.run(np.concatenate([np.zeros(n, np.bool_), [True]]),
                                np.append(ws, ws[-1]), np.append(key, -1),
                                [np.append(v, np.nan) for v in values], names)
            yield self._rows(closed, combos, keyed)
        closed = kernel.run(np.array([True]), np.array([MAX_TIME], np.int64),
                            np.array([-1], np.int32),
                            [np.array([np.nan]) for _ in self.folds], names)
        yield self._rows(closed, combos, keyed)

    def _combos(self, batch: pa.RecordBatch, keyed: bool) -> list[tuple]:
        """Each row's (key, *group values): the kernel's key."""
        n = batch.num_rows
        parts: list[list] = []
        if self.key_col is not None:
            parts.append(batch.column(self.key_col).to_pylist())
        elif self.key_field is not None:
            parts.append(self._payload_keys(batch))
        else:
            parts.append([None] * n)
        for g in self.groups:
            parts.append(batch.column(g).to_pylist())
        combo = list(zip(*parts))
        if keyed:
            for c in combo:
                if not isinstance(c[0], str):
                    raise _fail(f"a window key is {c[0]!r}; expected a string (column or "
                                "payload field named by key=)")
        return combo

    def _payload_keys(self, batch: pa.RecordBatch) -> list:
        field = self.key_field
        out = []
        for p in batch.column("payload").to_pylist():
            doc = orjson.loads(p) if p is not None else None
            out.append(doc.get(field) if isinstance(doc, dict) else None)
        return out

    def _values(self, batch: pa.RecordBatch) -> list[np.ndarray]:
        """Each fold's value per row as the engine reads it (``number``): float64, NaN for
        none."""
        n = batch.num_rows
        docs = None
        out = []
        for f, source in zip(self.folds, self.sources):
            if f.field is None:
                out.append(np.zeros(n, np.float64))
            elif source is not None:
                col = batch.column(source).cast(pa.float64())
                out.append(col.fill_null(np.nan).to_numpy(zero_copy_only=False) + 0.0)
            else:
                if docs is None:
                    docs = [orjson.loads(p) if p is not None else None
                            for p in batch.column("payload").to_pylist()]
                vals = [number(d, f.field) for d in docs]
                out.append(np.array([v if v.__class__ is float else np.nan for v in vals],
                                    np.float64))
        return out

    def _rows(self, closed: Any, combos: list[tuple], keyed: bool) -> pa.RecordBatch:
        spec = self.spec
        start = closed.end - spec.hop  # the kernel's window [ws, ws + hop) is ours at ws
        arrays: list[pa.Array] = [pa.array(start, pa.int64()),
                                  pa.array(start + spec.size, pa.int64())]
        names = ["start", "end"]
        picked = [combos[k] for k in closed.key.tolist()]
        if keyed:
            arrays.append(pa.array([c[0] for c in picked], pa.string()))
            names.append("key")
        for i, g in enumerate(self.groups, 1):
            arrays.append(pa.array([c[i] for c in picked],
                                   _arrow_type(self.group_types[g])))
            names.append(g)
        arrays.append(pa.array(closed.count, pa.int64()))
        names.append("count")
        for f, (v, has) in zip(self.folds, closed.values):
            if f.label == "count":
                continue
            if f.kind == "count":
                arrays.append(pa.array(v.astype(np.int64), pa.int64(), mask=~has))
            else:
                arrays.append(pa.array(v, pa.float64(), mask=~has))
            names.append(f.label)
        return pa.RecordBatch.from_arrays(arrays, names=names)


def _arrow_type(spark_type: str) -> pa.DataType | None:
    """The Arrow type of a group column (Spark's simple name); ``None``: inferred."""
    return {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(),
            "smallint": pa.int16(), "tinyint": pa.int8(), "boolean": pa.bool_(),
            "double": pa.float64(), "date": pa.date32()}.get(spark_type)


# -- streaming: after watermark_stage ---------------------------------------------------------

def window_stage(staged: DataFrame, *, window: DurationLike,
                 aggregates: Sequence[str] = ("count",), hop: DurationLike | None = None,
                 key: str | None = None, offset: DurationLike = 0,
                 time_col: str, order_by: Sequence[str] | None = None) -> DataFrame:
    """Windows after ``watermark_stage`` on a stream: one row per window, emitted once, when
    the stage's CTI has passed the window's end — the columns of ``windows``, the values
    folded by the engine's kernel in ``order_by`` order.

    The plan: Spark's own window aggregation in append mode, grouped by ``window(time_col,
    …)`` and ``key``, collecting each window's rows (``collect_list`` of the order and value
    columns, sorted by the order columns), then a ``mapInArrow`` folding each closed window
    with the kernel. Spark closes a window when its watermark passes the end, and that
    watermark is the stage's CTI (one micro-batch later, 1 ms behind: docs/spark.md); Spark
    keeps a window's rows in its state store until then, and never emits a window twice.

    ``time_col``: the column the stage marked (its ``time_col`` when a timestamp, else
    ``event_time``). ``key``: ``None`` or a string column. Aggregate fields: numeric columns,
    or fields of a JSON ``payload`` column. ``order_by``: the order the folds take a
    window's rows in (default ``(time_col, key)``; rows tied on every column are taken in any
    order). ``window``, ``hop``, ``offset``: whole microseconds (Spark's timestamps).

    Late rows: the stage judged every row against its CTI, and a row on time starts at or
    after it, so each window it falls in ends after the CTI Spark's watermark follows: no
    row reaching this stage is late for a window (TS §6.2); the late ones are the stage's,
    with their reasons, in its late output.
    """
    spec, folds = _definition(window, hop, offset, aggregates)
    for what, ns in (("window", spec.size), ("hop", spec.hop), ("offset", spec.offset)):
        if ns % 1000:
            raise _fail(f"{what} {format_duration_ns(ns)} is not a whole number of "
                        "microseconds; expected one "
                        "(Spark's windows and timestamps count microseconds)")
    _need(staged, [time_col], "")
    if not isinstance(staged.schema[time_col].dataType, TimestampType):
        raise _fail(f"time_col {time_col!r} is {staged.schema[time_col].dataType.simpleString()}; "
                    "expected the timestamp column watermark_stage marked (its time_col, or "
                    "event_time for an integer time)")
    key_col, key_field = _key(staged, key)
    if key_field is not None:
        raise _fail(f"key {key!r} is not a column; expected a string column of the stream")
    order = list(order_by) if order_by is not None else [time_col, *([key] if key else [])]
    _need(staged, order, " (order_by)")
    sources = _sources(staged, folds)
    values = list(dict.fromkeys(s for s in sources if s is not None))
    from_payload = any(f.field is not None and s is None for f, s in zip(folds, sources))
    elem = F.struct(*[F.col(o).alias(f"_gl_o{i}") for i, o in enumerate(order)],
                    *[F.col(v) for v in values], *([F.col("payload")] if from_payload else []))
    us = 1000
    win = F.window(time_col, f"{spec.size // us} microseconds", f"{spec.hop // us} microseconds",
                   f"{spec.offset % spec.hop // us} microseconds")
    by = [win.alias("_gl_w"), *([F.col(key_col)] if key_col else [])]
    grouped = staged.groupBy(*by).agg(F.array_sort(F.collect_list(elem)).alias(_ROWS))
    ready = grouped.select((F.unix_micros(F.col("_gl_w.start")) * F.lit(us)).alias(_WS),
                           *([F.col(key_col)] if key_col else []), F.col(_ROWS))
    task = _FoldClosed(spec, folds, key_col, None, [], sources, {})
    return ready.mapInArrow(task, _schema(staged, folds, key is not None, []))


class _FoldClosed(_Fold):
    """On the executors: rows of windows Spark closed, each with its own rows (sorted), folded
    by the kernel; a batch holds whole windows, so each batch's windows close at its end."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = self.spec
        keyed = self.key_col is not None
        for batch in batches:
            if not batch.num_rows:
                continue
            lists = batch.column(_ROWS)
            flat = pa.RecordBatch.from_struct_array(pc.list_flatten(lists))
            window = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
            ws = batch.column(_WS).to_numpy(zero_copy_only=False).astype(np.int64)
            keys = (batch.column(self.key_col).to_pylist() if keyed
                    else [None] * batch.num_rows)
            n = flat.num_rows
            kernel = WindowColumns(WindowSpec(spec.hop, spec.hop, spec.offset % spec.hop),
                                   self.folds, True, max_open=2**62)
            closed = kernel.run(np.concatenate([np.zeros(n, np.bool_), [True]]),
                                np.append(ws[window], MAX_TIME),
                                np.append(window, -1).astype(np.int32),
                                [np.append(v, np.nan) for v in self._values(flat)],
                                [""] * batch.num_rows)
            yield self._rows(closed, [(k,) for k in keys], keyed)
