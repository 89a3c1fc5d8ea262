"""Clocks that operators are given instead of reading the time themselves (design.md §6.6).

A clock has two methods: ``now() -> int`` (nanoseconds, on its own scale: only differences
count) and ``call_at(t, fn)``, which calls ``fn()`` once, on some thread, when ``now()``
reaches ``t`` (at once if it already has). ``WallClock`` is the machine's monotonic clock,
with a timer thread per pending call; ``VirtualClock`` moves only when told to
(``advance``, ``set``), and runs what came due on the thread that moved it: tests and
replays measure idleness on it and get the same result every run.

>>> clock = VirtualClock()
>>> fired = []
>>> clock.call_at(5, lambda: fired.append(clock.now()))
>>> clock.advance(3); fired
[]
>>> clock.advance(3); fired
[6]
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "WallClock", "VirtualClock", "WALL"]


@runtime_checkable
class Clock(Protocol):
    """What an operator that measures elapsed time is given."""

    def now(self) -> int: ...

    def call_at(self, t: int, fn: Callable[[], None]) -> None: ...


class WallClock:
    """The machine's monotonic clock (``time.monotonic_ns``); ``call_at`` starts a daemon
    timer thread for each call, one already due included: a caller may hold a lock that
    ``fn`` takes (the union schedules its idleness alarm under its intake lock), and on this
    clock time can pass a due time between the caller's reading and the call."""

    __slots__ = ()

    def now(self) -> int:
        return time.monotonic_ns()

    def call_at(self, t: int, fn: Callable[[], None]) -> None:
        wait = (t - time.monotonic_ns()) / 1e9
        timer = threading.Timer(max(wait, 0.0), fn)  # never on the caller's stack
        timer.daemon = True
        timer.start()

    def __repr__(self) -> str:
        return "WallClock()"


#: the shared wall clock (it has no state)
WALL = WallClock()


class VirtualClock:
    """A clock that stands still until ``advance(dt)`` or ``set(t)`` moves it; what came due
    runs then, in order of due time (then of scheduling), on the caller's thread, outside
    the clock's lock. Pending calls: O(those scheduled and not yet due)."""

    __slots__ = ("_now", "_due", "_order", "_lock")

    def __init__(self, start: int = 0) -> None:
        self._now = start
        self._due: list[tuple[int, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()

    def now(self) -> int:
        return self._now

    def call_at(self, t: int, fn: Callable[[], None]) -> None:
        with self._lock:
            if t > self._now:
                heapq.heappush(self._due, (t, next(self._order), fn))
                return
        fn()

    def advance(self, dt: int) -> None:
        """Move ``dt`` (>= 0) forward and run what came due."""
        if dt < 0:
            raise ValueError(f"VirtualClock.advance: dt must be >= 0, got {dt}")
        self.set(self._now + dt)

    def set(self, t: int) -> None:
        """Move to ``t`` (never back) and run what came due."""
        with self._lock:
            if t < self._now:
                raise ValueError(f"VirtualClock.set: {t} is before now ({self._now}); "
                                 "a clock never goes back")
            self._now = t
        while True:
            with self._lock:
                if not self._due or self._due[0][0] > self._now:
                    return
                _, _, fn = heapq.heappop(self._due)
            fn()

    @property
    def pending(self) -> int:
        """Calls scheduled and not yet due."""
        return len(self._due)

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now})"
