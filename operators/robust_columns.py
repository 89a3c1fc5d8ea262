"""The robust combine rules over columns: ``quantile_policy`` and ``goldilocks(max_ahead=…)``
(TS §2.5, §2.6) for replay's columnar path.

Their CTI depends on which input sent each CTI, so the running maximum of
``operators.columnar`` is not enough: the rule's value after a row is an order statistic
over the live inputs' latest CTIs. But only a few rows can change it — a CTI, a join, a
leave, and an insert that makes an input live — and inserts are nearly all of a log. So:

1. the rows that can change the live set are found with numpy: every CTI and control row,
   and each input's first insert in the columns or after its leave;
2. a tight loop runs over those rows only, keeping the live inputs' latest CTIs in a
   ``sortedcontainers.SortedList``, so the rule's value after a change is O(log k) with k
   live inputs (the step rebuilds and sorts its tuple: O(k log k));
3. a CTI is emitted where the delayed value exceeds the last one (TS §2.1), exactly as the
   step decides; every insert is then judged at once against the CTI in force before it
   (a forward fill of the emitted values, TS §2.4), and dropped or clipped (TS §3.1, §3.2).

The value after a change, with ``s`` the sorted latest CTIs:

- quantile(k): ``s[L - min(k, L)]`` over the ``L`` live inputs (``MIN_TIME`` for one without
  a CTI), the k-th most advanced;
- goldilocks(max_ahead=m) over the ``n`` inputs that have sent a CTI: the input at sorted
  position ``i`` counts for at most the median of the others plus ``m``. The median_low of
  the others is ``s[j + 1]`` for ``i <= j`` and ``s[j]`` for ``i > j``, with
  ``j = (n - 2) // 2``; as ``s`` rises with ``i``, the largest trusted value is
  ``max(min(s[j], s[j+1] + m), min(s[n-1], s[j] + m))``, whose second term is never the
  smaller (``s[j] <= s[n-1]`` and ``s[j] <= s[j] + m``): ``min(s[n-1], s[j] + m)``, the most
  advanced input capped by the median of the others below it (``s[0]`` alone when
  ``n == 1``). The guard decided it (reason ``max_ahead``) when no input's own CTI equals it.

The result is the step's, row for row, late records' reasons included (``tests/operators``
holds them equal with hypothesis, and to ``tests/reference.py``'s model). Time: O(n) numpy
work plus O(c log k) for the c rows that can change the live set; memory O(n).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sortedcontainers import SortedList

from engine.codes import REASON_TEXTS, Reason
from engine.policy import CTI_EMIT, CTI_SUPPRESS, DROP_LATE, EMIT, EMIT_ADJUSTED
from engine.times import MIN_TIME

__all__ = ["REASONS", "QUANTILE", "MAX_AHEAD", "GOLDILOCKS", "JOIN_ROW", "LEAVE_ROW", "live_columns", "quantile_value",
           "guarded_value"]

#: reasons on late records (``LateRecord.reason``): the rule that set the CTI violated
QUANTILE = Reason.QUANTILE.text
MAX_AHEAD = Reason.MAX_AHEAD.text
GOLDILOCKS = Reason.GOLDILOCKS.text
#: the reasons a late row can carry, by code (``reason`` column, ``engine.codes.Reason``): 0 is
#: none
REASONS: tuple[str | None, ...] = REASON_TEXTS
_QUANTILE, _MAX_AHEAD, _GOLDILOCKS = int(Reason.QUANTILE), int(Reason.MAX_AHEAD), int(Reason.GOLDILOCKS)

#: ``change`` codes: a row that makes its input live (join) or ends it (leave); 0 otherwise
JOIN_ROW, LEAVE_ROW = 1, -1


def quantile_value(k: int, latest: SortedList) -> tuple[int | None, int]:
    """The k-th most advanced of the live inputs' latest CTIs (the least advanced when fewer
    than k are live), and the reason code."""
    n = len(latest)
    if not n:
        return None, _QUANTILE
    return latest[n - min(k, n)], _QUANTILE


def guarded_value(max_ahead: int, sent: SortedList) -> tuple[int | None, int]:
    """The largest trusted CTI over the inputs that sent one (module docstring), and the
    reason code: ``max_ahead`` when no input reaches it on its own word."""
    n = len(sent)
    if not n:
        return None, _GOLDILOCKS
    if n == 1:
        return sent[0], _GOLDILOCKS
    top = sent[n - 1]
    best = min(top, sent[(n - 2) // 2] + max_ahead)
    return best, (_GOLDILOCKS if best == top or best in sent else _MAX_AHEAD)


def _changing_rows(is_cti: np.ndarray, change: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Rows that can change the live set: CTIs, joins and leaves, and each input's first
    insert in these rows or after its leave (whether it is live already, the loop knows)."""
    order = np.argsort(source, kind="stable")
    s = source[order]
    first = np.ones(len(s), np.bool_)
    first[1:] = s[1:] != s[:-1]
    first[1:] |= change[order][:-1] == LEAVE_ROW  # the row after a leave of the same input
    maybe = np.zeros(len(s), np.bool_)
    maybe[order] = first
    return np.flatnonzero(is_cti | (change != 0) | maybe)


def live_columns(rule: str, parameter: int, delay: int, adjust: bool, is_cti: Any,
                 change: Any, source: Any, start: Any, end: Any, names: Sequence[Any],
                 high: int | None, ctis: Sequence[tuple[Any, int]], reason: str | None,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int | None,
                            tuple[tuple[Any, int], ...], str | None]:
    """Decide rows in arrival order under ``rule`` (``"quantile"`` with ``parameter`` k, or
    ``"guarded"`` with ``parameter`` max_ahead in ns).

    ``is_cti``: bool per row; ``change``: int8 per row, ``JOIN_ROW``, ``LEAVE_ROW`` or 0 (an
    insert or a CTI); ``source``: int per row, a code into ``names`` (negative: no name,
    ``None``); ``start``, ``end``: int64 ns (``end`` read on inserts only). ``high``,
    ``ctis``, ``reason``: the step's state before the rows (``LiveState``'s fields).

    Returns ``(action, cti, why, high, ctis, reason)``: ``action`` int8 per row (the
    ``engine.policy`` codes; a join or leave row is ``CTI_EMIT`` when it released a CTI,
    else ``CTI_SUPPRESS``), ``cti`` int64 per row (the CTI in force after the row,
    ``MIN_TIME`` while none), ``why`` int8 per row (a code into ``REASONS``: the rule behind
    the CTI in force after the row, which a late row violated), and the state after the rows.
    """
    is_cti = np.asarray(is_cti, np.bool_)
    change = np.asarray(change, np.int8)
    source = np.asarray(source, np.int64)
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    n = len(is_cti)
    latest: dict[Any, int] = dict(ctis)  # live inputs in the order they became live
    quantile = rule == "quantile"
    # quantile: every live input's latest; guarded: only those that sent a CTI
    ordered = SortedList(t for t in latest.values() if quantile or t > MIN_TIME)
    value_of = quantile_value if quantile else guarded_value
    emitted_rows: list[int] = []
    emitted_values: list[int] = []
    emitted_why: list[int] = []
    floor = MIN_TIME if high is None else high
    rows = _changing_rows(is_cti, change, source)
    for i, cti_row, ch, code, t in zip(rows.tolist(), is_cti[rows].tolist(),
                                      change[rows].tolist(), source[rows].tolist(),
                                      start[rows].tolist()):
        name = names[code] if code >= 0 else None
        old = latest.get(name)
        if ch == LEAVE_ROW:
            if old is None:
                continue
            del latest[name]
            if quantile or old > MIN_TIME:
                ordered.remove(old)
        elif cti_row:
            if old is None:
                latest[name] = t
            elif t > old:
                latest[name] = t
                if quantile or old > MIN_TIME:
                    ordered.remove(old)
            else:
                continue  # not a new promise: nothing changes (the step returns its state)
            if quantile or t > MIN_TIME:
                ordered.add(t)
        else:  # a join, or an insert: the input becomes live at MIN_TIME if it is not
            if old is not None:
                continue
            latest[name] = MIN_TIME
            if quantile:
                ordered.add(MIN_TIME)
            if ch != JOIN_ROW:
                continue  # an insert makes its input live without a new CTI (as the step)
        value, why = value_of(parameter, ordered)
        if value is None:
            continue
        d = value - delay
        if d > MIN_TIME and d > floor:  # TS §2.1, §2.2; a CTI at MIN_TIME promises nothing
            floor = d
            emitted_rows.append(i)
            emitted_values.append(d)
            emitted_why.append(why)

    # the CTI in force after each row, and before it (emitted values strictly rise)
    marks = np.full(n, MIN_TIME, np.int64)
    marks[emitted_rows] = emitted_values
    after = np.maximum.accumulate(marks) if n else marks
    if high is not None:
        np.maximum(after, np.int64(high), out=after)
    before = np.empty(n, np.int64)
    if n:
        before[0] = MIN_TIME if high is None else high
        before[1:] = after[:-1]
    codes = np.zeros(n, np.int8)
    codes[emitted_rows] = emitted_why
    carried = int(Reason.of(reason))
    index = np.where(codes != 0, np.arange(n), -1)
    last = np.maximum.accumulate(index) if n else index
    why_after = np.where(last >= 0, codes[np.maximum(last, 0)], carried).astype(np.int8)

    timed = change == 0
    inserts = timed & ~is_cti
    late = inserts & (start < before)  # TS §2.4: no CTI yet is MIN_TIME, which nothing precedes
    action = np.full(n, CTI_SUPPRESS, np.int8)
    action[inserts] = EMIT
    if adjust:
        clipped = late & (end > before)  # TS §3.2
        action[clipped] = EMIT_ADJUSTED
        action[late & ~clipped] = DROP_LATE
    else:
        action[late] = DROP_LATE  # TS §3.1
    action[emitted_rows] = CTI_EMIT
    new_high = emitted_values[-1] if emitted_values else high
    new_reason = REASONS[emitted_why[-1]] if emitted_why else reason
    return action, after, why_after, new_high, tuple(latest.items()), new_reason
