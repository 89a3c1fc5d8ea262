"""What a Python user would otherwise write: the baselines we measure ourselves against.

None of these is part of the product, and none has backpressure across the whole pipeline or
a late side output; each applies the same Goldilocks rule (design.md §4.2) to the same workload
and counts what it emits and what it finds late, so the harness can check they agree.

- ``plain_loop``: one Python ``for`` loop over the merged list with the rule inlined — the
  per-event ceiling for anything that touches every event in Python.
- ``rxpy``: four ``Subject``s driven round-robin → ``merge`` → ``scan`` → ``filter`` →
  ``map``, the idiomatic Rx form of the StreamInsight CTI synchronizing subject (no backpressure).
- ``asyncio_queues``: four producer tasks, a bounded ``asyncio.Queue`` each, one consumer.
- ``thread_queues``: four producer threads on a ``ThreadPoolExecutor``, a bounded
  ``queue.Queue`` each, one consumer (the calling thread).
- ``numpy``: the rule over whole columns with a running maximum — the columnar ceiling.

The queue consumers take from the inputs round-robin, which reproduces the workload's arrival
order exactly, so their counts are deterministic too.
"""

from __future__ import annotations

import asyncio
import queue
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from engine.event import CTI, Event
from engine.times import MIN_TIME

from benchmarks.workload import DELAY, Counts, Workload

__all__ = ["plain_loop", "step_loop", "rxpy", "asyncio_queues", "thread_queues", "numpy_vectorised",
           "QUEUE_BOUND"]

#: Per-input queue bound of the queue baselines: the union's default per-input prefetch.
QUEUE_BOUND = 256


def plain_loop(w: Workload) -> tuple[Counts, int]:
    """The rule inlined in one loop: state in locals, nothing but the decision per event."""
    delay = DELAY
    high = None
    inserts = ctis = late = 0
    for e in w.merged:
        if e.kind == CTI:
            d = e.start - delay
            if d < MIN_TIME:
                d = MIN_TIME
            if high is None or d > high:
                high = d
                Event(CTI, d, None, None, None)  # the CTI that would be emitted
                ctis += 1
        elif high is None or e.start >= high:
            inserts += 1
        else:
            late += 1
    return Counts(inserts, ctis, late), w.inserts


def step_loop(w: Workload) -> tuple[Counts, int]:
    """Not a peer: a bare loop calling the product's ``goldilocks("100ns").step`` per event and
    reading its outputs — no merge, no demand, no subscriber. The floor under any per-event
    design built on the step function (an extra row, for the analysis)."""
    from operators.policies import goldilocks

    policy = goldilocks(DELAY)
    step = policy.step
    state = policy.initial()
    inserts = ctis = late = 0
    for e in w.merged:
        state, outputs = step(state, e)
        for out in outputs:
            if out.__class__ is not Event:
                late += 1
            elif out.kind == CTI:
                ctis += 1
            else:
                inserts += 1
    return Counts(inserts, ctis, late), w.inserts


# -- RxPY ----------------------------------------------------------------------------------

_EMIT, _LATE, _SUPPRESS = 0, 1, 2


def rxpy(w: Workload) -> tuple[Counts, int]:
    """merge → scan (highest delayed CTI as accumulator) → filter → map, as in the seed."""
    import reactivex as rx
    from reactivex import operators as ops
    from reactivex.subject import Subject

    delay = DELAY
    late = [0]
    counts = [0, 0]  # inserts, ctis

    def accumulate(acc: tuple, e: Event) -> tuple:
        high = acc[0]
        if e.kind == CTI:
            d = e.start - delay
            if d < MIN_TIME:
                d = MIN_TIME
            if high is None or d > high:
                return d, Event(CTI, d, None, None, None), _EMIT
            return high, None, _SUPPRESS
        if high is None or e.start >= high:
            return high, e, _EMIT
        return high, e, _LATE

    def keep(acc: tuple) -> bool:
        verdict = acc[2]
        if verdict == _LATE:
            late[0] += 1  # Rx has no side output: counting here is the cheapest honest trace
        return verdict == _EMIT

    def on_next(e: Event) -> None:
        if e.kind == CTI:
            counts[1] += 1
        else:
            counts[0] += 1

    subjects = [Subject() for _ in w.names]
    rx.merge(*subjects).pipe(
        ops.scan(accumulate, seed=(None, None, _SUPPRESS)),
        ops.filter(keep),
        ops.map(lambda acc: acc[1]),
    ).subscribe(on_next=on_next)
    sends = [s.on_next for s in subjects]
    for i, e in zip(w.source_index, w.merged):
        sends[i](e)
    for s in subjects:
        s.on_completed()
    return Counts(counts[0], counts[1], late[0]), w.inserts


# -- bounded queues ---------------------------------------------------------------------------

_DONE = object()


def asyncio_queues(w: Workload) -> tuple[Counts, int]:
    """Four producer tasks into bounded queues; one consumer task takes them round-robin."""

    async def produce(q: asyncio.Queue, events: list[Event]) -> None:
        put = q.put
        for e in events:
            await put(e)
        await put(_DONE)

    async def main() -> Counts:
        queues = [asyncio.Queue(maxsize=QUEUE_BOUND) for _ in w.names]
        tasks = [asyncio.create_task(produce(q, events))
                 for q, events in zip(queues, w.per_input)]
        delay = DELAY
        high = None
        inserts = ctis = late = 0
        gets = [q.get for q in queues]
        while gets:
            for get in list(gets):
                e = await get()
                if e is _DONE:
                    gets.remove(get)
                    continue
                if e.kind == CTI:
                    d = e.start - delay
                    if d < MIN_TIME:
                        d = MIN_TIME
                    if high is None or d > high:
                        high = d
                        Event(CTI, d, None, None, None)
                        ctis += 1
                elif high is None or e.start >= high:
                    inserts += 1
                else:
                    late += 1
        await asyncio.gather(*tasks)
        return Counts(inserts, ctis, late)

    return asyncio.run(main()), w.inserts


def thread_queues(w: Workload) -> tuple[Counts, int]:
    """Four producer threads into bounded queues; the calling thread consumes round-robin."""

    def produce(q: queue.Queue, events: list[Event]) -> None:
        put = q.put
        for e in events:
            put(e)
        put(_DONE)

    queues = [queue.Queue(maxsize=QUEUE_BOUND) for _ in w.names]
    with ThreadPoolExecutor(max_workers=len(queues)) as pool:
        futures = [pool.submit(produce, q, events) for q, events in zip(queues, w.per_input)]
        delay = DELAY
        high = None
        inserts = ctis = late = 0
        gets = [q.get for q in queues]
        while gets:
            for get in list(gets):
                e = get()
                if e is _DONE:
                    gets.remove(get)
                    continue
                if e.kind == CTI:
                    d = e.start - delay
                    if d < MIN_TIME:
                        d = MIN_TIME
                    if high is None or d > high:
                        high = d
                        Event(CTI, d, None, None, None)
                        ctis += 1
                elif high is None or e.start >= high:
                    inserts += 1
                else:
                    late += 1
        for f in futures:
            f.result()
    return Counts(inserts, ctis, late), w.inserts


# -- numpy ----------------------------------------------------------------------------------

def numpy_vectorised(w: Workload) -> tuple[Counts, int]:
    """The rule over columns: delayed CTIs, running maximum, masks for late and emitted CTIs.

    Bare: no overflow guard on the delay, no action-code column — what one would write for
    this one workload (times near 2026, so ``start - delay`` cannot underflow).
    """
    cols = w.columns
    is_cti = cols.is_cti
    start = cols.start
    delayed = np.where(is_cti, start - DELAY, MIN_TIME)
    high = np.maximum.accumulate(delayed)
    before = np.empty_like(high)
    before[0] = MIN_TIME
    before[1:] = high[:-1]
    late = (start < before) & ~is_cti
    cti_emit = (delayed > before) & is_cti
    n_late = int(np.count_nonzero(late))
    n_inserts = int(is_cti.shape[0] - np.count_nonzero(is_cti))
    return Counts(n_inserts - n_late, int(np.count_nonzero(cti_emit)), n_late), n_inserts
