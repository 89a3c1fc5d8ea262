"""The four Reactive Streams contracts, in Python, and ``MAX_DEMAND``.

Any object with the right methods works (duck typing); these ``Protocol`` classes document the
methods and let ``isinstance`` check the shape. The rule machinery lives in
``engine.subscription`` (publishers) and ``engine.sinks`` (subscribers); every publisher and
processor in this project is built on it.

Signal grammar, per subscription (RS §1.9, §1.7)::

    on_subscribe on_next* (on_error | on_complete)?
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["MAX_DEMAND", "Publisher", "Subscriber", "Subscription", "Processor"]

#: The largest demand a subscription tracks; a request that would exceed it saturates here and
#: means "effectively unbounded" (RS §3.17).
MAX_DEMAND = 2**63 - 1


@runtime_checkable
class Subscription(Protocol):
    def request(self, n: int) -> None:
        """Add ``n`` (> 0) to the demand. Never raises; ``n <= 0`` is signalled as ``on_error``
        (RS §3.9, §3.16). May be called from inside ``on_next`` (RS §3.2)."""

    def cancel(self) -> None:
        """Ask the publisher to stop signalling and drop its references. Idempotent,
        thread-safe, never raises (RS §3.5, §3.7, §3.15)."""


@runtime_checkable
class Subscriber(Protocol):
    def on_subscribe(self, subscription: Subscription) -> None: ...

    def on_next(self, item: Any) -> None: ...

    def on_error(self, error: BaseException) -> None: ...

    def on_complete(self) -> None: ...


@runtime_checkable
class Publisher(Protocol):
    def subscribe(self, subscriber: Subscriber) -> None:
        """Attach ``subscriber``; ``None`` raises ``TypeError`` at once (RS §1.9)."""


@runtime_checkable
class Processor(Subscriber, Publisher, Protocol):
    """Both sides at once; bound by both contracts (RS §4.1)."""
