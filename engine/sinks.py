"""Ready-made subscribers: ``CallbackSubscriber``, ``collect`` (blocking) and ``iterate`` (async).

All of them request in batches (``prefetch``) and replenish as they consume, so memory stays
O(``prefetch``) whatever the publisher's speed (RS §2.1 recommends requesting what one can
process). They check what the publisher does: more elements than requested (RS §1.1), signals
after a terminal one (RS §1.7), a second ``on_subscribe`` (RS §2.5) — each is reported through
the violation hook.

>>> from engine.sources import from_iterable
>>> seen = []
>>> _ = from_iterable([1, 2, 3]).subscribe(CallbackSubscriber(seen.append))
>>> seen
[1, 2, 3]
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import logging
import warnings

from engine.contracts import Publisher, Subscription
from engine.subscription import refuse_subscription
from engine.violations import report_violation

_log = logging.getLogger("goldilocks.sinks")

__all__ = ["CallbackSubscriber", "collect", "iterate", "DEFAULT_PREFETCH", "PublisherBase"]

DEFAULT_PREFETCH = 64


def _check_signal(value: object, method: str) -> None:
    if value is None:
        raise TypeError(f"RS §2.13: {method}() requires a value, got None")


class CallbackSubscriber:
    """A subscriber that calls ``on_next(item)`` for each element, then ``on_complete()`` or
    ``on_error(exc)``; requests ``prefetch`` at first and tops up by half as it consumes.

    A callback that raises cancels the subscription (RS §2.13: the subscriber signals failure by
    cancelling) and the exception goes to ``on_error`` if given, else to the violation hook —
    it is never thrown into the publisher. ``done`` is set on termination and ``error`` holds
    the failure, if any. ``cancel()`` cancels the subscription from any thread.
    """

    __slots__ = ("_on_next", "_on_error", "_on_complete", "prefetch", "_limit", "_subscription",
                 "_received", "_requested", "_consumed", "_terminated", "_cancelled", "done", "error",
                 "_lock")

    def __init__(self, on_next: Callable[[Any], None],
                 on_error: Callable[[BaseException], None] | None = None,
                 on_complete: Callable[[], None] | None = None, *,
                 prefetch: int = DEFAULT_PREFETCH) -> None:
        if not callable(on_next):
            raise TypeError("CallbackSubscriber: on_next must be callable")
        if prefetch <= 0:
            raise ValueError(f"CallbackSubscriber: prefetch must be > 0, got {prefetch}")
        self._on_next = on_next
        self._on_error = on_error
        self._on_complete = on_complete
        self.prefetch = prefetch
        self._limit = max(1, prefetch - prefetch // 2)
        self._subscription: Subscription | None = None
        self._received = 0
        self._requested = 0
        self._consumed = 0
        self._terminated = False  # a terminal signal arrived
        self._cancelled = False  # we cancelled: later signals are legal (RS §2.8) and ignored
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()

    def on_subscribe(self, subscription: Subscription) -> None:
        _check_signal(subscription, "on_subscribe")  # RS §2.13
        with self._lock:
            cancelled_first = self._cancelled and self._subscription is None
            if cancelled_first:
                duplicate = False
            elif self._subscription is not None or self._terminated:
                duplicate = True
            else:
                duplicate = False
                self._subscription = subscription
        if cancelled_first:  # cancel() came before on_subscribe (e.g. collect timed out)
            subscription.cancel()
            return
        if duplicate:
            refuse_subscription(subscription, repr(self))
            return
        self._requested = self.prefetch
        subscription.request(self.prefetch)

    def on_next(self, item: Any) -> None:
        _check_signal(item, "on_next")  # RS §2.13
        if self._terminated:
            report_violation("RS §1.7", f"on_next({item!r}) after a terminal signal", party=self)
            return
        if self._cancelled:
            return  # RS §2.8: still in flight when we cancelled; dropped
        self._received += 1
        if self._received > self._requested:
            report_violation("RS §1.1", f"element {self._received} delivered but only "
                             f"{self._requested} were requested", party=self._subscription)
        try:
            self._on_next(item)
        except Exception as err:
            self._fail_local(err)
            return
        self._consumed += 1
        if self._consumed >= self._limit:  # replenish in batches, at the end (RS §2.1)
            more = self._consumed
            self._consumed = 0
            self._requested += more
            subscription = self._subscription
            if subscription is not None:
                subscription.request(more)

    def on_error(self, error: BaseException) -> None:
        _check_signal(error, "on_error")  # RS §2.13
        if self._terminated:
            report_violation("RS §1.7", f"on_error({error!r}) after a terminal signal", party=self)
            return
        self._terminate()
        if self._cancelled:
            return  # raced with our cancel: the stream is over for us already
        self.error = error
        try:
            if self._on_error is not None:
                self._on_error(error)
            else:  # RS §2.13 forbids raising it here: said twice, so that it is not missed
                _log.error("stream failed and %r has no on_error", self, exc_info=error)
                warnings.warn(f"{self!r} was refused or failed with {error!r} and has no "
                              "on_error to take it; give CallbackSubscriber(on_next, "
                              "on_error=...) to handle it", RuntimeWarning, stacklevel=2)
        finally:
            self.done.set()

    def on_complete(self) -> None:
        if self._terminated:
            report_violation("RS §1.7", "on_complete after a terminal signal", party=self)
            return
        self._terminate()
        if self._cancelled:
            return
        try:
            if self._on_complete is not None:
                self._on_complete()
        except Exception as err:
            self.error = err
            _log.error("%r: on_complete callback raised", self, exc_info=err)
        finally:
            self.done.set()

    def cancel(self) -> None:
        """Cancel the subscription (from any thread); idempotent."""
        with self._lock:
            subscription = self._subscription
            self._cancelled = True
        if subscription is not None:
            subscription.cancel()  # RS §3.5: idempotent, so a second cancel() is harmless
        self.done.set()

    def _terminate(self) -> None:
        self._terminated = True  # RS §2.4: the subscription is considered cancelled
        self._subscription = None

    def _fail_local(self, err: BaseException) -> None:
        subscription = self._subscription
        self._cancelled = True  # RS §2.13: a subscriber signals failure by cancelling
        if subscription is not None:
            subscription.cancel()
        self.error = err
        try:
            if self._on_error is not None:
                self._on_error(err)
            else:
                _log.error("%r: on_next callback raised; subscription cancelled", self,
                           exc_info=err)
        finally:
            self.done.set()

    def __repr__(self) -> str:
        name = getattr(self._on_next, "__qualname__", type(self._on_next).__name__)
        return f"CallbackSubscriber({name})"


def collect(publisher: Publisher, *, timeout: float | None = None,
            prefetch: int = 1024) -> list[Any]:
    """Subscribe, gather every element into a list, return it when the stream completes.

    Raises the stream's error (chained) if it fails, ``TimeoutError`` (after cancelling) if it
    has not finished within ``timeout`` seconds. With the inline executor the whole stream may
    run inside this call. Do not call it on an event loop's thread for a publisher driven by
    that loop: it blocks.
    """
    items: list[Any] = []
    subscriber = CallbackSubscriber(items.append, on_error=lambda err: None, prefetch=prefetch)
    publisher.subscribe(subscriber)
    if not subscriber.done.wait(timeout):
        subscriber.cancel()
        raise TimeoutError(f"collect(): {publisher!r} did not finish within {timeout} s "
                           f"({len(items)} elements so far)")
    if subscriber.error is not None:
        raise subscriber.error
    return items


class _Receiver:
    """The subscriber behind ``iterate``: bridges signals from any thread onto the loop.

    Only the subscription references it; the iterator the user holds references it, not the
    other way round, so dropping that iterator can cancel (see ``_AsyncIterator``).
    """

    def __init__(self, publisher: Publisher, prefetch: int) -> None:
        self._publisher = publisher
        self._prefetch = prefetch
        self._limit = max(1, prefetch - prefetch // 2)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: deque[Any] = deque()
        self._ready: asyncio.Event | None = None
        self._subscription: Subscription | None = None
        self._finished = False
        self._closed = False  # the iteration was abandoned: cancel, now or on on_subscribe
        self._error: BaseException | None = None
        self._consumed = 0
        self._lock = threading.Lock()
        self._started = False

    # ---------------------------------------------------------------- subscriber side
    def on_subscribe(self, subscription: Subscription) -> None:
        _check_signal(subscription, "on_subscribe")
        if self._subscription is not None:
            refuse_subscription(subscription, "iterate()")
            return
        self._subscription = subscription
        if self._closed:  # abandoned before the publisher got round to on_subscribe
            subscription.cancel()  # RS §2.6
            return
        subscription.request(self._prefetch)

    def on_next(self, item: Any) -> None:
        _check_signal(item, "on_next")
        with self._lock:
            if len(self._queue) >= self._prefetch:
                report_violation("RS §1.1", f"iterate(): more than {self._prefetch} elements "
                                 "outstanding", party=self._subscription)
            self._queue.append(item)
        self._wake()

    def on_error(self, error: BaseException) -> None:
        _check_signal(error, "on_error")
        self._error = error
        self._finished = True
        self._wake()

    def on_complete(self) -> None:
        self._finished = True
        self._wake()

    def _wake(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._ready.set)  # type: ignore[union-attr]
        except RuntimeError:
            pass

    # ---------------------------------------------------------------- async iterator side
    async def next(self) -> Any:
        if self._closed:
            raise StopAsyncIteration  # closed before (or after) it began: nothing to subscribe
        if not self._started:
            self._started = True
            self._loop = asyncio.get_running_loop()
            self._ready = asyncio.Event()
            self._publisher.subscribe(self)
        while True:
            with self._lock:
                if self._queue:
                    item = self._queue.popleft()
                    break
            if self._finished:
                with self._lock:
                    if self._queue:
                        continue
                if self._error is not None and not self._closed:
                    raise self._error
                raise StopAsyncIteration
            self._ready.clear()  # type: ignore[union-attr]
            with self._lock:
                pending = bool(self._queue)
            if not pending and not self._finished:
                await self._ready.wait()  # type: ignore[union-attr]
        self._consumed += 1
        if self._consumed >= self._limit:
            more, self._consumed = self._consumed, 0
            if self._subscription is not None:
                self._subscription.request(more)
        return item

    def close(self) -> None:
        """Stop: cancel the subscription (RS §2.6) and drop what is queued. Idempotent,
        from any thread; a later ``next`` ends the iteration."""
        if self._closed:
            return
        self._closed = True
        self._finished = True
        with self._lock:
            self._queue.clear()
        subscription = self._subscription
        if subscription is not None:
            subscription.cancel()  # RS §3.5: idempotent, never raises
        self._wake()  # a ``next`` waiting for an element ends instead


class _AsyncIterator:
    """What ``iterate`` returns: an async iterator that subscribes on first use.

    Leaving ``async for`` early (``break``, ``return``, an exception) drops it, and dropping
    it cancels the subscription at once (``__del__``: immediately in CPython, which frees an
    object as its last reference goes). ``aclose()`` — or ``contextlib.aclosing`` — cancels
    explicitly, whatever the interpreter. It is also a subscriber (its receiver's methods),
    for code that subscribes it by hand.
    """

    __slots__ = ("_receiver", "on_subscribe", "on_next", "on_error", "on_complete")

    def __init__(self, publisher: Publisher, prefetch: int) -> None:
        receiver = self._receiver = _Receiver(publisher, prefetch)
        self.on_subscribe = receiver.on_subscribe
        self.on_next = receiver.on_next
        self.on_error = receiver.on_error
        self.on_complete = receiver.on_complete

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    def __anext__(self) -> Any:
        return self._receiver.next()

    async def aclose(self) -> None:
        """Stop early: cancels the subscription (RS §2.6); the iteration ends."""
        self._receiver.close()

    def __del__(self) -> None:
        try:
            self._receiver.close()  # abandoned (e.g. ``break``): the subscription goes too
        except Exception:  # a finaliser must not raise; cancel() never does (RS §3.15)
            pass

    def __repr__(self) -> str:
        return f"iterate({self._receiver._publisher!r}, prefetch={self._receiver._prefetch})"


def iterate(publisher: Publisher, *, prefetch: int = DEFAULT_PREFETCH) -> _AsyncIterator:
    """An async iterator over ``publisher``'s elements, for ``async for``.

    Subscribes on first use; keeps at most ``prefetch`` elements requested ahead; re-raises the
    stream's error. Leaving the loop early cancels the subscription as soon as the iterator is
    dropped (at once in CPython); ``aclose()`` (or leaving ``async with
    contextlib.aclosing(...)``) cancels explicitly. Elements delivered to it and not yet taken
    (at most ``prefetch``) are dropped with it: they were this subscriber's (RS §2.8). Every publisher here also iterates itself
    this way: ``async for event in publisher`` is ``async for event in iterate(publisher)``.
    """
    if prefetch <= 0:
        raise ValueError(f"iterate(): prefetch must be > 0, got {prefetch}")
    return _AsyncIterator(publisher, prefetch)


class PublisherBase:
    """What every publisher here shares beyond ``subscribe``: ``async for item in publisher``,
    through ``iterate`` with its default prefetch (``DEFAULT_PREFETCH``)."""

    __slots__ = ()

    def __aiter__(self) -> _AsyncIterator:
        return iterate(cast(Publisher, self))
