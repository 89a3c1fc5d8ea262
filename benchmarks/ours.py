"""Our implementations of the workload, each through the public API as a user would write it.

- ``union_inline``: ``Union`` + ``goldilocks`` on the calling thread; four emitters fed
  round-robin with ``try_send`` into a counting subscriber that requests in large batches.
- ``union_feed``: the same, through the batch path ``Union.feed`` (same arrival order).
- ``union_batches``: the batch path end to end: ``Union.feed_events`` in, ``Union.batches()``
  out, into a subscriber that counts lists (same arrival order).
- ``union_threads``: the same union fed by four producer threads (``send_blocking``).
- ``union_threads_batches``: the same, each thread sending its list with
  ``send_many_blocking`` (batches as credit allows).
- ``union_threads_aligned``, ``union_threads_batches_aligned``: those two with alignment
  through demand (``Union(max_drift=…)``): no input runs ahead of the others' time.
- ``union_asyncio``: the same union fed by four asyncio tasks (``await send``).
- ``cti_sync``: ``pipe(from_iterable(merged), cti_sync(delay))`` — one stream, no union.
- ``columnar``: the policy's numpy kernel (``policy.run_columns``) over the workload columns.
- ``replay_jsonl`` / ``replay_parquet``: ``goldilocks.replay.replay`` end to end, file to file.
- ``slow_subscriber_memory``: a producer as fast as it can go into a slow subscriber through
  the union; reports the peak RSS growth (backpressure must bound it).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from operator import attrgetter
from typing import Any

import numpy as np

from engine.event import CTI
from engine.policy import CTI_EMIT, DROP_LATE, EMIT, EMIT_ADJUSTED
from goldilocks.replay import replay
from engine.sources import from_iterable
from engine.stage import pipe
from operators.policies import goldilocks
from operators.temporal import cti_sync as cti_sync_operator
from operators.union import Union

from benchmarks.workload import DELAY, Counts, Workload

__all__ = ["CountingSubscriber", "CountingBatchSubscriber", "union_inline", "union_feed",
           "union_batches", "union_threads", "union_threads_batches", "union_threads_aligned",
           "union_threads_batches_aligned", "ALIGNED", "union_asyncio",
           "cti_sync",
           "columnar", "replay_jsonl", "replay_parquet", "slow_subscriber_memory",
           "RSSSampler", "WAIT"]

#: How long a run may wait for its subscriber to finish before it is declared stuck (s).
WAIT = 600.0


class BenchmarkError(RuntimeError):
    """An implementation did not finish, or finished inconsistently."""


class CountingSubscriber:
    """A minimal subscriber: counts inserts and CTIs, checks CTIs strictly increase (TS §2.1),
    requests ``batch`` at first and tops up by half as it consumes (RS §2.1)."""

    __slots__ = ("subscription", "inserts", "ctis", "last_cti", "batch", "_left", "done",
                 "error", "backwards")

    def __init__(self, batch: int = 1 << 16) -> None:
        self.subscription: Any = None
        self.inserts = 0
        self.ctis = 0
        self.last_cti: int | None = None
        self.batch = batch
        self._left = batch // 2
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.backwards = 0  # CTIs that did not advance: must stay 0

    def on_subscribe(self, subscription: Any) -> None:
        self.subscription = subscription
        subscription.request(self.batch)

    def on_next(self, event: Any) -> None:
        if event.kind == CTI:
            t = event.start
            last = self.last_cti
            if last is not None and t <= last:
                self.backwards += 1
            self.last_cti = t
            self.ctis += 1
        else:
            self.inserts += 1
        left = self._left - 1
        if left:
            self._left = left
        else:
            half = self.batch // 2
            self._left = half
            self.subscription.request(half)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def on_complete(self) -> None:
        self.done.set()

    def wait(self, who: str) -> None:
        if not self.done.wait(WAIT):
            raise BenchmarkError(f"{who}: the subscriber was not completed within {WAIT} s")
        if self.error is not None:
            raise BenchmarkError(f"{who}: the stream failed: {self.error!r}") from self.error
        if self.backwards:
            raise BenchmarkError(f"{who}: {self.backwards} emitted CTIs did not advance time "
                                 "(TS §2.1)")


class CountingBatchSubscriber(CountingSubscriber):
    """``CountingSubscriber`` for ``Union.batches()``: each element is a list of events;
    demand counts lists (requests ``batch`` lists, tops up by half)."""

    __slots__ = ()

    def __init__(self, batch: int = 64) -> None:
        super().__init__(batch)

    def on_next(self, events: Any) -> None:
        kinds = list(map(_KIND, events))
        ctis = kinds.count(CTI)
        if ctis:  # CTIs are few: find them by a search in C, not a loop over every event
            last = self.last_cti
            find = kinds.index
            i = -1
            for _ in range(ctis):
                i = find(CTI, i + 1)
                t = events[i].start
                if last is not None and t <= last:
                    self.backwards += 1
                last = t
            self.last_cti = last
            self.ctis += ctis
        self.inserts += len(kinds) - ctis
        left = self._left - 1
        if left:
            self._left = left
        else:
            half = self.batch // 2
            self._left = half
            self.subscription.request(half)


_KIND = attrgetter("kind")


def _union_result(who: str, union: Union, sub: CountingSubscriber,
                  sent_inserts: int) -> tuple[Counts, int]:
    """Counts seen by the subscriber, late from the union's accounting; cross-checked."""
    stats = union.stats()
    late = stats.dropped + stats.adjusted
    if (stats.emitted, stats.ctis) != (sub.inserts, sub.ctis):
        raise BenchmarkError(f"{who}: the union says it emitted {stats.emitted} inserts and "
                             f"{stats.ctis} CTIs; the subscriber saw {sub.inserts} and {sub.ctis}")
    if stats.late.records != late:
        raise BenchmarkError(f"{who}: {late} late events but {stats.late.records} late records")
    return Counts(sub.inserts, sub.ctis, late), sent_inserts


# -- the union ----------------------------------------------------------------------------

def union_inline(w: Workload) -> tuple[Counts, int]:
    """Everything on the calling thread: each ``try_send`` runs the merge (trampolined)."""
    union = Union(goldilocks(DELAY))
    emitters = [union.open_input(name) for name in w.names]
    sub = CountingSubscriber()
    union.subscribe(sub)
    sends = [em.try_send for em in emitters]
    for i, e in zip(w.source_index, w.merged):
        if not sends[i](e):
            raise BenchmarkError(f"union_inline: no credit for input {i}; the inline merge "
                                 "should have replenished it")
    for em in emitters:
        em.complete()
    union.close()
    sub.wait("union_inline")
    return _union_result("union_inline", union, sub, w.inserts)


def union_feed(w: Workload) -> tuple[Counts, int]:
    """As ``union_inline``, through the batch path: ``Union.feed`` takes the arrivals
    ``(emitter, event)`` in the same round-robin order and wakes the merge once per chunk."""
    union = Union(goldilocks(DELAY))
    emitters = [union.open_input(name) for name in w.names]
    sub = CountingSubscriber()
    union.subscribe(sub)
    sent = union.feed(zip(map(emitters.__getitem__, w.source_index), w.merged))
    if sent != w.n:
        raise BenchmarkError(f"union_feed: fed {sent} of {w.n} arrivals; the inline merge "
                             "should have replenished credit")
    for em in emitters:
        em.complete()
    union.close()
    sub.wait("union_feed")
    return _union_result("union_feed", union, sub, w.inserts)


def union_batches(w: Workload) -> tuple[Counts, int]:
    """The batch path end to end, same arrival order as ``union_inline``: the recorded
    arrivals, each naming its input, into ``Union.feed_events`` (1,024 per batch), the output
    as lists of up to 1,024 events from ``Union.batches()`` into a subscriber that counts
    them."""
    union = Union(goldilocks(DELAY))
    emitters = [union.open_input(name) for name in w.names]
    sub = CountingBatchSubscriber()
    union.batches(1024).subscribe(sub)
    sent = union.feed_events(w.merged)  # each record names its input
    if sent != w.n:
        raise BenchmarkError(f"union_batches: fed {sent} of {w.n} arrivals; the inline merge "
                             "should have replenished credit")
    for em in emitters:
        em.complete()
    union.close()
    sub.wait("union_batches")
    return _union_result("union_batches", union, sub, w.inserts)


def _send_each(who: str) -> Any:
    """A producer sending its events one by one, each blocking for credit."""

    def produce(em: Any, events: list) -> None:
        send = em.send_blocking
        for e in events:
            if not send(e, WAIT):
                raise BenchmarkError(f"{who}: {em.name} waited {WAIT} s for credit")
        em.complete()

    return produce


def _send_all(who: str) -> Any:
    """A producer handing its whole list to ``send_many_blocking``."""

    def produce(em: Any, events: list) -> None:
        if em.send_many_blocking(events, WAIT) != len(events):
            raise BenchmarkError(f"{who}: {em.name} waited {WAIT} s for credit")
        em.complete()

    return produce


def union_threads(w: Workload) -> tuple[Counts, int]:
    """Four producer threads on a pool, each blocking for credit (``send_blocking``); the
    merge runs on whichever producer thread signals it (``executor=None``)."""
    return _threaded("union_threads", w, _send_each("union_threads"))


def _threaded(who: str, w: Workload, produce: Any, **options: Any) -> tuple[Counts, int]:
    """A union whose four inputs are fed by ``produce(emitter, events)`` on four pool
    threads (the merge on whichever producer signals), into the counting subscriber;
    ``options`` go to the ``Union``."""
    union = Union(goldilocks(DELAY), **options)
    emitters = [union.open_input(name) for name in w.names]
    sub = CountingSubscriber()
    union.subscribe(sub)
    with ThreadPoolExecutor(max_workers=len(emitters)) as pool:
        futures = [pool.submit(produce, em, events) for em, events in zip(emitters, w.per_input)]
        for f in futures:
            f.result()
    union.close()
    sub.wait(who)
    return _union_result(who, union, sub, w.inserts)


def union_threads_batches(w: Workload) -> tuple[Counts, int]:
    """``union_threads`` through the batch path: each of the four producer threads hands its
    whole list to ``send_many_blocking``, which sends as much as credit allows as one batch
    and blocks for more; the output goes to the same per-element counting subscriber."""
    return _threaded("union_threads_batches", w, _send_all("union_threads_batches"))


#: The aligned rows' union options: an input more than ALIGNED["max_drift"] ahead of the
#: slowest waits for credit; each input's credit small enough that what it holds cannot
#: carry it past the delay (TS §4.6: max_drift + prefetch ticks + a CTI's spacing).
ALIGNED: dict[str, Any] = {"max_drift": 0, "prefetch": 64}


def union_threads_aligned(w: Workload) -> tuple[Counts, int]:
    """``union_threads`` with alignment through demand (``ALIGNED``)."""
    who = "union_threads_aligned"
    return _threaded(who, w, _send_each(who), **ALIGNED)


def union_threads_batches_aligned(w: Workload) -> tuple[Counts, int]:
    """``union_threads_batches`` with alignment through demand (``ALIGNED``)."""
    who = "union_threads_batches_aligned"
    return _threaded(who, w, _send_all(who), **ALIGNED)


def union_asyncio(w: Workload) -> tuple[Counts, int]:
    """Four asyncio tasks, each awaiting credit (``await send``); the merge runs inline on the
    loop's thread (``executor=None``)."""

    async def produce(em: Any, events: list) -> None:
        send = em.send
        for e in events:
            await send(e)
        em.complete()

    async def main() -> tuple[Union, CountingSubscriber]:
        union = Union(goldilocks(DELAY))
        emitters = [union.open_input(name) for name in w.names]
        sub = CountingSubscriber()
        union.subscribe(sub)
        await asyncio.gather(*(produce(em, events) for em, events in zip(emitters, w.per_input)))
        union.close()
        return union, sub

    union, sub = asyncio.run(main())
    sub.wait("union_asyncio")
    return _union_result("union_asyncio", union, sub, w.inserts)


# -- one stream, columns, files ---------------------------------------------------------------

def cti_sync(w: Workload) -> tuple[Counts, int]:
    """The single-stream operator over the merged list (no union, no inputs)."""
    op = cti_sync_operator(DELAY)
    sub = CountingSubscriber()
    pipe(from_iterable(w.merged), op).subscribe(sub)
    sub.wait("cti_sync")
    return Counts(sub.inserts, sub.ctis, op.late.stats().records), w.inserts


_POLICY = goldilocks(DELAY)


def columnar(w: Workload) -> tuple[Counts, int]:
    """The kernel the replay's columnar path uses, over the workload's columns."""
    cols = w.columns
    action = _POLICY.run_columns(cols.is_cti, cols.start, cols.end)[0]  # (action, cti, …)
    b = np.bincount(action, minlength=5)
    return (Counts(int(b[EMIT] + b[EMIT_ADJUSTED]), int(b[CTI_EMIT]),
                   int(b[DROP_LATE] + b[EMIT_ADJUSTED])),
            int(cols.is_cti.shape[0] - np.count_nonzero(cols.is_cti)))


def _replay(path: str, w: Workload) -> tuple[Counts, int]:
    folder = os.path.dirname(path)
    stats = replay([path], delay=DELAY, policy="goldilocks",
                   out=os.path.join(folder, "out.jsonl"), late=os.path.join(folder, "late.jsonl"))
    if stats.records != w.n:
        raise BenchmarkError(f"replay of {path}: {stats.records} records read, expected {w.n}")
    return Counts(stats.emitted, stats.ctis_emitted, stats.late), w.inserts


def replay_jsonl(w: Workload) -> tuple[Counts, int]:
    """Parse the JSON Lines log, merge, run the policy, write output and late files."""
    return _replay(w.log_file("jsonl"), w)


def replay_parquet(w: Workload) -> tuple[Counts, int]:
    """The same from Parquet."""
    return _replay(w.log_file("parquet"), w)


# -- memory -----------------------------------------------------------------------------------

class RSSSampler:
    """Samples this process's RSS on a daemon thread every ``interval`` s; ``peak`` in bytes."""

    def __init__(self, interval: float = 0.002) -> None:
        import psutil

        self._process = psutil.Process()
        self.interval = interval
        self.baseline = self._process.memory_info().rss
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        rss = self._process.memory_info
        while not self._stop.is_set():
            value = rss().rss
            if value > self.peak:
                self.peak = value
            self._stop.wait(self.interval)

    def __enter__(self) -> RSSSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        value = self._process.memory_info().rss
        if value > self.peak:
            self.peak = value

    @property
    def growth(self) -> int:
        return self.peak - self.baseline


#: The slow subscriber sleeps this long after every ``SLOW_EVERY`` events (about 1 µs/event).
SLOW_SLEEP = 0.001
SLOW_EVERY = 1000


class _SlowSubscriber(CountingSubscriber):
    """Requests 64 at a time and stalls 1 ms every 1,000 events: slower than the producer."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        super().__init__(batch=64)
        self._since = 0

    def on_next(self, event: Any) -> None:
        CountingSubscriber.on_next(self, event)
        self._since += 1
        if self._since == SLOW_EVERY:
            self._since = 0
            time.sleep(SLOW_SLEEP)


def slow_subscriber_memory(w: Workload) -> tuple[Counts, int, float, RSSSampler]:
    """A producer thread pushes the workload as fast as credit allows (``try_send``, falling
    back to ``send_blocking`` only when out of credit) into a union whose merge runs on its
    own thread into a slow subscriber. Events are generated on the fly, 1,024 at a time, so the
    producer holds almost nothing; what the union buffers is all that can grow.

    Returns (counts, inserts sent, seconds, the RSS sampler: ``peak``, ``growth`` in bytes).
    """
    merge_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="merge")
    union = Union(goldilocks(DELAY), executor=merge_thread)
    emitters = [union.open_input(name) for name in w.names]
    sub = _SlowSubscriber()
    union.subscribe(sub)
    tries = [em.try_send for em in emitters]
    blocks = [em.send_blocking for em in emitters]
    k = len(emitters)
    sent_inserts = 0
    began = time.perf_counter()
    with RSSSampler() as rss:
        for m, e in enumerate(w.iter_events(chunk=1024)):
            i = m % k
            if not tries[i](e) and not blocks[i](e, WAIT):
                raise BenchmarkError(f"slow_subscriber_memory: input {i} waited {WAIT} s")
            if e.kind != CTI:
                sent_inserts += 1
        for em in emitters:
            em.complete()
        union.close()
        sub.wait("slow_subscriber_memory")
    seconds = time.perf_counter() - began
    merge_thread.shutdown()
    counts, _ = _union_result("slow_subscriber_memory", union, sub, sent_inserts)
    return counts, sent_inserts, seconds, rss
