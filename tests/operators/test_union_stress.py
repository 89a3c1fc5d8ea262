"""Seeded stress: 8 producer threads, inputs joining and leaving at random, a million events,
a consumer requesting in random batches. Exact accounting, no deadlock, bounded buffers."""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import random
import threading
import time

import pytest

from engine import ClosedError, Event, from_iterable
from engine.event import CTI
from engine.times import Nanoseconds
from operators import Union, goldilocks

SEED = 20_240_613
TOTAL = int(os.environ.get("UNION_STRESS_EVENTS", 1_000_000))
PRODUCERS = 8
PREFETCH = 256
MAX_BUFFERED = 1024  # below PRODUCERS × PREFETCH: the total bound binds
DEADLINE = 120.0     # seconds; finishing later is a deadlock or livelock


class Consumer:
    """Requests in random batches; checks TS §2.1/§2.3 and RS §1.1 as elements arrive."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.subscription = None
        self.requested = 0
        self.received = 0
        self.inserts = 0
        self.ctis = 0
        self.last_cti: int | None = None
        self.problems: list[str] = []
        self.progress = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def on_subscribe(self, subscription) -> None:
        self.subscription = subscription

    def on_next(self, event) -> None:
        self.received += 1
        if self.received > self.requested:
            self.problems.append(f"RS §1.1: element {self.received} > {self.requested}")
        if event.kind == CTI:
            if self.last_cti is not None and event.start <= self.last_cti:
                self.problems.append(f"TS §2.1: CTI {event.start} after {self.last_cti}")
            self.last_cti = event.start
            self.ctis += 1
        else:
            if self.last_cti is not None and event.start < self.last_cti:
                self.problems.append(f"TS §2.3: {event!r} after CTI {self.last_cti}")
            self.inserts += 1
        if self.received == self.requested:
            self.progress.set()

    def on_error(self, error) -> None:
        self.error = error
        self.done.set()
        self.progress.set()

    def on_complete(self) -> None:
        self.done.set()
        self.progress.set()

    def request_batch(self) -> None:
        n = self.rng.choice((1, 7, 64, 500, 2000, 5000))
        self.progress.clear()
        self.requested += n
        self.subscription.request(n)


def finish(union: Union, consumer: Consumer, started: float, deadline: float) -> None:
    """Close the union and request until the consumer completes, within ``deadline`` s of
    ``started`` (later is a deadlock)."""
    union.close()
    while not consumer.done.is_set():
        assert time.monotonic() - started < deadline, f"did not finish: {union.stats()}"
        consumer.request_batch()
        consumer.progress.wait(1.0)


def producer(union: Union, index: int, quota: int, stop: threading.Event,
             ticks: itertools.count) -> dict:
    """Feed ``quota`` events through inputs that come and go; return what was sent."""
    rng = random.Random(SEED * 31 + index)
    skew = rng.randint(-150, 150)
    clock = 0
    sent = 0
    generation = 0
    left = {"complete": 0, "error": 0, "remove": 0, "publisher": 0}

    def events(n: int) -> list[Event]:
        nonlocal clock
        out = []
        for _ in range(n):
            clock = next(ticks) // PRODUCERS  # a shared wall of time, each with its skew
            r = rng.random()
            t = clock + skew + rng.randint(-40, 5)  # some jitter: a few arrive late
            if r < 0.1:
                out.append(Event(CTI, clock + skew, None, None, None))
            elif r < 0.3:
                out.append(Event("interval", t, t + rng.randint(1, 50), None, None))
            else:
                out.append(Event("point", t, t + 1, None, None))
        return out

    while sent < quota and not stop.is_set():
        generation += 1
        name = f"p{index}-{generation}"
        size = min(quota - sent, rng.randint(1, 20_000))
        batch = events(size)
        if rng.random() < 0.2:
            union.add(from_iterable(batch), name=name)  # completes once all merged
            left["publisher"] += 1
            sent += size
            continue
        emitter = union.open_input(name, prefetch=rng.choice((16, 64, PREFETCH)))
        cut = size if rng.random() < 0.6 else rng.randint(0, size)
        pos = 0
        while pos < cut and not stop.is_set():
            n = emitter.try_send_many(batch[pos:min(cut, pos + rng.randint(1, 300))])
            if n == 0:
                # no credit: wait for it without spinning
                if emitter.send_blocking(batch[pos], timeout=0.5):
                    n = 1
            pos += n
        sent += pos
        how = rng.choice(("complete", "complete", "error", "remove"))
        if how == "complete":
            emitter.complete()
        elif how == "error":
            emitter.error(RuntimeError(f"{name} failed"))
        else:
            emitter.remove()
        left[how] += 1
        try:
            emitter.try_send(batch[0])
            raise AssertionError(f"{name}: send after leaving was accepted")
        except ClosedError:
            pass
    return {"sent": sent, **left}


@pytest.mark.slow
def test_million_events_from_eight_threads_with_churn():
    rng = random.Random(SEED)
    union = Union(goldilocks(Nanoseconds(3000), "adjust"), prefetch=PREFETCH,
                  max_buffered=MAX_BUFFERED,
                  late_capacity=1000, final_cti=True)
    consumer = Consumer(rng)
    union.subscribe(consumer)
    stop = threading.Event()
    ticks = itertools.count()
    quota = TOTAL // PRODUCERS
    started = time.monotonic()
    peak_seen = 0
    with concurrent.futures.ThreadPoolExecutor(PRODUCERS) as pool:
        futures = [pool.submit(producer, union, i, quota, stop, ticks) for i in range(PRODUCERS)]
        try:
            while not all(f.done() for f in futures):
                assert time.monotonic() - started < DEADLINE, \
                    f"no progress: deadlock? {union.stats()}"
                consumer.request_batch()
                consumer.progress.wait(1.0)
                stats = union.stats()
                assert stats.buffered <= MAX_BUFFERED, stats  # memory bounded (TS §4.4)
                peak_seen = max(peak_seen, stats.buffered)
            results = [f.result() for f in futures]
        finally:
            stop.set()
    finish(union, consumer, started, DEADLINE)
    elapsed = time.monotonic() - started

    assert consumer.error is None and not consumer.problems, consumer.problems[:5]
    sent = sum(r["sent"] for r in results)
    assert sent == quota * PRODUCERS
    stats = union.stats()
    assert stats.done and stats.buffered == 0
    # exact accounting: every event sent arrived, and every arrival was emitted or dropped
    assert sum(s.received + s.ctis + s.discarded for s in stats.inputs) == sent
    for s in stats.inputs:
        assert s.received == s.emitted + s.dropped, s
        assert s.peak_buffered <= s.prefetch, s
        assert s.state in ("completed", "failed", "removed"), s
    assert stats.emitted == consumer.inserts
    assert stats.ctis == consumer.ctis and consumer.last_cti == stats.output_cti
    assert stats.late.records == stats.dropped + stats.adjusted
    assert stats.late.overflow == stats.late.records - stats.late.buffered
    assert stats.peak_buffered <= MAX_BUFFERED and peak_seen <= MAX_BUFFERED
    left = {k: sum(r[k] for r in results) for k in ("complete", "error", "remove", "publisher")}
    assert all(left.values()), left  # every way of leaving was exercised
    assert sum(s.state == "failed" for s in stats.inputs) == left["error"]
    assert sum(s.state == "removed" for s in stats.inputs) == left["remove"]
    print(f"\n{sent} events, {len(stats.inputs)} inputs, {elapsed:.1f} s, "
          f"{sent / elapsed:,.0f} events/s, dropped {stats.dropped}, adjusted {stats.adjusted}")
