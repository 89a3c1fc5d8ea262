"""The conformance kit: Reactive Streams verification suites for everything this project ships.

Four base classes hold test methods named by rule (``test_rs_3_9_request_zero_signals_error``);
a test module plugs a component in by subclassing one of them, and pytest collects the
inherited tests. Every rule of the specification (1.1–1.11, 2.1–2.13, 3.1–3.17, 4.1–4.2) has at
least one method; the few that cannot be tested generically are explicit skips that say why.
``docs/conformance.md`` maps each rule to its tests and the components that run them (generated
by ``python -m engine.tck.report --write``; a test keeps it in step).

Plugging in — a publisher::

    from engine.tck import PublisherVerification

    class TestFromIterableInline(PublisherVerification):
        def create_publisher(self, elements):
            return from_iterable(range(elements))
        def create_failed_publisher(self):          # or return None: cannot fail
            return failed(RuntimeError("boom"))
        max_elements = None                          # None: any number (2**63-1, lazily)

a subscriber (``SubscriberBlackboxVerification.create_subscriber()``, or whitebox, which also
sees what the subscriber received)::

    class TestCallbackSubscriberWhitebox(SubscriberWhiteboxVerification):
        def create_subscriber(self, probe):
            subscriber = CallbackSubscriber(probe.on_next, probe.on_error, probe.on_complete)
            probe.puppet(cancel=subscriber.cancel)  # request=… too, if it has a way to
            return subscriber

a processor (runs the publisher and whitebox suites too, RS §4.1)::

    class TestTransform(ProcessorVerification):
        def create_processor(self):
            return transform(lambda upstream: upstream, capacity=16)
        max_upstream_lead = 16

Knobs (class attributes): ``timeout`` and ``no_signal_wait`` (seconds), ``hot`` (a late
subscriber sees a tail of the stream), ``multiple_subscribers``, ``reports_violations``,
``max_recursion_depth``; see each base class.

Every kit test runs in a ``Session``: the probes it makes are checked at the end (more than
requested, overlapping signals, anything after a terminal signal, … — see ``probes``) and any
violation reported through ``engine.violations`` that the test did not expect fails it. Waits
are on conditions with timeouts; nothing sleeps. The kit needs no pytest: tests are plain
methods with ``assert``, and skips raise ``unittest.SkipTest``.
"""

from engine.tck.probes import (
    DEFAULT_TIMEOUT,
    NO_SIGNAL_WAIT,
    ManualSubscriber,
    ManualSubscription,
    ProbeError,
    Signal,
    WhiteboxProbe,
    background_loop,
    stack_depth,
    stop_loop,
)
from engine.tck.processor import ProcessorVerification
from engine.tck.publisher import PublisherVerification
from engine.tck.rules import RULES, Session, rule, skip, untested
from engine.tck.subscriber import SubscriberBlackboxVerification, SubscriberWhiteboxVerification

__all__ = [
    "PublisherVerification",
    "SubscriberBlackboxVerification",
    "SubscriberWhiteboxVerification",
    "ProcessorVerification",
    "ManualSubscriber",
    "ManualSubscription",
    "WhiteboxProbe",
    "ProbeError",
    "Signal",
    "Session",
    "RULES",
    "rule",
    "untested",
    "skip",
    "background_loop",
    "stop_loop",
    "stack_depth",
    "DEFAULT_TIMEOUT",
    "NO_SIGNAL_WAIT",
]
