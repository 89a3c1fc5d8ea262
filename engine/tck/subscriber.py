"""Subscriber verifications: blackbox (only what the subscriber does to its subscription) and
whitebox (also what it received, through a ``WhiteboxProbe`` the plug-in feeds).

In both, the test plays the publisher: it hands the subscriber a ``ManualSubscription``,
sends only as many elements as were requested, and signals serially.

Blackbox plug-in::

    class TestMySubscriberBlackbox(SubscriberBlackboxVerification):
        def create_subscriber(self):
            return CallbackSubscriber(lambda item: None)

Whitebox plug-in: forward the callbacks to the probe and give it a puppet to cancel with (and
to request with, if the subscriber does not only request on its own)::

    class TestMySubscriberWhitebox(SubscriberWhiteboxVerification):
        def create_subscriber(self, probe):
            subscriber = CallbackSubscriber(probe.on_next, probe.on_error, probe.on_complete)
            probe.puppet(cancel=subscriber.cancel)
            return subscriber
"""

from __future__ import annotations

import threading
from typing import Any

from engine.tck.probes import (
    DEFAULT_TIMEOUT,
    NO_SIGNAL_WAIT,
    ManualSubscription,
    WhiteboxProbe,
)
from engine.tck.rules import current_session, rule, untested

__all__ = ["SubscriberBlackboxVerification", "SubscriberWhiteboxVerification"]


def _expect_type_error(call: Any, what: str) -> None:
    try:
        call()
    except TypeError:
        return
    except Exception as err:
        raise AssertionError(f"{what} raised {err!r} instead of TypeError (RS §2.13)") from err
    raise AssertionError(f"{what} must raise TypeError at once (RS §2.13)")


class _SubscriberKit:
    timeout: float = DEFAULT_TIMEOUT
    no_signal_wait: float = NO_SIGNAL_WAIT

    def create_element(self, index: int) -> Any:
        """The ``index``-th element sent to the subscriber under test."""
        return index

    def _subscription(self, name: str = "subscription") -> ManualSubscription:
        return ManualSubscription(name, timeout=self.timeout, no_signal_wait=self.no_signal_wait)

    def _complete(self, subscriber: Any, subscription: ManualSubscription) -> None:
        with subscription.forbid_calls("on_complete"):  # RS §2.3
            assert subscriber.on_complete() is None
        subscription.expect_no_calls()

    def _error(self, subscriber: Any, subscription: ManualSubscription,
               error: BaseException) -> None:
        with subscription.forbid_calls("on_error"):  # RS §2.3
            assert subscriber.on_error(error) is None
        subscription.expect_no_calls()


class SubscriberBlackboxVerification(_SubscriberKit):
    """Subscriber rules checked from the outside: only the calls it makes are observed."""

    def create_subscriber(self) -> Any:
        raise NotImplementedError

    def trigger_request(self, subscriber: Any) -> None:
        """Make the subscriber request, if it does not on its own after ``on_subscribe``."""

    def _subscribed(self) -> tuple[Any, ManualSubscription]:
        subscriber = self.create_subscriber()
        subscription = self._subscription()
        assert subscriber.on_subscribe(subscription) is None
        return subscriber, subscription

    @rule("2.1")
    def test_rs_2_1_signals_demand_with_request(self) -> None:
        subscriber, subscription = self._subscribed()
        self.trigger_request(subscriber)
        subscription.expect_demand(1)
        subscriber.on_next(self.create_element(0))
        self._complete(subscriber, subscription)

    @rule("2.3", "2.9")
    def test_rs_2_3_no_calls_from_on_complete(self) -> None:
        subscriber, subscription = self._subscribed()
        self.trigger_request(subscriber)
        subscription.expect_demand(1)
        self._complete(subscriber, subscription)

    @rule("2.3", "2.10")
    def test_rs_2_3_no_calls_from_on_error(self) -> None:
        subscriber, subscription = self._subscribed()
        self.trigger_request(subscriber)
        subscription.expect_demand(1)
        self._error(subscriber, subscription, RuntimeError("upstream failed on purpose"))

    @rule("2.5")
    def test_rs_2_5_cancels_a_second_subscription(self) -> None:
        current_session().allow("RS §2.5")  # a subscriber may also report the intrusion
        subscriber, first = self._subscribed()
        second = self._subscription("second")
        assert subscriber.on_subscribe(second) is None
        second.expect_cancel()
        assert not first.cancelled, "the first, active subscription was cancelled"

    @rule("2.9")
    def test_rs_2_9_complete_without_preceding_request(self) -> None:
        subscriber = self.create_subscriber()
        subscription = self._subscription()
        subscriber.on_subscribe(subscription)
        self._complete(subscriber, subscription)

    @rule("2.10")
    def test_rs_2_10_error_without_preceding_request(self) -> None:
        subscriber = self.create_subscriber()
        subscription = self._subscription()
        subscriber.on_subscribe(subscription)
        self._error(subscriber, subscription, RuntimeError("upstream failed on purpose"))

    @rule("2.13")
    def test_rs_2_13_none_arguments_raise_type_error(self) -> None:
        _expect_type_error(lambda: self.create_subscriber().on_subscribe(None),
                           "on_subscribe(None)")
        subscriber, subscription = self._subscribed()
        self.trigger_request(subscriber)
        subscription.expect_demand(1)
        _expect_type_error(lambda: subscriber.on_next(None), "on_next(None)")
        _expect_type_error(lambda: subscriber.on_error(None), "on_error(None)")

    test_rs_2_2_dispatches_asynchronously_when_slow = untested(
        "2.2", "a recommendation that depends on the subscriber's own cost; nothing to observe")
    test_rs_2_4_terminal_means_cancelled = untested(
        "2.4", "an internal state of the subscriber; its visible effect (no calls after a "
        "terminal signal) is checked under RS §2.3")
    test_rs_2_6_cancels_when_no_longer_needed = untested(
        "2.6", "'no longer needed' is the subscriber's own judgement; the kit cannot know it")
    test_rs_2_7_blackbox_calls_are_serial = untested(
        "2.7", "needs a way to make the subscriber call its subscription; the whitebox "
        "verification checks it")
    test_rs_2_8_blackbox_on_next_after_cancel = untested(
        "2.8", "needs a way to make the subscriber cancel; the whitebox verification checks it")
    test_rs_2_11_signals_happen_before_processing = untested(
        "2.11", "a memory-model property (happens-before) that a test cannot observe")
    test_rs_2_12_subscriber_on_subscribe_at_most_once = untested(
        "2.12", "an obligation on the caller of on_subscribe; PublisherVerification checks "
        "that publishers keep it")
    test_rs_3_1_subscriber_calls_in_its_context = untested(
        "3.1", "'subscriber context' is not observable from outside the subscriber")


class SubscriberWhiteboxVerification(_SubscriberKit):
    """Subscriber rules checked with the subscriber's cooperation (see the module docstring)."""

    def create_subscriber(self, probe: WhiteboxProbe) -> Any:
        raise NotImplementedError

    def _whitebox(self) -> tuple[Any, WhiteboxProbe, ManualSubscription]:
        probe = WhiteboxProbe(timeout=self.timeout, no_signal_wait=self.no_signal_wait)
        subscriber = self.create_subscriber(probe)
        subscription = self._subscription()
        assert subscriber.on_subscribe(subscription) is None
        return subscriber, probe, subscription

    def _demand(self, probe: WhiteboxProbe, subscription: ManualSubscription,
                at_least: int) -> int:
        probe.trigger_request(at_least)
        return subscription.expect_demand(at_least)

    @rule("2.1", "3.8")
    def test_rs_2_1_subscriber_receives_what_it_requested(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        demand = self._demand(probe, subscription, 3)
        count = min(demand, 3)
        for index in range(count):
            subscriber.on_next(self.create_element(index))
        received = probe.expect_nexts(count)
        assert len(received) == count
        self._complete(subscriber, subscription)
        probe.expect_complete()

    @rule("2.1")
    def test_rs_2_1_subscriber_keeps_signalling_demand(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        sent = 0
        for _ in range(50):  # send as demand allows; a live subscriber keeps requesting
            probe.trigger_request(1)
            subscription.expect_demand(sent + 1)
            subscriber.on_next(self.create_element(sent))
            sent += 1
        probe.expect_nexts(sent)
        probe.trigger_cancel()
        subscription.expect_cancel()

    @rule("2.3", "2.9")
    def test_rs_2_3_subscriber_no_calls_from_on_complete(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        self._demand(probe, subscription, 1)
        self._complete(subscriber, subscription)
        probe.expect_complete()

    @rule("2.3", "2.10")
    def test_rs_2_3_subscriber_no_calls_from_on_error(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        self._demand(probe, subscription, 1)
        error = RuntimeError("upstream failed on purpose")
        self._error(subscriber, subscription, error)
        assert probe.expect_error(RuntimeError) is error

    @rule("2.5")
    def test_rs_2_5_subscriber_cancels_a_second_subscription(self) -> None:
        current_session().allow("RS §2.5")
        subscriber, probe, first = self._whitebox()
        second = self._subscription("second")
        assert subscriber.on_subscribe(second) is None
        second.expect_cancel()
        assert not first.cancelled, "the first, active subscription was cancelled"

    @rule("2.6", "3.12")
    def test_rs_2_6_subscriber_cancels_through_its_subscription(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        self._demand(probe, subscription, 1)
        probe.trigger_cancel()
        subscription.expect_cancel()

    @rule("2.7")
    def test_rs_2_7_subscriber_calls_are_serial(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        sent = 0
        lock = threading.Lock()

        def deliver() -> None:  # each element on a fresh thread, serially (joined)
            nonlocal sent
            with lock:
                subscriber.on_next(self.create_element(sent))
                sent += 1

        for _ in range(40):
            if subscription.requested <= sent:
                probe.trigger_request(1)
                subscription.expect_demand(sent + 1)
            thread = threading.Thread(target=deliver)
            thread.start()
            if probe.can_request:
                probe.trigger_request(1)  # from this thread, while on_next runs on another
            thread.join(self.timeout)
            assert not thread.is_alive(), "on_next did not return"
        probe.expect_nexts(sent)
        # ManualSubscription flags overlapping request/cancel calls (RS §2.7) at the end.

    @rule("2.8")
    def test_rs_2_8_subscriber_accepts_on_next_after_cancel(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        demand = self._demand(probe, subscription, 2)
        subscriber.on_next(self.create_element(0))
        probe.expect_next()
        probe.trigger_cancel()
        subscription.expect_cancel()
        if demand >= 2:  # still requested: it may arrive after cancel, and must be accepted
            assert subscriber.on_next(self.create_element(1)) is None

    @rule("2.9")
    def test_rs_2_9_subscriber_complete_without_preceding_request(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        self._complete(subscriber, subscription)
        probe.expect_complete()

    @rule("2.10")
    def test_rs_2_10_subscriber_error_without_preceding_request(self) -> None:
        subscriber, probe, subscription = self._whitebox()
        self._error(subscriber, subscription, RuntimeError("upstream failed on purpose"))
        probe.expect_error(RuntimeError)

    @rule("2.13")
    def test_rs_2_13_subscriber_none_arguments_raise_type_error(self) -> None:
        probe = WhiteboxProbe("unsubscribed", timeout=self.timeout)
        _expect_type_error(lambda: self.create_subscriber(probe).on_subscribe(None),
                           "on_subscribe(None)")
        subscriber, probe, subscription = self._whitebox()
        self._demand(probe, subscription, 1)
        _expect_type_error(lambda: subscriber.on_next(None), "on_next(None)")
        _expect_type_error(lambda: subscriber.on_error(None), "on_error(None)")
        probe.expect_none()

    test_rs_2_2_subscriber_dispatches_asynchronously_when_slow = untested(
        "2.2", "a recommendation that depends on the subscriber's own cost; nothing to observe")
    test_rs_2_4_subscriber_terminal_means_cancelled = untested(
        "2.4", "an internal state; its visible effect (no calls after a terminal signal) is "
        "checked under RS §2.3")
    test_rs_2_11_subscriber_signals_happen_before_processing = untested(
        "2.11", "a memory-model property (happens-before) that a test cannot observe")
    test_rs_2_13_subscriber_failing_on_signal = untested(
        "2.13", "a subscriber under test is not made to raise; PublisherVerification checks "
        "the caller's side (cancel and report)")
