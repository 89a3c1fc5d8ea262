"""Memory under backpressure: a slow subscriber on a fast unbounded source stays flat.

    python -m benchmarks.bench_memory            # 10,000,000 elements per case
    python -m benchmarks.bench_memory --quick    # 1,000,000

The source is ``from_iterable(itertools.count())`` (bounded by ``islice``); it produces as fast
as it is allowed to. The subscriber is slower: it does a little arithmetic per element and
requests in small batches (16 at a time, replenished when half is consumed). Two shapes:
``pipe(source, map(f))`` and ``transform(map(f))`` fed by the source. If any stage buffered
ahead of demand, memory would grow with the element count; with demand bounding every buffer
it stays O(prefetch + capacity).

Peak RSS growth is sampled by a background thread (psutil, every 5 ms) against the RSS just
before the run, after a warm-up of the same shape so that allocator pools and code paths are
already in place. ``resource.getrusage`` max-RSS is printed too, as a cross-check. Not a timed
test: the target is growth under 16 MiB for 10 million elements.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from engine import from_iterable, pipe, transform
from operators.basic import map

__all__ = ["SlowSubscriber", "RssSampler", "run_case", "main", "TARGET_MIB"]

TARGET_MIB = 16.0
MIB = 1024 * 1024


class SlowSubscriber:
    """Requests ``batch`` at a time, replenishes at half, does a little work per element."""

    __slots__ = ("batch", "_subscription", "_consumed", "received", "checksum", "done",
                 "error")

    def __init__(self, batch: int = 16) -> None:
        self.batch = batch
        self._subscription: Any = None
        self._consumed = 0
        self.received = 0
        self.checksum = 0
        self.done = threading.Event()
        self.error: BaseException | None = None

    def on_subscribe(self, subscription: Any) -> None:
        self._subscription = subscription
        subscription.request(self.batch)

    def on_next(self, item: int) -> None:
        checksum = self.checksum
        for _ in range(4):  # the "slow" part: a little work per element
            checksum = (checksum * 31 + item) & 0xFFFFFFFF
        self.checksum = checksum
        self.received += 1
        self._consumed += 1
        if self._consumed >= self.batch // 2:
            more, self._consumed = self._consumed, 0
            self._subscription.request(more)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def on_complete(self) -> None:
        self.done.set()


class RssSampler:
    """Samples this process's RSS on a daemon thread; ``peak`` is the largest seen."""

    def __init__(self, interval: float = 0.005) -> None:
        self._process = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self.baseline = self._process.memory_info().rss
        self.peak = self.baseline
        self.samples = 0
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            rss = self._process.memory_info().rss
            self.samples += 1
            if rss > self.peak:
                self.peak = rss

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        rss = self._process.memory_info().rss
        self.peak = max(self.peak, rss)

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.baseline) / MIB


def _square(x: int) -> int:
    return x * x


def _pipe_case(count: int) -> tuple[Any, Callable[[], Any]]:
    publisher = pipe(from_iterable(itertools.islice(itertools.count(), count)), map(_square))
    return publisher, lambda: None


def _transform_case(count: int) -> tuple[Any, Callable[[], Any]]:
    processor = transform(map(_square), capacity=256)
    source = from_iterable(itertools.islice(itertools.count(), count))
    return processor, lambda: (source.subscribe(processor), processor)[1]


CASES: dict[str, Callable[[int], tuple[Any, Callable[[], Any]]]] = {
    "pipe(map)": _pipe_case,
    "transform(map)": _transform_case,
}


def _run_once(name: str, count: int) -> tuple[SlowSubscriber, Any]:
    publisher, connect = CASES[name](count)
    subscriber = SlowSubscriber()
    publisher.subscribe(subscriber)
    connected = connect()
    if not subscriber.done.wait(3600):
        raise RuntimeError(f"{name}: did not finish")
    if subscriber.error is not None:
        raise subscriber.error
    if subscriber.received != count:
        raise RuntimeError(f"{name}: {subscriber.received} of {count} elements")
    return subscriber, connected


def run_case(name: str, count: int) -> dict[str, Any]:
    _run_once(name, min(count, 200_000))  # warm-up: same shape, allocator pools in place
    gc.collect()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with RssSampler() as sampler:
        subscriber, connected = _run_once(name, count)
    elapsed = time.perf_counter() - start
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stats = connected.stats() if hasattr(connected, "stats") else None
    return {
        "case": name,
        "elements": count,
        "seconds": elapsed,
        "rate": count / elapsed,
        "baseline_mib": sampler.baseline / MIB,
        "growth_mib": sampler.growth_mib,
        "maxrss_growth_mib": (maxrss_after - maxrss_before) / 1024,  # ru_maxrss is KiB
        "samples": sampler.samples,
        "buffer_peak": None if stats is None else stats.peak,
        "buffer_capacity": None if stats is None else stats.capacity,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000,000 elements per case")
    parser.add_argument("-n", "--elements", type=int, default=None,
                        help="elements per case (default 10,000,000)")
    parser.add_argument("--only", choices=sorted(CASES), action="append")
    args = parser.parse_args(argv)
    count = args.elements or (1_000_000 if args.quick else 10_000_000)
    print(f"slow subscriber (batch 16, replenish at 8) on from_iterable(count()), "
          f"{count:,} elements, target growth < {TARGET_MIB:g} MiB")
    print(f"{'case':<16}{'elements':>12}{'seconds':>9}{'elem/s':>11}{'baseline':>10}"
          f"{'peak growth':>13}{'maxrss growth':>15}{'buffer peak':>13}{'samples':>9}")
    worst = 0.0
    for name in args.only or list(CASES):
        row = run_case(name, count)
        worst = max(worst, row["growth_mib"])
        peak = "-" if row["buffer_peak"] is None else \
            f"{row['buffer_peak']}/{row['buffer_capacity']}"
        print(f"{name:<16}{row['elements']:>12,}{row['seconds']:>9.1f}{row['rate']:>11,.0f}"
              f"{row['baseline_mib']:>8.1f}Mi{row['growth_mib']:>11.2f}Mi"
              f"{row['maxrss_growth_mib']:>13.2f}Mi{peak:>13}{row['samples']:>9}")
    verdict = "OK" if worst < TARGET_MIB else "OVER TARGET"
    print(f"worst peak RSS growth: {worst:.2f} MiB ({verdict})")
    return 0 if worst < TARGET_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
