"""Bad input and faults (design.md §6.7): None, illegal requests, raising subscribers,
executors that reject work."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading

import pytest

from engine import (
    CallbackSubscriber,
    MAX_DEMAND,
    Multicast,
    RejectedError,
    collect,
    empty,
    failed,
    from_async_iterable,
    from_iterable,
    iterate,
    pipe,
    transform,
)
from engine.tck import ManualSubscriber, background_loop, stop_loop
from operators.basic import map
from tests.waiting import wait_until

TIMEOUT = 2.0


class Tracked:
    """An infinite generator that records whether it was closed (cancel reached the source)."""

    def __init__(self):
        self.closed = threading.Event()
        self.pulled = 0

    def __iter__(self):
        try:
            for value in itertools.count():
                self.pulled += 1
                yield value
        finally:
            self.closed.set()


def multicast_of(publisher):
    multicast = Multicast(capacity=8)
    publisher.subscribe(multicast)
    return multicast


PUBLISHERS = {
    "from_iterable": lambda: from_iterable(range(10)),
    "empty": empty,
    "failed": lambda: failed(RuntimeError("x")),
    "pipe-map": lambda: pipe(from_iterable(range(10)), map(str)),
    "multicast": lambda: multicast_of(from_iterable(range(10))),
    "transform": lambda: transform(map(str)),
    "from_async_iterable": lambda: from_async_iterable(_agen_factory(), loop=asyncio.new_event_loop()),
}


def _agen_factory():
    class Agen:
        def __aiter__(self):
            async def gen():
                yield 1
            return gen()
    return Agen()


# ------------------------------------------------------------------------- None → TypeError
@pytest.mark.parametrize("name", sorted(PUBLISHERS))
def test_subscribe_none_raises_type_error_at_once(name):
    with pytest.raises(TypeError, match="RS §1.9"):
        PUBLISHERS[name]().subscribe(None)


def _subscribers():
    processor = transform(map(str))
    return {
        "CallbackSubscriber": CallbackSubscriber(lambda item: None),
        "Multicast": Multicast(),
        "transform": processor,
        "iterate": iterate(empty()),
    }


@pytest.mark.parametrize("name", ["CallbackSubscriber", "Multicast", "transform", "iterate"])
@pytest.mark.parametrize("method", ["on_subscribe", "on_next", "on_error"])
def test_none_signal_raises_type_error_at_once(name, method):
    subscriber = _subscribers()[name]
    with pytest.raises(TypeError, match="RS §2.13|requires"):
        getattr(subscriber, method)(None)


def test_none_element_from_an_iterable_fails_the_stream():
    with pytest.raises(TypeError, match="element 1"):
        collect(from_iterable([1, None, 3]))


# ------------------------------------------------------------------------- request(n <= 0)
ILLEGAL = [0, -1, -(2**63), 1.5, True, "3"]


@pytest.mark.parametrize("n", ILLEGAL, ids=repr)
@pytest.mark.parametrize("name", ["from_iterable", "pipe-map", "multicast", "transform-fed"])
def test_illegal_request_is_on_error_citing_rs_3_9_never_raised(name, n):
    source = Tracked()
    publisher = {
        "from_iterable": lambda: from_iterable(source),
        "pipe-map": lambda: pipe(from_iterable(source), map(str)),
        "multicast": lambda: multicast_of(from_iterable(source)),
        "transform-fed": lambda: _fed_transform(source),
    }[name]()
    probe = ManualSubscriber(register=False)
    publisher.subscribe(probe)
    probe.request(2)
    probe.expect_nexts(2)
    probe.subscription.request(n)  # must return normally (RS §3.16)
    error = probe.expect_error(ValueError)
    assert "RS §3.9" in str(error)
    probe.check()
    assert source.closed.wait(TIMEOUT), "the illegal request did not cancel upstream"


def _fed_transform(source):
    processor = transform(map(str), capacity=8)
    from_iterable(source).subscribe(processor)
    return processor


# ------------------------------------------------------------------------- raising subscribers
class Raising:
    def __init__(self, where, after=0):
        self.where = where
        self.after = after
        self.seen = 0
        self.subscription = None
        self.signals = []

    def on_subscribe(self, subscription):
        self.subscription = subscription
        if self.where == "on_subscribe":
            raise RuntimeError("on_subscribe raised on purpose")
        subscription.request(10)

    def on_next(self, item):
        self.seen += 1
        if self.where == "on_next" and self.seen > self.after:
            raise RuntimeError("on_next raised on purpose")

    def on_error(self, error):
        self.signals.append(("error", error))

    def on_complete(self):
        self.signals.append(("complete",))


@pytest.mark.parametrize("where", ["on_subscribe", "on_next"])
@pytest.mark.parametrize("executor", ["inline", "pool", "loop"])
def test_raising_subscriber_is_cancelled_and_reported(where, executor, violations, caplog):
    pool = concurrent.futures.ThreadPoolExecutor(2)
    loop = background_loop() if executor == "loop" else None
    try:
        source = Tracked()
        chosen = {"inline": None, "pool": pool, "loop": loop}[executor]
        subscriber = Raising(where, after=2)
        with caplog.at_level(logging.ERROR, logger="goldilocks.executors"):
            from_iterable(source, executor=chosen).subscribe(subscriber)  # returns normally
            if where == "on_next":  # reported before the source is closed
                assert source.closed.wait(TIMEOUT), "the subscription was not cancelled"
            else:
                probe_wait(lambda: violations)
                assert source.pulled == 0  # never opened: cancelled before it started
        assert [v.rule for v in violations] == ["RS §2.13"]
        assert violations[0].party is subscriber
        assert isinstance(violations[0].cause, RuntimeError)
        assert subscriber.seen == (0 if where == "on_subscribe" else 3)
        assert subscriber.signals == []  # cancelled: no terminal signal follows
        # the producer's thread never saw the exception
        assert not [r for r in caplog.records if r.name == "goldilocks.executors"]
    finally:
        pool.shutdown(wait=True)
        if loop is not None:
            stop_loop(loop)


def probe_wait(predicate, timeout=TIMEOUT):
    """Wait until ``predicate()`` is truthy: the violation may be reported from another thread
    just after the call returned."""
    wait_until(predicate, timeout)


@pytest.mark.parametrize("shape", ["pipe-map", "transform"])
def test_raising_subscriber_downstream_cancels_the_source(shape, violations):
    source = Tracked()
    if shape == "pipe-map":
        publisher = pipe(from_iterable(source), map(lambda x: x))
    else:
        publisher = transform(map(lambda x: x), capacity=8)
    subscriber = Raising("on_next")
    publisher.subscribe(subscriber)
    if shape == "transform":
        from_iterable(source).subscribe(publisher)
    assert source.closed.wait(TIMEOUT)
    assert [v.rule for v in violations] == ["RS §2.13"]


def test_raising_callback_goes_to_on_error_not_to_the_publisher():
    errors = []
    source = Tracked()

    def boom(item):
        raise KeyError(item)

    subscriber = CallbackSubscriber(boom, on_error=errors.append)
    from_iterable(source).subscribe(subscriber)
    assert subscriber.done.is_set()
    assert isinstance(errors[0], KeyError) and len(errors) == 1
    assert source.closed.is_set()


def test_subscriber_raising_from_on_complete_is_reported(violations):
    class BadComplete(Raising):
        def on_complete(self):
            raise RuntimeError("on_complete raised")

    from_iterable([1]).subscribe(BadComplete("nowhere"))
    assert [v.rule for v in violations] == ["RS §2.13"]


# ------------------------------------------------------------------------- rejecting executors
def test_shut_down_pool_gives_on_error_at_subscribe():
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.shutdown()
    probe = ManualSubscriber(register=False)
    from_iterable(range(5), executor=pool).subscribe(probe)
    probe.expect_subscribe()
    probe.expect_error(RejectedError)
    probe.check()


def test_pool_shut_down_mid_stream_gives_on_error_not_a_hang():
    pool = concurrent.futures.ThreadPoolExecutor(1)
    probe = ManualSubscriber(register=False)
    from_iterable(itertools.count(), executor=pool).subscribe(probe)
    probe.request(3)
    probe.expect_nexts(3)
    pool.shutdown(wait=True)
    probe.request(3)
    probe.expect_error(RejectedError)
    probe.check()


def test_pool_shut_down_with_cancel_futures_gives_on_error_not_a_hang():
    gate = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.submit(gate.wait, TIMEOUT)  # keep the only worker busy so the drain stays queued
    probe = ManualSubscriber(register=False)
    from_iterable(range(5), executor=pool).subscribe(probe)
    pool.shutdown(wait=False, cancel_futures=True)  # the queued drain is dropped
    gate.set()
    probe.expect_subscribe()  # the dropped drain still ran, once, elsewhere
    probe.request(1)
    probe.expect_error(RejectedError)
    probe.check()


def test_closed_loop_gives_on_error():
    loop = asyncio.new_event_loop()
    loop.close()
    probe = ManualSubscriber(register=False)
    from_iterable(range(5), executor=loop).subscribe(probe)
    probe.expect_subscribe()
    probe.expect_error(RejectedError)
    probe2 = ManualSubscriber(register=False)
    from_async_iterable(_agen_factory(), loop=loop).subscribe(probe2)
    probe2.expect_subscribe()
    probe2.expect_error(RejectedError)
    probe.check()
    probe2.check()


def test_loop_closed_mid_stream_gives_on_error():
    loop = background_loop()
    probe = ManualSubscriber(register=False)
    from_iterable(itertools.count(), executor=loop).subscribe(probe)
    probe.request(2)
    probe.expect_nexts(2)
    stop_loop(loop)
    probe.request(2)
    probe.expect_error(RejectedError)
    probe.check()


def test_collect_on_a_shut_down_pool_raises_rejected_error():
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(RejectedError):
        collect(from_iterable(range(3), executor=pool), timeout=TIMEOUT)


def test_unopenable_iterable_is_on_error():
    class Unopenable:
        def __iter__(self):
            raise OSError("cannot open")

    with pytest.raises(OSError, match="cannot open"):
        collect(from_iterable(Unopenable()))


def test_iterator_failing_midway_delivers_what_it_had_then_the_error():
    def gen():
        yield 1
        yield 2
        raise ValueError("midway")

    items = []
    subscriber = CallbackSubscriber(items.append, on_error=lambda err: None)
    from_iterable(gen()).subscribe(subscriber)
    assert items == [1, 2] and isinstance(subscriber.error, ValueError)


def test_max_demand_constant():
    assert MAX_DEMAND == 2**63 - 1
