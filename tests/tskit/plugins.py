"""The TS kit's plug-ins for the engine: each runs a vector through one implementation of the
temporal decision and returns ``(emitted, late)`` for the kit to compare (``kit.mismatch``).

- ``Step``: ``policy.step`` (and ``join``/``leave``, ``finish`` for edges), event by event.
- ``StepMany``: the policy's own ``step_many`` over the runs between joins and leaves.
- ``Columns``: ``policy.run_columns``, the numpy kernel, in two chunks with the state carried.
- ``SourceColumns``: ``policy.run_source_columns``, the robust rules' kernel, in two chunks.
- ``UnionEmitters`` / ``UnionBatches``: the ``Union`` fed through ``open_input`` emitters,
  one event at a time (the single-event fast path) or in batches (``try_send_many``).
- ``ReplayElements`` / ``ReplayColumns``: ``goldilocks.replay`` over the vector written as
  a JSON Lines log, on its element and its columnar path; output and late files read back.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.codes import REASON_TEXTS, Decision
from engine.contracts import MAX_DEMAND
from engine.event import ADJUSTED, CTI, DROPPED, END, INTERVAL, POINT, START, Event, LateRecord
from engine.policy import step_many
from engine.times import MAX_TIME
from tests.reference import is_marker, split_outputs, step_through
from tests.tskit.kit import TSPlugin, arrivals_of, build_policy

__all__ = ["ENGINE_PLUGINS", "Step", "StepMany", "Columns", "SourceColumns", "UnionEmitters",
           "UnionBatches", "ReplayElements", "ReplayColumns", "read_events", "read_late",
           "log_record"]

_ALL = frozenset({"policy:goldilocks", "policy:max", "policy:min", "policy:quantile",
                  "policy:max_ahead", "adjust", "joins", "edges", "range-ends"})


def _finish(policy: Any, state: Any) -> list:
    """The end-of-stream reports of a policy that has them (edges still open, TS §7.5)."""
    finish = getattr(policy, "finish", None)
    return [] if finish is None else list(finish(state)[1])


class Step(TSPlugin):
    name = "step"
    where = "`policy.step`, `join`, `leave` (`operators.policies`, `robust`, `edges`)"
    implements = _ALL

    def run(self, vector):
        policy = build_policy(vector)
        state, outputs = step_through(policy, arrivals_of(vector))
        return split_outputs(outputs + _finish(policy, state))


class StepMany(TSPlugin):
    name = "step_many"
    where = "`policy.step_many` (`GoldilocksPolicy`, `EdgePolicy`)"
    implements = frozenset({"policy:goldilocks", "policy:max", "adjust", "joins", "edges",
                            "range-ends"})
    _OWN = ("has no step_many of its own: engine.policy.step_many runs its step, which the "
            "step plug-in checks")
    skips = {"policy:min": f"min_policy {_OWN}", "policy:quantile": f"quantile_policy {_OWN}",
             "policy:max_ahead": f"goldilocks(max_ahead=...) {_OWN}"}

    def run(self, vector):
        policy = build_policy(vector)
        assert hasattr(policy, "step_many"), f"{policy!r} has no step_many: declare a skip"
        state = policy.initial()
        emitted: list[Event] = []
        late: list[LateRecord] = []
        run: list[Event] = []

        def flush() -> None:
            nonlocal state
            if run:
                state, out, entries, _ = step_many(policy, state, run)
                emitted.extend(out)
                late.extend(LateRecord(*entry) for entry in entries)
                run.clear()

        for item in arrivals_of(vector):
            if is_marker(item):
                flush()
                verb, name = item
                state, outs = (policy.join if verb == "join" else policy.leave)(state, name)
                more, records = split_outputs(outs)
                emitted.extend(more)
                late.extend(records)
            else:
                run.append(item)
        flush()
        more, records = split_outputs(_finish(policy, state))
        return emitted + more, late + records


def _decoded(events: list[Event], action: np.ndarray, cti: np.ndarray,
             why: np.ndarray | None) -> tuple[list[Event], list[LateRecord]]:
    """The outputs a columnar decision stands for, row by row (``engine.codes.Decision``)."""
    emitted: list[Event] = []
    late: list[LateRecord] = []
    for i, (e, a, c) in enumerate(zip(events, action.tolist(), cti.tolist())):
        reason = None if why is None else REASON_TEXTS[int(why[i])]
        if a == Decision.CTI_EMIT:
            emitted.append(Event(CTI, c, None, None, None))
        elif a in (Decision.CTI_SUPPRESS, Decision.NONE):
            continue
        elif a == Decision.EMIT:
            emitted.append(e)
        elif a == Decision.EMIT_ADJUSTED:
            clipped = e.with_start(c)
            emitted.append(clipped)
            late.append(LateRecord(e.source, e, c, ADJUSTED, clipped, reason))
        else:
            assert a == Decision.DROP_LATE, a
            late.append(LateRecord(e.source, e, c, DROPPED, None, reason))
    return emitted, late


class Columns(TSPlugin):
    name = "run_columns"
    where = "`policy.run_columns` (`operators.columnar`)"
    implements = frozenset({"policy:goldilocks", "policy:max", "adjust", "range-ends"})
    skips = {
        "policy:min": "min_policy has no columnar form (run_columns returns None)",
        "policy:quantile": "its columnar form reads the inputs: run_source_columns",
        "policy:max_ahead": "its columnar form reads the inputs: run_source_columns",
        "joins": "the kernel takes inserts and CTIs only (replay hands it no join or leave)",
        "edges": "edges have no columnar form: replay hands blocks with edges to step (TS §7.7)",
    }

    def run(self, vector):
        policy = build_policy(vector)
        events = arrivals_of(vector)
        is_cti = np.array([e.kind == CTI for e in events], np.bool_)
        start = np.array([e.start for e in events], np.int64)
        end = np.array([e.start if e.end is None else e.end for e in events], np.int64)
        cut = len(events) // 2  # two chunks, the state carried across (TS §5.1)
        state = None
        actions, ctis = [], []
        for lo, hi in ((0, cut), (cut, len(events))):
            action, cti, state = policy.run_columns(is_cti[lo:hi], start[lo:hi], end[lo:hi],
                                                    state)
            actions.append(action)
            ctis.append(cti)
        return _decoded(events, np.concatenate(actions), np.concatenate(ctis), None)


class SourceColumns(TSPlugin):
    name = "run_source_columns"
    where = "`policy.run_source_columns` (`operators.robust_columns`)"
    implements = frozenset({"policy:quantile", "policy:max_ahead", "adjust", "joins",
                            "range-ends"})
    skips = {
        "policy:goldilocks": "a running maximum does not read the inputs: run_columns",
        "policy:max": "a running maximum does not read the inputs: run_columns",
        "policy:min": "min_policy has no columnar form",
        "edges": "edges have no columnar form: replay hands blocks with edges to step (TS §7.7)",
    }

    def run(self, vector):
        from operators.robust_columns import JOIN_ROW, LEAVE_ROW

        policy = build_policy(vector)
        arrivals = arrivals_of(vector)
        names = sorted({a[1] if is_marker(a) else a.source for a in arrivals})
        code = {name: i for i, name in enumerate(names)}
        rows = [(False, JOIN_ROW if a[0] == "join" else LEAVE_ROW, code[a[1]], 0, 0)
                if is_marker(a) else
                (a.kind == CTI, 0, code[a.source], a.start, a.start if a.end is None else a.end)
                for a in arrivals]
        cols = [np.array([r[k] for r in rows], t)
                for k, t in enumerate((np.bool_, np.int8, np.int64, np.int64, np.int64))]
        cut = len(rows) // 2
        state = None
        parts = []
        for lo, hi in ((0, cut), (cut, len(rows))):
            action, cti, why, state = policy.run_source_columns(
                *(c[lo:hi] for c in cols), names, state)
            parts.append((action, cti, why))
        action, cti, why = (np.concatenate([p[k] for p in parts]) for k in range(3))
        # a join or leave row decides no insert, but may move the CTI (CTI_EMIT)
        events = [Event(CTI, 0, None) if is_marker(a) else a for a in arrivals]
        return _decoded(events, action, cti, why)


class _Sink:
    """A subscriber that takes everything at once (``MAX_DEMAND``) and keeps it."""

    def __init__(self) -> None:
        self.items: list[Event] = []
        self.completed = False
        self.error: BaseException | None = None

    def on_subscribe(self, subscription: Any) -> None:
        subscription.request(MAX_DEMAND)

    def on_next(self, item: Event) -> None:
        self.items.append(item)

    def on_error(self, error: BaseException) -> None:
        self.error = error

    def on_complete(self) -> None:
        self.completed = True


class UnionEmitters(TSPlugin):
    name = "Union (one event at a time)"
    where = "`Union.open_input(...).try_send` (`operators.union`, its single-event fast path)"
    implements = _ALL
    batch: ClassVar[bool] = False

    def run(self, vector):
        from operators import Union

        union = Union(build_policy(vector))
        sink = _Sink()
        union.subscribe(sink)
        inputs: dict[str, Any] = {}
        pending: list[tuple[str, Event]] = []

        def send() -> None:
            if self.batch:  # consecutive events of one input go as one batch
                while pending:
                    name = pending[0][0]
                    n = next((i for i, (who, _) in enumerate(pending) if who != name),
                             len(pending))
                    events = [e for _, e in pending[:n]]
                    assert inputs[name].try_send_many(events) == len(events)
                    del pending[:n]
            for name, event in pending:
                assert inputs[name].try_send(event), f"{name}: no credit under MAX_DEMAND"
            pending.clear()

        for item in arrivals_of(vector):
            if is_marker(item):
                verb, name = item
                send()
                if verb == "join" and name not in inputs:
                    inputs[name] = union.open_input(name)
                elif verb == "leave" and name in inputs:
                    inputs.pop(name).complete()
                continue
            if item.source not in inputs:
                send()
                inputs[item.source] = union.open_input(item.source)
            pending.append((item.source, item))
        send()
        for emitter in inputs.values():
            emitter.complete()
        union.close()
        assert sink.completed and sink.error is None, (sink.error, union.stats())
        return sink.items, union.late.drain()


class UnionBatches(UnionEmitters):
    name = "Union (batches)"
    where = "`Union.open_input(...).try_send_many` (`operators.union`, its batch path)"
    batch = True


# -- replay ----------------------------------------------------------------------------------


def log_record(seq: int, row: list) -> dict[str, Any]:
    """An arrival row of a vector as an event-log record (``docs/event-log.md``)."""
    kind, source = row[0], row[1]
    if kind in ("join", "leave"):
        return {"seq": seq, "source": source, "kind": kind}
    _, _, start, end, id_, payload = row
    record: dict[str, Any] = {"seq": seq, "source": source,
                              "kind": "insert" if kind in (POINT, INTERVAL) else kind,
                              "start": start}
    if kind in (INTERVAL, END):
        record["end"] = end
    if id_ is not None:
        record["id"] = id_
    if payload is not None:
        record["payload"] = payload
    return record


def _event(record: dict[str, Any]) -> Event:
    """An output line (or a late line's own fields) as an event."""
    kind, start = record["kind"], record["start"]
    if kind == "cti":
        return Event(CTI, start, None, None, record.get("source"))
    if kind == "insert":
        end = record.get("end")
        return Event(POINT if end is None else INTERVAL, start, start + 1 if end is None else end,
                     record.get("payload"), record.get("source"))
    return Event(kind, start, MAX_TIME if kind == START else record["end"],
                 record.get("payload"), record.get("source"), record.get("id"))


def read_events(path: Path) -> list[Event]:
    return [_event(json.loads(line)) for line in path.read_text().splitlines()]


def read_late(path: Path, emitted: list[Event]) -> list[LateRecord]:
    """The late file's records. A late line names its adjusted event by the moved time only;
    the event that went out is the emitted one with the same payload (the vector numbers
    every insert), which the kit then compares in full."""
    by_payload = {e.payload: e for e in emitted if e.kind != CTI}
    records = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        event = _event(r)
        adjusted = by_payload.get(event.payload) if r["action"] == ADJUSTED else None
        records.append(LateRecord(r.get("source"), event, r["cti"], r["action"], adjusted,
                                  r.get("reason")))
    return records


class ReplayElements(TSPlugin):
    name = "replay (element path)"
    where = "`goldilocks.replay(..., columnar=False)` over a JSON Lines log"
    implements = _ALL
    columnar: ClassVar[bool] = False

    def run(self, vector):
        from goldilocks.replay import replay

        with tempfile.TemporaryDirectory() as tmp:
            log, out, late = (Path(tmp) / n for n in ("log.jsonl", "out.jsonl", "late.jsonl"))
            log.write_text("".join(json.dumps(log_record(i, row)) + "\n"
                                   for i, row in enumerate(vector["arrivals"])))
            stats = replay([log], policy=build_policy(vector), out=out, late=late,
                           columnar=self.columnar, merge="arrival")
            assert stats.path == ("columnar" if self.columnar else "element"), stats.path
            emitted = read_events(out)
            return emitted, read_late(late, emitted)


class ReplayColumns(ReplayElements):
    name = "replay (columnar path)"
    where = "`goldilocks.replay(..., columnar=True)`: `run_columns` / `run_source_columns` per chunk"
    implements = frozenset({"policy:goldilocks", "policy:max", "policy:quantile",
                            "policy:max_ahead", "adjust", "joins", "edges", "range-ends"})
    skips = {"policy:min": "min_policy has no columnar form: replay takes its element path"}
    columnar = True


#: the engine's plug-ins, in the order the conformance table lists them
ENGINE_PLUGINS: tuple[type[TSPlugin], ...] = (Step, StepMany, Columns, SourceColumns,
                                              UnionEmitters, UnionBatches, ReplayElements,
                                              ReplayColumns)
