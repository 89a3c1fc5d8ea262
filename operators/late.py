"""The late side output: every dropped or adjusted event as a ``LateRecord`` (TS §3.3).

A ``LateOutput`` is a hot publisher with a bounded buffer. Records wait in it (even with no
subscriber) until taken; when it is full, the newest record is not kept but *counted* in
``overflow`` — nothing disappears without a trace. One subscriber at a time; a subscriber that
arrives after the stream ended gets what is left, then the terminal signal.

Memory: O(``capacity``).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from collections.abc import Callable
from itertools import starmap
from typing import Any

from engine.errors import ClosedError
from engine.event import LateRecord
from engine.executors import INLINE
from engine.policy import LateEntry
from engine.sinks import PublisherBase
from engine.sources import failed
from engine.subscription import BufferedSubscription, SubscriptionBase, check_subscriber

__all__ = ["LateOutput", "LateStats"]


@dataclass(frozen=True, slots=True)
class LateStats:
    """The late side output's accounting (TS §3.3: ``records = kept + overflow``)."""

    records: int    # records produced in all
    buffered: int   # waiting now
    peak: int       # most ever waiting
    capacity: int   # the bound
    overflow: int   # records not kept because the buffer was full (counted, TS §3.3)


class _LateSubscription(BufferedSubscription):
    """Delivers from the output's own buffer, which outlives any one subscriber."""

    __slots__ = ("_on_finish_hook",)

    def __init__(self, subscriber: Any, buffer: deque[LateRecord], capacity: int,
                 on_finish: Callable[[_LateSubscription], None]) -> None:
        super().__init__(subscriber, capacity, INLINE)
        self._buffer = buffer  # the output's: records wait there with or without a subscriber
        self._on_finish_hook = on_finish

    def _release(self) -> None:
        SubscriptionBase._release(self)  # keep the records for the next subscriber

    def _on_finish(self, cancelled: bool) -> None:
        self._on_finish_hook(self)


class LateOutput(PublisherBase):
    """A bounded, hot publisher of ``LateRecord`` (see the module docstring)."""

    def __init__(self, capacity: int = 10_000, *, name: str = "late") -> None:
        if capacity <= 0:
            raise ValueError(f"{name}: capacity must be > 0, got {capacity}")
        self.capacity = capacity
        self.name = name
        self._buffer: deque[LateRecord] = deque()
        self._lock = threading.Lock()
        self._subscription: _LateSubscription | None = None
        self._records = 0
        self._peak = 0
        self._overflow = 0
        self._error: BaseException | None = None
        self._completed = False

    def push(self, record: LateRecord) -> None:
        """Add a record (any thread); counted in ``overflow`` when the buffer is full."""
        lock = self._lock
        lock.acquire()  # not ``with``: this runs once per late event, and costs half as much
        self._records += 1
        buffer = self._buffer
        if len(buffer) >= self.capacity:
            self._overflow += 1
            lock.release()
            return
        buffer.append(record)
        if len(buffer) > self._peak:
            self._peak = len(buffer)
        subscription = self._subscription
        lock.release()
        if subscription is not None:
            subscription.signal()

    def push_many(self, records: list[LateRecord]) -> None:
        """Add records in order under one lock and one wake-up; what does not fit is
        counted in ``overflow``, as with ``push``."""
        self._push(records, None)

    def push_entries(self, entries: list[LateEntry]) -> None:
        """``push_many`` for late entries, the records' fields (the union's batch path, from
        ``step_many``): a ``LateRecord`` is built only for an entry that fits in the buffer;
        the rest are counted in ``overflow`` without ever being built."""
        self._push(entries, LateRecord)

    def _push(self, items: list, build: Any) -> None:
        if not items:
            return
        with self._lock:
            self._records += len(items)
            room = self.capacity - len(self._buffer)
            if room < len(items):
                self._overflow += len(items) - max(room, 0)
                items = items[:max(room, 0)]
            self._buffer.extend(items if build is None else starmap(build, items))
            if len(self._buffer) > self._peak:
                self._peak = len(self._buffer)
            subscription = self._subscription
        if subscription is not None and items:
            subscription.signal()

    def complete(self) -> None:
        """No more records: a subscriber completes once it has taken what is buffered."""
        with self._lock:
            self._completed = True
            subscription = self._subscription
        if subscription is not None:
            subscription.complete()

    def error(self, error: BaseException) -> None:
        """The producer failed: a subscriber gets ``error`` at once (RS §4.2)."""
        with self._lock:
            self._error = error
            subscription = self._subscription
        if subscription is not None:
            subscription.fail(error)

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)  # RS §1.9
        with self._lock:
            busy = self._subscription is not None
            if not busy:
                subscription = _LateSubscription(subscriber, self._buffer, self.capacity,
                                                 self._detach)
                self._subscription = subscription
                if self._error is not None:
                    subscription.finish(self._error)
                elif self._completed:
                    subscription.finish()
        if busy:
            failed(ClosedError(f"{self.name}: already has a subscriber; one at a time"))\
                .subscribe(subscriber)
            return
        subscription.start()

    def drain(self) -> list[LateRecord]:
        """Take every buffered record at once (for callers that poll instead of subscribing)."""
        with self._lock:
            records = list(self._buffer)
            self._buffer.clear()
        return records

    def snapshot(self) -> tuple[list[LateRecord], int, int, int]:
        """What a checkpoint keeps (TS §8.1): the records waiting, and the counts of
        records, peak and overflow."""
        with self._lock:
            return list(self._buffer), self._records, self._peak, self._overflow

    def load(self, records: list[LateRecord], total: int, peak: int, overflow: int) -> None:
        """Take back what ``snapshot`` returned (a restored union's, before it runs)."""
        if len(records) > self.capacity:
            raise ValueError(f"{self.name}: {len(records)} records restored into a buffer of "
                             f"{self.capacity}; expected a capacity at least as large")
        with self._lock:
            self._buffer.extend(records)
            self._records, self._peak, self._overflow = total, peak, overflow

    def stats(self) -> LateStats:
        with self._lock:
            return LateStats(self._records, len(self._buffer), self._peak, self.capacity,
                             self._overflow)

    def _detach(self, subscription: _LateSubscription) -> None:
        with self._lock:
            if self._subscription is subscription:
                self._subscription = None

    def __repr__(self) -> str:
        return f"LateOutput({self.name!r}, capacity={self.capacity})"
