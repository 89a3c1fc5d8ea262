"""RS §2.7: a union input's calls on its publisher's subscription are serial, whichever
threads grant it credit (a merge turn, another input joining, the idle alarm)."""

from __future__ import annotations

import threading
from typing import Any

from engine import CallbackSubscriber, Event
from engine.times import Nanoseconds
from operators import Union, goldilocks

TIMEOUT = 30.0


class HandingOn:
    """A publisher whose ``request`` hands the credit to its own producer thread and waits
    for that thread to finish sending it — as a publisher does whose ``request`` is slow to
    return (logging, a network write) while its producer runs. The subscription records
    calls that overlap (RS §2.7)."""

    def __init__(self) -> None:
        self.subscriber: Any = None
        self.inside = 0
        self.overlaps = 0
        self.calls: list[int] = []
        self.lock = threading.Lock()
        self.producer: threading.Thread | None = None
        self.sent = 0
        self.errors: list[BaseException] = []

    def subscribe(self, subscriber: Any) -> None:
        self.subscriber = subscriber
        subscriber.on_subscribe(self)

    def request(self, n: int) -> None:
        with self.lock:
            self.inside += 1
            if self.inside > 1:
                self.overlaps += 1
            self.calls.append(n)
            first = self.producer is None
            if first:
                self.producer = threading.Thread(target=self._produce, args=(n,))
        try:
            if first:  # the first credit goes to the producer thread; return when it is spent
                self.producer.start()  # type: ignore[union-attr]
                self.producer.join(TIMEOUT)  # type: ignore[union-attr]
        finally:
            with self.lock:
                self.inside -= 1

    def _produce(self, n: int) -> None:
        try:
            for i in range(n):
                self.subscriber.on_next(Event.point(i))
                self.sent += 1
        except BaseException as err:  # reported by the test
            self.errors.append(err)

    def cancel(self) -> None:
        pass


def test_rs_2_7_a_merge_turn_on_the_producer_thread_does_not_request_while_a_grant_is_in_flight():
    """The subscribing thread's grant is inside ``request`` while the producer thread's
    arrivals are merged there and cross the low-water mark: that turn's grant must not call
    ``request`` on the same subscription at the same time; it is made once the first call
    returns."""
    union = Union(goldilocks(Nanoseconds(10)), prefetch=8)
    got: list[Event] = []
    union.subscribe(CallbackSubscriber(got.append, prefetch=1 << 20))
    publisher = HandingOn()
    handle = union.add(publisher, name="A")
    assert publisher.producer is not None and not publisher.producer.is_alive()
    assert publisher.errors == [] and publisher.sent == 8
    assert publisher.overlaps == 0  # RS §2.7
    # the credit the merge gave back was requested after all, once the first call returned
    assert publisher.calls[0] == 8 and sum(publisher.calls) > 8
    assert len(got) == 8 and handle.stats().received == 8
