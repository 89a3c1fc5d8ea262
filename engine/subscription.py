"""The one piece of machinery every publisher and processor here is built on.

A ``SubscriptionBase`` owns one subscriber. Its signal queue is compacted into three fields
guarded by a small lock — demand added since the last turn (requests sum, saturating at
``MAX_DEMAND``, RS §3.17), the first non-positive request (RS §3.9), and a sticky cancel flag —
plus a work-in-progress counter. ``request`` and ``cancel`` only record and schedule
(RS §3.4, §3.5); whoever moves the counter from 0 to 1 schedules the single drain loop on the
subscription's executor, so exactly one drain runs at a time and signals are serial (RS §1.3).
No lock is held while the subscriber is called.

Each drain turn does a bounded amount of work (``budget`` elements) and then yields the
executor, so one busy subscription cannot starve others. A request made from inside
``on_next`` only bumps the counter; the running loop picks it up (RS §3.2, §3.3).

Subclasses provide the elements:

- ``_prepare()`` — once, after ``on_subscribe`` (e.g. open an iterator);
- ``_emit(subscriber, limit) -> int`` — deliver up to ``limit`` elements, return how many;
  call ``finish()`` when the source is exhausted, ``finish(error)`` when it failed;
- ``_drained() -> bool`` — whether nothing is left to deliver (completion waits for it);
- ``_on_emitted(n)`` — after elements left (replenish upstream);
- ``_on_finish(cancelled)`` — once, when the subscription ends (release upstream resources).

Terminal errors are delivered at once, ahead of buffered elements and regardless of demand
(RS §4.2); completion is delivered once everything buffered has been delivered, with or
without demand (RS §2.9).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from engine.contracts import MAX_DEMAND
from engine.errors import RejectedError
from engine.executors import INLINE, Executor
from engine.violations import report_violation

__all__ = ["SubscriptionBase", "BufferedSubscription", "SerialUpstream", "DEFAULT_BUDGET",
           "check_subscriber", "refuse_subscription", "SIGNALS"]

#: Elements one drain turn may deliver before yielding its executor.
DEFAULT_BUDGET = 1024


def refuse_subscription(subscription: Any, who: str) -> None:
    """A subscriber that already has an active subscription was offered another: cancel the
    new one and report it (RS §2.5)."""
    subscription.cancel()  # RS §2.5
    report_violation("RS §2.5", f"{who}: second on_subscribe; cancelled it", party=subscription)


#: The methods that make an object a subscriber (engine.contracts.Subscriber).
SIGNALS = ("on_subscribe", "on_next", "on_error", "on_complete")


def check_subscriber(subscriber: object) -> None:
    """``subscribe(None)``, or of anything that is not a subscriber (an object with the four
    signal methods, callable), raises ``TypeError`` at once (RS §1.9) — before the publisher
    takes a slot or schedules a signal, so nothing is reported later in its place.

    Every publisher here calls it first thing in ``subscribe``; ``SubscriptionBase`` calls it
    too, for the publishers built on it elsewhere.
    """
    if subscriber is None:
        raise TypeError("RS §1.9: subscribe() requires a subscriber, got None")
    if isinstance(subscriber, type):  # RS §1.9: a class is not a subscriber, its instances are
        raise TypeError(f"RS §1.9: subscribe() requires a subscriber, got the class "
                        f"{subscriber.__name__}; pass an instance, {subscriber.__name__}(...)")
    missing = [name for name in SIGNALS if not callable(getattr(subscriber, name, None))]
    if missing:  # RS §1.9: refused at once, as None is
        raise TypeError(_not_a_subscriber(subscriber, missing))


def _not_a_subscriber(subscriber: object, missing: list[str]) -> str:
    kind = type(subscriber).__name__
    what = f"{kind} {subscriber!r}" if len(repr(subscriber)) <= 60 else kind
    text = (f"RS §1.9: subscribe() requires a subscriber (an object with callable "
            f"{', '.join(SIGNALS[:-1])} and {SIGNALS[-1]}); got {what}, whose "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing or not "
            "callable")
    if callable(subscriber):
        name = getattr(subscriber, "__name__", "")
        name = name if name.isidentifier() else "fn"
        text += (f"; to call a function with each element, pass "
                 f"CallbackSubscriber({name}) (engine.CallbackSubscriber) instead")
    return text


class SubscriptionBase:
    """A subscription with a compacted signal queue and a single drain loop (see module doc)."""

    __slots__ = (
        "_subscriber",
        "_executor",
        "_lock",
        "_wip",
        "_added",
        "_bad_request",
        "_cancelled",
        "_demand",
        "_started",
        "_done",
        "_completed",
        "_error",
        "budget",
        "__weakref__",
    )

    def __init__(self, subscriber: Any, executor: Executor = INLINE,
                 budget: int = DEFAULT_BUDGET) -> None:
        check_subscriber(subscriber)
        self._subscriber = subscriber
        self._executor = executor
        self._lock = threading.Lock()
        self._wip = 0
        self._added = 0
        self._bad_request: object = None
        self._cancelled = False
        self._demand = 0
        self._started = False
        self._done = False
        self._completed = False
        self._error: BaseException | None = None
        self.budget = budget

    # ------------------------------------------------------------------ Subscription API
    def request(self, n: int) -> None:
        """Record ``n`` more demand and schedule the drain. Never raises (RS §3.16)."""
        if self._done:  # RS §3.6: after cancel or termination, request is a NOP
            return
        with self._lock:
            if n.__class__ is int and n > 0:
                added = self._added + n
                self._added = added if added < MAX_DEMAND else MAX_DEMAND  # RS §3.17
            elif self._bad_request is None:
                self._bad_request = n  # RS §3.9: signalled as on_error by the drain
            self._wip += 1
            if self._wip != 1:
                return
        self._schedule()

    def cancel(self) -> None:
        """Idempotent, thread-safe, returns at once (RS §3.5, §3.7, §3.15)."""
        if self._cancelled or self._done:
            return
        self._cancelled = True  # RS §3.12: the drain stops signalling and drops references
        self.signal()

    # ------------------------------------------------------------------ ending the stream
    def finish(self, error: BaseException | None = None) -> None:
        """Record how the stream ends, without scheduling anything: with ``error`` (the first
        error recorded wins), delivered at once, ahead of buffered elements and regardless of
        demand (RS §4.2, §2.10); without, completion once everything buffered has been
        delivered (RS §2.9). The next drain turn delivers it: call ``signal()`` (or
        ``start()``) after, outside any lock of the caller's, since the drain may run inline.
        """
        if error is None:
            self._completed = True
        elif self._error is None:
            self._error = error

    def complete(self) -> None:
        """End the stream once everything buffered has been delivered (RS §2.9). Any thread."""
        self.finish()
        self.signal()

    def fail(self, error: BaseException) -> None:
        """End the stream with ``error`` at once (RS §4.2; the first error wins). Any thread."""
        if error is None:
            raise TypeError("fail() requires an exception, got None")
        self.finish(error)
        self.signal()

    # ------------------------------------------------------------------ scheduling
    def start(self) -> None:
        """Schedule the first turn, which signals ``on_subscribe`` (RS §1.9)."""
        self.signal()

    def signal(self) -> None:
        """Something changed (an element, a terminal state, demand): make sure a drain runs."""
        with self._lock:
            self._wip += 1
            if self._wip != 1:
                return
        self._schedule()

    def _schedule(self) -> None:
        try:
            self._executor.execute(self._drain)
        except RejectedError as err:
            # Nobody drains (we hold the counter): fail the subscriber serially, on this thread.
            self._executor = INLINE
            if self._error is None:
                self._error = err
            INLINE.execute(self._drain)

    def _drain(self) -> None:
        missed = 1
        while True:
            if not self._done and self._turn():
                self._schedule()  # budget spent: yield the executor, keep the counter held
                return
            with self._lock:
                self._wip -= missed
                missed = self._wip
                if missed == 0:
                    return

    # ------------------------------------------------------------------ one drain turn
    def _turn(self) -> bool:
        """Run one bounded turn; return True when it stopped only because the budget ran out."""
        subscriber = self._subscriber
        if not self._started:
            self._started = True
            try:
                subscriber.on_subscribe(self)  # RS §1.9: before any other signal
            except Exception as err:
                self._subscriber_failed("on_subscribe", err)
                return False
            if self._done:
                return False
            if self._error is None and not self._cancelled:  # cancelled in on_subscribe
                try:
                    self._prepare()
                except Exception as err:  # the source could not start: RS §1.4
                    self._error = err
        if self._added or self._bad_request is not None:
            # Only touch the lock when a request was recorded: a request racing with this read
            # bumps the work counter, so the loop takes another turn and sees it then.
            with self._lock:
                added = self._added
                self._added = 0
                bad = self._bad_request
        else:
            added = 0
            bad = None
        if added:
            demand = self._demand + added
            self._demand = demand if demand < MAX_DEMAND else MAX_DEMAND  # RS §3.17
        if self._cancelled:
            self._finish(True)
            return False
        if bad is not None:
            self._cancelled = True
            self._fail(ValueError(
                f"RS §3.9: request({bad!r}) is illegal; the number requested must be a "
                "positive integer"))
            return False
        if self._error is not None:
            self._fail(self._error)  # RS §4.2, §1.4: errors go out at once, demand or not
            return False
        demand = self._demand
        budget = self.budget
        if demand > 0:
            limit = demand if demand < budget else budget
            delivered = self._emit(subscriber, limit)
            if delivered:
                if demand != MAX_DEMAND:  # RS §3.17: "effectively unbounded" is not counted
                    self._demand = demand - delivered
                self._on_emitted(delivered)
            if self._done:
                return False
            if self._cancelled:
                self._finish(True)
                return False
            if self._error is not None:
                self._fail(self._error)
                return False
            if delivered == limit == budget and budget < demand:
                return True
        if self._completed and self._drained():
            self._complete()  # RS §1.5, §2.9: with or without demand
        return False

    # ------------------------------------------------------------------ terminal paths
    def _complete(self) -> None:
        subscriber = self._subscriber
        self._release()
        try:
            subscriber.on_complete()
        except Exception as err:
            report_violation("RS §2.13", f"{subscriber!r}.on_complete raised {err!r}",
                             party=subscriber, cause=err)
        self._on_finish(False)

    def _fail(self, error: BaseException) -> None:
        subscriber = self._subscriber
        self._release()
        try:
            subscriber.on_error(error)
        except Exception as err:
            report_violation("RS §2.13", f"{subscriber!r}.on_error raised {err!r}",
                             party=subscriber, cause=err)
        self._on_finish(self._cancelled)

    def _finish(self, cancelled: bool) -> None:
        self._release()
        self._on_finish(cancelled)

    def _release(self) -> None:
        self._done = True  # RS §1.7: nothing after a terminal signal
        self._subscriber = None  # RS §3.13: drop the reference to the subscriber

    def _deliver(self, subscriber: Any, items: Iterable[Any]) -> int:
        """Hand ``items`` to ``subscriber.on_next`` in order until cancelled; return how many
        it took. An ``on_next`` that raises takes nothing: the subscriber broke RS §2.13 and
        its subscription is cancelled."""
        on_next = subscriber.on_next
        count = 0
        for item in items:
            if self._cancelled:
                break
            try:
                on_next(item)
            except Exception as err:
                self._subscriber_failed("on_next", err)
                break
            count += 1
        return count

    def _subscriber_failed(self, method: str, err: BaseException) -> None:
        """The subscriber broke RS §2.13: its subscription is cancelled, the hook is told."""
        subscriber = self._subscriber
        self._cancelled = True
        report_violation(
            "RS §2.13",
            f"{subscriber!r}.{method} raised {err!r}; its subscription was cancelled",
            party=subscriber, cause=err)
        self._finish(True)

    # ------------------------------------------------------------------ subclass hooks
    def _prepare(self) -> None:
        """Called once, on the drain, after ``on_subscribe``."""

    def _emit(self, subscriber: Any, limit: int) -> int:
        """Deliver up to ``limit`` elements; return how many were delivered."""
        return 0

    def _drained(self) -> bool:
        return True

    def _on_emitted(self, count: int) -> None:
        """``count`` elements left; a processor replenishes its upstream here."""

    def _on_finish(self, cancelled: bool) -> None:
        """The subscription ended (cancelled, completed or failed)."""

    # ------------------------------------------------------------------ introspection
    @property
    def is_done(self) -> bool:
        return self._done

    @property
    def demand(self) -> int:
        """Outstanding demand as of the last drain turn (for stats and tests)."""
        return self._demand


class BufferedSubscription(SubscriptionBase):
    """A subscription fed by a producer through ``offer`` into a bounded buffer.

    ``offer`` never blocks: it returns False when the buffer holds ``capacity`` elements, and
    the producer is expected to respect the demand it was given instead. Memory is
    O(``capacity``). ``complete()`` and ``fail(exc)`` end the stream (an error at once, RS §4.2).
    """

    __slots__ = ("_buffer", "capacity", "peak")

    def __init__(self, subscriber: Any, capacity: int, executor: Executor = INLINE,
                 budget: int = DEFAULT_BUDGET) -> None:
        super().__init__(subscriber, executor, budget)
        if capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        self._buffer: deque[Any] = deque()
        self.capacity = capacity
        self.peak = 0

    def offer(self, item: Any) -> bool:
        """Buffer ``item`` for delivery; False (and nothing buffered) when full. Any thread."""
        with self._lock:
            buffer = self._buffer
            if len(buffer) >= self.capacity:
                return False
            buffer.append(item)
            if len(buffer) > self.peak:
                self.peak = len(buffer)
            self._wip += 1
            if self._wip != 1:
                return True
        self._schedule()
        return True

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def _emit(self, subscriber: Any, limit: int) -> int:
        buffer = self._buffer
        on_next = subscriber.on_next
        count = 0
        while count < limit and buffer:
            if self._cancelled:
                break
            item = buffer.popleft()
            try:
                on_next(item)
            except Exception as err:
                self._subscriber_failed("on_next", err)
                return count
            count += 1
        return count

    def _drained(self) -> bool:
        return not self._buffer

    def _release(self) -> None:
        super()._release()
        self._buffer.clear()


class SerialUpstream:
    """Serialises our calls on an upstream subscription (RS §2.7).

    A processor's ``request`` and ``cancel`` on its upstream can come from several threads at
    once — downstream drains, producers, ``remove()``. This wrapper turns them into a compacted
    queue (requests sum, saturating at ``MAX_DEMAND``; cancel is sticky) drained by one caller at
    a time. No lock is held while the upstream runs, and a call made from inside it (an inline
    publisher delivering on ``request``) is only recorded and picked up by the running loop,
    so recursion stays at depth 1 (RS §3.3). After ``cancel`` nothing more is sent.
    """

    __slots__ = ("_target", "_lock", "_wip", "_requested", "_cancel", "_sent_cancel")

    def __init__(self, target: Any) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._wip = 0
        self._requested = 0
        self._cancel = False
        self._sent_cancel = False

    def request(self, n: int) -> None:
        with self._lock:
            total = self._requested + n
            self._requested = total if total < MAX_DEMAND else MAX_DEMAND  # RS §3.17
            self._wip += 1
            if self._wip != 1:
                return
        self._drain()

    def cancel(self) -> None:
        with self._lock:
            self._cancel = True
            self._wip += 1
            if self._wip != 1:
                return
        self._drain()

    def _drain(self) -> None:
        missed = 1
        while True:
            with self._lock:
                n = self._requested
                self._requested = 0
                cancel = self._cancel
            target = self._target
            if target is not None:
                if cancel:
                    self._target = None  # RS §3.13 on our side too: drop the reference
                    self._sent_cancel = True
                    target.cancel()
                elif n:
                    target.request(n)
            with self._lock:
                self._wip -= missed
                missed = self._wip
                if missed == 0:
                    return

    def __repr__(self) -> str:
        return f"SerialUpstream({self._target!r})"
