"""Cold sources: ``from_iterable``, ``empty``, ``failed``, ``from_async_iterable``.

Each ``subscribe`` creates a fresh subscription with its own state (a fresh iteration per
subscriber); a publisher is never its own subscription.

>>> from engine.sinks import collect
>>> collect(from_iterable(range(3)))
[0, 1, 2]
>>> collect(empty())
[]
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Iterable
from typing import Any

from engine.contracts import MAX_DEMAND
from engine.executors import INLINE, Executor, LoopExecutor, as_executor
from engine.sinks import PublisherBase
from engine.subscription import BufferedSubscription, SubscriptionBase, check_subscriber

__all__ = ["from_iterable", "empty", "failed", "from_async_iterable", "IterablePublisher"]

_END = object()


def _none_element(position: int) -> TypeError:
    return TypeError(f"RS §2.13: element {position} of the iterable is None; "
                     "a stream cannot carry None")


class _IterableSubscription(SubscriptionBase):
    """Pulls from a private iterator only as demand allows, one element of lookahead so that
    completion is signalled as soon as the iterator is exhausted (like ``hasNext``)."""

    __slots__ = ("_iterable", "_iterator", "_next", "_position")

    def __init__(self, subscriber: Any, iterable: Iterable[Any], executor: Executor) -> None:
        super().__init__(subscriber, executor)
        self._iterable: Iterable[Any] | None = iterable
        self._iterator: Any = None
        self._next: Any = _END
        self._position = 0

    def _prepare(self) -> None:
        iterable, self._iterable = self._iterable, None  # opened once: the iterator holds it
        assert iterable is not None
        iterator = self._iterator = iter(iterable)  # user code: may raise → on_error
        try:
            self._next = next(iterator)
        except StopIteration:
            self._completed = True  # empty: complete without waiting for demand (RS §2.9)

    def _emit(self, subscriber: Any, limit: int) -> int:
        iterator = self._iterator
        on_next = subscriber.on_next
        upcoming = self._next
        count = 0
        while count < limit and upcoming is not _END:
            if self._cancelled:
                break
            item = upcoming
            if item is None:
                self._error = _none_element(self._position + count)
                break
            try:
                upcoming = next(iterator)
            except StopIteration:
                upcoming = _END
                self._completed = True
            except Exception as err:  # the iterator failed: this element, then on_error
                upcoming = _END
                self._error = err
            try:
                on_next(item)
            except Exception as err:
                self._subscriber_failed("on_next", err)
                return count
            count += 1
        self._next = upcoming
        self._position += count
        return count

    def _on_finish(self, cancelled: bool) -> None:
        iterator, self._iterator = self._iterator, None
        self._next = _END
        close = getattr(iterator, "close", None)
        if cancelled and close is not None:  # a generator's finally blocks run on cancel
            try:
                close()
            except Exception:
                pass


class IterablePublisher(PublisherBase):
    """A cold publisher over an iterable; see ``from_iterable``."""

    __slots__ = ("_iterable", "_executor")

    def __init__(self, iterable: Iterable[Any], executor: object = None) -> None:
        if iterable is None:
            raise TypeError("from_iterable() requires an iterable, got None")
        self._iterable = iterable
        self._executor = as_executor(executor)

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)  # RS §1.9
        _IterableSubscription(subscriber, self._iterable, self._executor).start()

    def __repr__(self) -> str:
        return f"from_iterable({type(self._iterable).__name__}, executor={self._executor!r})"


def from_iterable(iterable: Iterable[Any], *, executor: object = None) -> IterablePublisher:
    """A cold publisher of ``iterable``'s elements, a fresh ``iter()`` per subscriber.

    Elements are pulled only as requested (plus one of lookahead), so an infinite generator is
    fine. ``executor`` chooses where signals run: ``None`` the calling thread (trampolined), a
    ``concurrent.futures.Executor`` or an asyncio loop. An iterator (rather than a re-iterable
    collection) can be consumed by only one subscriber. Memory: O(1) per subscription.
    """
    return IterablePublisher(iterable, executor)


class _EmptySubscription(SubscriptionBase):
    __slots__ = ()

    def _prepare(self) -> None:
        self._completed = True


class _Empty(PublisherBase):
    __slots__ = ()

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)
        _EmptySubscription(subscriber, INLINE).start()

    def __repr__(self) -> str:
        return "empty()"


_EMPTY = _Empty()


def empty() -> _Empty:
    """A publisher that completes right after ``on_subscribe``, without demand (RS §2.9)."""
    return _EMPTY


class _Failed(PublisherBase):
    __slots__ = ("_error",)

    def __init__(self, error: BaseException) -> None:
        if not isinstance(error, BaseException):
            raise TypeError(f"failed() requires an exception, got {type(error).__name__}")
        self._error = error

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)
        subscription = SubscriptionBase(subscriber, INLINE)
        subscription.finish(self._error)  # RS §2.10: on_error without any request
        subscription.start()

    def __repr__(self) -> str:
        return f"failed({self._error!r})"


def failed(error: BaseException) -> _Failed:
    """A publisher that signals ``on_error(error)`` right after ``on_subscribe``."""
    return _Failed(error)


class _AsyncIterableSubscription(BufferedSubscription):
    """Pulls from an async iterator on its loop, never more than requested (RS §1.1).

    ``_wanted`` is the demand not yet pulled for — the permits of the asynchronous semaphore of
    the async-semaphore backpressure article — plus one element of lookahead, pulled as soon as
    the subscription starts (as ``from_iterable`` does), so that an empty or failing source
    terminates without demand and completion follows the last requested element at once. With no
    permit, or with ``capacity`` pulled elements still waiting for delivery, the puller awaits
    an ``asyncio.Event`` instead of blocking a thread. The lookahead element is only buffered;
    it is delivered when requested (RS §1.1). The drain runs on the same loop, so these fields
    are only touched from the loop's thread.
    """

    __slots__ = ("_aiterable", "_loop", "_task", "_wanted", "_wake")

    def __init__(self, subscriber: Any, aiterable: AsyncIterable[Any],
                 loop: asyncio.AbstractEventLoop, capacity: int) -> None:
        super().__init__(subscriber, capacity, LoopExecutor(loop))
        self._aiterable = aiterable
        self._loop = loop
        self._task: asyncio.Task[None] | None = None
        self._wanted = 1  # the lookahead
        self._wake = asyncio.Event()

    def request(self, n: int) -> None:
        super().request(n)
        if n.__class__ is int and n > 0 and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._grant, n)
            except RuntimeError:
                pass  # the loop closed meanwhile: the drain reports RejectedError

    def _prepare(self) -> None:  # on the loop (the drain's executor), after on_subscribe
        if self._task is None:
            self._task = self._loop.create_task(self._pull())

    def _grant(self, n: int) -> None:  # on the loop
        if self._done:
            return
        self._wanted = min(self._wanted + n, MAX_DEMAND)
        self._wake.set()
        if self._task is None:
            self._task = self._loop.create_task(self._pull())

    async def _pull(self) -> None:  # on the loop
        iterator = None
        try:
            iterator = aiter(self._aiterable)
            position = 0
            while not self._done:
                if self._wanted <= 0 or len(self._buffer) >= self.capacity:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                try:
                    item = await anext(iterator)
                except StopAsyncIteration:
                    self.complete()
                    return
                if item is None:
                    self.fail(_none_element(position))
                    return
                position += 1
                self._wanted -= 1
                self.offer(item)  # fits: at most `capacity` are buffered (checked above)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self.fail(err)
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None and self._done:
                try:
                    await aclose()
                except Exception:
                    pass

    def _on_emitted(self, count: int) -> None:  # on the loop (the drain's executor)
        self._wake.set()

    def _on_finish(self, cancelled: bool) -> None:  # on the loop
        task = self._task
        if task is not None and cancelled and not task.done():
            task.cancel()
        self._wake.set()


class _AsyncIterablePublisher(PublisherBase):
    __slots__ = ("_aiterable", "_loop", "_capacity")

    def __init__(self, aiterable: AsyncIterable[Any], loop: asyncio.AbstractEventLoop | None,
                 capacity: int) -> None:
        if aiterable is None:
            raise TypeError("from_async_iterable() requires an async iterable, got None")
        self._aiterable = aiterable
        self._loop = loop
        self._capacity = capacity

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)
        loop = self._loop
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise RuntimeError(
                    "from_async_iterable(): no loop given and no running event loop; pass "
                    "loop=… or subscribe from inside the loop") from None
        _AsyncIterableSubscription(subscriber, self._aiterable, loop, self._capacity).start()

    def __repr__(self) -> str:
        return f"from_async_iterable({self._aiterable!r})"


def from_async_iterable(aiterable: AsyncIterable[Any], *,
                        loop: asyncio.AbstractEventLoop | None = None,
                        capacity: int = 1024) -> _AsyncIterablePublisher:
    """A cold publisher over an async iterable, pulled on ``loop`` only as demand allows.

    ``loop`` defaults to the loop running at ``subscribe`` time. Signals are delivered on the
    loop's thread. At most ``capacity`` pulled elements wait for delivery (credit beyond it is
    granted as elements leave), so memory is O(``capacity``).
    """
    return _AsyncIterablePublisher(aiterable, loop, capacity)
