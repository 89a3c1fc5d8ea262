"""Demand: saturation at MAX_DEMAND (RS §3.17) and bounded recursion (RS §3.3)."""

from __future__ import annotations

import concurrent.futures
import itertools
import threading

import pytest

from engine import MAX_DEMAND, SubscriptionBase, from_iterable, pipe
from engine.tck import ManualSubscriber, stack_depth
from operators.basic import map

TIMEOUT = 5.0


class Idle:
    """A subscriber that only keeps its subscription."""

    def __init__(self):
        self.subscription = None
        self.errors = []

    def on_subscribe(self, subscription):
        self.subscription = subscription

    def on_next(self, item):
        raise AssertionError("nothing should be delivered")

    def on_error(self, error):
        self.errors.append(error)

    def on_complete(self):
        pass


def idle_subscription():
    """The shared machinery with no elements to give: demand only accumulates."""
    subscriber = Idle()
    subscription = SubscriptionBase(subscriber)
    subscription.start()
    return subscription, subscriber


def test_two_max_requests_saturate():
    subscription, subscriber = idle_subscription()
    subscription.request(MAX_DEMAND)
    subscription.request(MAX_DEMAND)
    assert subscription.demand == MAX_DEMAND
    assert subscriber.errors == []


def test_many_requests_summing_past_max_saturate():
    subscription, subscriber = idle_subscription()
    step = MAX_DEMAND // 1000 + 1
    for _ in range(1000):
        subscription.request(step)
    assert subscription.demand == MAX_DEMAND


def test_concurrent_requests_summing_past_max_saturate():
    subscription, subscriber = idle_subscription()
    barrier = threading.Barrier(8)

    def hammer():
        barrier.wait(TIMEOUT)
        for _ in range(200):
            subscription.request(MAX_DEMAND // 100)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert subscription.demand == MAX_DEMAND
    assert subscriber.errors == []


def test_demand_below_max_is_exact():
    subscription, _ = idle_subscription()
    for n in (1, 2, 3, 10**12):
        subscription.request(n)
    assert subscription.demand == 6 + 10**12


def test_unbounded_demand_is_not_counted_down():
    probe = ManualSubscriber(register=False)
    from_iterable(range(100)).subscribe(probe)
    probe.request(MAX_DEMAND)
    probe.expect_nexts(100)
    probe.expect_complete()
    probe.check()


def test_max_demand_then_more_keeps_delivering_until_cancel():
    probe = ManualSubscriber(register=False, on_next_hook=lambda p, item: (
        p.cancel() if item == 5000 else p.request(MAX_DEMAND) if item % 1000 == 0 else None))
    from_iterable(itertools.count()).subscribe(probe)
    probe.request(MAX_DEMAND)
    assert probe.items == list(range(5001))
    probe.check()


# ------------------------------------------------------------------------------ recursion
def _depths(publisher, count):
    """Stack depth at every on_next while requesting 1 from inside each on_next."""
    probe = ManualSubscriber(register=False, timeout=TIMEOUT, measure_stack=True,
                             on_subscribe_hook=lambda p: p.request(1),
                             on_next_hook=lambda p, item: p.request(1))
    publisher.subscribe(probe)
    probe.wait_until(lambda: probe.terminal is not None, TIMEOUT * 4, "completion")
    probe.check()
    assert probe.received == count
    assert probe.max_nesting == 1, "on_next ran inside on_next (RS §3.3)"
    return probe.stack_depths


def test_request_from_on_next_keeps_the_stack_flat_over_100k_elements():
    depths = _depths(from_iterable(range(100_000)), 100_000)
    assert max(depths) == min(depths), (min(depths), max(depths))


def test_request_from_on_next_on_a_pool_keeps_the_stack_flat():
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        depths = _depths(from_iterable(range(20_000), executor=pool), 20_000)
    assert max(depths) - min(depths) <= 2  # a drain may start nested in another's turn


def test_fifty_stage_pipeline_keeps_the_stack_flat():
    stages = [map(lambda x: x + 1, prefetch=4) for _ in range(50)]
    depths = _depths(pipe(from_iterable(range(10_000)), *stages), 10_000)
    assert max(depths) - min(depths) <= 8, (min(depths), max(depths))
    assert max(depths) < 200  # not proportional to 50 stages × elements


def test_fifty_stage_pipeline_delivers_everything_in_order():
    stages = [map(lambda x: x + 1) for _ in range(50)]
    probe = ManualSubscriber(register=False)
    pipe(from_iterable(range(1000)), *stages).subscribe(probe)
    probe.request(MAX_DEMAND)
    assert probe.expect_nexts(1000) == [x + 50 for x in range(1000)]
    probe.expect_complete()


def test_stack_depth_helper_counts_frames():
    def inner():
        return stack_depth()
    assert inner() == stack_depth() + 1


@pytest.mark.parametrize("budget", [1, 7, 1024])
def test_bounded_turns_deliver_everything(budget):
    probe = ManualSubscriber(register=False)
    publisher = from_iterable(range(3000))
    publisher.subscribe(probe)
    probe.expect_subscribe().budget = budget
    probe.request(3000)
    probe.expect_nexts(3000)
    probe.expect_complete()
