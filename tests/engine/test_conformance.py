"""The conformance kit (engine.tck) run on every publisher, subscriber and processor the engine
ships. Each class is a plug-in of a few lines; the tests come from the kit."""

from __future__ import annotations

import concurrent.futures

from engine import (
    CallbackSubscriber,
    Multicast,
    empty,
    failed,
    from_async_iterable,
    from_iterable,
    iterate,
    pipe,
    step_operator,
    transform,
)
from engine.tck import (
    ProcessorVerification,
    PublisherVerification,
    SubscriberBlackboxVerification,
    SubscriberWhiteboxVerification,
    background_loop,
)
from operators.basic import filter, map, scan

POOL = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="conformance")
LOOP = background_loop("conformance-loop")


class Unopenable:
    """An iterable whose ``iter()`` fails: from_iterable's way to fail (RS §1.4)."""

    def __iter__(self):
        raise RuntimeError("cannot open on purpose")


class AsyncRange:
    """A re-iterable async iterable: a fresh async generator per subscriber."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __aiter__(self):
        return self._generate()

    async def _generate(self):
        for index in range(self.count):
            yield index


class AsyncFailing:
    def __aiter__(self):
        return self._generate()

    async def _generate(self):
        raise RuntimeError("async source failed on purpose")
        yield  # pragma: no cover


def identity_step():
    return lambda item: (item,)


# ------------------------------------------------------------------------------ sources
class TestFromIterableInline(PublisherVerification):
    def create_publisher(self, elements):
        return from_iterable(range(elements))

    def create_failed_publisher(self):
        return from_iterable(Unopenable())


class TestFromIterablePool(PublisherVerification):
    def create_publisher(self, elements):
        return from_iterable(range(elements), executor=POOL)

    def create_failed_publisher(self):
        return from_iterable(Unopenable(), executor=POOL)


class TestFromIterableLoop(PublisherVerification):
    def create_publisher(self, elements):
        return from_iterable(range(elements), executor=LOOP)

    def create_failed_publisher(self):
        return from_iterable(Unopenable(), executor=LOOP)


class TestEmpty(PublisherVerification):
    max_elements = 0

    def create_publisher(self, elements):
        return empty()


class TestFailed(PublisherVerification):
    def create_publisher(self, elements):
        return None  # failed() has no successful form

    def create_failed_publisher(self):
        return failed(RuntimeError("failed on purpose"))


class TestFromAsyncIterable(PublisherVerification):
    def create_publisher(self, elements):
        return from_async_iterable(AsyncRange(elements), loop=LOOP, capacity=16)

    def create_failed_publisher(self):
        return from_async_iterable(AsyncFailing(), loop=LOOP)


# ------------------------------------------------------------------------------ pipe stages
class TestPipeMap(PublisherVerification):
    def create_publisher(self, elements):
        return pipe(from_iterable(range(elements)), map(lambda x: x * 2))

    def create_failed_publisher(self):
        return pipe(from_iterable(range(5)), map(lambda x: 1 // (x - 2)))  # fails at x == 2


class TestPipeMapOnPool(PublisherVerification):
    def create_publisher(self, elements):
        return pipe(from_iterable(range(elements), executor=POOL), map(lambda x: x + 1))

    def create_failed_publisher(self):
        return pipe(failed(RuntimeError("failed on purpose")), map(lambda x: x))


class TestPipeFilter(PublisherVerification):
    def create_publisher(self, elements):  # keeps the odd ones of twice as many
        return pipe(from_iterable(range(2 * elements)), filter(lambda x: x % 2 == 1))

    def create_failed_publisher(self):
        return pipe(from_iterable(range(5)), filter(lambda x: 1 // (x - 3)))


class TestPipeScan(PublisherVerification):
    def create_publisher(self, elements):
        return pipe(from_iterable(range(elements)), scan(lambda acc, x: acc + x, 0))

    def create_failed_publisher(self):
        return pipe(from_iterable(Unopenable()), scan(lambda acc, x: acc + x, 0))


class TestPipeFiftyStages(PublisherVerification):
    def create_publisher(self, elements):
        return pipe(from_iterable(range(elements)), *[map(lambda x: x) for _ in range(50)])


# ------------------------------------------------------------------------------ multicast
class TestMulticast(PublisherVerification):
    hot = True

    def create_publisher(self, elements):
        multicast = Multicast(capacity=16)
        from_iterable(range(elements)).subscribe(multicast)
        return multicast

    def create_failed_publisher(self):
        multicast = Multicast(capacity=16)
        failed(RuntimeError("failed on purpose")).subscribe(multicast)
        return multicast


class TestMulticastOnPool(TestMulticast):
    def create_publisher(self, elements):
        multicast = Multicast(capacity=16)
        from_iterable(range(elements), executor=POOL).subscribe(multicast)
        return multicast


class _Connected:
    """A live multicast of bounded lag whose upstream is connected when the first subscriber
    joins (a live multicast takes from upstream at once, and with nobody there lets it go):
    what the kit checks is the members' side, within the bound (``capacity`` holds every
    element, so none is cut off)."""

    def __init__(self, upstream, capacity: int, batch: int | None = None) -> None:
        self.multicast = Multicast(capacity=capacity, batch=batch, live=True, max_lag=True)
        self.upstream = upstream

    def subscribe(self, subscriber):
        self.multicast.subscribe(subscriber)
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.subscribe(self.multicast)


class TestMulticastBoundedLag(PublisherVerification):
    hot = True
    max_elements = 4096  # live: it never cancels upstream, so no endless upstream here

    def create_publisher(self, elements):
        return _Connected(from_iterable(range(elements)), max(elements, 16))

    def create_failed_publisher(self):
        return _Connected(failed(RuntimeError("failed on purpose")), 16)


class TestMulticastBoundedLagOnPool(TestMulticastBoundedLag):
    def create_publisher(self, elements):
        return _Connected(from_iterable(range(elements), executor=POOL), max(elements, 16))


class Chunks:
    """``range(elements)`` in lists of ``size`` (the last one shorter), made as they are
    asked for: a batch-mode multicast's upstream."""

    def __init__(self, elements: int, size: int) -> None:
        self.elements = elements
        self.size = size

    def __iter__(self):
        for start in range(0, self.elements, self.size):
            yield list(range(start, min(start + self.size, self.elements)))


class TestMulticastBatches(PublisherVerification):
    """Batch mode: each element is a list of four; upstream's whole lists of four come out
    as the same lists (a subscriber never gets part of one, or an empty one)."""

    hot = True

    def create_publisher(self, elements):
        multicast = Multicast(capacity=16, batch=4)
        from_iterable(Chunks(4 * elements, 4)).subscribe(multicast)
        return multicast

    def create_failed_publisher(self):
        multicast = Multicast(capacity=16, batch=4)
        failed(RuntimeError("failed on purpose")).subscribe(multicast)
        return multicast


class TestMulticastBatchesOnPool(TestMulticastBatches):
    def create_publisher(self, elements):
        multicast = Multicast(capacity=16, batch=4)
        from_iterable(Chunks(4 * elements, 4), executor=POOL).subscribe(multicast)
        return multicast


class TestMulticastBatchesAsElements(PublisherVerification):
    """``elements()`` of a batch-mode multicast: lists of up to three in, elements out."""

    hot = True

    def create_publisher(self, elements):
        multicast = Multicast(capacity=16, batch=3)
        from_iterable(Chunks(elements, 3)).subscribe(multicast)
        return multicast.elements()

    def create_failed_publisher(self):
        multicast = Multicast(capacity=16, batch=3)
        failed(RuntimeError("failed on purpose")).subscribe(multicast)
        return multicast.elements()


# ------------------------------------------------------------------------------ transform
class TestTransformIdentity(ProcessorVerification):
    hot = True
    max_upstream_lead = 16

    def create_processor(self):
        return transform(lambda upstream: upstream, capacity=16)


class TestTransformIdentityStep(ProcessorVerification):
    hot = True
    max_upstream_lead = 16 + 8

    def create_processor(self):
        return transform(step_operator(identity_step, name="identity", prefetch=8), capacity=16)


class TestTransformMap(ProcessorVerification):
    hot = True
    max_upstream_lead = 16 + 8

    def create_processor(self):
        return transform(map(lambda x: x + 1, prefetch=8), capacity=16)

    def output_of(self, element):
        return element + 1


# ------------------------------------------------------------------------------ subscribers
class TestCallbackSubscriberBlackbox(SubscriberBlackboxVerification):
    def create_subscriber(self):
        return CallbackSubscriber(lambda item: None, on_error=lambda err: None, prefetch=4)


class TestCallbackSubscriberWhitebox(SubscriberWhiteboxVerification):
    def create_subscriber(self, probe):
        subscriber = CallbackSubscriber(probe.on_next, probe.on_error, probe.on_complete,
                                        prefetch=4)
        probe.puppet(cancel=subscriber.cancel)
        return subscriber


class TestIterateSubscriberBlackbox(SubscriberBlackboxVerification):
    """The subscriber behind ``iterate()``, driven directly (no event loop needed)."""

    def create_subscriber(self):
        return iterate(empty(), prefetch=4)
