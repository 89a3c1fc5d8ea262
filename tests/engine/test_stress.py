"""Seeded concurrency stress: threads requesting and cancelling at random, hundreds of trials.

Every trial checks, through the kit's probes, that no subscriber ever gets more than it
requested (RS §1.1), that signals never overlap (RS §1.3), that nothing follows a terminal
signal (RS §1.7) and that every subscriber that did not cancel gets its whole stream and a
terminal signal within a timeout (nothing hangs). A wrapper between the source and the stage
under test also checks that the stage calls its upstream subscription serially (RS §2.7).
Each trial has its own thread pool, shut down (waiting) at the end, so nothing from one trial
leaks into the next. Seeds are fixed: a failure names its seed and replays.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading

import pytest

from engine import MAX_DEMAND, Multicast, from_iterable, pipe, transform
from engine.tck import ManualSubscriber
from operators.basic import filter, map

TIMEOUT = 5.0


class SerialCheck:
    """A publisher wrapper whose subscriptions flag overlapping request/cancel (RS §2.7)."""

    def __init__(self, upstream, problems):
        self.upstream = upstream
        self.problems = problems

    def subscribe(self, subscriber):
        self.upstream.subscribe(_CheckingSubscriber(subscriber, self.problems))


class _CheckingSubscriber:
    def __init__(self, downstream, problems):
        self.downstream = downstream
        self.problems = problems
        self.inner = None
        self.active = 0
        self.lock = threading.Lock()

    def on_subscribe(self, subscription):
        self.inner = subscription
        self.downstream.on_subscribe(self)

    def on_next(self, item):
        self.downstream.on_next(item)

    def on_error(self, error):
        self.downstream.on_error(error)

    def on_complete(self):
        self.downstream.on_complete()

    def _call(self, method, *args):
        with self.lock:
            self.active += 1
            if self.active > 1:
                self.problems.append(f"RS §2.7: overlapping {method} on the upstream")
        try:
            getattr(self.inner, method)(*args)
        finally:
            with self.lock:
                self.active -= 1

    def request(self, n):
        self._call("request", n)

    def cancel(self):
        self._call("cancel")


def _drive(probe, rng, ops):
    """Random requests (and, rarely, a cancel) on one subscriber, from one thread."""
    for _ in range(ops):
        if rng.random() < 0.03:
            probe.cancel()
            return
        probe.request(rng.randint(1, 8))


def _run_trial(seed, build, subscribers, threads_per_subscriber=3):
    rng = random.Random(seed)
    size = rng.randint(50, 400)
    pool = concurrent.futures.ThreadPoolExecutor(3, thread_name_prefix=f"stress-{seed}")
    problems: list[str] = []
    try:
        probes = [ManualSubscriber(f"seed {seed} subscriber {i}", timeout=TIMEOUT,
                                   register=False) for i in range(subscribers)]
        expected, connect = build(size, pool, probes, problems)
        for probe in probes:
            probe.expect_subscribe()
        connect()
        workers = [
            threading.Thread(target=_drive, args=(probe, random.Random(rng.random()),
                                                  rng.randint(5, 60)))
            for probe in probes for _ in range(threads_per_subscriber)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(TIMEOUT)
            assert not worker.is_alive(), f"seed {seed}: a requesting thread hung"
        live = [probe for probe in probes if not probe.cancelled]
        for probe in live:  # all at once: a shared stream is paced by its slowest subscriber
            probe.request(MAX_DEMAND)
        for probe in live:
            probe.expect_terminal(TIMEOUT)  # nothing hangs
    finally:
        pool.shutdown(wait=True)
    for probe in probes:
        probe.check()  # RS §1.1, §1.3, §1.7, and request/cancel returned normally
        items = probe.items
        assert items == expected[:len(items)], f"seed {seed}: out of order or wrong elements"
        if not probe.cancelled:
            assert probe.terminal.kind == "on_complete", f"seed {seed}: {probe.terminal}"
            assert items == expected, f"seed {seed}: {len(items)} of {len(expected)} elements"
    assert not problems, f"seed {seed}: {problems}"


def build_source(size, pool, probes, problems):
    source = from_iterable(range(size), executor=pool)
    return list(range(size)), lambda: source.subscribe(probes[0])


def build_pipe(size, pool, probes, problems):
    checked = SerialCheck(from_iterable(range(size), executor=pool), problems)
    stage = pipe(checked, map(lambda x: x * 3, prefetch=16))
    return [x * 3 for x in range(size)], lambda: stage.subscribe(probes[0])


def build_pipe_filter(size, pool, probes, problems):
    checked = SerialCheck(from_iterable(range(size), executor=pool), problems)
    stage = pipe(checked, filter(lambda x: x % 3 != 0, prefetch=4))
    return [x for x in range(size) if x % 3 != 0], lambda: stage.subscribe(probes[0])


def build_transform(size, pool, probes, problems):
    processor = transform(map(lambda x: x + 1, prefetch=8), capacity=16)
    for probe in probes:
        processor.subscribe(probe)  # all join before the upstream connects: all see everything
    checked = SerialCheck(from_iterable(range(size), executor=pool), problems)
    return [x + 1 for x in range(size)], lambda: checked.subscribe(processor)


def build_multicast_batches(size, pool, probes, problems):
    """A batch-mode multicast whose members drain on the pool, taken one element at a time
    (``elements()``) so that every member's stream is the same; upstream's lists of three."""
    multicast = Multicast(capacity=12, batch=3, executor=pool)
    for probe in probes:
        multicast.elements().subscribe(probe)
    lists = [list(range(i, min(i + 3, size))) for i in range(0, size, 3)]
    checked = SerialCheck(from_iterable(lists, executor=pool), problems)
    return list(range(size)), lambda: checked.subscribe(multicast)


def _source_first(build):  # source and pipe subscribe on connect, after the probe exists
    def wrapped(size, pool, probes, problems):
        expected, connect = build(size, pool, probes, problems)
        connect()
        return expected, lambda: None
    return wrapped


CASES = {
    "from_iterable-pool": (_source_first(build_source), 1),
    "pipe-map-pool": (_source_first(build_pipe), 1),
    "pipe-filter-pool": (_source_first(build_pipe_filter), 1),
    "transform-4-subscribers": (build_transform, 4),
    "multicast-batches-4-subscribers": (build_multicast_batches, 4),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_stress_quick(case):
    build, subscribers = CASES[case]
    for seed in range(40):
        _run_trial(seed, build, subscribers)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_stress_many_trials(case):
    build, subscribers = CASES[case]
    for seed in range(1000, 1300):
        _run_trial(seed, build, subscribers)
