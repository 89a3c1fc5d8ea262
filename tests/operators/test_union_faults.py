"""Who is blamed when a merge goes wrong: the union wraps only user code in ``try``.

- The subscriber's ``on_next`` raises: it broke RS §2.13. The violation is reported, its
  subscription cancelled, and the union goes on (it is hot): the next subscriber continues.
- The policy raises (``step``, ``step_many``, ``join``, ``leave``): the union fails with the
  policy's own error (RS §1.4), delivered at once (RS §4.2), the late output ended with it.
- The union's own work raises (here its accounting, fed output it cannot read): the union fails
  with that very error; nobody is reported as having broken RS §2.13 for it.

Each on every shape of the output: one event per ``on_next``, lists (``batches``), and settling
(no demand, the union closed: joins, leaves and late events are merged without a request).
"""

from __future__ import annotations

import pytest

from engine import MAX_DEMAND, ClosedError, Event
from engine.event import DROPPED
from engine.policy import LateEntry
from operators import Union, max_policy

SHAPES = ("events", "lists", "settling")


class Recorder:
    """Requests ``demand`` at once; records what it gets; raises from ``on_next`` if told."""

    def __init__(self, demand: int, raises: BaseException | None = None) -> None:
        self.demand = demand
        self.raises = raises
        self.items: list = []
        self.errors: list = []
        self.completed = 0

    def on_subscribe(self, subscription) -> None:
        if self.demand:
            subscription.request(self.demand)

    def on_next(self, item) -> None:
        self.items.append(item)
        if self.raises is not None:
            raise self.raises

    def on_error(self, error) -> None:
        self.errors.append(error)

    def on_complete(self) -> None:
        self.completed += 1


class Boom(Exception):
    pass


class Faulty:
    """``max_policy()``, except where ``where`` names the method and the arrival is marked
    ``"bad"`` (its payload, or an input named ``bad`` for join and leave): there it raises
    ``self.error`` or, ``malformed``, returns output the union cannot read."""

    name, delay, on_late = "faulty", 0, "drop"

    def __init__(self, where: str, malformed: bool = False) -> None:
        self.inner = max_policy()
        self.where = where
        self.malformed = malformed
        self.error = Boom(f"the policy's {where} failed")

    def _fault(self, where: str, bad: bool, state):
        if where != self.where or not bad:
            return None
        if not self.malformed:
            raise self.error
        return state, ("not an event, not a late record",)

    def initial(self):
        return self.inner.initial()

    def step(self, state, event):
        return (self._fault("step", event.payload == "bad", state)
                or self.inner.step(state, event))

    def join(self, state, source):
        return self._fault("join", source == "bad", state) or self.inner.join(state, source)

    def leave(self, state, source):
        return self._fault("leave", source == "bad", state) or self.inner.leave(state, source)


class FaultyMany(Faulty):
    """``Faulty`` with a ``step_many`` (the batch path), faulty on a batch holding a "bad"
    event: malformed, it reports a late entry for an input that sent nothing."""

    def step_many(self, state, events):
        if any(e.payload == "bad" for e in events):
            if not self.malformed:
                raise self.error
            ghost = Event.point(0, source="nobody")
            return state, list(events), [LateEntry("nobody", ghost, 0, DROPPED, None)], []
        return self.inner.step_many(state, events)


def _subscribe(union: Union, shape: str, subscriber: Recorder) -> None:
    (union.batches(4) if shape == "lists" else union).subscribe(subscriber)


def _drive(union: Union, where: str) -> None:
    """Arrivals that reach ``where`` with a "bad" mark, before any element is due (so that
    settling, which stops at the first, gets to it too)."""
    a = union.open_input("A")
    if where == "step":
        a.try_send(Event.point(2, payload="bad"))
    elif where == "step_many":
        b = union.open_input("B")
        union.feed_events([Event.point(2, source="A"), Event.point(3, "bad", source="B")])
        b.complete()
    elif where == "join":
        union.open_input("bad")
    else:
        union.open_input("bad").complete()
    a.complete()


def _run(policy: Faulty, shape: str) -> tuple[Union, Recorder, Recorder]:
    union = Union(policy)
    out = Recorder(0 if shape == "settling" else MAX_DEMAND)
    late = Recorder(MAX_DEMAND)
    _subscribe(union, shape, out)
    union.late.subscribe(late)
    _drive(union, policy.where)
    if shape == "settling":
        union.close()  # merging without demand is what closing asks for
    return union, out, late


WHERES = [("step", Faulty), ("step_many", FaultyMany), ("join", Faulty), ("leave", Faulty)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("where, kind", WHERES, ids=[w for w, _ in WHERES])
def test_rs_1_4_a_policy_that_raises_fails_the_union_with_its_own_error(shape, where, kind,
                                                                        violations):
    policy = kind(where)
    union, out, late = _run(policy, shape)
    assert out.errors == [policy.error] and out.completed == 0  # RS §4.2: at once, as itself
    assert late.errors == [policy.error]
    assert union.stats().done
    assert violations == []  # the subscriber did nothing wrong
    with pytest.raises(ClosedError):
        union.open_input("more")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("where, kind, error",
                         [("step", Faulty, AttributeError),
                          ("step_many", FaultyMany, KeyError),
                          ("join", Faulty, AttributeError),
                          ("leave", Faulty, AttributeError)],
                         ids=[w for w, _ in WHERES])
def test_a_defect_in_the_unions_own_work_fails_it_with_that_error_and_blames_nobody(
        shape, where, kind, error, violations):
    """Output the union's accounting cannot read makes the union's own code raise; that
    error is what the subscriber gets, not a report that the subscriber broke RS §2.13."""
    union, out, late = _run(kind(where, malformed=True), shape)
    assert [type(e) for e in out.errors] == [error] and out.completed == 0
    assert late.errors == out.errors
    assert union.stats().done
    assert violations == []


@pytest.mark.parametrize("shape", ["events", "lists"])
def test_rs_2_13_a_subscriber_that_raises_is_cancelled_and_the_union_goes_on(shape,
                                                                             violations):
    union = Union(max_policy())
    broken = Boom("the subscriber's on_next failed")
    first = Recorder(MAX_DEMAND, raises=broken)
    _subscribe(union, shape, first)
    a = union.open_input("A")
    assert a.try_send(Event.point(1))
    assert [v.rule for v in violations] == ["RS §2.13"] and violations[0].cause is broken
    assert first.errors == [] and first.completed == 0  # cancelled: nothing more for it
    assert not union.stats().done  # the union itself is fine
    a.try_send(Event.point(2))
    a.try_send(Event.point(3))
    second = Recorder(MAX_DEMAND)
    _subscribe(union, shape, second)  # hot: continues after what the first one was handed
    a.complete()
    union.close()
    got = [e.start for item in second.items for e in (item if shape == "lists" else [item])]
    assert got == [2, 3] and second.completed == 1 and second.errors == []
    assert len(violations) == 1
