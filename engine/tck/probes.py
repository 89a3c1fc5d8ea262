"""Test probes: a subscriber and a subscription that record every signal and check the protocol.

``ManualSubscriber`` is the kit's subscriber: the test calls ``request``/``cancel`` on it and
then waits for what should follow (``expect_next``, ``expect_complete``, ``expect_error``,
``expect_none``). Every wait is on a condition with a timeout; nothing here sleeps. While it
records, it checks what the publisher does: more ``on_next`` than requested (RS §1.1), signals
that overlap across threads (RS §1.3), a signal before ``on_subscribe`` (RS §1.9), a second
``on_subscribe`` (RS §2.12), anything after a terminal signal (RS §1.7), ``None`` elements
(RS §2.13), and ``request``/``cancel`` that raise (RS §3.15, §3.16). Problems are collected,
not raised in the publisher's thread, and ``check()`` fails the test with all of them.

``ManualSubscription`` is the kit's subscription, handed to a subscriber under test: it records
``request``/``cancel`` calls, flags calls that overlap (RS §2.7) or happen inside ``on_complete``/
``on_error`` (RS §2.3).

``WhiteboxProbe`` receives what a subscriber under test was signalled (the plug-in forwards its
callbacks to it) and holds the *puppet*: how the test makes that subscriber request or cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NamedTuple

from engine.contracts import MAX_DEMAND

__all__ = [
    "DEFAULT_TIMEOUT",
    "NO_SIGNAL_WAIT",
    "Signal",
    "SignalLog",
    "ManualSubscriber",
    "ProbeError",
    "ManualSubscription",
    "WhiteboxProbe",
    "background_loop",
    "stop_loop",
    "stack_depth",
]

#: Seconds a test waits for a signal that must come.
DEFAULT_TIMEOUT = 2.0
#: Seconds a test waits to see that a signal does *not* come. Kept tiny and used sparingly.
NO_SIGNAL_WAIT = 0.02


def _register(probe: SignalLog) -> None:
    from engine.tck.rules import current_session
    with contextlib.suppress(RuntimeError):
        current_session().probes.append(probe)


def stack_depth() -> int:
    """Frames on the calling thread's stack."""
    depth = 0
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


class Signal(NamedTuple):
    kind: str  # "on_next" | "on_error" | "on_complete" (on_subscribe is kept apart)
    value: Any
    thread: int
    time_ns: int


def _describe(signals: list[Signal], limit: int = 8) -> str:
    shown = ", ".join(
        f"{s.kind}({s.value!r})" if s.kind != "on_complete" else "on_complete"
        for s in signals[:limit])
    more = f", … ({len(signals) - limit} more)" if len(signals) > limit else ""
    return f"[{shown}{more}]" if signals else "[]"


class SignalLog:
    """Signals received, in order, and the ``expect_*`` waits over them."""

    def __init__(self, name: str, timeout: float = DEFAULT_TIMEOUT,
                 no_signal_wait: float = NO_SIGNAL_WAIT) -> None:
        self.name = name
        self.timeout = timeout
        self.no_signal_wait = no_signal_wait
        self._cond = threading.Condition()
        self.events: list[Signal] = []
        self._cursor = 0
        self.problems: list[str] = []

    # ------------------------------------------------------------------ recording
    def _append(self, kind: str, value: Any) -> None:
        with self._cond:
            self.events.append(Signal(kind, value, threading.get_ident(), time.monotonic_ns()))
            self._cond.notify_all()

    def problem(self, message: str) -> None:
        with self._cond:
            self.problems.append(message)
            self._cond.notify_all()

    def check(self) -> None:
        """Fail with every protocol problem seen so far."""
        with self._cond:
            problems = list(self.problems)
        if problems:
            raise AssertionError(f"{self.name}: " + "; ".join(problems))

    # ------------------------------------------------------------------ views
    @property
    def items(self) -> list[Any]:
        with self._cond:
            return [s.value for s in self.events if s.kind == "on_next"]

    @property
    def terminal(self) -> Signal | None:
        with self._cond:
            for s in self.events:
                if s.kind != "on_next":
                    return s
        return None

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None,
                   what: str = "condition") -> None:
        """Wait (on the log's condition) until ``predicate()`` holds; fail after ``timeout``."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"{self.name}: {what} not reached within {timeout} s; "
                        f"signals {_describe(self.events)}")
                self._cond.wait(remaining)

    # ------------------------------------------------------------------ expectations
    def _take(self, what: str, timeout: float | None) -> Signal:
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._cursor >= len(self.events):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"{self.name}: expected {what} within {timeout} s, got nothing "
                        f"(so far {_describe(self.events)})")
                self._cond.wait(remaining)
            signal = self.events[self._cursor]
            self._cursor += 1
            return signal

    def expect_next(self, timeout: float | None = None) -> Any:
        """The next signal must be ``on_next``; return its element."""
        signal = self._take("on_next", timeout)
        if signal.kind != "on_next":
            raise AssertionError(f"{self.name}: expected on_next, got {signal.kind}"
                                 f"({signal.value!r})")
        return signal.value

    def expect_nexts(self, count: int, timeout: float | None = None) -> list[Any]:
        return [self.expect_next(timeout) for _ in range(count)]

    def expect_complete(self, timeout: float | None = None) -> None:
        signal = self._take("on_complete", timeout)
        if signal.kind != "on_complete":
            raise AssertionError(f"{self.name}: expected on_complete, got {signal.kind}"
                                 f"({signal.value!r})")

    def expect_error(self, kind: type[BaseException] | tuple[type[BaseException], ...]
                     = BaseException, timeout: float | None = None) -> BaseException:
        signal = self._take("on_error", timeout)
        if signal.kind != "on_error":
            raise AssertionError(f"{self.name}: expected on_error, got {signal.kind}"
                                 f"({signal.value!r})")
        if not isinstance(signal.value, kind):
            raise AssertionError(f"{self.name}: expected on_error({kind}), got "
                                 f"on_error({signal.value!r})")
        return signal.value

    def expect_terminal(self, timeout: float | None = None) -> Signal:
        """Skip elements until a terminal signal; return it."""
        while True:
            signal = self._take("a terminal signal", timeout)
            if signal.kind != "on_next":
                return signal

    def expect_never(self, predicate: Callable[[], bool], what: str,
                     within: float | None = None) -> None:
        """``predicate()`` does not become true within ``within`` seconds (short, bounded)."""
        within = self.no_signal_wait if within is None else within
        deadline = time.monotonic() + within
        with self._cond:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)
        raise AssertionError(f"{self.name}: {what}")

    def expect_none(self, within: float | None = None) -> None:
        """No further signal arrives within ``within`` seconds (a short bounded wait)."""
        within = self.no_signal_wait if within is None else within
        deadline = time.monotonic() + within
        with self._cond:
            while self._cursor >= len(self.events):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)
            extra = self.events[self._cursor:]
        raise AssertionError(f"{self.name}: expected no signal, got {_describe(extra)}")

    def wait_quiet(self, quiet: float | None = None, timeout: float | None = None) -> int:
        """Wait until no signal has arrived for ``quiet`` seconds (bounded by ``timeout``);
        return how many signals were received in total. Fails if the stream never settles."""
        quiet = self.no_signal_wait if quiet is None else quiet
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = len(self.events)
            while True:
                now = time.monotonic()
                if now >= deadline:
                    raise AssertionError(f"{self.name}: signals kept coming for {timeout} s "
                                         f"({len(self.events)} so far)")
                if not self._cond.wait(min(quiet, deadline - now)):
                    if len(self.events) == seen:
                        return seen
                seen = len(self.events)

    def skip_received(self) -> None:
        """Consume everything received so far."""
        with self._cond:
            self._cursor = len(self.events)


class ManualSubscriber(SignalLog):
    """The kit's subscriber: records and checks every signal (see the module docstring).

    ``on_subscribe_hook(probe)`` and ``on_next_hook(probe, item)`` run inside the signal (after
    it is recorded), to request or cancel synchronously (RS §3.2). ``raise_from`` names a
    method (``"on_subscribe"`` or ``"on_next"``) that raises ``ProbeError`` on purpose, to
    check RS §2.13 handling.
    """

    def __init__(self, name: str = "subscriber", *, timeout: float = DEFAULT_TIMEOUT,
                 no_signal_wait: float = NO_SIGNAL_WAIT,
                 on_subscribe_hook: Callable[[ManualSubscriber], None] | None = None,
                 on_next_hook: Callable[[ManualSubscriber, Any], None] | None = None,
                 raise_from: str | None = None, measure_stack: bool = False,
                 register: bool = True) -> None:
        super().__init__(name, timeout, no_signal_wait)
        self.subscription: Any = None
        self.subscribe_count = 0
        self.requested = 0
        self.received = 0
        self.cancelled = False
        self.terminated = False
        self.max_nesting = 0
        self.stack_depths: list[int] = []
        self._active: dict[int, int] = {}
        self._calls = threading.RLock()  # request/cancel are serial (RS §2.7)
        self.on_subscribe_hook = on_subscribe_hook
        self.on_next_hook = on_next_hook
        self.raise_from = raise_from
        self.measure_stack = measure_stack
        self.subscribe_threads: list[int] = []
        if register:  # the running kit test checks it at the end
            _register(self)

    # ------------------------------------------------------------------ entry / exit
    def _enter(self, kind: str) -> None:
        me = threading.get_ident()
        with self._cond:
            others = [t for t, n in self._active.items() if n and t != me]
            if others:
                self.problems.append(f"RS §1.3: {kind} overlapped a signal running on "
                                     f"another thread")
            nesting = self._active.get(me, 0) + 1
            self._active[me] = nesting
            if nesting > self.max_nesting:
                self.max_nesting = nesting
            if kind != "on_subscribe":
                if self.subscribe_count == 0:
                    self.problems.append(f"RS §1.9: {kind} before on_subscribe")
                if self.terminated:
                    self.problems.append(f"RS §1.7: {kind} after a terminal signal")

    def _exit(self) -> None:
        me = threading.get_ident()
        with self._cond:
            nesting = self._active[me] - 1
            if nesting:
                self._active[me] = nesting
            else:
                del self._active[me]

    # ------------------------------------------------------------------ Subscriber
    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            self.problem("RS §2.13: on_subscribe(None)")
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        self._enter("on_subscribe")
        try:
            with self._cond:
                self.subscribe_count += 1
                self.subscribe_threads.append(threading.get_ident())
                if self.subscribe_count > 1:
                    self.problems.append("RS §2.12: on_subscribe called more than once")
                    duplicate = True
                else:
                    duplicate = False
                    self.subscription = subscription
                self._cond.notify_all()
            if duplicate:
                subscription.cancel()  # RS §2.5
                return
            if self.raise_from == "on_subscribe":
                raise ProbeError("on_subscribe raised on purpose")
            if self.on_subscribe_hook is not None:
                self.on_subscribe_hook(self)
        finally:
            self._exit()

    def on_next(self, item: Any) -> None:
        if item is None:
            self.problem("RS §2.13: on_next(None)")
            raise TypeError("RS §2.13: on_next() requires an element, got None")
        self._enter("on_next")
        try:
            if self.measure_stack:
                self.stack_depths.append(stack_depth())
            with self._cond:
                self.received += 1
                if self.received > self.requested:
                    self.problems.append(f"RS §1.1: element {self.received} delivered but "
                                         f"only {self.requested} were requested")
            self._append("on_next", item)
            if self.raise_from == "on_next":
                raise ProbeError(f"on_next({item!r}) raised on purpose")
            if self.on_next_hook is not None:
                self.on_next_hook(self, item)
        finally:
            self._exit()

    def on_error(self, error: BaseException) -> None:
        if error is None:
            self.problem("RS §2.13: on_error(None)")
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        self._enter("on_error")
        try:
            with self._cond:
                self.terminated = True
            self._append("on_error", error)
        finally:
            self._exit()

    def on_complete(self) -> None:
        self._enter("on_complete")
        try:
            with self._cond:
                self.terminated = True
            self._append("on_complete", None)
        finally:
            self._exit()

    # ------------------------------------------------------------------ Subscription calls
    def expect_subscribe(self, timeout: float | None = None) -> Any:
        self.wait_until(lambda: self.subscribe_count > 0, timeout, "on_subscribe")
        return self.subscription

    def request(self, n: int) -> None:
        """Request ``n`` through the subscription; a positive ``n`` is counted first."""
        subscription = self.expect_subscribe()
        with self._calls:
            if n.__class__ is int and n > 0:
                with self._cond:
                    self.requested = min(self.requested + n, MAX_DEMAND)
            try:
                result = subscription.request(n)
            except Exception as err:
                self.problem(f"RS §3.16: request({n!r}) raised {err!r}")
                return
            if result is not None:
                self.problem(f"request({n!r}) returned {result!r}, not None")

    def cancel(self) -> None:
        subscription = self.expect_subscribe()
        with self._calls:
            self.cancelled = True
            try:
                subscription.cancel()
            except Exception as err:
                self.problem(f"RS §3.15: cancel() raised {err!r}")

    def __repr__(self) -> str:
        return f"<ManualSubscriber {self.name}>"


class ProbeError(RuntimeError):
    """Raised on purpose by a probe to exercise RS §2.13 handling."""


class ManualSubscription(SignalLog):
    """The kit's subscription, given to a subscriber under test; records ``request``/``cancel``.

    Calls are kept as signals ``("request", n)`` and ``("cancel", None)`` in ``events``.
    """

    def __init__(self, name: str = "subscription", *, timeout: float = DEFAULT_TIMEOUT,
                 no_signal_wait: float = NO_SIGNAL_WAIT) -> None:
        super().__init__(name, timeout, no_signal_wait)
        self.requested = 0
        self.cancelled = False
        self._active: dict[int, int] = {}
        self._forbidden: str | None = None
        _register(self)

    def _call(self, kind: str, value: Any) -> None:
        me = threading.get_ident()
        with self._cond:
            if any(n and t != me for t, n in self._active.items()):
                self.problems.append(f"RS §2.7: {kind} overlapped another call on the "
                                     f"subscription")
            if self._forbidden is not None:
                self.problems.append(f"RS §2.3: {kind} called inside {self._forbidden}")
            self._active[me] = self._active.get(me, 0) + 1
            if kind == "request":
                if value.__class__ is int and value > 0:
                    self.requested = min(self.requested + value, MAX_DEMAND)
                else:
                    self.problems.append(f"RS §3.9: the subscriber requested {value!r}")
            else:
                self.cancelled = True
            self.events.append(Signal(kind, value, me, time.monotonic_ns()))
            self._cond.notify_all()
        with self._cond:
            self._active[me] -= 1

    def request(self, n: int) -> None:
        self._call("request", n)

    def cancel(self) -> None:
        self._call("cancel", None)

    @contextlib.contextmanager
    def forbid_calls(self, inside: str) -> Iterator[None]:
        """Any call while the block runs is an RS §2.3 problem."""
        with self._cond:
            self._forbidden = inside
        try:
            yield
        finally:
            with self._cond:
                self._forbidden = None

    def expect_demand(self, at_least: int = 1, timeout: float | None = None) -> int:
        """Wait until the total requested is at least ``at_least``; return it."""
        self.wait_until(lambda: self.requested >= at_least, timeout,
                        f"a total demand of {at_least}")
        return self.requested

    def expect_cancel(self, timeout: float | None = None) -> None:
        self.wait_until(lambda: self.cancelled, timeout, "cancel()")

    def expect_no_calls(self, within: float | None = None) -> None:
        self.skip_received()
        self.expect_none(within)


class WhiteboxProbe(SignalLog):
    """What a subscriber under test received, forwarded by the plug-in, and its puppet.

    The plug-in wires the subscriber's callbacks to ``on_next``/``on_error``/``on_complete``
    here and calls ``puppet(cancel=…, request=…)`` to let the test make the subscriber cancel
    (required) and request (optional: ``None`` for a subscriber that only requests on its own).
    """

    def __init__(self, name: str = "whitebox", *, timeout: float = DEFAULT_TIMEOUT,
                 no_signal_wait: float = NO_SIGNAL_WAIT) -> None:
        super().__init__(name, timeout, no_signal_wait)
        self._cancel: Callable[[], None] | None = None
        self._request: Callable[[int], None] | None = None
        self._terminated = False
        _register(self)

    def puppet(self, *, cancel: Callable[[], None],
               request: Callable[[int], None] | None = None) -> None:
        self._cancel = cancel
        self._request = request

    def on_next(self, item: Any) -> None:
        if self._terminated:
            self.problem(f"on_next({item!r}) forwarded after a terminal signal")
        self._append("on_next", item)

    def on_error(self, error: BaseException) -> None:
        self._terminated = True
        self._append("on_error", error)

    def on_complete(self) -> None:
        self._terminated = True
        self._append("on_complete", None)

    # ---------------------------------------------------------------- driving the subscriber
    @property
    def can_request(self) -> bool:
        return self._request is not None

    def trigger_request(self, n: int) -> None:
        """Make the subscriber request ``n`` (a NOP for one that only requests on its own)."""
        if self._request is not None:
            self._request(n)

    def trigger_cancel(self) -> None:
        if self._cancel is None:
            raise AssertionError("the plug-in did not give the whitebox probe a cancel puppet")
        self._cancel()


# ------------------------------------------------------------------------- a background loop
_loop_threads: dict[int, threading.Thread] = {}


def background_loop(name: str = "tck-loop") -> asyncio.AbstractEventLoop:
    """An asyncio loop running forever on a daemon thread (for plug-ins and tests)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        loop.run_forever()

    thread = threading.Thread(target=run, name=name, daemon=True)
    _loop_threads[id(loop)] = thread
    thread.start()
    if not started.wait(DEFAULT_TIMEOUT):
        raise RuntimeError("background event loop did not start")
    return loop


def stop_loop(loop: asyncio.AbstractEventLoop, *, close: bool = True,
              timeout: float = DEFAULT_TIMEOUT) -> None:
    """Stop a ``background_loop`` and (by default) close it."""
    stopped = threading.Event()

    def halt() -> None:
        loop.stop()
        stopped.set()

    loop.call_soon_threadsafe(halt)
    if not stopped.wait(timeout):
        raise RuntimeError("background event loop did not stop")
    thread = _loop_threads.pop(id(loop), None)
    if thread is not None:
        thread.join(timeout)  # run_forever has returned once the thread ends
    if close:
        loop.close()
