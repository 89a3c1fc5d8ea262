"""``Multicast`` (hot fan-out, paced by the slowest subscriber) and ``transform``
(design.md §6.5).

``Multicast`` subscribes once upstream and shares every element with all of its current
subscribers. It keeps one bounded buffer (``capacity`` elements); an element is dropped from it
once every subscriber has taken it, and upstream is asked only for the free space, so the
slowest subscriber sets the pace and memory is O(``capacity``) whatever the number of
subscribers. A subscriber sees the elements that arrive after it joined. When the last
subscriber cancels, upstream is cancelled; a subscriber arriving after termination gets the
terminal signal at once.

**Batch mode** (``batch=N``): upstream's elements are lists of at most ``N`` elements (as
``Union.batches(N)`` publishes them) and subscribers receive lists of at most ``N``, so the
per-element cost of a signal is paid once per list. Demand counts lists on both sides, as it
does for ``Union.batches`` (RS §1.1 and §3.9 apply to lists): upstream is asked for at most
``capacity // N`` lists, requested or buffered, so the buffer still holds at most
``capacity`` elements; a subscriber's ``request(n)`` asks for ``n`` lists. The buffer holds
elements, not lists: each list a subscriber receives is new (it may keep or change it) and
holds what arrived since its previous one, at most ``N`` and never nothing. Every subscriber
sees the same elements in the same order; the grouping is its own (one that keeps up sees
upstream's lists, one that fell behind catches up in full ones). ``elements()`` is the same
stream one element at a time, for subscribers that want elements.

**Live** (``live=True``): the multicast takes from upstream whether or not anyone
subscribes, letting go of what no subscriber is there to take, and stays subscribed when
its last subscriber leaves (a server's output, which subscribers join and leave). Otherwise
it asks upstream for nothing before its first subscriber, and its last subscriber's cancel
cancels upstream.

**Bounded lag** (``max_lag=True``, live only): the subscribers never slow upstream — as a
Kafka consumer never slows its producers. Upstream is always asked for more; the buffer keeps
the last ``capacity`` elements that some subscriber has not taken yet, and a subscriber that
falls more than ``capacity`` elements behind is cut off with ``TooSlowError`` (its
``position`` says where it was). ``start`` is the absolute index of upstream's first element
(a stream continued after a restart), ``join_at`` joins at an index still held.

``transform(fn)`` is the transform subject of the StreamInsight CTI synchronizing subject,
with backpressure: a processor whose output is ``fn(input)``, where ``input`` is a publisher of
whatever the processor receives and ``fn`` may be any stateful pipeline. The output is
multicast.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.contracts import MAX_DEMAND, Publisher, Subscription
from engine.errors import ClosedError, TooSlowError
from engine.executors import INLINE, Executor, as_executor
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


@dataclass(frozen=True, slots=True)
class MulticastStats:
    """A multicast's subscribers and its one buffer (elements, in batch mode too)."""

    subscribers: int
    buffered: int   # elements held for subscribers that have not taken them yet
    peak: int       # the most ever held ...
    capacity: int   # ... and the bound
    cut: int = 0    # subscribers cut off for falling more than ``capacity`` behind (max_lag)
    position: int = 0  # the absolute index of the next element from upstream


class CursorSubscription(SubscriptionBase):
    """One subscriber's view of a ``Multicast``'s buffer: a cursor (an absolute element index)
    into it. With ``batch`` set, each ``on_next`` carries a list of up to ``batch`` elements
    and demand counts lists; otherwise one element each.

    The owner keeps the buffer and provides ``_window(cursor, limit) -> list`` (the elements
    from ``cursor`` on, at most ``limit``), ``_end() -> int`` (the index after the last one),
    ``_advance()`` (trim what every cursor passed, ask upstream for room) and
    ``_leave(member, cancelled)``.
    """

    __slots__ = ("_owner", "cursor", "batch")

    def __init__(self, subscriber: Any, owner: Multicast, cursor: int,
                 executor: Executor = INLINE, batch: int = 0) -> None:
        super().__init__(subscriber, executor)
        self._owner = owner
        self.cursor = cursor
        self.batch = batch

    def _emit(self, subscriber: Any, limit: int) -> int:
        if self.batch:  # RS §1.1: demand counts lists
            return self._deliver(subscriber, itertools.islice(self._lists(), limit))
        count = self._deliver(subscriber, self._owner._window(self.cursor, limit))
        self.cursor += count
        return count

    def _lists(self) -> Iterator[list[Any]]:
        """New lists of what arrived since the previous one, at most ``batch`` elements each,
        until none is left."""
        window = self._owner._window
        batch = self.batch
        while True:
            items = window(self.cursor, batch)
            if not items:
                return
            self.cursor += len(items)
            yield items

    def _drained(self) -> bool:
        return self.cursor >= self._owner._end()

    def _on_emitted(self, count: int) -> None:
        self._owner._advance()

    def _on_finish(self, cancelled: bool) -> None:
        self._owner._leave(self, cancelled)


class Multicast(PublisherBase):
    """A hot publisher sharing one upstream among many subscribers (see module docstring).

    It is also the subscriber of that upstream: pass it to ``upstream.subscribe``.
    ``executor`` runs the subscribers' drains (``None``: on the calling thread).
    """

    def __init__(self, capacity: int = 256, *, batch: int | None = None, live: bool = False,
                 executor: object = None, name: str = "multicast", max_lag: bool = False,
                 start: int = 0) -> None:
        if capacity <= 0:
            raise ValueError(f"{name}: capacity must be > 0, got {capacity}")
        if max_lag and not live:
            raise ValueError(f"{name}: max_lag needs live=True (upstream is taken from "
                             "whether or not anyone subscribes)")
        if start.__class__ is not int or start < 0:
            raise ValueError(f"{name}: start must be an int >= 0, got {start!r}")
        if batch is not None and (batch.__class__ is not int or not 0 < batch <= capacity):
            raise ValueError(f"{name}: batch must be an int from 1 to the capacity "
                             f"({capacity}), got {batch!r}")
        self.capacity = capacity
        self.batch = batch
        self.live = live
        self.max_lag = max_lag
        self.name = name
        self._unit = batch or 1                   # elements per upstream element, at most
        self._lists = capacity // self._unit      # upstream elements requested or held
        self._executor = as_executor(executor)
        self._lock = threading.Lock()
        self._items: deque[Any] = deque()
        self._base = start  # absolute index of _items[0]
        self._cut = 0
        self._members: list[CursorSubscription] = []
        self._upstream: Subscription | None = None
        self._outstanding = 0
        self._completed = False
        self._error: BaseException | None = None
        self._closed = False  # the last subscriber left: upstream cancelled
        self._peak = 0

    # ------------------------------------------------------------ publisher side
    def subscribe(self, subscriber: Any) -> None:
        """Elements, or in batch mode lists of up to ``batch`` of them (demand counts lists)."""
        self._join(subscriber, self._unit if self.batch else 0)

    def elements(self) -> Publisher:
        """The same stream one element at a time (demand counts elements), from the same
        buffer: what a subscriber that wants elements subscribes to in batch mode."""
        return _Elements(self)

    def join_at(self, subscriber: Any, position: int, *, elements: bool = False) -> None:
        """Subscribe from absolute index ``position`` (lists in batch mode, unless
        ``elements``): from an element still held, or the next one to come. ``ValueError``
        naming the range held otherwise (nothing subscribed)."""
        self._join(subscriber, 0 if elements or not self.batch else self._unit, position)

    def held(self) -> tuple[int, int]:
        """``(first, end)``: the absolute indexes a subscriber may join at, ``first`` to
        ``end`` (the next element to come) included."""
        with self._lock:
            return self._base, self._base + len(self._items)

    def _join(self, subscriber: Any, batch: int, at: int | None = None) -> None:
        check_subscriber(subscriber)  # RS §1.9
        ended = True
        error: BaseException | None = None
        with self._lock:
            end = self._base + len(self._items)
            if at is not None and not self._base <= at <= end:
                raise ValueError(f"{self.name}: position {at} is not held; expected "
                                 f"{self._base} to {end}")
            member = CursorSubscription(subscriber, self, end if at is None else at,
                                        self._executor, batch)
            if self._error is not None:
                error = self._error
            elif self._closed:
                error = ClosedError(f"{self.name}: closed after its last subscriber cancelled")
            elif not self._completed:
                self._members.append(member)
                ended = False
        if ended:  # RS §1.9, §2.9: a late subscriber gets the terminal signal at once
            member.finish(error)
        member.start()
        self._advance()

    def stats(self) -> MulticastStats:
        with self._lock:
            return MulticastStats(len(self._members), len(self._items), self._peak,
                                  self.capacity, self._cut, self._base + len(self._items))

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
            if not self.max_lag:  # with max_lag upstream has MAX_DEMAND: nothing to count
                self._outstanding -= 1
            overrun = self._outstanding < 0
            members = list(self._members)
            cut: list[CursorSubscription] = []
            if not members:  # live, nobody to take it: let it go
                self._base += len(item) if self.batch else 1
            else:
                items = self._items
                if self.batch:
                    items.extend(item)
                else:
                    items.append(item)
                if self.max_lag and len(items) > self.capacity:
                    cut = self._cut_off(len(items) - self.capacity)
                    members = self._members
                if len(items) > self._peak:
                    self._peak = len(items)
        for member in cut:
            member.fail(TooSlowError(
                f"{self.name}: subscriber more than {self.capacity} elements behind, cut off "
                f"at position {member.cursor}", position=member.cursor, bound=self.capacity))
        if overrun:
            report_violation("RS §1.1", f"{self.name}: upstream sent more than requested",
                             party=self._upstream)
        for member in members:
            member.signal()
        if not members:
            self._advance()

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        with self._lock:
            self._error = error
            members = list(self._members)
        for member in members:  # RS §4.2: to every subscriber at once, demand or not
            member.fail(error)

    def on_complete(self) -> None:
        with self._lock:
            self._completed = True
            members = list(self._members)
        for member in members:  # RS §2.9: once each has taken what is buffered
            member.complete()

    def _cut_off(self, excess: int) -> list[CursorSubscription]:
        """Bounded lag (under the lock): the ``excess`` oldest elements go; the members that
        had not taken them leave, returned to be told (outside the lock)."""
        base = self._base + excess
        cut = [m for m in self._members if m.cursor < base]
        if cut:
            self._members = [m for m in self._members if m.cursor >= base]
            self._cut += len(cut)
        for _ in range(excess):
            self._items.popleft()
        self._base = base
        return cut

    # ------------------------------------------------------------ the members' buffer
    def _window(self, cursor: int, limit: int) -> list[Any]:
        with self._lock:
            offset = cursor - self._base
            if offset < 0:  # cut off (bounded lag): its error is on its way
                return []
            return list(itertools.islice(self._items, offset, offset + limit))

    def _end(self) -> int:
        with self._lock:  # trimming moves both: read them together
            return self._base + len(self._items)

    # ------------------------------------------------------------ pacing
    def _advance(self) -> None:
        """Trim what every member has taken; ask upstream for the free space."""
        with self._lock:
            members = self._members
            items = self._items
            if members:
                taken = min(member.cursor for member in members) - self._base
            else:
                taken = len(items) if self.live else 0
            if taken >= len(items):
                self._base += len(items)
                items.clear()
            else:
                for _ in range(taken):
                    items.popleft()
                self._base += max(taken, 0)
            upstream = self._upstream
            if upstream is None or self._closed or self._completed or self._error is not None \
                    or not (members or self.live):
                return
            if self.max_lag:  # the subscribers never slow upstream: ask for all, once
                if self._outstanding:
                    return
                want = self._outstanding = MAX_DEMAND
            else:
                want = (self.capacity - len(items)) // self._unit - self._outstanding
            if want <= 0 or want < (self._lists + 1) // 2:
                return  # ask in batches, once half the room is free
            self._outstanding += want
        upstream.request(want)

    def _leave(self, member: CursorSubscription, cancelled: bool) -> None:
        with self._lock:
            try:
                self._members.remove(member)
            except ValueError:
                return
            last = not self._members and cancelled and not self._completed \
                and self._error is None and not self.live
            if last:
                self._closed = True
                self._items.clear()
            upstream = self._upstream
        if last:
            if upstream is not None:
                upstream.cancel()  # the last subscriber left: cancel upstream
        else:
            self._advance()

    def __repr__(self) -> str:
        mode = f", batch={self.batch}" if self.batch else ""
        return f"{self.name}(capacity={self.capacity}{mode}{', live' if self.live else ''})"


class _Elements(PublisherBase):
    """A batch-mode multicast's stream one element at a time (``Multicast.elements()``):
    its subscribers are members of the same buffer, whose demand counts elements."""

    __slots__ = ("_multicast",)

    def __init__(self, multicast: Multicast) -> None:
        self._multicast = multicast

    def subscribe(self, subscriber: Any) -> None:
        self._multicast._join(subscriber, 0)

    def __repr__(self) -> str:
        return f"{self._multicast!r}.elements()"


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
    """The processor's input as a publisher: exactly one subscriber, ``fn``'s pipeline, whose
    subscription (``relay``) the processor feeds."""

    __slots__ = ("_processor", "relay")

    def __init__(self, processor: TransformProcessor) -> None:
        self._processor = processor
        self.relay: _Relay | None = None

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)
        if self.relay is not None:
            from engine.sources import failed
            failed(ClosedError("a transform's input accepts one subscriber; fn subscribed "
                               "to it twice")).subscribe(subscriber)
            return
        relay = self.relay = _Relay(subscriber, self._processor)
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
        self._input = _InputPublisher(self)
        self._output = Multicast(capacity, name=name)
        output = fn(self._input)
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
        relay = self._input.relay
        if relay is None or not relay.offer(item):
            report_violation("RS §1.1", f"{self.name}: element beyond demand dropped",
                             party=self._upstream)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        relay = self._input.relay
        if relay is not None:
            relay.fail(error)
        else:
            self._output.on_error(error)

    def on_complete(self) -> None:
        relay = self._input.relay
        if relay is not None:
            relay.complete()
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
    """The StreamInsight transform subject: a processor emitting ``fn(input)`` to all subscribers.

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
