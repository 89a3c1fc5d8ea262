"""``Multicast`` (hot fan-out, paced by the slowest subscriber) and ``transform`` (seed 002).

``Multicast`` subscribes once upstream and shares every element with all of its current
subscribers. It keeps one bounded buffer (``capacity`` elements); an element is dropped from it
once every subscriber has taken it, and upstream is asked only for the free space, so the
slowest subscriber sets the pace and memory is O(``capacity``) whatever the number of
subscribers. A subscriber sees the elements that arrive after it joined. When the last
subscriber cancels, upstream is cancelled; a subscriber arriving after termination gets the
terminal signal at once.

``transform(fn)`` is the seed's transform subject, with backpressure: a processor whose output
is ``fn(input)``, where ``input`` is a publisher of whatever the processor receives and
``fn`` may be any stateful pipeline. The output is multicast.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from engine.contracts import MAX_DEMAND, Publisher, Subscription
from engine.errors import ClosedError
from engine.executors import INLINE, Executor
from engine.sinks import PublisherBase
from engine.subscription import (
    BufferedSubscription,
    SerialUpstream,
    SubscriptionBase,
    check_subscriber,
    refuse_subscription,
)
from engine.violations import report_violation

__all__ = ["Multicast", "CursorSubscription", "TransformProcessor", "transform", "MulticastStats"]


class MulticastStats(tuple):
    """``(subscribers, buffered, peak, capacity)`` — frozen and cheap."""

    __slots__ = ()

    def __new__(cls, subscribers: int, buffered: int, peak: int, capacity: int) -> MulticastStats:
        return tuple.__new__(cls, (subscribers, buffered, peak, capacity))

    subscribers = property(lambda self: self[0])
    buffered = property(lambda self: self[1])
    peak = property(lambda self: self[2])
    capacity = property(lambda self: self[3])


class CursorSubscription(SubscriptionBase):
    """One subscriber's view of a shared buffer: a cursor (an absolute element index) into it.

    The owner keeps the buffer and provides ``_window(cursor, limit) -> list`` (the elements
    from ``cursor`` on, at most ``limit``), ``_end() -> int`` (the index after the last one),
    ``_advance()`` (trim what every cursor passed, ask upstream for room) and
    ``_leave(member, cancelled)``. ``Multicast`` is one owner; the network server's output
    fan-out is another.
    """

    __slots__ = ("_owner", "cursor")

    def __init__(self, subscriber: Any, owner: Any, cursor: int,
                 executor: Executor = INLINE) -> None:
        super().__init__(subscriber, executor)
        self._owner = owner
        self.cursor = cursor

    def _emit(self, subscriber: Any, limit: int) -> int:
        batch = self._owner._window(self.cursor, limit)
        on_next = subscriber.on_next
        count = 0
        for item in batch:
            if self._cancelled:
                break
            try:
                on_next(item)
            except Exception as err:
                self.cursor += count
                self._subscriber_failed("on_next", err)
                return count
            count += 1
        self.cursor += count
        return count

    def _drained(self) -> bool:
        return self.cursor >= self._owner._end()

    def _on_emitted(self, count: int) -> None:
        self._owner._advance()

    def _on_finish(self, cancelled: bool) -> None:
        self._owner._leave(self, cancelled)


class Multicast(PublisherBase):
    """A hot publisher sharing one upstream among many subscribers (see module docstring).

    It is also the subscriber of that upstream: pass it to ``upstream.subscribe``.
    """

    def __init__(self, capacity: int = 256, *, name: str = "multicast") -> None:
        if capacity <= 0:
            raise ValueError(f"{name}: capacity must be > 0, got {capacity}")
        self.capacity = capacity
        self.name = name
        self._lock = threading.Lock()
        self._items: deque[Any] = deque()
        self._base = 0  # absolute index of _items[0]
        self._members: list[CursorSubscription] = []
        self._upstream: Subscription | None = None
        self._outstanding = 0
        self._completed = False
        self._error: BaseException | None = None
        self._closed = False  # the last subscriber left: upstream cancelled
        self._peak = 0
        self._had_members = False

    # ------------------------------------------------------------ publisher side
    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)  # RS §1.9
        with self._lock:
            member = CursorSubscription(subscriber, self, self._base + len(self._items))
            if self._error is not None:
                member._error = self._error
            elif self._closed:
                member._error = ClosedError(
                    f"{self.name}: closed after its last subscriber cancelled")
            elif self._completed:
                member._completed = True
            else:
                self._members.append(member)
                self._had_members = True
        member.start()
        self._advance()

    def stats(self) -> MulticastStats:
        with self._lock:
            return MulticastStats(len(self._members), len(self._items), self._peak,
                                  self.capacity)

    # ------------------------------------------------------------ subscriber side (upstream)
    def on_subscribe(self, subscription: Subscription) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        with self._lock:
            duplicate = self._upstream is not None
            if not duplicate:
                self._upstream = SerialUpstream(subscription)  # RS §2.7
            closed = self._closed
        if duplicate:
            refuse_subscription(subscription, self.name)
            return
        if closed:
            subscription.cancel()
            return
        self._advance()

    def on_next(self, item: Any) -> None:
        if item is None:
            raise TypeError("RS §2.13: on_next() requires an element, got None")
        with self._lock:
            if self._closed or self._error is not None or self._completed:
                return
            self._outstanding -= 1
            overrun = self._outstanding < 0
            self._items.append(item)
            if len(self._items) > self._peak:
                self._peak = len(self._items)
            members = list(self._members)
        if overrun:
            report_violation("RS §1.1", f"{self.name}: upstream sent more than requested",
                             party=self._upstream)
        for member in members:
            member.signal()

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        with self._lock:
            self._error = error
            members = list(self._members)
        for member in members:  # RS §4.2: to every subscriber at once, demand or not
            member._error = error
            member.signal()

    def on_complete(self) -> None:
        with self._lock:
            self._completed = True
            members = list(self._members)
        for member in members:
            member._completed = True
            member.signal()

    # ------------------------------------------------------------ the members' buffer
    def _window(self, cursor: int, limit: int) -> list[Any]:
        with self._lock:
            offset = cursor - self._base
            return list(itertools.islice(self._items, offset, offset + limit))

    def _end(self) -> int:
        return self._base + len(self._items)

    # ------------------------------------------------------------ pacing
    def _advance(self) -> None:
        """Trim what every member has taken; ask upstream for the free space."""
        with self._lock:
            members = self._members
            if members:
                low = min(member.cursor for member in members)
                while self._base < low and self._items:
                    self._items.popleft()
                    self._base += 1
            upstream = self._upstream
            if upstream is None or not members or self._closed or self._completed:
                return
            want = self.capacity - len(self._items) - self._outstanding
            if want < (self.capacity + 1) // 2:
                return
            self._outstanding += want
        upstream.request(want)

    def _leave(self, member: CursorSubscription, cancelled: bool) -> None:
        with self._lock:
            try:
                self._members.remove(member)
            except ValueError:
                return
            last = not self._members and cancelled and not self._completed \
                and self._error is None
            if last:
                self._closed = True
                self._items.clear()
            upstream = self._upstream
        if last:
            if upstream is not None:
                upstream.cancel()  # the last subscriber left: cancel upstream
        else:
            self._advance()


class _Relay(BufferedSubscription):
    """The subscription of ``fn``'s pipeline on the processor's input; relays demand upstream."""

    __slots__ = ("_processor",)

    def __init__(self, subscriber: Any, processor: TransformProcessor) -> None:
        super().__init__(subscriber, capacity=1 << 62, executor=INLINE)
        self._processor = processor

    def request(self, n: int) -> None:
        super().request(n)
        if n.__class__ is int and n > 0:
            self._processor._relay_request(n)

    def _on_finish(self, cancelled: bool) -> None:
        if cancelled:
            self._processor._relay_cancel()


class _InputPublisher(PublisherBase):
    """The processor's input as a publisher: exactly one subscriber, ``fn``'s pipeline."""

    __slots__ = ("_processor",)

    def __init__(self, processor: TransformProcessor) -> None:
        self._processor = processor

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)
        processor = self._processor
        if processor._relay is not None:
            from engine.sources import failed
            failed(ClosedError("a transform's input accepts one subscriber; fn subscribed "
                               "to it twice")).subscribe(subscriber)
            return
        relay = processor._relay = _Relay(subscriber, processor)
        relay.start()


class TransformProcessor(PublisherBase):
    """A processor whose output is ``fn(input)``, shared by any number of subscribers."""

    def __init__(self, fn: Callable[[Publisher], Publisher], *, capacity: int = 256,
                 name: str = "transform") -> None:
        if not callable(fn):
            raise TypeError("transform() requires a callable fn(publisher) -> publisher")
        self.name = name
        self._lock = threading.Lock()
        self._upstream: Subscription | None = None
        self._pending = 0
        self._cancelled = False
        self._relay: _Relay | None = None
        self._received = 0
        self._output = Multicast(capacity, name=name)
        output = fn(_InputPublisher(self))
        if output is None:
            raise TypeError("transform(): fn returned None instead of a publisher")
        output.subscribe(self._output)

    # ------------------------------------------------------------ subscriber side
    def on_subscribe(self, subscription: Subscription) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        with self._lock:
            duplicate = self._upstream is not None
            if not duplicate:
                self._upstream = SerialUpstream(subscription)  # RS §2.7
                pending, self._pending = self._pending, 0
                cancelled = self._cancelled
        if duplicate:
            refuse_subscription(subscription, self.name)
            return
        if cancelled:
            subscription.cancel()
        elif pending:
            subscription.request(pending)

    def on_next(self, item: Any) -> None:
        if item is None:
            raise TypeError("RS §2.13: on_next() requires an element, got None")
        relay = self._relay
        if relay is None or not relay.offer(item):
            report_violation("RS §1.1", f"{self.name}: element beyond demand dropped",
                             party=self._upstream)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        if self._relay is not None:
            self._relay.fail(error)
        else:
            self._output.on_error(error)

    def on_complete(self) -> None:
        if self._relay is not None:
            self._relay.complete()
        else:
            self._output.on_complete()

    # ------------------------------------------------------------ publisher side
    def subscribe(self, subscriber: Any) -> None:
        self._output.subscribe(subscriber)

    def stats(self) -> MulticastStats:
        return self._output.stats()

    # ------------------------------------------------------------ relay hooks
    def _relay_request(self, n: int) -> None:
        with self._lock:
            upstream = self._upstream
            if upstream is None:
                pending = self._pending + n
                self._pending = pending if pending < MAX_DEMAND else MAX_DEMAND
                return
        upstream.request(n)

    def _relay_cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            upstream = self._upstream
        if upstream is not None:
            upstream.cancel()

    def __repr__(self) -> str:
        return f"{self.name}()"


def transform(fn: Callable[[Publisher], Publisher], *, capacity: int = 256) -> TransformProcessor:
    """The seed's transform subject: a processor emitting ``fn(input)`` to all subscribers.

    >>> from engine.sources import from_iterable
    >>> from engine.sinks import collect
    >>> from engine.stage import step_operator
    >>> plus_one = step_operator(lambda: (lambda x: (x + 1,)), name="plus_one")
    >>> processor = transform(plus_one)
    >>> from engine.sinks import CallbackSubscriber
    >>> seen = []
    >>> processor.subscribe(CallbackSubscriber(seen.append))
    >>> from_iterable([1, 2, 3]).subscribe(processor)
    >>> seen
    [2, 3, 4]

    Memory: O(``capacity``) for the shared output buffer, whatever the number of subscribers.
    """
    return TransformProcessor(fn, capacity=capacity)
