"""The kit must be able to fail: deliberately broken components fail the tests named for the
rule they break, and the probes catch what they are meant to catch."""

from __future__ import annotations

import threading

import pytest

from engine import transform
from engine.tck import (
    ManualSubscriber,
    ManualSubscription,
    ProcessorVerification,
    PublisherVerification,
    SubscriberBlackboxVerification,
)

SHORT = 0.2


class _Plain:
    """A subscription that records nothing and does nothing."""

    def request(self, n):
        pass

    def cancel(self):
        pass


class Greedy:
    """Ignores demand (RS §1.1)."""

    def __init__(self, n):
        self.n = n

    def subscribe(self, subscriber):
        if subscriber is None:
            raise TypeError("None")
        subscriber.on_subscribe(_Plain())
        for i in range(self.n):
            subscriber.on_next(i)
        subscriber.on_complete()


class Synchronous:
    """Delivers on request, synchronously; the flags break one rule each."""

    def __init__(self, n, *, raise_on_bad=False, ignore_cancel=False, complete_twice=False,
                 accept_none=False, keep_subscribers=False):
        self.n = n
        self.raise_on_bad = raise_on_bad
        self.ignore_cancel = ignore_cancel
        self.complete_twice = complete_twice
        self.accept_none = accept_none
        self.kept = [] if keep_subscribers else None

    def subscribe(self, subscriber):
        if subscriber is None:
            if self.accept_none:
                return
            raise TypeError("None")
        publisher = self
        state = {"next": 0, "cancelled": False, "done": False}
        if self.kept is not None:
            self.kept.append(subscriber)

        class Subscription:
            def request(self, n):
                if n <= 0:
                    if publisher.raise_on_bad:
                        raise ValueError("bad request")
                    state["done"] = True
                    subscriber.on_error(ValueError("RS §3.9"))
                    return
                for _ in range(n):
                    if state["done"] or (state["cancelled"] and not publisher.ignore_cancel):
                        return
                    if state["next"] >= publisher.n:
                        break
                    state["next"] += 1
                    subscriber.on_next(state["next"] - 1)
                if state["next"] >= publisher.n and not state["done"]:
                    state["done"] = True
                    subscriber.on_complete()
                    if publisher.complete_twice:
                        subscriber.on_complete()

            def cancel(self):
                state["cancelled"] = True

        subscriber.on_subscribe(Subscription())


def kit(publisher_factory, **attrs):
    class Plugin(PublisherVerification):
        timeout = SHORT

        def create_publisher(self, elements):
            return publisher_factory(elements)

    for name, value in attrs.items():
        setattr(Plugin, name, value)
    return Plugin()


@pytest.mark.parametrize("method", [
    "test_rs_1_1_never_more_than_requested",
    "test_rs_3_8_requests_add_up",
])
def test_greedy_publisher_fails_rs_1_1(method):
    with pytest.raises(AssertionError, match="RS §1.1"):
        getattr(kit(Greedy), method)()


def test_control_publisher_passes_the_same_tests():
    plugin = kit(Synchronous)
    plugin.test_rs_1_1_never_more_than_requested()
    plugin.test_rs_3_9_request_zero_signals_error()
    plugin.test_rs_3_6_request_after_cancel_is_nop()
    plugin.test_rs_1_7_nothing_after_on_complete()
    plugin.test_rs_1_9_subscribe_none_raises_type_error()


def test_raising_request_fails_rs_3_9():
    with pytest.raises(AssertionError, match="RS §3.16|on_error"):
        kit(lambda n: Synchronous(n, raise_on_bad=True)).test_rs_3_9_request_zero_signals_error()


def test_ignoring_cancel_fails_rs_3_6():
    with pytest.raises(AssertionError, match="expected no signal"):
        kit(lambda n: Synchronous(n, ignore_cancel=True)).test_rs_3_6_request_after_cancel_is_nop()


def test_completing_twice_fails_rs_1_7():
    with pytest.raises(AssertionError, match="RS §1.7"):
        kit(lambda n: Synchronous(n, complete_twice=True)).test_rs_1_7_nothing_after_on_complete()


def test_accepting_none_fails_rs_1_9():
    with pytest.raises(AssertionError, match="RS §1.9"):
        kit(lambda n: Synchronous(n, accept_none=True)).test_rs_1_9_subscribe_none_raises_type_error()


def test_keeping_subscribers_fails_rs_3_13():
    with pytest.raises(AssertionError, match="RS §3.13"):
        kit(lambda n: Synchronous(n, keep_subscribers=True)).test_rs_3_13_cancel_drops_the_subscriber()


def test_probe_flags_overlapping_signals_rs_1_3():
    b_inside = threading.Event()
    probe = ManualSubscriber(register=False)
    probe.on_subscribe(_Plain())
    probe.requested = 2
    probe.on_next_hook = lambda p, item: b_inside.wait(SHORT) if item == "a" else b_inside.set()
    a = threading.Thread(target=probe.on_next, args=("a",))
    a.start()
    probe.on_next("b")  # enters while `a` waits inside on_next
    a.join(SHORT)
    with pytest.raises(AssertionError, match="RS §1.3"):
        probe.check()


def test_probe_flags_signal_before_on_subscribe():
    probe = ManualSubscriber(register=False)
    probe.on_complete()
    with pytest.raises(AssertionError, match="RS §1.9"):
        probe.check()


class _Rude:
    """A subscriber that breaks RS §2.3, §2.5 and §2.13."""

    def __init__(self):
        self.subscription = None

    def on_subscribe(self, subscription):
        if self.subscription is None:
            self.subscription = subscription
            subscription.request(1)

    def on_next(self, item):
        pass

    def on_error(self, error):
        self.subscription.request(1)

    def on_complete(self):
        self.subscription.cancel()


class RudeKit(SubscriberBlackboxVerification):
    timeout = SHORT

    def create_subscriber(self):
        return _Rude()


@pytest.mark.parametrize("method, rule", [
    ("test_rs_2_3_no_calls_from_on_complete", "RS §2.3"),
    ("test_rs_2_3_no_calls_from_on_error", "RS §2.3"),
    ("test_rs_2_5_cancels_a_second_subscription", "cancel"),
    ("test_rs_2_13_none_arguments_raise_type_error", "TypeError"),
])
def test_rude_subscriber_fails_the_rule_it_breaks(method, rule):
    with pytest.raises(AssertionError, match=rule):
        getattr(RudeKit(), method)()


def test_manual_subscription_flags_overlapping_calls_rs_2_7():
    subscription = ManualSubscription()
    subscription._active[-1] = 1  # as if another thread were inside request() right now
    subscription.request(2)
    with pytest.raises(AssertionError, match="RS §2.7"):
        subscription.check()


class _SwallowingProcessor:
    """A processor that drops upstream errors (breaks RS §4.2)."""

    def __init__(self):
        self.inner = transform(lambda upstream: upstream, capacity=16)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def on_error(self, error):
        if error is None:
            raise TypeError("None")


class SwallowingKit(ProcessorVerification):
    timeout = SHORT
    max_upstream_lead = 16

    def create_processor(self):
        return _SwallowingProcessor()


def test_error_swallowing_processor_fails_rs_4_2():
    with pytest.raises(AssertionError, match="on_error"):
        SwallowingKit().test_rs_4_2_upstream_error_reaches_every_subscriber_at_once()
