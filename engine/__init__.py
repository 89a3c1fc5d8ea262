"""Goldilocks engine: a Reactive Streams runtime and the temporal event model.

The documented surface (design.md §3)::

    from engine import (Publisher, Subscriber, Subscription, Processor, MAX_DEMAND,
                        from_iterable, empty, failed, from_async_iterable,
                        collect, iterate, CallbackSubscriber, pipe, transform, Event)

Every publisher here derives from ``PublisherBase``: ``async for event in publisher`` works.
"""

from engine.contracts import MAX_DEMAND, Processor, Publisher, Subscriber, Subscription
from engine.errors import (
    BadRecordError,
    ClosedError,
    GoldilocksError,
    InputError,
    RejectedError,
    SpecViolation,
    TimeFormatError,
)
from engine.event import CTI, INTERVAL, POINT, Event, LateRecord
from engine.executors import INLINE, as_executor
from engine.multicast import Multicast, TransformProcessor, transform
from engine.sinks import CallbackSubscriber, PublisherBase, collect, iterate
from engine.sources import empty, failed, from_async_iterable, from_iterable
from engine.stage import pipe, step_operator
from engine.subscription import BufferedSubscription, SubscriptionBase
from engine.times import (MAX_TIME, MIN_TIME, DurationLike, Nanoseconds, format_ns,
                          to_duration_ns, to_ns)
from engine.violations import collect_violations, report_violation, set_violation_handler

__all__ = [
    "MAX_DEMAND",
    "Publisher",
    "Subscriber",
    "Subscription",
    "Processor",
    "from_iterable",
    "empty",
    "failed",
    "from_async_iterable",
    "collect",
    "iterate",
    "CallbackSubscriber",
    "PublisherBase",
    "pipe",
    "transform",
    "step_operator",
    "Multicast",
    "TransformProcessor",
    "SubscriptionBase",
    "BufferedSubscription",
    "INLINE",
    "as_executor",
    "Event",
    "LateRecord",
    "POINT",
    "INTERVAL",
    "CTI",
    "MIN_TIME",
    "MAX_TIME",
    "to_ns",
    "to_duration_ns",
    "Nanoseconds",
    "DurationLike",
    "format_ns",
    "GoldilocksError",
    "SpecViolation",
    "InputError",
    "TimeFormatError",
    "BadRecordError",
    "ClosedError",
    "RejectedError",
    "report_violation",
    "set_violation_handler",
    "collect_violations",
]
