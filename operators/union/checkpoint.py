"""A union's checkpoint: ``Union.checkpoint()`` and ``Union.restore()`` (TS §8.1, §8.2).

What it holds (``docs/checkpoint.md``): the configuration; the policy (described, to check
that it is restored under the same) and its state; the merge's output CTI and counts and the
events merged but not yet handed on (``pending``); every input still in ``stats()`` — the
active ones (the membership) and the latest to leave — with its counts, last CTI, progress
and idleness; the totals of those let go; the late records waiting in the side output and
its counts; and the state of the stages named in ``stages`` (``Windows``, ``ReorderBuffer``)
downstream of it.

A checkpoint is a cut between arrivals: taking it claims the merge's drain (nothing merges
meanwhile), merges what is queued, and holds every input's gate so that nothing arrives
while it is read. Arrivals still queued then (behind events that wait for demand) cannot be
part of the cut: the checkpoint is refused, saying so, and the caller takes it once the
subscriber has caught up. An input's ``received`` in the checkpoint is how many of its
events the union had taken at the cut; its producer resends from there after a restore.

Restoring builds a new union with the checkpoint's configuration (keywords override it), its
state, and its active inputs *detached*: each keeps its place in the policy's state (no
join is seen again) and gets no credit until re-attached by name — ``add(publisher,
name=…)`` or ``open_input(name)`` — which continues its counts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Mapping, cast

from engine.policy import Policy
from operators.checkpoint import (CheckpointError, RestoredError, check_policy, decode_event,
                                  decode_late, decode_state, describe_policy, encode_event,
                                  encode_late, encode_state, field, pack, unpack)
from operators.late import LateOutput
from operators.reorder_buffer import ReorderBuffer
from operators.union.inputs import Input, Intake
from operators.union.merge import Merge, Output
from operators.windows import WindowOperator, Windows

__all__ = ["take", "read", "Saved", "KIND", "CONFIG"]

#: the ``kind`` of a union's checkpoint
KIND = "union"
#: the union's keywords a checkpoint records (and restore uses unless told otherwise)
CONFIG = ("name", "prefetch", "max_buffered", "late_capacity", "fail_on_input_error",
          "final_cti", "keep_departed", "min_credit", "max_drift", "idle_after")

_STAGES: dict[str, tuple[type, ...]] = {"windows": (Windows, WindowOperator),
                                         "reorder": (ReorderBuffer,)}

_INPUT_INTS = ("received", "emitted", "dropped", "adjusted", "ctis", "peak", "prefetch",
               "discarded", "idles", "pauses")


def _stage_type(stage: Any, name: str) -> str:
    for kind, classes in _STAGES.items():
        if isinstance(stage, classes):
            return kind
    named = getattr(stage, "checkpoint_kind", None)
    if isinstance(named, str) and named and named not in _STAGES:
        return named  # a stage of another package: it names its kind itself
    raise TypeError(f"checkpoint: stage {name!r} is a {type(stage).__name__}; expected "
                    "Windows, a window operator (tumbling, hopping), a ReorderBuffer, or an "
                    "object with a checkpoint_kind and snapshot()/load(state, where)")


def take(name: str, config: dict[str, Any], policy: Policy, intake: Intake, merge: Merge,
         late: LateOutput, stages: Mapping[str, Any]) -> bytes:
    """``Union.checkpoint(stages=…)`` of the union ``name`` whose keywords are ``config``:
    see the module docstring."""
    kinds = {key: _stage_type(stage, key) for key, stage in stages.items()}
    output = cast("Output | None", intake.output)  # the union's one output (merge.Output)
    if output is not None and not output.hold():
        raise CheckpointError(
            f"checkpoint: {name} is merging on another thread, or checkpoint() was "
            "called from inside its subscriber's on_next; call it between sends (or once "
            "the subscriber has returned)")
    try:
        if output is not None:
            output.settle()
        with intake.lock:  # an input added after this queues its join: refused below
            inputs = sorted(intake.inputs.values(), key=id)
        for inp in inputs:  # no arrival while the state is read (lock order: gate, lock)
            inp.gate.acquire()
        try:
            with intake.lock:
                if intake.error is not None:
                    raise CheckpointError(f"checkpoint: {name} failed "
                                          f"({intake.error!r}); there is nothing to continue")
                if merge.queue:
                    why = ("waiting for a subscriber to merge them" if output is None else
                           f"behind {len(merge.pending)} merged events waiting for demand")
                    raise CheckpointError(
                        f"checkpoint: {len(merge.queue)} arrivals are queued in "
                        f"{name}, {why}; take the checkpoint once they are merged")
                body = _body(config, policy, intake, merge, late)
                body["stages"] = {key: {"type": kinds[key], "state": stage.snapshot()}
                                  for key, stage in stages.items()}
        finally:
            for inp in inputs:
                inp.gate.release()
    finally:
        if output is not None:
            output.let_go()
    return pack(KIND, body)


def _body(config: dict[str, Any], policy: Policy, intake: Intake, merge: Merge,
          late: LateOutput) -> dict[str, Any]:
    history = list(intake.history.values())
    at = {id(inp): i for i, inp in enumerate(history)}
    records, total, peak, overflow = late.snapshot()
    return {
        "union": config,
        "policy": describe_policy(policy),
        "state": encode_state(policy, merge.state),
        "merge": {"output_cti": merge.output_cti, "cti_before_final": merge.cti_before_final,
                  "ctis": merge.ctis, "final_sent": merge.final_sent,
                  "pending": [encode_event(e) for e in merge.pending]},
        "intake": {"closed": intake.closed or intake.done, "added": intake.added,
                   "forgotten": intake.forgotten, "totals": list(intake.forgotten_totals),
                   "peak": intake.peak, "rotate": intake.rotate,
                   "departed": [at[id(inp)] for inp in intake.departed]},
        "inputs": [_input(inp) for inp in history],
        "late": {"records": [encode_late(r) for r in records], "total": total, "peak": peak,
                 "overflow": overflow},
    }


def _input(inp: Input) -> dict[str, Any]:
    return {"name": inp.name, "state": inp.state, "left": inp.left,
            "imperative": inp.imperative,
            "error": None if inp.error is None else repr(inp.error),
            **{k: getattr(inp, k) for k in _INPUT_INTS},
            "last_cti": inp.last_cti, "progress": inp.progress, "timed": inp.timed,
            "idle": inp.idle, "resumed": inp.resumed}


# -- restore ----------------------------------------------------------------------------------

class Saved:
    """A union's checkpoint, read and checked (``read``): ``config``, the keywords of the
    union it came from; ``apply`` puts the rest into a new union's parts."""

    def __init__(self, config: dict[str, Any], apply: Callable[[Intake, Merge, LateOutput],
                                                                dict[str, Input]]) -> None:
        self.config = config
        self.apply = apply


def read(data: bytes, policy: Policy, stages: Mapping[str, Any]) -> Saved:
    """``Union.restore(data, policy=…, stages=…)``'s first half: everything is read and
    checked before anything is built or loaded (TS §8.2)."""
    where = "checkpoint"
    body = unpack(data, KIND, where)
    check_policy(policy, body.get("policy"), where)
    state = decode_state(policy, body.get("state"), f"{where}: policy state")
    config = field(body, "union", dict, where)
    m = field(body, "merge", dict, where)
    pending = [decode_event(a, f"{where}: pending") for a in field(m, "pending", list, where)]
    late = field(body, "late", dict, where)
    records = [decode_late(a, f"{where}: late") for a in field(late, "records", list, where)]
    late_counts = [field(late, k, int, where) for k in ("total", "peak", "overflow")]
    i = field(body, "intake", dict, where)
    rows = field(body, "inputs", list, where)
    inputs = [_check_input(row, f"{where}: input {n}") for n, row in enumerate(rows)]
    departed = field(i, "departed", list, where)
    if any(not isinstance(k, int) or not 0 <= k < len(rows) or not rows[k]["left"]
           for k in departed):
        raise CheckpointError(f"{where}: malformed: departed {departed!r}")
    saved = field(body, "stages", dict, where)
    for name in saved:
        if name not in stages:
            raise CheckpointError(f"{where}: holds the state of stage {name!r}; pass the "
                                  f"stage to restore it into (stages={{{name!r}: …}})")
    for name, stage in stages.items():
        entry = saved.get(name)
        if entry is None:
            raise CheckpointError(f"{where}: holds no stage {name!r} (it holds "
                                  f"{sorted(saved) or 'none'})")
        if not isinstance(entry, dict) or entry.get("type") != _stage_type(stage, name):
            raise CheckpointError(f"{where}: stage {name!r} was a {entry.get('type')!r}, "
                                  f"restored into a {type(stage).__name__}")
    kwargs = {k: config[k] for k in CONFIG if k in config}

    def apply(intake: Intake, merge: Merge, late: LateOutput) -> dict[str, Input]:
        """Load the stages and fill a new union's parts; the restored active inputs, by
        name, are returned (detached: TS §8.1)."""
        if len(records) > late.capacity:
            raise CheckpointError(f"{where}: {len(records)} late records waiting, more than "
                                  f"late_capacity={late.capacity}")
        _load_stages(stages, saved, where)
        merge.state = state
        merge.output_cti = m.get("output_cti")
        merge.cti_before_final = m.get("cti_before_final")
        merge.ctis, merge.final_sent = int(m.get("ctis", 0)), bool(m.get("final_sent"))
        merge.pending.extend(pending)
        late.load(records, *late_counts)
        return _fill(intake, i, inputs, departed)
    return Saved(kwargs, apply)


def _fill(intake: Intake, i: dict[str, Any], inputs: list[dict[str, Any]],
          departed: list[int]) -> dict[str, Input]:
    intake.closed = bool(i.get("closed"))
    intake.added, intake.forgotten = int(i.get("added", 0)), int(i.get("forgotten", 0))
    totals = i.get("totals", [0, 0, 0, 0])
    intake.forgotten_totals = (int(totals[0]), int(totals[1]), int(totals[2]), int(totals[3]))
    intake.peak, intake.rotate = int(i.get("peak", 0)), int(i.get("rotate", 0))
    made = [_make_input(intake, row) for row in inputs]
    detached = {}
    for inp in made:
        intake.history[id(inp)] = inp
        if not inp.left:
            intake.active[inp.name] = inp
            intake.inputs[id(inp)] = inp
            detached[inp.name] = inp
    intake.departed = deque(made[k] for k in departed)
    return detached


def _load_stages(stages: Mapping[str, Any], saved: dict[str, Any], where: str) -> None:
    """Load each stage's state; if one refuses its state, those loaded are put back."""
    before = {name: stage.snapshot() for name, stage in stages.items()}
    done = []
    try:
        for name, stage in stages.items():
            stage.load(saved[name].get("state"), f"{where}: stage {name!r}")
            done.append(name)
    except BaseException:
        for name in done:
            stages[name].load(before[name])
        raise


def _check_input(row: Any, where: str) -> dict[str, Any]:
    name = field(row, "name", str, where)
    for k in _INPUT_INTS:
        field(row, k, int, f"{where} ({name!r})")
    for k in ("left", "imperative", "timed", "idle", "resumed"):
        field(row, k, bool, f"{where} ({name!r})")
    for k in ("last_cti", "progress"):
        field(row, k, (int, type(None)), f"{where} ({name!r})")
    field(row, "state", str, f"{where} ({name!r})")
    return row


def _make_input(intake: Intake, row: dict[str, Any]) -> Input:
    inp = Input(intake, row["name"], row["prefetch"], row["imperative"])
    for k in _INPUT_INTS:
        setattr(inp, k, row[k])
    inp.requested = inp.processed = inp.received  # the cut: everything taken was merged
    inp.state, inp.left = row["state"], row["left"]
    inp.error = None if row.get("error") is None else RestoredError(row["error"])
    inp.last_cti, inp.progress, inp.timed = row["last_cti"], row["progress"], row["timed"]
    inp.idle, inp.resumed = row["idle"], row["resumed"]
    return inp
