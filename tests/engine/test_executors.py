"""Executors (inline trampoline, pool, asyncio loop) and the sinks that block or await."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import threading

import pytest

from engine import INLINE, CallbackSubscriber, as_executor, collect, from_async_iterable, \
    from_iterable, iterate, pipe
from engine.executors import LoopExecutor, PoolExecutor
from engine.tck import ManualSubscriber, background_loop, stop_loop
from operators.basic import map

TIMEOUT = 2.0


class Tracked:
    def __init__(self):
        self.closed = threading.Event()
        self.opened = False

    def __iter__(self):
        self.opened = True
        try:
            yield from itertools.count()
        finally:
            self.closed.set()


# ------------------------------------------------------------------------------ INLINE
def test_inline_trampoline_runs_nested_tasks_after_not_inside():
    order = []

    def outer():
        order.append("outer-start")
        INLINE.execute(lambda: order.append("inner"))
        order.append("outer-end")

    INLINE.execute(outer)
    assert order == ["outer-start", "outer-end", "inner"]


def test_inline_trampoline_is_per_thread():
    seen = []
    started = threading.Event()
    release = threading.Event()

    def blocking():
        started.set()
        release.wait(TIMEOUT)

    thread = threading.Thread(target=INLINE.execute, args=(blocking,))
    thread.start()
    started.wait(TIMEOUT)
    INLINE.execute(lambda: seen.append(threading.get_ident()))  # not queued behind the other
    release.set()
    thread.join(TIMEOUT)
    assert seen == [threading.get_ident()]


def test_inline_runs_the_whole_stream_on_the_calling_thread():
    threads = set()
    subscriber = CallbackSubscriber(lambda item: threads.add(threading.get_ident()))
    from_iterable(range(500)).subscribe(subscriber)
    assert subscriber.done.is_set() and threads == {threading.get_ident()}


# ------------------------------------------------------------------------------ pool, loop
def test_pool_runs_signals_on_the_pool_serially():
    with concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="exec-test") as pool:
        names = set()
        probe = ManualSubscriber(register=False,
                                 on_next_hook=lambda p, item: names.add(
                                     threading.current_thread().name))
        from_iterable(range(5000), executor=pool).subscribe(probe)
        probe.request(5000)
        probe.expect_nexts(5000)
        probe.expect_complete()
        probe.check()
    assert names and all(name.startswith("exec-test") for name in names)


def test_loop_runs_signals_on_the_loop_thread():
    loop = background_loop("exec-loop")
    try:
        names = set()
        probe = ManualSubscriber(register=False,
                                 on_next_hook=lambda p, item: names.add(
                                     threading.current_thread().name))
        from_iterable(range(100), executor=loop).subscribe(probe)
        probe.request(100)
        probe.expect_nexts(100)
        probe.expect_complete()
        assert names == {"exec-loop"}
    finally:
        stop_loop(loop)


def test_as_executor_adapts_and_rejects():
    pool = concurrent.futures.ThreadPoolExecutor(1)
    loop = asyncio.new_event_loop()
    try:
        assert as_executor(None) is INLINE
        assert isinstance(as_executor(pool), PoolExecutor)
        assert isinstance(as_executor(loop), LoopExecutor)
        assert as_executor(INLINE) is INLINE
        with pytest.raises(TypeError, match="executor must be"):
            as_executor(42)
    finally:
        pool.shutdown()
        loop.close()


# ------------------------------------------------------------------------------ collect
def test_collect_gathers_and_reraises():
    assert collect(pipe(from_iterable(range(5)), map(lambda x: x * x))) == [0, 1, 4, 9, 16]
    with pytest.raises(ZeroDivisionError):
        collect(pipe(from_iterable(range(5)), map(lambda x: 1 // (x - 3))))


def test_collect_timeout_raises_and_cancels():
    source = Tracked()
    loop = background_loop()
    try:
        async def never_ends():
            for value in itertools.count():
                if value == 3:
                    await asyncio.Event().wait()  # stalls forever: collect must time out
                yield value

        class Stalling:
            def __aiter__(self):
                return never_ends()

        with pytest.raises(TimeoutError, match="3 elements so far"):
            collect(from_async_iterable(Stalling(), loop=loop), timeout=0.05)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            gate = threading.Event()
            blocked = pool.submit(gate.wait, TIMEOUT)  # the drain waits behind this
            with pytest.raises(TimeoutError):
                collect(from_iterable(source, executor=pool), timeout=0.05)
            gate.set()
            blocked.result(TIMEOUT)
        # the pool has finished: on_subscribe came after the timeout and was cancelled at once
        assert not source.opened
    finally:
        stop_loop(loop)


def test_collect_timeout_cancels_the_subscription():
    cancelled = threading.Event()

    class Silent:  # a publisher that never sends anything
        def subscribe(self, subscriber):
            class Subscription:
                def request(self, n):
                    pass

                def cancel(self):
                    cancelled.set()
            subscriber.on_subscribe(Subscription())

    with pytest.raises(TimeoutError):
        collect(Silent(), timeout=0.01)
    assert cancelled.is_set()


# ------------------------------------------------------------------------------ iterate
def test_iterate_yields_everything_then_stops():
    async def main():
        return [item async for item in iterate(from_iterable(range(300)), prefetch=8)]

    assert asyncio.run(main()) == list(range(300))


def test_iterate_reraises_the_stream_error():
    async def main():
        async for _ in iterate(pipe(from_iterable(range(5)), map(lambda x: 1 // (x - 2)))):
            pass

    with pytest.raises(ZeroDivisionError):
        asyncio.run(main())


def test_iterate_break_inside_aclosing_cancels():
    source = Tracked()

    async def main():
        seen = []
        async with contextlib.aclosing(iterate(from_iterable(source), prefetch=4)) as items:
            async for item in items:
                seen.append(item)
                if item == 10:
                    break
        return seen

    assert asyncio.run(main()) == list(range(11))
    assert source.closed.is_set()


def test_iterate_aclose_cancels():
    source = Tracked()

    async def main():
        items = iterate(from_iterable(source), prefetch=4)
        assert await items.__anext__() == 0
        await items.aclose()

    asyncio.run(main())
    assert source.closed.is_set()


def test_iterate_from_a_pool_driven_publisher_bridges_threads():
    async def main():
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            return [item async for item in
                    iterate(from_iterable(range(2000), executor=pool), prefetch=16)]

    assert asyncio.run(main()) == list(range(2000))


def test_iterate_keeps_at_most_prefetch_outstanding(violations):
    async def main():
        items = iterate(from_iterable(range(1000)), prefetch=5)
        got = [await items.__anext__() for _ in range(3)]
        assert len(items._receiver._queue) <= 5
        return got

    assert asyncio.run(main()) == [0, 1, 2]
    assert violations == []
