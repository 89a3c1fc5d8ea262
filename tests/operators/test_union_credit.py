"""Credit shared among a union's inputs (TS §4.4, §4.5): each input holds at most its fair
share of the total bound, re-balanced as inputs join and leave, and with ``min_credit`` every
input holds some credit at once, however much the others hold unused."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import CallbackSubscriber, Event
from operators import Union, max_policy


def _union(prefetch: int, max_buffered: int, min_credit: int = 0) -> Union:
    extra = {"min_credit": min_credit} if min_credit else {}
    union = Union(max_policy(), prefetch=prefetch, max_buffered=max_buffered, **extra)
    union.subscribe(CallbackSubscriber(lambda e: None, prefetch=1 << 20))  # takes everything
    return union


def _credit(emitter) -> int:
    return emitter._credit()


def _spend(emitter, t: int = 0) -> int:
    """Send as many points as ``emitter``'s credit allows; how many that was."""
    n = _credit(emitter)
    assert emitter.try_send_many([Event.point(t + i) for i in range(n)]) == n
    return n


def test_ts_4_5_an_input_joining_a_spent_bound_gets_credit_as_the_others_use_theirs():
    union = _union(prefetch=32, max_buffered=64)
    a, b = union.open_input("a"), union.open_input("b")
    assert (_credit(a), _credit(b)) == (32, 32)  # two shares of 64, capped by the prefetch
    c = union.open_input("c")
    assert _credit(c) == 0                        # the bound is spent, and nothing is over it
    _spend(a)
    # a is topped up to at most its share among three (64 // 3 = 21); what it gave back and
    # does not take goes to c
    assert 1 <= _credit(a) <= 21 and _credit(c) >= 1
    assert _credit(a) + _credit(b) + _credit(c) <= 64
    b.complete()  # b leaves: shares grow to 32
    for _ in range(3):
        _spend(a)
        _spend(c)
    assert _credit(a) == _credit(c) == 32
    assert union.stats().peak_buffered <= 64


def test_ts_4_5_with_min_credit_an_input_gets_credit_at_once_beyond_the_bound():
    union = _union(prefetch=32, max_buffered=64, min_credit=2)
    a, b = union.open_input("a"), union.open_input("b")
    c = union.open_input("c")
    assert (_credit(a), _credit(b), _credit(c)) == (32, 32, 2)
    assert _spend(c) == 2 and _credit(c) == 2  # and again, as long as the others hold theirs
    stats = union.stats()
    assert stats.min_credit == 2 and stats.peak_buffered <= 64 + 3 * 2


_ops = st.lists(st.tuples(st.sampled_from(["open", "spend", "half", "leave"]),
                          st.integers(0, 7)), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(_ops, st.integers(1, 40), st.integers(1, 120), st.sampled_from([0, 0, 1, 3]))
def test_ts_4_4_and_4_5_hold_as_inputs_come_go_and_spend(ops, prefetch, max_buffered,
                                                         min_credit):
    """Whatever inputs do: the total held stays within the bound (plus ``min_credit`` each),
    no input holds more than its prefetch (or ``min_credit``), and with ``min_credit`` every
    input holds credit after every step."""
    union = _union(prefetch, max_buffered, min_credit)
    live: dict[int, object] = {}
    opened = 0
    t = 0
    for op, k in ops:
        if op == "open" or not live:
            live[opened] = union.open_input(f"in-{opened}")
            opened += 1
        else:
            key = sorted(live)[k % len(live)]
            emitter = live[key]
            if op == "leave":
                emitter.complete()
                del live[key]
            else:
                n = _credit(emitter) if op == "spend" else (_credit(emitter) + 1) // 2
                sent = emitter.try_send_many([Event.point(t + i) for i in range(n)])
                assert sent == n
                t += n
        held = [_credit(e) for e in live.values()]
        assert sum(held) <= max_buffered + min_credit * len(live)      # TS §4.4, §4.5
        assert all(h <= max(prefetch, min_credit) for h in held)
        if min_credit:
            assert all(h >= 1 for h in held), held                     # TS §4.5
    stats = union.stats()
    assert stats.peak_buffered <= max_buffered + min_credit * opened
    assert stats.received == stats.emitted == t
