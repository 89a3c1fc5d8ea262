"""``PublisherVerification``: the publisher rules, run on any publisher a plug-in creates.

Plug in by subclassing (pytest collects ``Test*`` subclasses)::

    class TestRange(PublisherVerification):
        def create_publisher(self, elements):      # exactly `elements` elements, then complete
            return from_iterable(range(elements))
        def create_failed_publisher(self):         # signals on_error; None if not applicable
            return failed(RuntimeError("boom"))

Class attributes tune the kit: ``max_elements`` (``None``: any number, even 2**63-1, lazily),
``hot`` (a late subscriber sees a suffix of the stream, not all of it), ``multiple_subscribers``
(RS §1.11), ``reports_violations`` (faults of a subscriber are reported through
``engine.violations``), ``timeout`` and ``no_signal_wait`` (seconds).
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any

from engine.contracts import MAX_DEMAND
from engine.tck.probes import DEFAULT_TIMEOUT, NO_SIGNAL_WAIT, ManualSubscriber
from engine.tck.rules import current_session, rule, skip, untested

__all__ = ["PublisherVerification"]


def _run_threads(count: int, target: Any, timeout: float) -> None:
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout)
            target(index)
        except BaseException as err:  # reported below, on the test's thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        if thread.is_alive():
            raise AssertionError(f"a helper thread did not finish within {timeout} s")
    if errors:
        raise errors[0]


class PublisherVerification:
    """Publisher rules 1.x, 2.12, 2.13 (the caller's side) and 3.x. See the module docstring."""

    max_elements: int | None = None
    hot: bool = False
    multiple_subscribers: bool = True
    reports_violations: bool = True
    #: Deepest nesting of signals on one thread that RS §3.3 allows here (1 = no nesting).
    max_recursion_depth: int = 1
    #: The error type ``request(n <= 0)`` must signal (RS §3.9), and text its message must hold.
    illegal_request_error: type[BaseException] = ValueError
    illegal_request_message: str | None = "3.9"
    timeout: float = DEFAULT_TIMEOUT
    no_signal_wait: float = NO_SIGNAL_WAIT

    # ---------------------------------------------------------------- the plug-in's part
    def create_publisher(self, elements: int) -> Any:
        """A publisher of exactly ``elements`` elements followed by ``on_complete`` (or None
        when this component has no such publisher)."""
        raise NotImplementedError

    def create_failed_publisher(self) -> Any:
        """A publisher that signals ``on_error`` (or None if the component cannot fail)."""
        return None

    # ---------------------------------------------------------------- helpers
    def _publisher(self, elements: int) -> Any:
        if self.max_elements is not None and elements > self.max_elements:
            skip(f"needs a publisher of {elements} elements; this one produces at most "
                 f"{self.max_elements}")
        publisher = self.create_publisher(elements)
        if publisher is None:
            skip("create_publisher() returned None: not applicable to this component")
        return publisher

    def _unbounded(self, at_least: int) -> tuple[Any, int]:
        """The largest publisher this component offers (2**63-1 elements when unbounded, built
        lazily), and its size; skips when it cannot reach ``at_least`` elements."""
        size = MAX_DEMAND if self.max_elements is None else self.max_elements
        if size < at_least:
            skip(f"needs a publisher of at least {at_least} elements; this one produces at "
                 f"most {size}")
        return self._publisher(size), size

    def _failed_publisher(self) -> Any:
        publisher = self.create_failed_publisher()
        if publisher is None:
            skip("create_failed_publisher() returned None: this component cannot fail")
        return publisher

    def _probe(self, name: str = "subscriber", **options: Any) -> ManualSubscriber:
        return ManualSubscriber(name, timeout=self.timeout, no_signal_wait=self.no_signal_wait,
                                **options)

    def _subscribe(self, publisher: Any, probe: ManualSubscriber | None = None,
                   **options: Any) -> ManualSubscriber:
        probe = probe if probe is not None else self._probe(**options)
        result = publisher.subscribe(probe)  # RS §1.9: returns normally
        assert result is None, f"subscribe() returned {result!r}, expected None"
        probe.expect_subscribe()
        return probe

    # ================================================================ RS §1.1, §1.2, §1.3
    @rule("1.1")
    def test_rs_1_1_never_more_than_requested(self) -> None:
        probe = self._subscribe(self._publisher(10))
        probe.expect_none()  # nothing before a request
        probe.request(1)
        assert probe.expect_next() is not None
        probe.request(3)
        probe.expect_nexts(3)
        probe.expect_none()  # 4 requested, 4 received; the probe flags any extra (RS §1.1)
        probe.cancel()

    @rule("1.1", "1.3")
    def test_rs_1_1_concurrent_requests_never_exceed_demand(self) -> None:
        elements = 200
        probe = self._subscribe(self._publisher(elements))

        def requester(index: int) -> None:
            for _ in range(elements // 4):
                probe.request(1)

        _run_threads(4, requester, self.timeout)
        probe.expect_nexts(elements)
        probe.expect_complete()

    @rule("1.2", "1.5")
    def test_rs_1_2_may_signal_fewer_than_requested_and_complete(self) -> None:
        probe = self._subscribe(self._publisher(3))
        probe.request(10)
        probe.expect_nexts(3)
        probe.expect_complete()
        probe.expect_none()

    @rule("1.3")
    def test_rs_1_3_signals_are_serial_under_concurrent_demand(self) -> None:
        elements = 300
        probe = self._subscribe(self._publisher(elements),
                                on_next_hook=lambda p, item: p.request(1)
                                if p.received % 3 == 0 else None)

        def requester(index: int) -> None:
            for _ in range(40):
                probe.request(1)

        _run_threads(3, requester, self.timeout)
        probe.request(elements)  # more than enough: the rest flows, then completion
        probe.expect_nexts(elements)
        probe.expect_complete()
        assert probe.max_nesting <= self.max_recursion_depth

    # ================================================================ RS §1.4 – §1.8
    @rule("1.4", "2.10")
    def test_rs_1_4_failed_publisher_signals_error_without_request(self) -> None:
        probe = self._subscribe(self._failed_publisher())
        probe.expect_error(Exception)
        probe.expect_none()

    @rule("1.4")
    def test_rs_1_4_failed_publisher_signals_error_after_request(self) -> None:
        probe = self._subscribe(self._failed_publisher())
        probe.request(1)
        probe.expect_terminal()
        assert probe.terminal is not None and probe.terminal.kind == "on_error", \
            f"expected on_error, got {probe.terminal}"

    @rule("1.5")
    def test_rs_1_5_produces_exactly_its_elements_then_completes(self) -> None:
        for size in (1, 3):
            probe = self._subscribe(self._publisher(size), name=f"subscriber-{size}")
            probe.request(size)
            probe.expect_nexts(size)
            probe.request(1)  # completion may wait for the next request; no more elements
            probe.expect_complete()

    @rule("1.5", "2.9")
    def test_rs_1_5_empty_stream_completes_without_request(self) -> None:
        probe = self._subscribe(self._publisher(0))
        probe.expect_complete()
        probe.expect_none()

    @rule("1.6")
    def test_rs_1_6_after_terminal_request_and_cancel_are_nops(self) -> None:
        probe = self._subscribe(self._publisher(1))
        probe.request(5)
        probe.expect_next()
        probe.expect_complete()
        probe.subscription.request(5)  # the subscription is considered cancelled (RS §1.6)
        probe.subscription.cancel()
        probe.expect_none()

    @rule("1.7")
    def test_rs_1_7_nothing_after_on_complete(self) -> None:
        probe = self._subscribe(self._publisher(3))
        probe.request(MAX_DEMAND)
        probe.expect_nexts(3)
        probe.expect_complete()
        probe.expect_none()

    @rule("1.7")
    def test_rs_1_7_nothing_after_on_error(self) -> None:
        probe = self._subscribe(self._failed_publisher())
        probe.request(10)
        probe.expect_terminal()
        probe.expect_none()

    @rule("1.8", "3.12")
    def test_rs_1_8_cancel_from_on_next_stops_signals(self) -> None:
        publisher, size = self._unbounded(40)
        probe = self._subscribe(publisher, on_next_hook=lambda p, item: p.cancel()
                                if p.received == 10 else None)
        probe.request(MAX_DEMAND)
        probe.expect_nexts(10)
        total = probe.wait_quiet()  # RS §2.8: a few more may come; then they must stop
        assert total < size, "the publisher delivered everything despite cancel"
        assert probe.terminal is None, \
            f"a cancelled subscription was terminated with {probe.terminal}"

    @rule("3.12", "1.8")
    def test_rs_3_12_cancel_from_another_thread_stops_signals(self) -> None:
        publisher, size = self._unbounded(20)
        probe = self._subscribe(publisher)
        probe.request(5)
        probe.expect_nexts(5)
        probe.cancel()
        probe.request(10)
        total = probe.wait_quiet()
        assert total == 5, f"{total - 5} signal(s) after cancel with no demand pending"

    # ================================================================ RS §1.9 – §1.11, §2.12
    @rule("1.9")
    def test_rs_1_9_subscribe_none_raises_type_error(self) -> None:
        publisher = self.create_publisher(0)
        if publisher is None:
            publisher = self._failed_publisher()
        try:
            publisher.subscribe(None)
        except TypeError:
            return
        raise AssertionError("subscribe(None) must raise TypeError at once (RS §1.9)")

    @rule("1.9", "2.13")
    def test_rs_1_9_subscribe_non_subscriber_raises_type_error(self) -> None:
        # What a user passes by mistake: a function, a lambda, a string, an object lacking a
        # signal method, one whose on_next is not callable, the class instead of an instance.
        # Python's counterpart of the JVM's type check: refused at once, as None is — not
        # accepted and then broken on its first signal (RS §2.13 reported in its place).
        class NoComplete:
            def on_subscribe(self, subscription: Any) -> None: ...
            def on_next(self, item: Any) -> None: ...
            def on_error(self, error: BaseException) -> None: ...

        class DataNext(NoComplete):
            on_next = 1  # type: ignore[assignment]

            def on_complete(self) -> None: ...

        elements = 0 if self.max_elements == 0 else 1
        publisher = self.create_publisher(elements)
        failing = publisher is None
        if failing:
            publisher = self._failed_publisher()
        for wrong in (print, lambda item: None, "subscriber", NoComplete(), DataNext(),
                      ManualSubscriber):
            try:
                publisher.subscribe(wrong)
            except TypeError:
                continue
            raise AssertionError(f"subscribe({wrong!r}) must raise TypeError at once: it is "
                                 "not a subscriber (RS §1.9)")
        # nothing was taken or scheduled in their place: a subscriber is served as usual
        probe = self._subscribe(publisher)
        probe.request(1)
        if failing:
            probe.expect_error(Exception)
        elif not self.hot:
            probe.expect_nexts(elements)
            probe.expect_complete()
        probe.cancel()

    @rule("1.9", "2.12")
    def test_rs_1_9_on_subscribe_first_and_once(self) -> None:
        probe = self._subscribe(self._publisher(1))
        probe.request(1)
        probe.expect_next()
        probe.request(1)
        probe.expect_complete()
        assert probe.subscribe_count == 1  # the probe flags signals before on_subscribe too

    @rule("1.9", "2.12")
    def test_rs_1_9_failure_is_on_error_after_on_subscribe(self) -> None:
        probe = self._probe()
        self._failed_publisher().subscribe(probe)  # must not raise: failure goes to on_error
        probe.expect_subscribe()
        probe.request(1)
        probe.expect_error(Exception)
        assert probe.subscribe_count == 1

    @rule("1.10")
    def test_rs_1_10_subscribe_many_times_with_different_subscribers(self) -> None:
        publisher = self._publisher(3)
        probes = [self._subscribe(publisher, name=f"subscriber-{i}") for i in range(3)]
        for probe in probes:
            probe.request(1)
        for index, probe in enumerate(probes):
            if not self.multiple_subscribers and index > 0:
                # A single-subscriber publisher may refuse the others, but only the legal way:
                # on_subscribe first, then on_error (RS §1.9)
                probe.expect_error(Exception)
                continue
            if not self.hot:
                probe.expect_next()
            probe.cancel()

    @rule("1.11")
    def test_rs_1_11_multiple_subscribers_see_the_same_sequence(self) -> None:
        if not self.multiple_subscribers:
            skip("this publisher supports a single subscriber (RS §1.11 makes that optional)")
        publisher = self._publisher(5)
        first = self._subscribe(publisher, name="first")
        second = self._subscribe(publisher, name="second")
        for _ in range(5):  # one by one, alternating
            first.request(1)
            second.request(1)
        first.expect_terminal()
        second.expect_terminal()
        a, b = first.items, second.items
        if self.hot:  # a later subscriber sees a contiguous tail of the stream
            assert b == a[len(a) - len(b):], f"{b} is not a tail of {a}"
        else:
            assert a == b and len(a) == 5, f"subscribers saw {a} and {b}"

    @rule("1.11")
    def test_rs_1_11_multiple_subscribers_requesting_upfront(self) -> None:
        if not self.multiple_subscribers:
            skip("this publisher supports a single subscriber (RS §1.11 makes that optional)")
        publisher = self._publisher(5)
        probes = [self._subscribe(publisher, name=f"subscriber-{i}") for i in range(3)]
        for probe in probes:
            probe.request(10)
        for probe in probes:
            probe.expect_terminal()
            assert probe.terminal is not None and probe.terminal.kind == "on_complete"
        if not self.hot:
            assert probes[0].items == probes[1].items == probes[2].items

    # ================================================================ RS §2.13 (caller's side)
    @rule("2.13")
    def test_rs_2_13_subscriber_raising_from_on_next_is_cancelled(self) -> None:
        session = current_session()
        session.allow("RS §2.13")
        probe = self._subscribe(self._publisher(5), raise_from="on_next")
        probe.request(5)  # may run on_next synchronously: must still return normally
        probe.expect_next()
        probe.wait_quiet()
        assert probe.received == 1 and probe.terminal is None, \
            f"after on_next raised, the subscriber still got {probe.events[1:]}"
        if self.reports_violations:
            session.wait_violation("RS §2.13", self.timeout)

    @rule("2.13")
    def test_rs_2_13_subscriber_raising_from_on_subscribe_is_cancelled(self) -> None:
        session = current_session()
        session.allow("RS §2.13")
        probe = self._probe(raise_from="on_subscribe")
        self._publisher(0).subscribe(probe)  # must return normally
        probe.expect_subscribe()
        probe.wait_quiet()
        assert not probe.events, f"signals after on_subscribe raised: {probe.events}"
        if self.reports_violations:
            session.wait_violation("RS §2.13", self.timeout)

    # ================================================================ RS §3.2 – §3.8
    @rule("3.2")
    def test_rs_3_2_request_from_on_subscribe_and_on_next(self) -> None:
        probe = self._probe(on_subscribe_hook=lambda p: p.request(1),
                            on_next_hook=lambda p, item: p.request(1))
        self._subscribe(self._publisher(10), probe)
        probe.expect_nexts(10)
        probe.expect_complete()

    @rule("3.3")
    def test_rs_3_3_recursion_between_request_and_on_next_is_bounded(self) -> None:
        elements = 1000 if self.max_elements is None else min(1000, self.max_elements)
        if elements < 10:
            skip(f"needs a publisher of at least 10 elements; this one produces at most "
                 f"{elements}")
        probe = self._probe(on_subscribe_hook=lambda p: p.request(1),
                            on_next_hook=lambda p, item: p.request(1), measure_stack=True)
        self._subscribe(self._publisher(elements), probe)
        probe.expect_nexts(elements)
        probe.expect_complete()
        assert probe.max_nesting <= self.max_recursion_depth, \
            f"on_next nested {probe.max_nesting} deep on one thread (RS §3.3)"
        spread = max(probe.stack_depths) - min(probe.stack_depths)
        assert spread <= 64, f"the stack grew by {spread} frames over {elements} elements"

    @rule("3.5", "3.15")
    def test_rs_3_5_cancel_is_idempotent_and_thread_safe(self) -> None:
        publisher, _ = self._unbounded(10)
        probe = self._subscribe(publisher)
        probe.request(2)
        probe.expect_nexts(2)
        subscription = probe.subscription

        def cancel_twice(index: int) -> None:
            assert subscription.cancel() is None  # RS §3.15: returns normally
            assert subscription.cancel() is None

        _run_threads(4, cancel_twice, self.timeout)
        probe.request(5)
        probe.expect_none()

    @rule("3.6")
    def test_rs_3_6_request_after_cancel_is_nop(self) -> None:
        probe = self._subscribe(self._publisher(10))
        probe.request(1)
        probe.expect_next()
        probe.cancel()
        probe.request(10)
        probe.expect_none()

    @rule("3.7", "3.15")
    def test_rs_3_7_cancel_after_cancel_is_nop(self) -> None:
        probe = self._subscribe(self._publisher(10))
        probe.cancel()
        probe.cancel()
        probe.cancel()
        probe.request(1)
        probe.expect_none()

    @rule("3.8")
    def test_rs_3_8_requests_add_up(self) -> None:
        probe = self._subscribe(self._publisher(10))
        probe.request(1)
        probe.request(2)
        probe.request(3)
        probe.expect_nexts(6)
        probe.expect_none()
        probe.request(4)
        probe.expect_nexts(4)
        probe.request(1)
        probe.expect_complete()

    # ================================================================ RS §3.9
    def _illegal_request(self, n: int) -> None:
        probe = self._subscribe(self._publisher(10))
        probe.request(n)  # the probe flags a raising request (RS §3.16)
        error = probe.expect_error(self.illegal_request_error)
        if self.illegal_request_message is not None:
            assert self.illegal_request_message in str(error), \
                f"the error {error!r} does not cite {self.illegal_request_message!r}"
        probe.request(1)
        probe.expect_none()

    @rule("3.9", "3.16")
    def test_rs_3_9_request_zero_signals_error(self) -> None:
        self._illegal_request(0)

    @rule("3.9", "3.16")
    def test_rs_3_9_request_negative_signals_error(self) -> None:
        self._illegal_request(-1)

    @rule("3.9")
    def test_rs_3_9_illegal_request_after_legal_demand_signals_error(self) -> None:
        probe = self._subscribe(self._publisher(10))
        probe.request(2)
        probe.expect_nexts(2)
        probe.request(-(2**63))
        probe.expect_error(self.illegal_request_error)

    # ================================================================ RS §3.13 – §3.17
    @rule("3.13")
    def test_rs_3_13_cancel_drops_the_subscriber(self) -> None:
        publisher, _ = self._unbounded(10)
        gone = threading.Event()
        probe = ManualSubscriber("dropped", timeout=self.timeout, register=False)
        publisher.subscribe(probe)
        probe.expect_subscribe()
        probe.request(2)
        probe.expect_nexts(2)
        probe.cancel()
        probe.check()
        ref = weakref.ref(probe, lambda _: gone.set())
        del probe
        deadline = time.monotonic() + self.timeout
        while not gone.is_set() and time.monotonic() < deadline:
            gc.collect()
            gone.wait(0.01)  # woken by the weakref callback as soon as it is collected
        assert ref() is None, "the publisher still holds the cancelled subscriber (RS §3.13)"

    @rule("3.15", "3.16")
    def test_rs_3_15_request_and_cancel_return_normally_in_every_state(self) -> None:
        probe = self._subscribe(self._publisher(1))
        probe.cancel()  # before any request
        probe2 = self._subscribe(self._publisher(1), name="after-complete")
        probe2.request(1)
        probe2.expect_next()
        probe2.request(1)
        probe2.expect_complete()
        for n in (1, 0, -1, MAX_DEMAND):
            assert probe2.subscription.request(n) is None
        assert probe2.subscription.cancel() is None
        probe2.expect_none()

    @rule("3.17")
    def test_rs_3_17_demand_of_max_demand(self) -> None:
        probe = self._subscribe(self._publisher(3))
        probe.request(MAX_DEMAND)
        probe.expect_nexts(3)
        probe.expect_complete()

    @rule("3.17")
    def test_rs_3_17_cumulative_demand_up_to_max_demand(self) -> None:
        probe = self._subscribe(self._publisher(3))
        probe.request(MAX_DEMAND // 2)
        probe.request(MAX_DEMAND // 2)
        probe.request(1)  # exactly MAX_DEMAND in total
        probe.expect_nexts(3)
        probe.expect_complete()

    @rule("3.17")
    def test_rs_3_17_demand_beyond_max_demand_saturates(self) -> None:
        publisher, size = self._unbounded(20)
        probe = self._probe(on_next_hook=lambda p, item: p.cancel() if p.received == 20
                            else p.request(MAX_DEMAND - 1))
        self._subscribe(publisher, probe)
        probe.request(MAX_DEMAND)
        probe.request(MAX_DEMAND)
        probe.expect_nexts(min(20, size))
        probe.wait_quiet()
        assert probe.terminal is None or probe.terminal.kind == "on_complete", \
            f"demand above 2**63-1 must not fail the stream; got {probe.terminal}"

    # ================================================================ untestable rules
    test_rs_3_1_calls_only_inside_subscriber_context = untested(
        "3.1", "an obligation on the subscriber; a publisher cannot tell where a call "
        "comes from, and 'subscriber context' is not observable")
    test_rs_3_4_request_returns_timely = untested(
        "3.4", "'timely' has no threshold to test against; request only records and schedules "
        "(engine.subscription), which review checks")
    test_rs_3_10_request_may_call_on_next_synchronously = untested(
        "3.10", "a permission (MAY), not an obligation: nothing to verify")
    test_rs_3_11_request_may_terminate_synchronously = untested(
        "3.11", "a permission (MAY), not an obligation: nothing to verify")
    test_rs_3_14_cancel_may_shut_down_publisher = untested(
        "3.14", "a permission (MAY); processors that do it are checked by ProcessorVerification")
