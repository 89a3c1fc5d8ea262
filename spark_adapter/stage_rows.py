"""The columns a decision needs, read from one Arrow record batch of the user's rows (an
executor, inside a ``mapInArrow`` task): times in nanoseconds, kinds and reasons as int8
codes, sources and clock groups dictionary-encoded. A row the stage cannot use (a null or
out-of-range time, a null source, an unknown kind, an end not after its start) is marked
with its reason here and never decided. No pyspark import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import MAX_TIME
from engine.times import NS_PER_S, NS_PER_US, UNSCALED_RANGES
from spark_adapter.stage_spec import (BAD_END, JOIN, LEAVE, NULL_KIND, NULL_SOURCE, NULL_TIME, OK,
                                      TIME_FAULTS, TIME_RANGE, UNKNOWN_KIND, UNSCALED_REASON,
                                      StageSpec)

__all__ = ["Rows", "read_rows"]


@dataclass
class Rows:
    """One record batch's columns as the decisions need them (numpy, nanoseconds)."""

    n: int
    start: np.ndarray            # int64 ns (0 where the row is bad)
    end: np.ndarray | None       # int64 ns, or None without an end column
    has_end: np.ndarray | None   # bool
    kind: np.ndarray             # int8 codes; -1 where bad
    bad: np.ndarray              # int8 reason codes (0: usable)
    kind_values: list | None     # the kind column's distinct values (for unknown-kind text)
    kind_index: np.ndarray | None
    pair: np.ndarray             # int per row: index into pair_keys (-1 where bad)
    pair_keys: list              # [(group, source)]
    group: np.ndarray            # int per row: index into group_keys
    group_keys: list             # [group]


_US_LIMIT = MAX_TIME // NS_PER_US


def _int64_values(arr: Any) -> np.ndarray:
    """The int64 values of an integer or timestamp Arrow array, zero-copy where possible
    (null slots hold whatever the buffer holds)."""
    import pyarrow as pa

    if pa.types.is_timestamp(arr.type):
        arr = arr.view(pa.int64())
    if arr.type != pa.int64():
        arr = arr.cast(pa.int64())
    if arr.null_count:
        import pyarrow.compute as pc

        arr = pc.fill_null(arr, 0)
    return arr.to_numpy(zero_copy_only=False)


def _nulls(arr: Any) -> np.ndarray | None:
    if not arr.null_count:
        return None
    return arr.is_null().to_numpy(zero_copy_only=False)


def _times(spec: StageSpec, arr: Any, bad: np.ndarray) -> np.ndarray:
    """Nanoseconds of a time column; marks null, out-of-range and unscaled rows in ``bad``."""
    values = _int64_values(arr)
    nulls = _nulls(arr)
    if nulls is not None:
        bad[nulls & (bad == 0)] = NULL_TIME
    if spec.time_is_timestamp:
        limit, scale = _US_LIMIT, NS_PER_US
    elif spec.time_scale is None:
        limit, scale = MAX_TIME, 1
    else:
        scale = spec.time_scale
        limit = MAX_TIME // scale
    if len(values) and (values.min() < -limit or values.max() > limit):
        out = (values < -limit) | (values > limit)
        bad[out & (bad == 0)] = TIME_RANGE
        values = np.where(out, 0, values)
    if not spec.time_is_timestamp and spec.time_scale is None and len(values):
        lo, hi = UNSCALED_RANGES[0][1], UNSCALED_RANGES[-1][2]
        if values.max() >= lo and values.min() < hi:  # engine.times.looks_unscaled, by columns
            whole = values % NS_PER_S == 0
            for unit, a, b in UNSCALED_RANGES:
                hit = (values >= a) & (values < b) & ~whole & (bad == 0)
                bad[hit] = UNSCALED_REASON[unit]
    return values * scale if scale != 1 else values


def _encode(arr: Any, nulls_as_value: bool) -> tuple[np.ndarray, list]:
    """Dictionary codes (int64, -1 for null unless ``nulls_as_value``) and the values."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(arr, null_encoding="encode" if nulls_as_value else "mask")
    indices = encoded.indices
    codes = _int64_values(indices)
    nulls = _nulls(indices)
    if nulls is not None:
        codes = np.where(nulls, -1, codes)
    return codes, encoded.dictionary.to_pylist()


def read_rows(spec: StageSpec, batch: Any) -> Rows:
    """The columns of ``batch`` (a ``pyarrow.RecordBatch``) that the decisions need."""
    n = batch.num_rows
    bad = np.zeros(n, np.int8)
    start = _times(spec, batch.column(spec.time_col), bad)
    end = has_end = None
    if spec.end_col is not None:
        end_arr = batch.column(spec.end_col)
        ignored = np.zeros(n, np.int8)  # an end's own faults make the row bad below
        end = _times(spec, end_arr, ignored)
        has_end = ignored == 0
        nulls = _nulls(end_arr)
        if nulls is not None:
            has_end &= ~nulls
        bad[(ignored != 0) & (ignored != NULL_TIME) & (bad == 0)] = TIME_RANGE
        bad[has_end & (end <= start) & (bad == 0)] = BAD_END

    kind_values = kind_index = None
    if spec.kind_col is None:
        kind = np.zeros(n, np.int8)
    else:
        kind_index, kind_values = _encode(batch.column(spec.kind_col), False)
        table = dict(spec.kinds)
        codes = np.array([table.get(v, -1) for v in kind_values] + [-2], np.int8)
        kind = codes[kind_index]  # -1 indexes the appended -2: a null kind
        bad[(kind == -2) & (bad == 0)] = NULL_KIND
        bad[(kind == -1) & (bad == 0)] = UNKNOWN_KIND
        # join and leave rows carry no time: only their source counts
        timeless = (kind == JOIN) | (kind == LEAVE)
        if timeless.any():
            bad[timeless & np.isin(bad, TIME_FAULTS)] = OK
    src, src_keys = _encode(batch.column(spec.source_col), False)
    bad[(src < 0) & (bad == 0)] = NULL_SOURCE

    if not spec.group_cols:
        group = np.zeros(n, np.int64)
        group_keys: list = [()]
        pair = src
        pair_keys: list = [((), s) for s in src_keys]
    else:
        parts = [_encode(batch.column(c), True) for c in spec.group_cols]
        if len(parts) == 1:
            group, values = parts[0]
            group_keys = [(v,) for v in values]
        else:
            stacked = np.stack([codes for codes, _ in parts], axis=1)
            uniq, group = np.unique(stacked, axis=0, return_inverse=True)
            group = group.reshape(-1)
            group_keys = [tuple(parts[j][1][int(c)] for j, c in enumerate(row)) for row in uniq]
        width = max(len(src_keys), 1)
        code = np.where(src < 0, -1, group * width + src)
        uniq_pairs, pair = np.unique(code, return_inverse=True)
        pair = pair.reshape(-1).astype(np.int64)
        pair_keys = [None if c < 0 else (group_keys[int(c) // width], src_keys[int(c) % width])
                     for c in uniq_pairs]
        pair[src < 0] = -1
    kind[bad != 0] = -1
    return Rows(n, start, end, has_end, kind, bad, kind_values, kind_index, pair, pair_keys,
                group, group_keys)

