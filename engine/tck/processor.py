"""``ProcessorVerification``: a processor is bound by both contracts (RS §4.1), so it runs every
publisher test and every whitebox subscriber test, plus the processor rules.

Plug in with a factory; the kit feeds it from ``from_iterable`` for the publisher tests and
plays its upstream (a ``ManualSubscription``) for the subscriber tests::

    class TestIdentityTransform(ProcessorVerification):
        def create_processor(self):
            return transform(lambda upstream: upstream, capacity=16)
        max_upstream_lead = 16     # most elements it asks for beyond its slowest subscriber

``output_of(element)`` says what the processor emits for an input element (identity by
default; a processor that maps elements overrides it).
"""

from __future__ import annotations

from typing import Any

from engine.tck.probes import ManualSubscription, WhiteboxProbe
from engine.tck.publisher import PublisherVerification
from engine.tck.rules import rule, skip, untested
from engine.tck.subscriber import SubscriberWhiteboxVerification

__all__ = ["ProcessorVerification"]


class _Downstream:
    """A subscriber of the processor that forwards what it gets into a ``WhiteboxProbe``."""

    def __init__(self, probe: WhiteboxProbe) -> None:
        self.probe = probe
        self.subscription: Any = None

    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("on_subscribe(None)")
        self.subscription = subscription

    def on_next(self, item: Any) -> None:
        if item is None:
            raise TypeError("on_next(None)")
        self.probe.on_next(item)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("on_error(None)")
        self.probe.on_error(error)

    def on_complete(self) -> None:
        self.probe.on_complete()

    def request(self, n: int) -> None:
        self.probe.wait_until(lambda: self.subscription is not None, what="on_subscribe")
        self.subscription.request(n)

    def cancel(self) -> None:
        self.probe.wait_until(lambda: self.subscription is not None, what="on_subscribe")
        self.subscription.cancel()


class ProcessorVerification(PublisherVerification, SubscriberWhiteboxVerification):
    """Processor rules 4.1 and 4.2, on top of the publisher and whitebox subscriber rules."""

    #: Whether the processor cancels its upstream when its last subscriber cancels (advised
    #: after RS §4.2; required by this project's design).
    cancels_upstream_when_last_subscriber_cancels: bool = True
    #: The most elements the processor asks upstream for beyond what its slowest subscriber
    #: took (its buffer); ``None`` skips the pacing check.
    max_upstream_lead: int | None = None

    # ---------------------------------------------------------------- the plug-in's part
    def create_processor(self) -> Any:
        raise NotImplementedError

    def output_of(self, element: Any) -> Any:
        return element

    def create_upstream(self, elements: int) -> Any:
        from engine.sources import from_iterable
        return from_iterable(range(elements))

    # ---------------------------------------------------------------- both roles
    def create_publisher(self, elements: int) -> Any:
        processor = self.create_processor()
        self.create_upstream(elements).subscribe(processor)
        return processor

    def create_failed_publisher(self) -> Any:
        from engine.sources import failed
        processor = self.create_processor()
        failed(RuntimeError("upstream failed on purpose")).subscribe(processor)
        return processor

    def create_subscriber(self, probe: WhiteboxProbe) -> Any:
        processor = self.create_processor()
        downstream = _Downstream(probe)
        processor.subscribe(downstream)
        probe.puppet(cancel=downstream.cancel, request=downstream.request)
        return processor

    # ---------------------------------------------------------------- helpers
    def _fed(self) -> tuple[Any, ManualSubscription]:
        processor = self.create_processor()
        upstream = self._subscription("upstream")
        processor.on_subscribe(upstream)
        return processor, upstream

    def _feed(self, processor: Any, upstream: ManualSubscription, start: int,
              count: int) -> int:
        """Send up to ``count`` elements from ``start`` as upstream demand allows (RS §1.1)."""
        sent = 0
        while sent < count and upstream.requested > start + sent:
            processor.on_next(self.create_element(start + sent))
            sent += 1
        return sent

    # ================================================================ RS §4.1
    @rule("4.1")
    def test_rs_4_1_relays_elements_in_order(self) -> None:
        processor, upstream = self._fed()
        probe = self._subscribe(processor)
        probe.request(5)
        upstream.expect_demand(1)
        sent = 0
        while sent < 5:
            upstream.expect_demand(sent + 1)
            sent += self._feed(processor, upstream, sent, 5 - sent)
        assert probe.expect_nexts(5) == [self.output_of(self.create_element(i))
                                         for i in range(5)]
        processor.on_complete()
        probe.expect_complete()

    @rule("4.1", "1.1")
    def test_rs_4_1_paced_by_the_slowest_subscriber(self) -> None:
        lead = self.max_upstream_lead
        if lead is None:
            skip("max_upstream_lead is None: the processor's buffer bound is not declared")
        processor, upstream = self._fed()
        fast = self._subscribe(processor, name="fast")
        slow = self._subscribe(processor, name="slow")
        fast.request(10_000)
        slow.request(1)
        sent = 0
        for _ in range(4 * lead):
            moved = self._feed(processor, upstream, sent, 10_000)
            sent += moved
            if not moved:
                break
        upstream.wait_quiet()
        assert upstream.requested <= slow.received + lead, (
            f"the processor asked for {upstream.requested} elements while its slowest "
            f"subscriber took {slow.received} (declared lead {self.max_upstream_lead})")
        slow.request(10_000)
        while sent < 300:
            upstream.expect_demand(sent + 1)
            sent += self._feed(processor, upstream, sent, 300 - sent)
        processor.on_complete()
        fast.expect_terminal()
        slow.expect_terminal()
        assert fast.items == [self.output_of(self.create_element(i)) for i in range(300)]
        assert slow.items == fast.items

    @rule("4.1", "3.14")
    def test_rs_4_1_cancels_upstream_when_the_last_subscriber_cancels(self) -> None:
        if not self.cancels_upstream_when_last_subscriber_cancels:
            skip("this processor keeps its upstream after its last subscriber leaves")
        processor, upstream = self._fed()
        first = self._subscribe(processor, name="first")
        second = self._subscribe(processor, name="second")
        first.request(1)
        second.request(1)
        first.cancel()
        upstream.expect_never(lambda: upstream.cancelled,
                              "upstream cancelled while a subscriber remains")
        second.cancel()
        upstream.expect_cancel()

    @rule("4.1", "1.9")
    def test_rs_4_1_late_subscriber_gets_the_terminal_signal(self) -> None:
        processor, upstream = self._fed()
        early = self._subscribe(processor, name="early")
        processor.on_complete()
        early.expect_complete()
        late = self._subscribe(processor, name="late")
        late.expect_complete()

    # ================================================================ RS §4.2
    @rule("4.2", "2.10")
    def test_rs_4_2_upstream_error_reaches_every_subscriber_at_once(self) -> None:
        processor, upstream = self._fed()
        idle = self._subscribe(processor, name="no-demand")
        busy = self._subscribe(processor, name="with-demand")
        busy.request(1)
        upstream.expect_demand(2)
        self._feed(processor, upstream, 0, 2)  # one buffered for `busy`, two for `idle`
        busy.expect_next()
        error = RuntimeError("upstream failed on purpose")
        processor.on_error(error)
        assert idle.expect_error(RuntimeError) is error  # before buffered elements (RS §4.2)
        assert busy.expect_error(RuntimeError) is error

    @rule("4.2", "1.9")
    def test_rs_4_2_subscriber_after_error_gets_the_error(self) -> None:
        processor, upstream = self._fed()
        error = RuntimeError("upstream failed on purpose")
        processor.on_error(error)
        late = self._subscribe(processor, name="late")
        assert late.expect_error(RuntimeError) is error

    test_rs_4_2_recovering_processor_cancels = untested(
        "4.2", "a processor that recovers from on_error decides what to emit instead; the "
        "kit checks the propagating kind, and a recovering plug-in tests its own recovery")

