"""One task of the watermarking stage: Arrow record batches in, decided record batches out.

``run_task`` is what the function shipped to ``mapInArrow`` calls on an executor. It loads the
state at the start of the task's micro-batch (``stage_state``), decides every row
(``stage_rows``, ``stage_core``), and yields:

- the data rows — the user's columns untouched (an adjusted row's time clipped), then
  ``event_time`` (integer time columns only), ``cti``, and — with ``keep_late`` — the late
  rows too, with ``late_action`` and ``late_reason``;
- after its last batch, a streaming task's marker row (every user column null) whose
  watermark column carries the task's CTI for Spark, with the task's late and rejected counts.

Late and rejected rows go, without ``keep_late``, to one Parquet file per task
(``stage_state.LateFiles``), published when the task ends. Memory: one record batch (Spark's
``maxRecordsPerBatch``) plus the state (one entry per clock group and per source).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np

from engine import MIN_TIME
from spark_adapter.stage_core import Decided, StageState, new_decider
from spark_adapter.stage_rows import read_rows
from spark_adapter.stage_spec import (ACTIONS, BAD_COUNT, JOIN, KIND_CTI, KIND_NAMES,
                                      LATE_COUNT, LEAVE, TIME_FAULTS, WM, StageSpec, TaskInfo,
                                      reason_text)

__all__ = ["run_task", "sorted_batches", "OutputShape"]


class OutputShape:
    """The Arrow types of the columns the stage adds, from the first record batch's schema."""

    def __init__(self, spec: StageSpec, schema: Any) -> None:
        import pyarrow as pa

        self.spec = spec
        self.user = schema
        names = spec.name_of
        self.time_type = schema.field(spec.time_col).type
        ts = self.time_type if spec.time_is_timestamp else pa.timestamp("us", tz="UTC")
        self.ts_type = ts
        self.cti_type = ts if spec.time_is_timestamp else pa.int64()
        self.scale = 1 if spec.time_is_timestamp else (spec.time_scale or 1)
        extra = []
        if not spec.time_is_timestamp:
            extra.append(pa.field(names["event_time"], ts))
        extra.append(pa.field(names["cti"], self.cti_type))
        self.late_fields = [pa.field(names["late_action"], pa.string()),
                            pa.field(names["late_reason"], pa.string())]
        if spec.keep_late:
            extra += self.late_fields
        self.extra = extra
        internal = [pa.field(WM, ts), pa.field(LATE_COUNT, pa.int64()),
                    pa.field(BAD_COUNT, pa.int64())]
        self.out_schema = pa.schema(list(schema) + extra + internal)
        late = list(schema) + [f for f in extra if f.name not in (f2.name for f2 in self.late_fields)]
        self.late_schema = pa.schema(late + self.late_fields)
        self.time_index = schema.get_field_index(spec.time_col)

    def instants(self, ns: np.ndarray, kind: str) -> Any:
        """Nanoseconds as the column type of ``kind`` (``cti``: null where ``MIN_TIME``;
        ``ts``: a timestamp; ``time``: the user's time column)."""
        import pyarrow as pa

        if kind == "ts":
            return pa.array(np.floor_divide(ns, 1000), pa.int64()).view(self.ts_type)
        if kind == "time":
            values = np.floor_divide(ns, 1000 if self.spec.time_is_timestamp else self.scale)
            arr = pa.array(values, pa.int64())
            if self.spec.time_is_timestamp:
                return arr.view(pa.timestamp(self.time_type.unit, tz=self.time_type.tz))
            return arr.cast(self.time_type)
        none = ns == MIN_TIME
        values = np.floor_divide(ns, 1000 if self.spec.time_is_timestamp else self.scale)
        arr = pa.array(values, pa.int64(), mask=none if none.any() else None)
        return arr.view(self.cti_type) if self.spec.time_is_timestamp else arr

    def internal_nulls(self, n: int) -> list:
        import pyarrow as pa

        return [pa.nulls(n, self.ts_type), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64())]


def _reasons(d: Decided, rows: Any, picked: np.ndarray, spec: StageSpec) -> Any:
    """``late_reason`` of the picked rows: one text per distinct reason (and unknown kind)."""
    import pyarrow as pa

    kinds = [value for value, _ in spec.kinds] or list(KIND_NAMES[:1])
    codes = d.reason[picked].astype(np.int64)
    if rows.kind_index is not None:  # an unknown kind's text names the value
        codes = codes * (len(rows.kind_values) + 1) + (rows.kind_index[picked] + 1)
    distinct, inverse = np.unique(codes, return_inverse=True)
    texts = []
    for code in distinct:
        value = None
        if rows.kind_index is not None:
            code, index = divmod(int(code), len(rows.kind_values) + 1)
            value = rows.kind_values[index - 1] if index else None
        texts.append(reason_text(int(code), value, kinds))
    return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1)))


def _data_batch(shape: OutputShape, batch: Any, d: Decided) -> Any:
    import pyarrow as pa

    keep = d.keep
    n_keep = int(np.count_nonzero(keep))
    if n_keep == 0:
        return None
    whole = n_keep == batch.num_rows
    chosen = batch if whole else batch.filter(pa.array(keep))
    columns = list(chosen.columns)
    start = d.start if whole else d.start[keep]
    if d.adjusted:
        columns[shape.time_index] = shape.instants(start, "time")
    if not shape.spec.time_is_timestamp:
        columns.append(shape.instants(start, "ts"))
    columns.append(shape.instants(d.row_cti if whole else d.row_cti[keep], "cti"))
    if shape.spec.keep_late:
        action = np.array(ACTIONS, dtype=object)[d.action if whole else d.action[keep]]
        columns.append(pa.array(action, pa.string()))
        columns.append(pa.nulls(n_keep, pa.string()))  # an adjusted row's reason is on its late row
    columns += shape.internal_nulls(n_keep)
    return pa.RecordBatch.from_arrays(columns, schema=shape.out_schema)


def _late_batch(shape: OutputShape, batch: Any, d: Decided, rows: Any) -> Any:
    """The late and rejected rows as they arrived, with the CTI broken, action and reason."""
    import pyarrow as pa
    import pyarrow.compute as pc

    late = d.action != 0
    picked = np.flatnonzero(late)
    if not len(picked):
        return None
    chosen = batch.filter(pa.array(late))
    columns = list(chosen.columns)
    if not shape.spec.time_is_timestamp:
        event_time = shape.instants(rows.start[picked], "ts")
        unusable = np.isin(rows.bad[picked], TIME_FAULTS)
        if unusable.any():  # no time to show
            event_time = pc.if_else(pa.array(unusable), pa.scalar(None, event_time.type),
                                    event_time)
        columns.append(event_time)
    columns.append(shape.instants(d.late_cti[picked], "cti"))
    columns.append(pa.array(np.array(ACTIONS, dtype=object)[d.action[picked]], pa.string()))
    columns.append(_reasons(d, rows, picked, shape.spec))
    if shape.spec.keep_late:
        columns += shape.internal_nulls(len(picked))
        return pa.RecordBatch.from_arrays(columns, schema=shape.out_schema)
    return pa.RecordBatch.from_arrays(columns, schema=shape.late_schema)


def _marker(shape: OutputShape, value: int | None, late: int, bad: int) -> Any:
    import pyarrow as pa

    columns = [pa.nulls(1, f.type) for f in shape.user] + [pa.nulls(1, f.type) for f in shape.extra]
    wm = (pa.nulls(1, shape.ts_type) if value is None
          else pa.array([value // 1000], pa.int64()).view(shape.ts_type))
    columns += [wm, pa.array([late], pa.int64()), pa.array([bad], pa.int64())]
    return pa.RecordBatch.from_arrays(columns, schema=shape.out_schema)


def _orderable(t: Any) -> bool:
    import pyarrow as pa

    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t)
            or pa.types.is_decimal(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def sorted_batches(spec: StageSpec, batches: Iterable[Any]) -> Iterator[Any]:
    """The sequential plan's order inside a task: by clock group, then the arrival columns
    (``order_by``) when given, else event-time order — joins first, leaves last, then time,
    source, CTIs before inserts, then the other columns in the order of the schema. Nulls
    first, as Spark sorts. Holds the task's rows (one micro-batch of its clock groups)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    batches = list(batches)
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    del batches
    keys = list(spec.group_cols)
    extra: dict = {}
    if spec.order_by:
        keys += list(spec.order_by)
    else:
        codes = dict(spec.kinds)
        if spec.kind_col is not None:
            kind = table.column(spec.kind_col)
            def coded(values: list, hit: int, miss: int) -> Any:
                return pc.if_else(pc.is_in(kind, pa.array(values, pa.string())), hit, miss)
            joins = [v for v, c in codes.items() if c == JOIN]
            leaves = [v for v, c in codes.items() if c == LEAVE]
            ctis = [v for v, c in codes.items() if c == KIND_CTI]
            extra["_gl_phase"] = pc.if_else(pc.is_in(kind, pa.array(leaves, pa.string())), 2,
                                            coded(joins, 0, 1))
            extra["_gl_rank"] = coded(ctis, 0, 1)
            keys.append("_gl_phase")
        keys += [spec.time_col, spec.source_col]
        if spec.kind_col is not None:
            keys.append("_gl_rank")
        taken = set(keys) | set(spec.group_cols)
        keys += [f.name for f in table.schema if f.name not in taken and _orderable(f.type)]
    keyed = table
    for name, values in extra.items():
        keyed = keyed.append_column(name, values)
    order = pc.sort_indices(keyed, sort_keys=[(k, "ascending", "at_start") for k in keys])
    yield from table.take(order).to_batches(max_chunksize=1 << 16)


def run_task(spec: StageSpec, batches: Iterable[Any], info: TaskInfo) -> Iterator[Any]:
    """Decide one task's record batches; yield the decided ones (module docstring). Executor."""
    from spark_adapter.stage_state import LateFiles, StateStore

    store = StateStore(spec, info) if spec.streaming else None
    state = store.load() if store is not None else StageState(spec.fingerprint())
    late_files = None
    if not spec.keep_late and spec.late_path is not None:
        late_files = LateFiles(spec.late_path, info)
    decider = new_decider(spec, state)
    shape: OutputShape | None = None
    if spec.plan == "sequential":
        batches = sorted_batches(spec, batches)
    try:
        for batch in batches:
            if shape is None:
                shape = OutputShape(spec, batch.schema)
            rows = read_rows(spec, batch)
            d = decider.decide(rows)
            out = _data_batch(shape, batch, d)
            if out is not None:
                yield out
            late = _late_batch(shape, batch, d, rows)
            if late is not None:
                if spec.keep_late:
                    yield late
                elif late_files is not None:
                    late_files.write(late)
        if late_files is not None:
            late_files.close()
    except BaseException:
        if late_files is not None:
            late_files.abort()
        raise
    if store is not None and shape is None and spec.input_schema is not None:
        shape = OutputShape(spec, spec.input_schema)  # no row: the CTI in force, all the same
    if store is not None and shape is not None:
        partial = decider.partial()
        store.save(partial)
        counts = partial["counts"]
        yield _marker(shape, partial["marker"], counts["dropped"] + counts["adjusted"],
                      counts["rejected"])
