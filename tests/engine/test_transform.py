"""transform and Multicast (design.md §6.5): shared by N subscribers, paced by the slowest,
bounded buffer, upstream cancelled with the last subscriber, errors to all at once (RS §4.2),
late subscribers get the terminal signal."""

from __future__ import annotations

import itertools
import threading

import pytest

from engine import MAX_DEMAND, ClosedError, Multicast, failed, from_iterable, transform
from engine.tck import ManualSubscriber, ManualSubscription
from operators.basic import map, scan

TIMEOUT = 2.0


class Tracked:
    def __init__(self):
        self.closed = threading.Event()
        self.pulled = 0

    def __iter__(self):
        try:
            for value in itertools.count():
                self.pulled += 1
                yield value
        finally:
            self.closed.set()


def probes(count):
    return [ManualSubscriber(f"subscriber-{i}", register=False) for i in range(count)]


def test_shared_by_n_subscribers_each_sees_the_same_output_once():
    processor = transform(scan(lambda acc, x: acc + x, 0), capacity=8)
    subscribers = probes(3)
    for probe in subscribers:
        processor.subscribe(probe)
        probe.request(MAX_DEMAND)
    from_iterable(range(100)).subscribe(processor)
    expected = list(itertools.accumulate(range(100)))
    for probe in subscribers:
        assert probe.expect_nexts(100) == expected  # fn ran once, shared (not per subscriber)
        probe.expect_complete()
        probe.check()


def test_paced_by_the_slowest_and_memory_bounded_by_capacity():
    source = Tracked()
    processor = transform(map(lambda x: x, prefetch=4), capacity=16)
    fast, slow = probes(2)
    processor.subscribe(fast)
    processor.subscribe(slow)
    fast.request(MAX_DEMAND)
    from_iterable(source).subscribe(processor)
    for step in range(1, 50):
        slow.request(1)
        slow.expect_next()
        stats = processor.stats()
        assert stats.buffered <= stats.capacity == 16
        assert fast.received <= slow.received + 16 + 4, (fast.received, slow.received)
        assert source.pulled <= slow.received + 16 + 4 + 4 + 1  # + stage prefetch + lookahead
    assert processor.stats().peak <= 16
    fast.cancel()
    slow.cancel()
    assert source.closed.wait(TIMEOUT)


def test_upstream_cancelled_only_when_the_last_subscriber_cancels():
    upstream = ManualSubscription()
    processor = transform(lambda p: p, capacity=8)
    processor.on_subscribe(upstream)
    subscribers = probes(3)
    for probe in subscribers:
        processor.subscribe(probe)
        probe.request(1)
    for probe in subscribers[:-1]:
        probe.cancel()
        assert not upstream.cancelled
    subscribers[-1].cancel()
    upstream.expect_cancel()
    late = ManualSubscriber("late", register=False)
    processor.subscribe(late)
    late.expect_error(ClosedError)  # closed after its last subscriber left: says so


def test_upstream_error_reaches_every_subscriber_at_once_regardless_of_demand():
    upstream = ManualSubscription()
    processor = transform(map(str, prefetch=4), capacity=8)
    processor.on_subscribe(upstream)
    idle, hungry = probes(2)
    processor.subscribe(idle)
    processor.subscribe(hungry)
    hungry.request(1)
    upstream.expect_demand(3)
    for i in range(3):
        processor.on_next(i)
    hungry.expect_next()
    assert processor.stats().buffered >= 1  # elements wait for `idle`
    error = RuntimeError("upstream failed")
    processor.on_error(error)
    assert idle.expect_error(RuntimeError) is error  # ahead of the buffered elements
    assert hungry.expect_error(RuntimeError) is error
    for probe in (idle, hungry):
        probe.check()


def test_subscriber_after_completion_gets_on_complete():
    processor = transform(map(str), capacity=8)
    early = ManualSubscriber("early", register=False)
    processor.subscribe(early)
    early.request(MAX_DEMAND)
    from_iterable(range(3)).subscribe(processor)
    early.expect_nexts(3)
    early.expect_complete()
    late = ManualSubscriber("late", register=False)
    processor.subscribe(late)
    late.expect_complete()
    late.check()


def test_subscriber_after_error_gets_the_error():
    processor = transform(lambda p: p)
    failed(KeyError("gone")).subscribe(processor)
    late = ManualSubscriber("late", register=False)
    processor.subscribe(late)
    assert isinstance(late.expect_error(KeyError), KeyError)


def test_error_from_fn_pipeline_reaches_subscribers():
    processor = transform(map(lambda x: 1 // (x - 2)), capacity=8)
    probe = ManualSubscriber(register=False)
    processor.subscribe(probe)
    probe.request(10)
    source = Tracked()
    from_iterable(source).subscribe(processor)
    terminal = probe.expect_terminal()  # errors overtake buffered elements (RS §4.2)
    assert isinstance(terminal.value, ZeroDivisionError)
    assert probe.items == [-1, -1][:len(probe.items)]
    assert source.closed.wait(TIMEOUT)  # the failing stage cancelled the input


def test_multicast_late_subscriber_sees_only_later_elements():
    upstream = ManualSubscription()
    multicast = Multicast(capacity=4)
    multicast.on_subscribe(upstream)
    first = ManualSubscriber("first", register=False)
    multicast.subscribe(first)
    first.request(MAX_DEMAND)
    upstream.expect_demand(2)
    multicast.on_next("a")
    multicast.on_next("b")
    second = ManualSubscriber("second", register=False)
    multicast.subscribe(second)
    second.request(MAX_DEMAND)
    upstream.expect_demand(3)
    multicast.on_next("c")
    multicast.on_complete()
    assert first.expect_nexts(3) == ["a", "b", "c"]
    assert second.expect_nexts(1) == ["c"]
    first.expect_complete()
    second.expect_complete()


def test_multicast_asks_upstream_only_for_free_space():
    upstream = ManualSubscription()
    multicast = Multicast(capacity=8)
    multicast.on_subscribe(upstream)
    assert upstream.requested == 0  # no subscriber, no demand
    probe = ManualSubscriber(register=False)
    multicast.subscribe(probe)
    assert upstream.requested == 8
    for i in range(8):
        multicast.on_next(i)
    assert multicast.stats().buffered == 8 and upstream.requested == 8
    probe.request(3)
    assert upstream.requested == 8  # 3 free: below the half-capacity batch
    probe.request(2)
    assert upstream.requested == 13
    upstream.check()


# ------------------------------------------------------------------------------ batch mode
def batch_multicast(capacity: int, batch: int, **options):
    """A batch-mode multicast and the upstream subscription it was given."""
    upstream = ManualSubscription()
    multicast = Multicast(capacity=capacity, batch=batch, **options)
    multicast.on_subscribe(upstream)
    return multicast, upstream


def test_batch_mode_asks_upstream_for_lists_and_holds_at_most_capacity_elements():
    multicast, upstream = batch_multicast(8, 2)
    probe = ManualSubscriber(register=False)
    multicast.subscribe(probe)
    assert upstream.requested == 4  # lists of up to 2: 8 elements
    for i in range(4):
        multicast.on_next([2 * i, 2 * i + 1])
    stats = multicast.stats()
    assert stats.buffered == stats.peak == stats.capacity == 8
    assert upstream.requested == 4  # full: nothing more until the subscriber takes
    probe.request(2)  # two lists: four elements leave, two lists of room
    assert probe.expect_nexts(2) == [[0, 1], [2, 3]]
    assert upstream.requested == 6 and multicast.stats().buffered == 4
    upstream.check()


def test_batch_mode_each_subscriber_gets_the_same_elements_in_lists_of_at_most_batch():
    multicast, upstream = batch_multicast(12, 4)
    fast, slow = probes(2)
    multicast.subscribe(fast)
    multicast.subscribe(slow)
    fast.request(MAX_DEMAND)
    for chunk in ([0], [1, 2], [3, 4, 5]):
        multicast.on_next(chunk)
    assert fast.expect_nexts(3) == [[0], [1, 2], [3, 4, 5]]  # kept up: upstream's lists
    slow.request(MAX_DEMAND)  # fell behind: catches up in full lists, never an empty one
    assert slow.expect_nexts(2) == [[0, 1, 2, 3], [4, 5]]
    multicast.on_complete()
    fast.expect_complete()
    slow.expect_complete()


def test_batch_mode_elements_share_the_buffer_one_element_at_a_time():
    multicast, upstream = batch_multicast(4, 2)
    lists, one_by_one = probes(2)
    multicast.subscribe(lists)
    multicast.elements().subscribe(one_by_one)
    lists.request(MAX_DEMAND)
    multicast.on_next(["a", "b"])
    multicast.on_next(["c"])
    assert lists.expect_nexts(2) == [["a", "b"], ["c"]]
    one_by_one.request(2)
    assert one_by_one.expect_nexts(2) == ["a", "b"]
    assert multicast.stats().buffered == 1  # "c": the element subscriber has not taken it
    multicast.on_error(RuntimeError("upstream failed"))
    lists.expect_error(RuntimeError)
    one_by_one.expect_error(RuntimeError)  # RS §4.2: at once, demand or not


def test_batch_mode_refuses_a_batch_it_cannot_bound():
    for batch in (0, 9, True, 2.0):
        with pytest.raises(ValueError, match="batch must be an int from 1 to the capacity"):
            Multicast(capacity=8, batch=batch)


# ------------------------------------------------------------------------------ live
def test_live_takes_from_upstream_without_subscribers_and_outlives_the_last_one():
    multicast, upstream = batch_multicast(4, 2, live=True)
    assert upstream.requested == 2  # nobody there: it asks anyway ...
    multicast.on_next([1, 2])
    multicast.on_next([3, 4])
    assert multicast.stats().buffered == 0 and upstream.requested == 4  # ... and lets go
    first, second = probes(2)
    for probe, sent in ((first, [5]), (second, [7])):
        multicast.subscribe(probe)
        probe.request(1)
        multicast.on_next(sent)
        assert probe.expect_nexts(1) == [sent]  # not [6]: nobody was there to take it
        if probe is first:
            first.cancel()
            assert not upstream.cancelled  # its last subscriber left: it stays subscribed
            multicast.on_next([6])
    multicast.on_complete()
    second.expect_complete()
    upstream.check()

