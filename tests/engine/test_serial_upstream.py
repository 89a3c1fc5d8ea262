"""RS §2.7: a processor's calls on its upstream subscription are serial, from any thread."""

from __future__ import annotations

import random
import threading

import pytest

from engine import CallbackSubscriber, MAX_DEMAND, transform
from engine.stage import step_operator
from engine.subscription import SerialUpstream


class OverlapDetector:
    """A subscription that records whether two calls on it ever overlapped."""

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps = 0
        self.requested = 0
        self.cancels = 0
        self.lock = threading.Lock()

    def _enter(self) -> None:
        with self.lock:
            self.inside += 1
            if self.inside > 1:
                self.overlaps += 1

    def _leave(self) -> None:
        spin = 0
        for _ in range(200):  # widen the window in which an overlap would be seen
            spin += 1
        with self.lock:
            self.inside -= 1

    def request(self, n: int) -> None:
        self._enter()
        self.requested += n
        self._leave()

    def cancel(self) -> None:
        self._enter()
        self.cancels += 1
        self._leave()


def test_rs_2_7_requests_from_many_threads_never_overlap():
    target = OverlapDetector()
    serial = SerialUpstream(target)
    per_thread = 2_000
    barrier = threading.Barrier(4)

    def hammer(seed: int) -> None:
        rng = random.Random(seed)
        barrier.wait(timeout=10)
        for _ in range(per_thread):
            serial.request(rng.randint(1, 3))

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert target.overlaps == 0
    expected = 0
    for seed in range(4):
        rng = random.Random(seed)
        expected += sum(rng.randint(1, 3) for _ in range(per_thread))
    assert target.requested == expected  # nothing lost when calls were coalesced (RS §3.8)


def test_rs_3_17_coalesced_requests_saturate():
    seen = []

    class Reentrant:
        def request(self, n: int) -> None:
            seen.append(n)
            if len(seen) == 1:  # both arrive while the first call runs: coalesced
                serial.request(MAX_DEMAND)
                serial.request(MAX_DEMAND)

        def cancel(self) -> None:
            pass

    serial = SerialUpstream(Reentrant())
    serial.request(1)
    assert seen == [1, MAX_DEMAND]


def test_nothing_is_sent_after_cancel():
    target = OverlapDetector()
    serial = SerialUpstream(target)
    serial.request(5)
    serial.cancel()
    serial.cancel()
    serial.request(7)
    assert (target.requested, target.cancels) == (5, 1)


def test_a_request_from_inside_the_upstream_is_picked_up_not_nested():
    depth = []

    class Reentrant:
        inside = 0
        total = 0

        def request(self, n: int) -> None:
            self.inside += 1
            depth.append(self.inside)
            self.total += n
            if self.total < 50:
                serial.request(1)  # as an inline publisher's on_next → request would
            self.inside -= 1

        def cancel(self) -> None:
            pass

    target = Reentrant()
    serial = SerialUpstream(target)
    serial.request(1)
    assert target.total == 50
    assert max(depth) == 1  # RS §3.3


@pytest.mark.parametrize("build", ["stage", "transform"])
def test_processors_wrap_their_upstream(build):
    target = OverlapDetector()

    class Upstream:
        def subscribe(self, subscriber):
            subscriber.on_subscribe(target)

    identity = step_operator(lambda: (lambda x: (x,)), name="identity")
    if build == "stage":
        publisher = identity(Upstream())
    else:
        publisher = transform(identity)
        Upstream().subscribe(publisher)
    sink = CallbackSubscriber(lambda x: None)
    publisher.subscribe(sink)
    assert target.requested > 0
    sink.cancel()
    assert target.cancels == 1
