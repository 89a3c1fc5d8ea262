"""Credit shared among a union's inputs (TS §4.4, §4.5): each input holds at most its fair
share of the total bound, re-balanced as inputs join and leave, and with ``min_credit`` every
input holds some credit at once, however much the others hold unused."""

from __future__ import annotations

import pytest
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


# -- a refused send changes nothing (TS §3.4, §4.4) ------------------------------------------

def _refused_sends(emitter, bad, how: str, times: int) -> None:
    """``times`` calls that are refused (``bad`` is not an event the union takes), by a
    producer that logs the error and carries on."""
    import asyncio

    from engine.errors import InputError

    for _ in range(times):
        try:
            if how == "try_send":
                emitter.try_send(bad)
            elif how == "send_blocking":
                emitter.send_blocking(bad, timeout=1)
            else:
                asyncio.run(asyncio.wait_for(emitter.send(bad), 2))
        except (TypeError, InputError):
            pass
        else:
            raise AssertionError(f"{how}({bad!r}) was not refused")


@pytest.mark.parametrize("how", ["try_send", "send_blocking", "send"])
@pytest.mark.parametrize("bad", [{"bad": 1}, Event.start_edge("2026-11-22T08:00:00Z", "door")],
                         ids=["not_an_event", "edge_without_edges"])
def test_ts_3_4_a_refused_send_uses_no_credit_and_is_not_counted(how, bad):
    from operators import goldilocks

    union = Union(goldilocks("2s"), final_cti=True, prefetch=8, max_buffered=16)
    got: list = []
    union.subscribe(CallbackSubscriber(got.append, prefetch=1 << 20))
    a, b = union.open_input("A"), union.open_input("B")
    before = _credit(a)
    _refused_sends(a, bad, how, 8 + 3)  # more than the input's whole credit
    assert _credit(a) == before
    assert a.stats().received == 0 and a.stats().buffered == 0
    # the input still takes events: it was not jammed
    assert a.try_send(Event.point("2026-11-22T08:00:00Z", source="A"))
    assert a.send_blocking(Event.point("2026-11-22T08:00:01Z"), timeout=1)
    a.complete()
    b.complete()
    union.close()
    s = union.stats()
    assert s.done and s.buffered == 0
    assert s.received == s.emitted + s.dropped == 2  # TS §3.4: it balances
    assert [e for e in got if not e.is_cti] == [Event.point("2026-11-22T08:00:00Z", source="A"),
                                                Event.point("2026-11-22T08:00:01Z", source="A")]


def test_ts_3_4_a_batch_with_an_edge_under_a_policy_without_edges_is_refused_whole():
    from engine.errors import InputError

    union = _union(prefetch=8, max_buffered=16)
    a = union.open_input("A")
    batch = [Event.point(1), Event.start_edge(2, "door"), Event.point(3)]
    with pytest.raises(InputError, match="edge"):
        a.try_send_many(batch)
    assert a.stats().received == 0 and _credit(a) == 8  # nothing of the batch was counted
    assert a.try_send_many([Event.point(1), Event.point(3)]) == 2
    a.complete()
    union.close()
    assert union.stats().received == union.stats().emitted == 2
