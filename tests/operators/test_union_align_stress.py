"""Seeded stress for alignment (TS §4.6) and idleness (TS §4.7): producer threads at
different speeds and clocks, inputs joining, leaving, going quiet and completing at random,
a consumer requesting in random batches. Nothing deadlocks, accounting is exact, CTIs
strictly increase, and both pausing and idleness happen."""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time

import pytest

from engine import ClosedError, Event, from_iterable
from engine.event import CTI
from engine.times import Nanoseconds
from operators import Union, goldilocks
from tests.operators.test_union_stress import Consumer, finish

SEED = 20_261_123
PRODUCERS = 6
QUOTA = 30_000        # events per producer
DEADLINE = 120.0      # seconds; finishing later is a deadlock
IDLE_AFTER = 0.02     # seconds of wall clock


def producer(union: Union, index: int, stop: threading.Event) -> dict:
    """Feed QUOTA events through inputs that come and go, each input's clock running at its
    own pace from its own start; now and then the producer goes quiet past IDLE_AFTER."""
    rng = random.Random(SEED * 31 + index)
    quiet = threading.Event()  # never set: waiting on it is the producer going quiet
    sent = 0
    generation = 0
    done = {"complete": 0, "error": 0, "remove": 0, "publisher": 0, "quiet": 0}
    while sent < QUOTA and not stop.is_set():
        generation += 1
        name = f"p{index}-{generation}"
        size = min(QUOTA - sent, rng.randint(1, 6_000))
        t = rng.randint(0, 5_000)          # where this input's clock starts
        pace = rng.choice((1, 2, 5, 20))   # how fast it runs per event
        batch = []
        for _ in range(size):
            t += rng.randint(0, pace)
            if rng.random() < 0.05:
                batch.append(Event(CTI, t, None, None, None))
            else:
                s = t - (200 if rng.random() < 0.02 else 0)
                batch.append(Event("point", s, s + 1, None, None))
        if rng.random() < 0.15:
            union.add(from_iterable(batch), name=name)  # paused through request(n) alone
            done["publisher"] += 1
            sent += size
            continue
        emitter = union.open_input(name, prefetch=rng.choice((4, 16, 64)))
        cut = size if rng.random() < 0.7 else rng.randint(0, size)
        pos = 0
        while pos < cut and not stop.is_set():
            if rng.random() < 0.002:
                quiet.wait(rng.choice((IDLE_AFTER / 4, IDLE_AFTER * 3)))
                done["quiet"] += 1
            n = emitter.try_send_many(batch[pos:min(cut, pos + rng.randint(1, 50))])
            if n == 0 and emitter.send_blocking(batch[pos], timeout=0.5):
                n = 1
            pos += n
        sent += pos
        how = rng.choice(("complete", "complete", "error", "remove"))
        getattr(emitter, how)(*((RuntimeError(name),) if how == "error" else ()))
        done[how] += 1
        with pytest.raises(ClosedError):
            emitter.try_send(batch[0])
    return {"sent": sent, **done}


@pytest.mark.slow
def test_ts_4_6_no_deadlock_with_inputs_joining_leaving_idling_at_random():
    rng = random.Random(SEED)
    union = Union(goldilocks(Nanoseconds(100)), max_drift=Nanoseconds(50),
                  idle_after=Nanoseconds(int(IDLE_AFTER * 10**9)),
                  max_buffered=256, late_capacity=100, final_cti=True)
    consumer = Consumer(rng)
    union.subscribe(consumer)
    stop = threading.Event()
    started = time.monotonic()
    pauses = 0
    with concurrent.futures.ThreadPoolExecutor(PRODUCERS) as pool:
        futures = [pool.submit(producer, union, i, stop) for i in range(PRODUCERS)]
        try:
            while not all(f.done() for f in futures):
                assert time.monotonic() - started < DEADLINE, f"deadlock? {union.stats()}"
                consumer.request_batch()
                consumer.progress.wait(1.0)
                pauses = max(pauses, sum(s.pauses for s in union.stats().inputs))
            results = [f.result() for f in futures]
        finally:
            stop.set()
    finish(union, consumer, started, DEADLINE)

    assert consumer.error is None and not consumer.problems, consumer.problems[:5]  # TS §2.1
    stats = union.stats()
    sent = sum(r["sent"] for r in results)
    assert sent == QUOTA * PRODUCERS and stats.done and stats.buffered == 0
    assert stats.forgotten == 0
    assert sum(s.received + s.ctis + s.discarded for s in stats.inputs) == sent
    for s in stats.inputs:
        assert s.received == s.emitted + s.dropped, s  # TS §3.4
    assert stats.emitted == consumer.inserts and stats.ctis == consumer.ctis
    assert stats.late.records == stats.dropped + stats.adjusted
    pauses = max(pauses, sum(s.pauses for s in stats.inputs))
    idles = sum(s.idles for s in stats.inputs)
    assert pauses > 0 and idles > 0, (pauses, idles)
    left = {k: sum(r[k] for r in results) for k in ("complete", "error", "remove",
                                                     "publisher", "quiet")}
    assert all(left.values()), left
