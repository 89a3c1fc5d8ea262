"""Where a ``union_inline`` event's time goes, step by step, in one run.

    python -m benchmarks.bench_perevent            # 200,000 records, 1 warm-up + 7 rounds
    python -m benchmarks.bench_perevent --quick    # 50,000 records, 3 rounds

The single-event fast path (``Output.arrive_now``) is rebuilt here as a ladder of senders,
each doing what the one before does plus one step of the real path, with the real objects
where there are some (``threading.Lock``, the policy, ``LateOutput``, the benchmark's
counting subscriber): the driver's loop and the call; the sender's credit and open checks;
the thread's trampoline; the claim of the drain with the arrival counted under its lock; the
release under the same lock; the arrival's bookkeeping and credit at low water; the policy's
decision and the late side output; the subscriber. The senders are flat (each is one
function, every step inline), so the last rung is what that path costs with no structure
around it; the real ``union_inline`` and RxPY are measured in the same rounds. A step's cost
is the difference of the medians of consecutive rungs (CPU time, ``time.process_time``, ns
per event); the ladder's last rung against ``union_inline`` is what the classes, methods and
their checks cost on top. A benchmark, not a test: ``union_inline`` must count what the
ladder counts, and each rung checks that every event went through.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import threading
import time
from typing import Any

from benchmarks.ours import DELAY, CountingSubscriber, union_inline
from benchmarks.peers import rxpy
from benchmarks.workload import Workload
from engine.event import ADJUSTED, CTI, Event
from engine.executors import INLINE
from operators import goldilocks
from operators.late import LateOutput

__all__ = ["STEPS", "ladder", "main"]

#: The steps of the fast path, in the order the ladder adds them: ``(name, head, tail)``,
#: ``head`` run in order before the hand-off, ``tail`` in reverse order after it (Python
#: source, indented for the sender's body). Each sender returns True once its event is taken.
STEPS: list[tuple[str, str, str]] = [
    ("the driver's loop and the call (a sender that returns True)", "", ""),
    ("the sender's checks: open, credit", """
    if inp.left or intake.error is not None:
        raise RuntimeError("closed")
    if inp.requested - inp.received <= 0:
        return False""", ""),
    ("the thread's trampoline: looked up, checked, held, let go", """
    try:
        trampoline = local.trampoline
    except AttributeError:
        trampoline = here()
    if trampoline.running or queue or pending:
        raise RuntimeError("not the fast path")
    trampoline.running = True""", """
    trampoline.running = False"""),
    ("claiming the drain, the arrival counted under its lock", """
    lock.acquire()
    added = out.added
    demand = out.demand + added
    if (out.wip or demand <= 0 or out.done or out.cancelled or not out.started
            or inp.left or inp.received >= inp.requested or queue or pending):
        lock.release()
        raise RuntimeError("not the fast path")
    out.wip = 1
    if added:
        out.added = 0
        out.demand = demand
    received = inp.received = inp.received + 1
    lock.release()""", """
    out.wip = 0"""),
    ("releasing the drain under the same lock", "", """
    lock.acquire()
    if out.wip == 1 and not out.done and not pending:
        lock.release()  # (the counter is set back by the rung before's tail)
    else:
        lock.release()
        raise RuntimeError("a full turn")"""),
    ("the arrival's bookkeeping (peak, name, processed, low water) and credit", """
    if received - inp.processed > inp.peak:
        inp.peak = received - inp.processed
    if inp.tracking:
        raise RuntimeError("aligned")
    if e.source != inp.name:
        e = Event(e.kind, e.start, e.end, e.payload, inp.name)
    processed = inp.processed = inp.processed + 1
    if inp.requested - processed == inp.low_water:
        intake.low = True""", """
    if intake.low:
        intake.low = False
        grant()"""),
    ("the policy's decision (a call of step for CTIs and late inserts only)", """
    if e.kind != CTI and ((high := merge.state.high) is None or e.start >= high):
        outputs = None
    else:
        merge.state, outputs = step(merge.state, e)
        if len(outputs) == 1 and outputs[0] is e:
            outputs = None""", ""),
    ("the subscriber's on_next, emitted and demand counted; late records kept", """
    if outputs is None:
        inp.emitted += 1
        if demand != MAX:
            out.demand = demand - 1
        on_next(e)
    else:
        for o in outputs:
            if o.__class__ is Event:
                on_next(o)
            elif o.action == ADJUSTED:
                inp.adjusted += 1
            else:
                inp.dropped += 1
                push(o)""", ""),
]

def _record(**fields: Any) -> Any:
    """An object with ``fields`` as slots, as the real classes keep them (``Input``,
    ``Output``, ``Merge``: attribute reads of the same kind)."""
    cls = type("Record", (), {"__slots__": tuple(fields)})
    obj = cls()
    for name, value in fields.items():
        setattr(obj, name, value)
    return obj


def _sender(level: int, inp: Any, env: dict[str, Any]) -> Any:
    """The sender of rung ``level``: the first ``level + 1`` steps, flat, in one function."""
    heads = "".join(head for _, head, _ in STEPS[:level + 1])
    tails = "".join(tail for _, _, tail in reversed(STEPS[:level + 1]))
    source = f"def send(e):{heads or chr(10) + '    pass'}{tails}\n    return True\n"
    scope = dict(env, inp=inp)
    exec(compile(source, f"<rung {level}>", "exec"), scope)  # noqa: S102 - our own text
    return scope["send"]


def _rung(level: int, w: Workload) -> int:
    """Run rung ``level`` over the workload's arrivals; returns how many inserts reached the
    subscriber (0 below the subscriber's rung)."""
    sub = CountingSubscriber()
    policy = goldilocks(DELAY)
    late = LateOutput(10_000, name="ladder.late")
    glock = threading.Lock()
    intake = _record(error=None, low=False)
    merge = _record(state=policy.initial())
    out = _record(wip=0, added=0, demand=0, done=False, cancelled=False, started=True)
    inputs = [_record(name=name, left=False, requested=256, received=0, processed=0, peak=0,
                     tracking=False, low_water=128, emitted=0, dropped=0, adjusted=0)
              for name in w.names]

    def grant() -> None:
        with glock:  # as Intake.grant tops an input up under the intake's lock
            for inp in inputs:
                held = inp.requested - inp.processed
                if held <= inp.low_water:
                    inp.requested += 256 - held

    class Demand:
        def request(self, n: int) -> None:
            out.added += n

    sub.on_subscribe(Demand())
    env = {"intake": intake, "merge": merge, "out": out, "lock": threading.Lock(),
           "local": INLINE.local, "here": INLINE.here, "queue": [], "pending": [],
           "grant": grant, "step": policy.step, "on_next": sub.on_next, "push": late.push,
           "CTI": CTI, "ADJUSTED": ADJUSTED, "Event": Event, "MAX": (1 << 63) - 1}
    if level < 5:  # before the bookkeeping rung nothing returns credit
        for inp in inputs:
            inp.requested = 1 << 62
    sends = [_sender(level, inp, env) for inp in inputs]
    for i, e in zip(w.source_index, w.merged):
        if not sends[i](e):
            raise RuntimeError(f"rung {level}: no credit")
    if level < 3:
        return 0
    if sum(inp.received for inp in inputs) != w.n:
        raise RuntimeError(f"rung {level}: not every event was counted")
    return sub.inserts


def ladder(n: int, rounds: int, warmup: int = 1) -> list[tuple[str, float]]:
    """Median CPU ns per event of every rung, ``union_inline`` and ``rxpy``, rounds
    interleaved."""
    w = Workload(n)
    w.merged
    w.source_index
    rows: list[tuple[str, Any]] = [(name, lambda w, k=k: _rung(k, w))
                                   for k, (name, _, _) in enumerate(STEPS)]
    rows += [("union_inline (the real fast path)", union_inline), ("rxpy", rxpy)]
    times: dict[str, list[float]] = {name: [] for name, _ in rows}
    gc.collect()
    gc.freeze()
    inserts = None
    for r in range(warmup + rounds):
        for name, run in rows:
            t = time.process_time()
            result = run(w)
            dt = time.process_time() - t
            if r >= warmup:
                times[name].append(dt / n * 1e9)
            if name.startswith("the subscriber"):
                inserts = result
            elif name.startswith("union_inline") and inserts is not None:
                if result[0].inserts != inserts:
                    raise RuntimeError(f"union_inline emitted {result[0].inserts} inserts, "
                                       f"the ladder {inserts}")
    gc.unfreeze()
    return [(name, statistics.median(times[name])) for name, _ in rows]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200_000, help="records (default 200,000)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="50,000 records, 3 rounds")
    args = ap.parse_args(argv)
    n, rounds = (50_000, 3) if args.quick else (args.n, args.rounds)
    results = ladder(n, rounds)
    print(f"{n:,} records, median of {rounds} rounds, CPU ns per event")
    print(f"| {'rung: what it adds':<70} | {'ns/event':>9} | {'step':>6} |")
    before = 0.0
    for k, (name, ns) in enumerate(results):
        step = "" if k == 0 or k >= len(STEPS) else f"{ns - before:+.0f}"
        print(f"| {name:<70} | {ns:9.0f} | {step:>6} |")
        if k < len(STEPS):
            before = ns
    real = dict(results)["union_inline (the real fast path)"]
    print(f"structure (union_inline - last rung): {real - before:+.0f} ns; "
          f"3x RxPY is {dict(results)['rxpy'] / 3:.0f} ns")


if __name__ == "__main__":
    main()
