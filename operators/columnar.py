"""The Goldilocks policy over whole numpy columns: fast replay of a recorded log.

``goldilocks_columns`` gives, for every row of a log in arrival order, the decision the
element-by-element step (``operators.policies.GoldilocksPolicy.step``) would take, without a
Python loop per row:

1. delay each CTI row, flooring at ``MIN_TIME`` without int64 overflow (TS §2.2);
2. a running maximum (``np.maximum.accumulate``) of the delayed CTIs, floored at the
   high-water mark carried in from earlier columns, is the CTI in force after each row; shifted
   by one row (the carried mark in front) it is the CTI in force before it;
3. classify: a CTI row is emitted iff it is the first CTI ever or exceeds the CTI in force
   before it (TS §2.1); an insert row is late iff it starts before the CTI in force (TS §2.4)
   and is then dropped (TS §3.1) or, under ``adjust``, emitted clipped when its end is after
   that CTI (TS §3.2).

The kernel takes and returns the high-water mark (``high``: the last emitted CTI, ``None``
before the first), so a log can be run chunk by chunk in constant memory: running the chunks
one after another, each with the mark the previous one returned, gives exactly the decisions
of one run over the concatenated columns.

Time O(n), memory O(n) in the rows of one call (a handful of temporary int64 columns).

>>> import numpy as np
>>> m = 60 * 10**9                       # design.md §4.2's example, delay 5 min
>>> is_cti = np.array([0, 0, 1, 1, 0, 1, 0], dtype=bool)
>>> start = np.array([5, 0, 5, 0, 7, 8, 1]) * m
>>> action, cti, high = goldilocks_columns(is_cti, start, start + 1, "5m", "drop")
>>> action.tolist()                      # EMIT, EMIT, CTI_EMIT, CTI_SUPPRESS, EMIT, CTI_EMIT, DROP_LATE
[0, 0, 3, 4, 0, 3, 2]
>>> (cti[-1] // m).item()
3
>>> a1, _, high = goldilocks_columns(is_cti[:4], start[:4], start[:4] + 1, "5m", "drop")
>>> a2, _, high = goldilocks_columns(is_cti[4:], start[4:], start[4:] + 1, "5m", "drop", high)
>>> a1.tolist() + a2.tolist(), high // m
([0, 0, 3, 4, 0, 3, 2], 3)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.errors import InputError
from engine.policy import CTI_EMIT, CTI_SUPPRESS, DROP_LATE, EMIT, EMIT_ADJUSTED
from engine.times import MAX_TIME, MIN_TIME, DurationLike, to_duration_ns

__all__ = ["goldilocks_columns", "delayed_cti_column"]

# The kernel computes the action codes arithmetically; it relies on their values.
if (EMIT, EMIT_ADJUSTED, DROP_LATE, CTI_EMIT, CTI_SUPPRESS) != (0, 1, 2, 3, 4):
    raise ImportError("operators.columnar: engine.policy action codes changed; update the kernel")


def delayed_cti_column(is_cti: np.ndarray, start: np.ndarray, delay: int) -> np.ndarray:
    """Per row: ``max(start - delay, MIN_TIME)`` for CTI rows, ``MIN_TIME`` for the others.

    Overflow-free for any ``delay >= 0``, even one beyond int64: only rows with
    ``start >= threshold = MIN_TIME + delay`` are computed, as
    ``(start - threshold) + MIN_TIME``, whose every step stays within int64 (TS §2.2).
    """
    out = np.full(start.shape[0], MIN_TIME, dtype=np.int64)
    threshold = MIN_TIME + delay
    if threshold > MAX_TIME:  # every delayed CTI lies below MIN_TIME
        return out
    mask = start >= threshold
    mask &= is_cti
    np.subtract(start, np.int64(threshold), out=out, where=mask)  # in [0, MAX_TIME - threshold]
    np.add(out, np.int64(MIN_TIME), out=out, where=mask)
    return out


def goldilocks_columns(is_cti: Any, start: Any, end: Any, delay: DurationLike,
                       on_late: str = "drop", high: int | None = None,
                       ) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Run the Goldilocks policy over columns; return ``(action, cti, high)``.

    ``is_cti``: bool per row; ``start``, ``end``: int64 ns per row (``end`` is ignored on CTI
    rows); ``delay``: a duration (``engine.times.DurationLike``: ``"5m"``, ``timedelta``, seconds,
    ``Nanoseconds``); ``on_late``: ``"drop"`` or
    ``"adjust"``; ``high``: the last CTI emitted before these rows (an int64 instant), ``None``
    if none was. ``action`` is int8 per row with the codes of ``engine.policy`` (``EMIT``,
    ``EMIT_ADJUSTED``, ``DROP_LATE``, ``CTI_EMIT``, ``CTI_SUPPRESS``); ``cti`` is int64 per row,
    the CTI in force after the row (``MIN_TIME`` while no CTI was ever emitted). For a late
    insert row ``cti`` is the CTI it violated, and an adjusted row's new start. The returned
    ``high`` is the last CTI emitted up to the end of these rows (``None``: still none), to be
    passed with the next columns. Time O(n), memory O(n).
    """
    delay_ns = to_duration_ns(delay, what="goldilocks_columns: delay")
    if on_late not in ("drop", "adjust"):
        raise InputError(
            f"goldilocks_columns: on_late={on_late!r} is not a late policy; "
            "expected 'drop' or 'adjust'"
        )
    if high is not None and not (type(high) is int and MIN_TIME <= high <= MAX_TIME):
        raise InputError(
            f"goldilocks_columns: high={high!r}; expected None or an int64 instant "
            f"in [{MIN_TIME}, {MAX_TIME}]"
        )
    is_cti = np.asarray(is_cti, dtype=bool)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    n = is_cti.shape[0]
    if is_cti.ndim != 1 or start.shape != (n,) or end.shape != (n,):
        raise InputError(
            "goldilocks_columns: is_cti, start and end must be 1-d columns of one length; got "
            f"shapes {is_cti.shape}, {start.shape}, {end.shape}"
        )
    if n == 0:
        return np.empty(0, dtype=np.int8), np.empty(0, dtype=np.int64), high

    # The CTI in force before the first row. "No CTI yet" is MIN_TIME here, which is also a
    # CTI value; the two differ only for a first CTI that delays to MIN_TIME, handled below.
    floor = MIN_TIME if high is None else high
    delayed = delayed_cti_column(is_cti, start, delay_ns)  # TS §2.2
    cti = np.maximum.accumulate(delayed)  # the CTI in force after each row ...
    if floor != MIN_TIME:
        np.maximum(cti, np.int64(floor), out=cti)  # ... never below the carried mark (TS §2.1)
    before = np.empty(n, dtype=np.int64)  # ... and before it
    before[0] = floor
    before[1:] = cti[:-1]

    # Codes as arithmetic on int8 views of the masks (no per-row branches, no fancy
    # indexing): insert rows are EMIT + late * DROP_LATE - clipped; CTI rows are
    # CTI_SUPPRESS - advance.
    # Inserts: late iff start < CTI in force (TS §2.4). With no CTI yet ``before`` is
    # MIN_TIME, which no start is below, so "no CTI yet" needs no separate mask.
    late = np.less(start, before)
    late &= ~is_cti
    action = late.view(np.int8) * np.int8(DROP_LATE)  # TS §3.1
    if on_late == "adjust":
        clipped = np.greater(end, before)  # TS §3.2: still overlaps (never true of a point)
        clipped &= late
        action -= clipped.view(np.int8)  # DROP_LATE - 1 == EMIT_ADJUSTED

    # CTIs: emitted iff strictly above the CTI in force (TS §2.1), and the first CTI ever
    # (the step's ``high is None``) always, even when it is MIN_TIME.
    advance = np.greater(delayed, before)
    advance &= is_cti
    np.copyto(action, np.int8(CTI_SUPPRESS) - advance.view(np.int8), where=is_cti)
    first = int(is_cti.argmax())
    if is_cti[first]:
        if high is None:
            action[first] = CTI_EMIT
        return action, cti, int(cti[-1])
    return action, cti, high
