"""Windows closed by CTIs over columns in arrival order: the vectorised form of ``Windows``.

``WindowColumns(spec, folds, keyed).run(is_cti, start, key, values, names)`` takes one chunk
of a merged stream (the policy's output: inserts and advancing CTIs, in order) and returns
the windows it closed, in the order ``Windows.step`` emits them, with the same numbers: the
open windows and their accumulators are carried from chunk to chunk, so where the chunks are
cut changes nothing. Only the built-in folds (``count``, ``sum``, ``mean``, ``min``, ``max``)
run here; a user fold runs element by element.

The clock: one for the stream (the CTIs of the chunk, whoever sent them), or with
``per_key=True`` one per key (TS §6.3): a CTI row carries the code of the key whose clock it
advances, and an insert is judged, and a window closed, by its own key's clock only — what
``Windows(clocks=policy)`` does with the CTIs the policy emits for each key (the caller runs
the policy per key; ``goldilocks.windowed`` does). Idle keys are not evicted here (TS §6.4 is
the element path's); more than ``max_keys`` keys is an error that says so.

How: every insert is given its windows (``size / hop`` candidates per row, kept where the
insert falls in them), the CTI in force before each row is a running maximum, assignments to
windows already closed are late (TS §6.2), and the rest are folded with unbuffered
``ufunc.at`` in row order — the additions happen in the same order as element by element,
so the float sums are bit-identical. A window closes at the first CTI at or after its end
(TS §6.1) — of its own key, with per-key clocks; the windows a chunk closes come out by the
row that closed them, then ``(end, key name)``, as element by element.

Memory: O(open windows + chunk × size / hop).

Checkpoints: ``snapshot``/``load`` write and read the kernel's state in ``Windows.snapshot``'s
format — one codec for the windows of both paths (TS §8.1): the open windows by ``(end, key
name)`` with each fold's accumulator as ``Windows`` holds it, the clock, or with per-key
clocks each key's clock and policy state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import InputError
from engine.policy import Policy
from engine.times import MAX_TIME, MIN_TIME

from operators.checkpoint import decode_state, describe_policy, encode_state
from operators.windows import Fold, Windows, WindowSpec

__all__ = ["WindowColumns", "Closed"]


@dataclass(frozen=True, slots=True)
class Closed:
    """Windows closed by one chunk, in emission order: ``end`` (int64), ``key`` (int32 codes;
    -1 unkeyed), ``count`` (int64 inserts folded), and per fold its results as ``(value,
    present)``: float64 values and a bool mask (``False``: no value, reported as null);
    ``late`` marks the chunk's rows that found a window closed, and ``clock`` is the clock
    each row was judged by (its key's, with per-key clocks; ``MIN_TIME``: none yet)."""

    end: np.ndarray
    key: np.ndarray
    count: np.ndarray
    values: tuple[tuple[np.ndarray, np.ndarray], ...]
    late: np.ndarray
    clock: np.ndarray


class WindowColumns:
    """The windows of one run over a merged stream's chunks (see the module docstring)."""

    def __init__(self, spec: WindowSpec, folds: Sequence[Fold], keyed: bool, *,
                 max_open: int = 100_000, per_key: bool = False,
                 max_keys: int = 100_000) -> None:
        for f in folds:
            if f.kind is None:
                raise InputError(f"windows: the fold {f.label!r} is a user fold; only the "
                                 "built-in ones run on columns (use the element path)")
        if per_key and not keyed:
            raise InputError("windows: per-key clocks need keyed windows; without a key the "
                             "stream has one clock")
        self.spec = spec
        self.folds = tuple(folds)
        self.keyed = keyed
        self.max_open = max_open
        self.clock = MIN_TIME  # the CTI in force (MIN_TIME: none yet; no window ends there)
        self.per_key = per_key
        self.max_keys = max_keys
        self.clocks = np.zeros(0, np.int64)  # per-key clocks by key code (MIN_TIME: none)
        # the open windows, one row each
        self.end = np.zeros(0, np.int64)
        self.key = np.zeros(0, np.int32)
        self.count = np.zeros(0, np.int64)
        self.n = [np.zeros(0, np.int64) for _ in self.folds]      # values folded
        self.acc = [np.zeros(0, np.float64) for _ in self.folds]  # sum, or min / max
        self.peak = 0
        self.inserts = 0
        self.late = 0
        self.emitted = 0

    def run(self, is_cti: np.ndarray, start: np.ndarray, key: np.ndarray,
            values: Sequence[np.ndarray], names: Sequence[str]) -> Closed:
        """One chunk: ``is_cti``/``start`` per row (CTIs and inserts, in arrival order),
        ``key`` int32 codes into ``names`` (ignored unkeyed; with per-key clocks a CTI row's
        code names the key it moves), ``values[i]`` fold ``i``'s value per row (float64, NaN
        where the insert has none)."""
        spec = self.spec
        n_rows = len(start)
        start = np.asarray(start, np.int64)
        ins = np.flatnonzero(~is_cti)
        t = start[ins]
        if len(t) and int(t.max()) > MAX_TIME - spec.size:
            raise InputError("windows: an insert would open a window ending after the latest "
                             "instant (MAX_TIME); expected earlier times")
        # the CTI in force before and after each row: a running maximum, the carried clock
        # first — over the whole chunk, or over each key's rows with per-key clocks
        cti_at = np.where(is_cti, start, MIN_TIME)
        if self.per_key:
            key = np.asarray(key, np.int32)
            row_before, row_after, segments = self._key_clocks(cti_at, key, len(names))
        else:
            after = np.maximum.accumulate(np.concatenate([[self.clock], cti_at]))
            row_before, row_after, segments = after[:-1], after[1:], []
        before = row_before[ins]
        # each insert's candidate windows, row-major (row, then window): per window the
        # assignments keep arrival order, so the sums add in the element path's order
        m = spec.per_insert
        last = t - (t - spec.offset) % spec.hop
        ends = last[:, None] + (spec.size - spec.hop * np.arange(m, dtype=np.int64))[None, :]
        inside = ends > t[:, None]
        closed = inside & (ends <= before[:, None])                   # TS §6.2
        keep = inside & ~closed
        late_rows = np.zeros(n_rows, np.bool_)
        late_rows[ins[closed.any(axis=1)]] = True
        self.late += int(late_rows.sum())
        self.inserts += int(keep.any(axis=1).sum())
        rows = np.repeat(np.arange(len(t)), m).reshape(len(t), m)[keep]
        a_end = ends[keep]
        a_key = (key[ins][rows].astype(np.int32) if self.keyed
                 else np.full(len(rows), -1, np.int32))
        # windows: the open ones first, then the new ones in order of first assignment
        old = len(self.end)
        both_end = np.concatenate([self.end, a_end])
        both_key = np.concatenate([self.key, a_key])
        first, inverse = _unique_pairs(both_end, both_key, spec)
        order = np.argsort(first, kind="stable")  # slots: carried windows keep their places
        slot_of = np.empty(len(order), np.int64)
        slot_of[order] = np.arange(len(order))
        slots = slot_of[inverse[old:]]
        w = len(order)
        end = both_end[first[order]]
        wkey = both_key[first[order]]
        count = np.zeros(w, np.int64)
        count[:old] = self.count
        np.add.at(count, slots, 1)
        opened_at = np.full(w, n_rows, np.int64)  # the row that opened each new window
        np.minimum.at(opened_at, slots, ins[rows])
        results = []
        for i, f in enumerate(self.folds):
            n = np.zeros(w, np.int64)
            n[:old] = self.n[i]
            acc = np.full(w, np.inf if f.kind == "min" else -np.inf if f.kind == "max"
                          else 0.0)
            acc[:old] = self.acc[i]
            if f.field is None:  # count of every insert
                n[:] = count
            else:
                v = np.asarray(values[i], np.float64)[ins][rows]
                has = ~np.isnan(v)
                s, v = slots[has], v[has]
                np.add.at(n, s, 1)
                if f.kind in ("sum", "mean"):
                    np.add.at(acc, s, v)
                elif f.kind == "min":
                    np.minimum.at(acc, s, v)
                elif f.kind == "max":
                    np.maximum.at(acc, s, v)
            results.append((n, acc))
        # which windows close, and at which row: the first CTI at or after their end (TS
        # §6.1), of their own key with per-key clocks (TS §6.3); n_rows: not in this chunk
        if self.per_key:
            closes = np.full(w, n_rows, np.int64)
            for k, rows_k in segments:
                mine = np.flatnonzero(wkey == k)
                at = np.searchsorted(row_after[rows_k], end[mine], side="left")
                closes[mine] = np.append(rows_k, n_rows)[at]
        else:
            self.clock = int(row_after[-1]) if n_rows else self.clock
            closes = np.searchsorted(row_after, end, side="left")
        shut = closes < n_rows
        self._peak(opened_at[old:], old, closes[shut], n_rows)
        c = np.flatnonzero(shut)
        # emission order: the closing row, then (end, key name) among the windows it closes
        if self.keyed and len(c):
            c = c[np.lexsort((_ranks(names)[wkey[c]], end[c], closes[c]))]
        else:
            c = c[np.lexsort((end[c], closes[c]))]
        out_values = []
        for f, (n, acc) in zip(self.folds, results):
            if f.kind == "count":
                out_values.append((n[c].astype(np.float64), np.ones(len(c), np.bool_)))
            elif f.kind == "mean":
                with np.errstate(invalid="ignore", divide="ignore"):
                    out_values.append((acc[c] / n[c], n[c] > 0))
            else:
                out_values.append((acc[c], n[c] > 0))
        closed_out = Closed(end[c], wkey[c], count[c], tuple(out_values), late_rows,
                            row_before)
        stay = ~shut
        self.end, self.key, self.count = end[stay], wkey[stay], count[stay]
        self.n = [n[stay] for n, _ in results]
        self.acc = [acc[stay] for _, acc in results]
        self.emitted += len(c)
        return closed_out

    def _key_clocks(self, cti_at: np.ndarray, key: np.ndarray, n_keys: int,
                    ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, np.ndarray]]]:
        """Per-key clocks (TS §6.3): each row's key's clock before and after it, each key's
        running maximum from its carried clock; and the rows of each key (ascending), by key.
        Updates the carried clocks."""
        if n_keys > self.max_keys:
            raise InputError(
                f"windows: {n_keys} keys hold a clock (max_keys {self.max_keys}); expected "
                "fewer on the columnar path, which evicts no key (the element path evicts "
                "the longest idle: columnar=False)")
        if len(self.clocks) < n_keys:
            self.clocks = np.concatenate(
                [self.clocks, np.full(n_keys - len(self.clocks), MIN_TIME, np.int64)])
        n_rows = len(key)
        before = np.empty(n_rows, np.int64)
        after = np.empty(n_rows, np.int64)
        order = np.argsort(key, kind="stable")
        cuts = np.flatnonzero(np.diff(key[order])) + 1
        segments = []
        for rows_k in np.split(order, cuts) if n_rows else ():
            k = int(key[rows_k[0]])
            if k < 0:
                raise InputError("windows: a row without a key; with per-key clocks every "
                                 "insert and CTI names its key")
            run = np.maximum.accumulate(np.concatenate([[self.clocks[k]], cti_at[rows_k]]))
            before[rows_k] = run[:-1]
            after[rows_k] = run[1:]
            self.clocks[k] = run[-1]
            segments.append((k, rows_k))
        return before, after, segments

    def _peak(self, opened_at: np.ndarray, old: int, closes: np.ndarray, n_rows: int) -> None:
        """The most windows open at once in this chunk, exactly as element by element:
        +1 at the row that opens a window, -1 at the CTI row that closes it."""
        delta = np.zeros(n_rows + 1, np.int64)
        np.add.at(delta, opened_at, 1)
        np.add.at(delta, closes, -1)
        running = old + np.cumsum(delta[:n_rows])
        peak = int(running.max()) if n_rows else old
        if peak > self.max_open:
            raise InputError(
                f"windows: {self.max_open} windows are open at once (max_open); expected "
                "CTIs often enough to close them (raise max_open, or generate CTIs with "
                "advance_time)")
        self.peak = max(self.peak, peak)

    @property
    def open(self) -> int:
        return len(self.end)

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self, names: Sequence[str], *, clocks: Policy | None = None,
                 states: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The kernel's state as ``Windows.snapshot`` writes it (one codec): ``names`` are the
        key codes' names; with per-key clocks, ``clocks`` is the policy each key runs and
        ``states`` each key's policy state by name. The columnar path keeps no idle index
        (it evicts no key): every key's latest time is written as unknown."""
        accs = self._accumulators()
        code_key = (lambda k: names[k]) if self.keyed else (lambda k: None)
        rows = sorted((int(e), code_key(int(k)), a)
                      for e, k, a in zip(self.end.tolist(), self.key.tolist(), accs))
        groups: list[list[Any]] = []
        clock = None if self.clock == MIN_TIME else self.clock
        if self.per_key:
            assert clocks is not None and states is not None
            code_of = {name: code for code, name in enumerate(names)}
            by_key: dict[Any, list] = {}
            for end, key, a in rows:
                by_key.setdefault(key, []).append([end, a])
            for name, state in states.items():
                code = code_of[name]
                t = int(self.clocks[code]) if code < len(self.clocks) else MIN_TIME
                groups.append([name, code + 1, encode_state(clocks, state),
                               None if t == MIN_TIME else t, None, by_key.get(name, [])])
            rows, clock = [], None
        known = [g[3] for g in groups if g[3] is not None]
        return {"spec": [self.spec.size, self.spec.hop, self.spec.offset],
                "folds": [f.label for f in self.folds], "keyed": self.keyed,
                "clocks": None if clocks is None else describe_policy(clocks),
                "idle_after": None, "clock": clock,
                "open": [[end, key, a] for end, key, a in rows], "groups": groups,
                "made": max((g[1] for g in groups), default=0),
                "fleet_time": max(known) if known else None, "floor": None,
                "counts": [self.open, self.peak, self.inserts, self.late, self.emitted, 0, 0]}

    def _accumulators(self) -> list[list]:
        """Each open window's ``[count, acc, …]`` as ``Windows`` holds them: ``count`` an
        int; ``sum``/``mean`` ``(values, total)``; ``min``/``max`` the value or ``None``."""
        out: list[list[Any]] = [[c] for c in self.count.tolist()]
        for f, n, acc in zip(self.folds, self.n, self.acc):
            for row, k, a in zip(out, n.tolist(), acc.tolist()):
                if f.kind == "count":
                    row.append(k)
                elif f.kind in ("sum", "mean"):
                    row.append((k, a))
                else:
                    row.append(a if k else None)
        return out

    def load(self, obj: Any, code: Callable[[str], int], *, clocks: Policy | None = None,
             where: str = "checkpoint: windows") -> dict[str, Any]:
        """Take a state in ``Windows.snapshot``'s format (written by either path): checked
        first by ``Windows.load`` (the same definition, bounds, well formed:
        ``CheckpointError``, nothing changed), then held as columns; ``code(name)`` gives a
        key's code. Returns each key's policy state by name (per-key clocks; else empty)."""
        Windows(self.spec, self.folds, key="source" if self.keyed else None, clocks=clocks,
                max_open=self.max_open, max_keys=self.max_keys).load(obj, where)
        rows = [(end, key, accs) for end, key, accs in obj["open"]]
        clock_by: dict[int, int] = {}
        states: dict[str, Any] = {}
        if self.per_key:
            assert clocks is not None
            for key, _, state, clock, _, windows in obj["groups"]:
                states[key] = decode_state(clocks, state, where)
                k = code(key)  # every key with a clock has a code, windows open or not
                if clock is not None:
                    clock_by[k] = clock
                rows.extend((end, key, accs) for end, accs in windows)
        n = len(rows)
        self.end = np.array([r[0] for r in rows], np.int64).reshape(n)
        self.key = np.array([code(r[1]) if self.keyed else -1 for r in rows],
                            np.int32).reshape(n)
        self.count = np.array([r[2][0] for r in rows], np.int64).reshape(n)
        self.n, self.acc = [], []
        for i, f in enumerate(self.folds, 1):
            got = [r[2][i] for r in rows]
            if f.kind == "count":
                n_i, acc_i = got, [0.0] * n
            elif f.kind in ("sum", "mean"):
                n_i, acc_i = [a[0] for a in got], [a[1] for a in got]
            else:
                empty = np.inf if f.kind == "min" else -np.inf
                n_i = [0 if a is None else 1 for a in got]
                acc_i = [empty if a is None else a for a in got]
            self.n.append(np.array(n_i, np.int64).reshape(n))
            self.acc.append(np.array(acc_i, np.float64).reshape(n))
        self.clock = MIN_TIME if obj["clock"] is None else obj["clock"]
        size = max(clock_by, default=-1) + 1
        self.clocks = np.full(size, MIN_TIME, np.int64)
        for k, t in clock_by.items():
            self.clocks[k] = t
        _, self.peak, self.inserts, self.late, self.emitted = obj["counts"][:5]
        return states


def _unique_pairs(end: np.ndarray, key: np.ndarray, spec: WindowSpec,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(end, key)`` pairs: each one's first index, and each row's pair number.

    A pair is one int64 when it fits — ``(window number - smallest) * keys + key`` (ends are
    ``offset + size + k * hop``) — and sorted as one column; otherwise as rows (slower)."""
    if not len(end):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    k = (end - (spec.offset + spec.size)) // spec.hop
    k -= k.min()
    width = int(key.max()) + 2
    if int(k.max()) < (2**62) // width:
        _, first, inverse = np.unique(k * width + (key.astype(np.int64) + 1),
                                      return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)
    pair = np.stack([end, key.astype(np.int64)], axis=1)
    _, first, inverse = np.unique(pair, axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _ranks(names: Sequence[str]) -> np.ndarray:
    """Each code's rank when the names are sorted (codepoint order, as Python's ``<``)."""
    ranks = np.zeros(len(names), np.int64)
    if len(names):
        ranks[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    return ranks
