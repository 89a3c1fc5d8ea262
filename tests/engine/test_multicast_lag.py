"""``Multicast(max_lag=True)``: subscribers never slow upstream; one more than ``capacity``
elements behind is cut off with ``TooSlowError`` and its position; positions start at
``start`` and a subscriber may join at any position still held."""

from __future__ import annotations

import pytest

from engine.contracts import MAX_DEMAND
from engine.errors import TooSlowError
from engine.multicast import Multicast


class Upstream:
    def __init__(self):
        self.requests: list[int] = []
        self.cancelled = False

    def request(self, n):
        self.requests.append(n)

    def cancel(self):
        self.cancelled = True


class Member:
    def __init__(self, demand=0):
        self.items: list = []
        self.error = None
        self.completed = False
        self.demand = demand

    def on_subscribe(self, s):
        self.s = s
        if self.demand:
            s.request(self.demand)

    def on_next(self, item):
        self.items.append(item)

    def on_error(self, e):
        self.error = e

    def on_complete(self):
        self.completed = True


def _lagging(capacity=8, start=0):
    multicast = Multicast(capacity, live=True, max_lag=True, start=start, name="out")
    upstream = Upstream()
    multicast.on_subscribe(upstream)
    return multicast, upstream


def test_upstream_is_asked_for_everything_once_whatever_the_subscribers_do():
    multicast, upstream = _lagging()
    stalled = Member(demand=2)
    multicast.subscribe(stalled)
    for i in range(100):
        multicast.on_next(i)
    assert upstream.requests == [MAX_DEMAND] and not upstream.cancelled


def test_a_subscriber_more_than_capacity_behind_is_cut_off_at_its_position():
    multicast, _ = _lagging(capacity=8, start=1000)
    keeping_up, stalled = Member(demand=MAX_DEMAND), Member(demand=3)
    multicast.subscribe(keeping_up)
    multicast.subscribe(stalled)
    for i in range(11):
        multicast.on_next(i)
    assert stalled.error is None  # 3 taken, 8 held for it: exactly the bound
    multicast.on_next(11)
    assert isinstance(stalled.error, TooSlowError)
    assert (stalled.error.position, stalled.error.bound) == (1003, 8)
    assert "more than 8 elements behind" in str(stalled.error)
    assert stalled.items == [0, 1, 2] and keeping_up.items == list(range(12))
    stats = multicast.stats()
    assert (stats.cut, stats.subscribers, stats.position) == (1, 1, 1012)
    assert stats.buffered == 0  # nobody behind: nothing kept


def test_a_subscriber_may_join_at_a_position_still_held_and_not_elsewhere():
    multicast, _ = _lagging(capacity=8, start=50)
    behind = Member(demand=1)
    multicast.subscribe(behind)
    for i in range(6):
        multicast.on_next(i)
    assert multicast.held() == (51, 56)
    late = Member(demand=MAX_DEMAND)
    multicast.join_at(late, 53)
    assert late.items == [3, 4, 5]
    with pytest.raises(ValueError, match="position 50 is not held; expected 51 to 56"):
        multicast.join_at(Member(), 50)
    with pytest.raises(ValueError, match="not held"):
        multicast.join_at(Member(), 57)


def test_bounded_lag_needs_a_live_multicast():
    with pytest.raises(ValueError, match="max_lag needs live=True"):
        Multicast(8, max_lag=True)
