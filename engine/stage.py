"""``pipe`` and the step stage: the shared machinery behind every per-element operator.

A *step* is built per subscription (state belongs to the subscription, so a pipeline can be
subscribed twice or replayed) and called once per upstream element; it returns a sequence of
zero or more outputs. An optional ``flush()`` on the step returns the outputs owed at
completion (a reorder buffer's remainder, a final CTI)::

    def make_step():
        total = 0
        def step(x):
            nonlocal total
            total += x
            return (total,)
        return step

    running_sum = step_operator(make_step, name="running_sum")
    pipe(from_iterable([1, 2, 3]), running_sum)      # 1, 3, 6

Backpressure: the stage requests ``prefetch`` elements upstream and tops up as its output
buffer drains; the buffer holds at most ``prefetch × (largest output burst)`` elements.
Only the step (user code) is wrapped in ``try``; a step that raises cancels upstream and sends
``on_error`` downstream (RS §2.13 applies to subscribers, not to steps).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from engine.contracts import Publisher, Subscription
from engine.executors import INLINE
from engine.sinks import PublisherBase
from engine.subscription import (
    BufferedSubscription,
    SerialUpstream,
    check_subscriber,
    refuse_subscription,
)
from engine.violations import report_violation

__all__ = ["pipe", "step_operator", "StagePublisher", "Step"]

Step = Callable[[Any], Sequence[Any]]


def pipe(publisher: Publisher, *operators: Callable[[Publisher], Publisher]) -> Publisher:
    """Apply operators left to right: ``pipe(p, f, g) == g(f(p))``."""
    if publisher is None:
        raise TypeError("pipe() requires a publisher, got None")
    for operator in operators:
        publisher = operator(publisher)
        if publisher is None:
            raise TypeError(f"pipe(): operator {operator!r} returned None instead of a publisher")
    return publisher


class _StageSubscription(BufferedSubscription):
    """Downstream side of one stage subscription; its ``inner`` subscribes upstream."""

    __slots__ = ("_step", "_flush", "_upstream", "_outstanding", "_prefetch", "_name",
                 "_upstream_lock", "_stopped")

    def __init__(self, subscriber: Any, step: Step, prefetch: int, name: str) -> None:
        # The buffer bound is enforced by demand; capacity only guards against a broken upstream.
        super().__init__(subscriber, capacity=1 << 62, executor=INLINE)
        self._step = step
        self._flush = getattr(step, "flush", None)
        self._upstream: Subscription | None = None
        self._outstanding = 0
        self._prefetch = prefetch
        self._name = name
        self._upstream_lock = threading.Lock()
        self._stopped = False

    # ------------------------------------------------------------ upstream (inner) signals
    def inner_subscribe(self, subscription: Subscription) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        with self._upstream_lock:
            duplicate = self._upstream is not None
            if not duplicate:
                self._upstream = SerialUpstream(subscription)  # RS §2.7
                stopped = self._stopped
        if duplicate:
            refuse_subscription(subscription, self._name)
            return
        if stopped:
            subscription.cancel()
            return
        self._replenish()

    def inner_next(self, item: Any) -> None:
        if item is None:
            raise TypeError("RS §2.13: on_next() requires an element, got None")
        if self._stopped:
            return
        with self._upstream_lock:
            self._outstanding -= 1
            overrun = self._outstanding < 0
        if overrun:
            report_violation("RS §1.1", f"{self._name}: upstream sent more than requested",
                             party=self._upstream)
        try:
            outputs = self._step(item)
        except Exception as err:
            self._stop_upstream()
            self.fail(err)
            return
        if outputs:
            buffer = self._buffer
            for output in outputs:
                buffer.append(output)
            if len(buffer) > self.peak:
                self.peak = len(buffer)
            self.signal()
        else:
            self._replenish()

    def inner_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        self._stopped = True
        self.fail(error)  # RS §4.2: passed on at once

    def inner_complete(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._flush is not None:
            try:
                outputs = self._flush()
            except Exception as err:
                self.fail(err)
                return
            self._buffer.extend(outputs or ())
        self.complete()

    # ------------------------------------------------------------ demand upstream
    def _replenish(self) -> None:
        with self._upstream_lock:
            upstream = self._upstream
            if upstream is None or self._stopped:
                return
            want = self._prefetch - self._outstanding - len(self._buffer)
            if want < (self._prefetch + 1) // 2:
                return  # top up in batches
            self._outstanding += want
        upstream.request(want)

    def _on_emitted(self, count: int) -> None:
        self._replenish()

    def _stop_upstream(self) -> None:
        with self._upstream_lock:
            self._stopped = True
            upstream = self._upstream
        if upstream is not None:
            upstream.cancel()

    def _on_finish(self, cancelled: bool) -> None:
        if cancelled:
            self._stop_upstream()  # propagate cancellation upstream
        self._step = None  # type: ignore[assignment]


class _Inner:
    """The upstream-facing subscriber of a stage subscription."""

    __slots__ = ("on_subscribe", "on_next", "on_error", "on_complete", "_owner")

    def __init__(self, owner: _StageSubscription) -> None:
        self._owner = owner
        self.on_subscribe = owner.inner_subscribe
        self.on_next = owner.inner_next
        self.on_error = owner.inner_error
        self.on_complete = owner.inner_complete

    def __repr__(self) -> str:
        return f"<{self._owner._name} stage>"


class StagePublisher(PublisherBase):
    """A cold publisher: each subscriber gets its own step and its own upstream subscription."""

    __slots__ = ("_upstream", "_make_step", "_prefetch", "name")

    def __init__(self, upstream: Publisher, make_step: Callable[[], Step], *, name: str,
                 prefetch: int = 64) -> None:
        if upstream is None:
            raise TypeError(f"{name}: upstream publisher is None")
        if prefetch <= 0:
            raise ValueError(f"{name}: prefetch must be > 0, got {prefetch}")
        self._upstream = upstream
        self._make_step = make_step
        self._prefetch = prefetch
        self.name = name

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)  # RS §1.9
        try:
            step = self._make_step()
        except Exception as err:
            from engine.sources import failed
            failed(err).subscribe(subscriber)
            return
        subscription = _StageSubscription(subscriber, step, self._prefetch, self.name)
        subscription.start()
        self._upstream.subscribe(_Inner(subscription))

    def __repr__(self) -> str:
        return f"{self.name}({self._upstream!r})"


def step_operator(make_step: Callable[[], Step], *, name: str,
                  prefetch: int = 64) -> Callable[[Publisher], Publisher]:
    """An operator for ``pipe``: ``Publisher → Publisher`` running a fresh ``make_step()`` per
    subscription. See the module docstring."""
    def operator(upstream: Publisher) -> Publisher:
        return StagePublisher(upstream, make_step, name=name, prefetch=prefetch)

    operator.__name__ = name
    operator.__qualname__ = name
    return operator


def _as_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(values)
