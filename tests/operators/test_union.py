"""The Union: properties over arbitrary arrival orders against the brute-force reference models,
the worked example of design.md §4.2, lifecycle, accounting and backpressure.

Arrivals are driven from the test's thread (emitters' ``try_send``, or publishers whose signals
are tapped), so the arrival order the union sees is known exactly and can be replayed through
``tests/reference.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import (MAX_DEMAND, CallbackSubscriber, ClosedError, Event, InputError,
                    LateRecord, collect, from_iterable, transform)
from engine.event import ADJUSTED, CTI, DROPPED
from engine.times import MAX_TIME, format_ns
from engine.times import Nanoseconds
from operators import Union, cti_sync, goldilocks, max_policy, min_policy
from operators.union import ACTIVE, COMPLETED, FAILED, REMOVED
from tests.reference import reference_goldilocks, reference_min
from tests.waiting import wait_until

TIMEOUT = 10.0
MINUTE = 60 * 10**9
NAMES = "ABCDE"


# ------------------------------------------------------------------------------- helpers
class Probe:
    """A subscriber that requests only when told and records every signal (thread-safe)."""

    def __init__(self, initial: int = 0) -> None:
        self.initial = initial
        self.items: list = []
        self.errors: list = []
        self.completed = 0
        self.subscription = None
        self.requested = 0
        self.overrun = 0
        self.cond = threading.Condition()
        self.cancel_after: int | None = None

    def on_subscribe(self, subscription) -> None:
        self.subscription = subscription
        if self.initial:
            self.request(self.initial)

    def on_next(self, item) -> None:
        with self.cond:
            self.items.append(item)
            if len(self.items) > self.requested:
                self.overrun += 1  # RS §1.1
            self.cond.notify_all()
        if self.cancel_after is not None and len(self.items) >= self.cancel_after:
            self.subscription.cancel()

    def on_error(self, error) -> None:
        with self.cond:
            self.errors.append(error)
            self.cond.notify_all()

    def on_complete(self) -> None:
        with self.cond:
            self.completed += 1
            self.cond.notify_all()

    def request(self, n: int) -> None:
        with self.cond:
            self.requested = min(self.requested + n, MAX_DEMAND)
        self.subscription.request(n)

    def wait(self, predicate, timeout: float = TIMEOUT) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self), timeout), \
                f"timed out; items={len(self.items)} errors={self.errors} " \
                f"completed={self.completed}"

    @property
    def terminated(self) -> bool:
        return bool(self.errors) or self.completed > 0


def check_output(items: list[Event]) -> None:
    """TS §2.1 (CTIs strictly increase) and TS §2.3 (no insert before the last emitted CTI)."""
    last = None
    for item in items:
        if item.kind == CTI:
            assert last is None or item.start > last, f"CTI {item.start} after {last} (TS §2.1)"
            last = item.start
        else:
            assert last is None or item.start >= last, \
                f"insert at {item.start} after CTI {last} (TS §2.3)"


def reference(policy_name: str, delay: int, on_late: str, arrivals: list):
    if policy_name == "min":
        return reference_min(arrivals, on_late)
    return reference_goldilocks(arrivals, delay if policy_name == "goldilocks" else 0, on_late)


def make_policy(policy_name: str, delay: int, on_late: str):
    if policy_name == "min":
        return min_policy(on_late)
    if policy_name == "max":
        return max_policy(on_late)
    return goldilocks(Nanoseconds(delay), on_late)


POLICIES = st.sampled_from([("goldilocks", 0), ("goldilocks", 3), ("goldilocks", 10),
                            ("goldilocks", 25), ("max", 0), ("min", 0)])
ON_LATE = st.sampled_from(["drop", "adjust"])

times = st.integers(-20, 60)
event_specs = st.one_of(
    st.tuples(st.just("point"), times, st.just(0)),
    st.tuples(st.just("interval"), times, st.integers(1, 30)),
    st.tuples(st.just("cti"), times, st.just(0)),
    st.tuples(st.just("cti"), st.sampled_from([MAX_TIME - 1, MAX_TIME]), st.just(0)),
)


def build_event(spec, name: str) -> Event:
    kind, t, n = spec
    if kind == "point":
        return Event.point(t, payload=t, source=name)
    if kind == "interval":
        return Event.interval(t, t + n, payload=(t, n), source=name)
    return Event.cti(t, source=name)


ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 4), event_specs),
        st.tuples(st.just("send"), st.integers(0, 4), event_specs),
        st.tuples(st.just("send"), st.integers(0, 4), event_specs),
        st.tuples(st.just("leave"), st.integers(0, 4),
                  st.sampled_from(["complete", "error", "remove"])),
        st.tuples(st.just("request"), st.integers(1, 12), st.just(None)),
    ),
    max_size=60,
)


def assert_accounting(stats, late_records=None) -> None:
    """TS §3.4: per input received = emitted + dropped + buffered; adjusted counted apart;
    TS §3.3: one late record per dropped or adjusted event."""
    for s in stats.inputs:
        assert s.received == s.emitted + s.dropped + s.buffered, s
        assert s.buffered <= s.prefetch and s.peak_buffered <= s.prefetch, s
    if late_records is not None:  # by name: an input may leave and come back under its name
        for name in {s.name for s in stats.inputs}:
            mine = [r for r in late_records if r.input == name]
            same = [s for s in stats.inputs if s.name == name]
            assert sum(s.dropped for s in same) == sum(r.action == DROPPED for r in mine)
            assert sum(s.adjusted for s in same) == sum(r.action == ADJUSTED for r in mine)
    assert stats.peak_buffered <= stats.max_buffered
    assert stats.buffered <= stats.max_buffered


# ------------------------------------------------------------------------------- properties
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=POLICIES, on_late=ON_LATE, ops=ops_strategy, k=st.integers(2, 5),
       prefetch=st.integers(1, 8), spare=st.integers(0, 30), initial=st.integers(0, 20),
       final_cti=st.booleans())
def test_emitters_match_the_reference_on_any_arrival_order(policy, on_late, ops, k, prefetch,
                                                            spare, initial, final_cti):
    policy_name, delay = policy
    union = Union(make_policy(policy_name, delay, on_late), prefetch=prefetch,
                  max_buffered=prefetch + spare, final_cti=final_cti)
    probe = Probe(initial)
    union.subscribe(probe)
    arrivals: list = []
    open_inputs: dict[str, object] = {}
    generation: dict[str, int] = {}
    how_left: dict[str, str] = {}

    def open_(name):
        open_inputs[name] = union.open_input(name)
        arrivals.append(("join", name))

    for name in NAMES[:k]:
        open_(name)
    refused = 0
    for verb, index, arg in ops:
        name = NAMES[index % k]
        if verb == "request":
            probe.request(index)
        elif verb == "send":
            if name not in open_inputs:
                open_(name)  # an input joining late (or coming back under the same name)
            event = build_event(arg, name)
            for _ in range(3):
                if open_inputs[name].try_send(event):
                    arrivals.append(event)
                    break
                probe.request(8)  # no credit: demand drains the queue and credit returns
            else:
                refused += 1  # the total bound is held by other inputs' unused credit
        elif name in open_inputs:
            emitter = open_inputs.pop(name)
            if arg == "complete":
                emitter.complete()
            elif arg == "error":
                emitter.error(RuntimeError(f"{name} broke"))
            else:
                emitter.remove()
            arrivals.append(("leave", name))
            generation[name] = generation.get(name, 0) + 1
            how_left[name] = arg
        check_output(probe.items)
        assert probe.overrun == 0  # RS §1.1
        assert_accounting(union.stats())  # mid-run: bounds and received = … + buffered
    for name, emitter in list(open_inputs.items()):
        emitter.complete()
        arrivals.append(("leave", name))
    union.close()
    probe.request(MAX_DEMAND)
    # everything runs on this thread: the union has finished by now (no waiting)
    assert probe.completed == 1 and not probe.errors and probe.overrun == 0, union.stats()

    expected, expected_late = reference(policy_name, delay, on_late, arrivals)
    out = list(probe.items)
    if final_cti and (not any(e.kind == CTI for e in expected)
                      or max(e.start for e in expected if e.kind == CTI) < MAX_TIME):
        expected.append(Event.cti(MAX_TIME))
    assert out == expected
    check_output(out)
    late = union.late.drain()
    assert late == expected_late  # TS §3.3: every late event has its record
    stats = union.stats()
    assert stats.done and stats.closed and stats.buffered == 0
    assert_accounting(stats, late)
    sent = sum(1 for a in arrivals if isinstance(a, Event))
    assert sum(s.received + s.ctis for s in stats.inputs) == sent
    assert stats.emitted == sum(1 for e in out if e.kind != CTI)
    assert stats.ctis == sum(1 for e in out if e.kind == CTI)
    for s in stats.inputs:
        assert s.state != ACTIVE


class BatchProbe(Probe):
    """A ``Probe`` on ``Union.batches()``: demand counts lists; ``items`` is their events."""

    def __init__(self, initial: int = 0, max_batch: int = 1) -> None:
        super().__init__(initial)
        self.max_batch = max_batch
        self.batches: list[list] = []
        self.bad_batches = 0

    def on_next(self, batch) -> None:
        with self.cond:
            if not isinstance(batch, list) or not 0 < len(batch) <= self.max_batch:
                self.bad_batches += 1
            self.batches.append(batch)
            self.items.extend(batch)
            if len(self.batches) > self.requested:
                self.overrun += 1  # RS §1.1: counted in lists
            self.cond.notify_all()


batch_ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 4), event_specs),
        st.tuples(st.just("send_many"), st.integers(0, 4), st.lists(event_specs, max_size=12)),
        st.tuples(st.just("feed"), st.integers(0, 12),
                  st.lists(st.tuples(st.integers(0, 4), event_specs), max_size=20)),
        st.tuples(st.just("leave"), st.integers(0, 4),
                  st.sampled_from(["complete", "error", "remove"])),
        st.tuples(st.just("request"), st.integers(1, 12), st.just(None)),
    ),
    max_size=40,
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=POLICIES, on_late=ON_LATE, ops=batch_ops_strategy, k=st.integers(2, 5),
       prefetch=st.integers(1, 16), spare=st.integers(0, 40), initial=st.integers(0, 20),
       final_cti=st.booleans(), max_batch=st.one_of(st.just(0), st.integers(1, 9)))
def test_batch_paths_match_the_reference_on_any_arrival_order(policy, on_late, ops, k,
                                                               prefetch, spare, initial,
                                                               final_cti, max_batch):
    """try_send_many, feed, feed_columns and feed_events queue whole batches that the policy
    runs over in one loop, and batches() hands the output over in lists: on any interleaving, with any demand, the
    events out (flattened), the late records and the accounting are the reference model's.
    ``max_batch`` 0: a per-element subscriber on the same batch inputs."""
    policy_name, delay = policy
    union = Union(make_policy(policy_name, delay, on_late), prefetch=prefetch,
                  max_buffered=prefetch + spare, final_cti=final_cti)
    if max_batch:
        probe = BatchProbe(initial, max_batch)
        union.batches(max_batch).subscribe(probe)
    else:
        probe = Probe(initial)
        union.subscribe(probe)
    arrivals: list = []
    open_inputs: dict[str, object] = {}

    def open_(name):
        open_inputs[name] = union.open_input(name)
        arrivals.append(("join", name))

    for name in NAMES[:k]:
        open_(name)
    for verb, index, arg in ops:
        name = NAMES[index % k]
        if verb == "request":
            probe.request(index)
        elif verb in ("send", "send_many"):
            if name not in open_inputs:
                open_(name)
            events = [build_event(spec, name) for spec in (arg if verb == "send_many" else [arg])]
            while events:
                n = open_inputs[name].try_send_many(events)
                arrivals.extend(events[:n])
                events = events[n:]
                if events and not n:
                    probe.request(8)  # no credit: demand drains the queue, credit returns
                    if not open_inputs[name].try_send_many(events[:1]):
                        break  # the total bound is held by other inputs' unused credit
                    arrivals.append(events.pop(0))
        elif verb == "feed":
            for i, _ in arg:
                if NAMES[i % k] not in open_inputs:
                    open_(NAMES[i % k])
            block = [(open_inputs[NAMES[i % k]], build_event(spec, NAMES[i % k]))
                     for i, spec in arg]
            way = index % 4
            # ways 0 and 1 send the events unnamed: the union names them after their input
            sends = [(em, e.with_source(None) if way < 2 else e) for em, e in block]
            if way == 3:  # each event's source names its input
                sent = union.feed_events([e for _, e in sends], chunk=1 + index)
            elif way == 1:
                sent = union.feed(sends, chunk=1 + index)
            else:  # the same arrivals as columns
                sent = union.feed_columns([em for em, _ in sends], [e for _, e in sends],
                                          chunk=1 + index)
            arrivals.extend(event for _, event in block[:sent])
        elif name in open_inputs:
            emitter = open_inputs.pop(name)
            getattr(emitter, arg)(*([RuntimeError(name)] if arg == "error" else []))
            arrivals.append(("leave", name))
        check_output(probe.items)
        assert probe.overrun == 0  # RS §1.1
        assert_accounting(union.stats())
    for name, emitter in list(open_inputs.items()):
        emitter.complete()
        arrivals.append(("leave", name))
    union.close()
    probe.request(MAX_DEMAND)
    assert probe.completed == 1 and not probe.errors and probe.overrun == 0, union.stats()
    assert getattr(probe, "bad_batches", 0) == 0

    expected, expected_late = reference(policy_name, delay, on_late, arrivals)
    if final_cti and (not any(e.kind == CTI for e in expected)
                      or max(e.start for e in expected if e.kind == CTI) < MAX_TIME):
        expected.append(Event.cti(MAX_TIME))
    assert probe.items == expected
    late = union.late.drain()
    assert late == expected_late  # TS §3.3
    stats = union.stats()
    assert stats.done and stats.buffered == 0
    assert_accounting(stats, late)
    assert sum(s.received + s.ctis for s in stats.inputs) == \
        sum(1 for a in arrivals if isinstance(a, Event))
    assert stats.emitted == sum(1 for e in probe.items if e.kind != CTI)
    assert stats.ctis == sum(1 for e in probe.items if e.kind == CTI)
    for name in {s.name for s in stats.inputs}:  # per input, by name (names come back)
        sent = [a for a in arrivals if isinstance(a, Event) and a.source == name]
        same = [s for s in stats.inputs if s.name == name]
        assert sum(s.ctis for s in same) == sum(1 for a in sent if a.kind == CTI)
        ctis = [a.start for a in sent if a.kind == CTI]
        if ctis and same[-1].ctis:
            assert same[-1].last_cti == ctis[-1]


class Tap:
    """Sits between a publisher and a union input; logs each arrival in order."""

    def __init__(self, inner_name: str, log: list, union: Union) -> None:
        self.name = inner_name
        self.log = log
        self.union = union
        self.inner = None

    def subscribe_to(self, publisher) -> None:
        self.publisher = publisher

    # a publisher wrapper: union.add(TapPublisher) subscribes an _Input; we intercept
    def subscribe(self, subscriber) -> None:
        self.inner = subscriber
        self.publisher.subscribe(self)

    def on_subscribe(self, subscription) -> None:
        self.inner.on_subscribe(subscription)

    def on_next(self, event) -> None:
        self.log.append(event.with_source(self.name))
        self.inner.on_next(event)

    def on_error(self, error) -> None:
        self.log.append(("leave", self.name))
        self.inner.on_error(error)

    def on_complete(self) -> None:
        self.log.append(("leave", self.name))
        self.inner.on_complete()


streams_strategy = st.lists(st.lists(event_specs, max_size=15), min_size=2, max_size=5)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=POLICIES, on_late=ON_LATE, streams=streams_strategy, prefetch=st.integers(1, 6),
       batch=st.integers(1, 9), subscribe_first=st.booleans())
def test_publisher_inputs_match_the_reference(policy, on_late, streams, prefetch, batch,
                                              subscribe_first):
    policy_name, delay = policy
    union = Union(make_policy(policy_name, delay, on_late), prefetch=prefetch,
                  max_buffered=prefetch * len(streams))
    log: list = []
    probe = Probe()
    if subscribe_first:
        union.subscribe(probe)
    for i, specs in enumerate(streams):
        name = NAMES[i]
        tap = Tap(name, log, union)
        tap.subscribe_to(from_iterable([build_event(s, "ignored") for s in specs]))
        log.append(("join", name))
        union.add(tap, name=name)
    if not subscribe_first:
        union.subscribe(probe)
    union.close()
    for _ in range(10_000):
        if probe.terminated:
            break
        probe.request(batch)
    assert probe.completed == 1 and probe.overrun == 0
    expected, expected_late = reference(policy_name, delay, on_late, log)
    assert probe.items == expected
    assert union.late.drain() == expected_late
    stats = union.stats()
    assert_accounting(stats, expected_late)
    assert all(s.state == COMPLETED for s in stats.inputs)
    assert [s.received + s.ctis for s in stats.inputs] == [len(s) for s in streams]


# ------------------------------------------------------------------------------- seed example
SEED = [("A", Event.point(5 * MINUTE)), ("B", Event.point(0)), ("A", Event.cti(5 * MINUTE)),
        ("B", Event.cti(0)), ("A", Event.point(7 * MINUTE)), ("A", Event.cti(8 * MINUTE)),
        ("B", Event.point(1 * MINUTE))]


def test_seed_worked_example_through_the_union():
    union = Union(goldilocks("5m"))
    probe = Probe(MAX_DEMAND)
    union.subscribe(probe)
    emitters = {"A": union.open_input("A"), "B": union.open_input("B")}
    for name, event in SEED:
        assert emitters[name].try_send(event)
    assert [(e.kind, e.start // MINUTE, e.source) for e in probe.items] == [
        ("point", 5, "A"), ("point", 0, "B"), ("cti", 0, None), ("point", 7, "A"),
        ("cti", 3, None)]
    assert union.late.drain() == [LateRecord("B", Event.point(MINUTE, source="B"),
                                             3 * MINUTE, DROPPED)]
    a, b = union.stats().input("A"), union.stats().input("B")
    assert (a.received, a.ctis, a.emitted, a.dropped, a.last_cti) == (2, 2, 2, 0, 8 * MINUTE)
    assert (b.received, b.ctis, b.emitted, b.dropped, b.last_cti) == (2, 1, 1, 1, 0)
    assert a.lag == 3 * MINUTE - 8 * MINUTE and b.lag == 3 * MINUTE
    assert union.stats().output_cti == 3 * MINUTE


def test_seed_worked_example_through_transform_cti_sync():
    operator = cti_sync("5m")
    subject = transform(operator)
    out: list = []
    sink = CallbackSubscriber(out.append)
    subject.subscribe(sink)
    from_iterable([e.with_source(n) for n, e in SEED]).subscribe(subject)
    assert sink.done.wait(TIMEOUT) and sink.error is None
    assert [(e.kind, e.start // MINUTE) for e in out] == [
        ("point", 5), ("point", 0), ("cti", 0), ("point", 7), ("cti", 3)]
    assert operator.late.drain() == [LateRecord("B", Event.point(MINUTE, source="B"),
                                                3 * MINUTE, DROPPED)]


# ------------------------------------------------------------------------------- lifecycle
def test_input_that_completes_leaves_and_close_completes_the_union():
    union = Union(goldilocks(0), final_cti=True)
    probe = Probe(MAX_DEMAND)
    union.subscribe(probe)
    a = union.add(from_iterable([Event.point(1), Event.cti(2)]), name="A")
    assert a.stats().state == COMPLETED
    b = union.open_input("B")
    b.try_send(Event.point(3))
    union.close()
    assert not probe.terminated  # B is still there
    with pytest.raises(ClosedError):
        union.open_input("C")
    b.complete()
    probe.wait(lambda p: p.completed == 1)
    assert [(e.kind, e.start) for e in probe.items] == [
        ("point", 1), ("cti", 2), ("point", 3), ("cti", MAX_TIME)]
    assert union.stats().done and union.stats().output_cti == MAX_TIME
    with pytest.raises(ClosedError):
        b.try_send(Event.point(4))


def test_input_error_leaves_with_the_error_in_its_stats():
    union = Union(goldilocks(0))
    probe = Probe(MAX_DEMAND)
    union.subscribe(probe)
    boom = RuntimeError("device 7 disconnected")
    a = union.open_input("A")
    b = union.open_input("B")
    a.try_send(Event.point(1))
    a.error(boom)
    b.try_send(Event.point(2))
    stats = union.stats().input("A")
    assert stats.state == FAILED and stats.error is boom and stats.emitted == 1
    assert union.stats().input("B").state == ACTIVE
    assert not probe.terminated
    b.complete()
    union.close()
    probe.wait(lambda p: p.completed == 1)
    assert [e.start for e in probe.items] == [1, 2]


def test_input_error_fails_the_union_when_configured():
    union = Union(goldilocks(0), fail_on_input_error=True)
    probe = Probe(MAX_DEMAND)
    union.subscribe(probe)
    late_probe = Probe(MAX_DEMAND)
    union.late.subscribe(late_probe)
    other = union.open_input("other")
    a = union.open_input("A")
    boom = RuntimeError("A broke")
    a.error(boom)
    probe.wait(lambda p: p.terminated)
    assert probe.errors == [boom] and probe.completed == 0
    late_probe.wait(lambda p: p.terminated)
    assert late_probe.errors == [boom]
    assert union.stats().done
    with pytest.raises(ClosedError):
        other.try_send(Event.point(6))  # a failed union takes nothing more (not lost silently)
    after = Probe(1)
    union.subscribe(after)  # after termination: the terminal signal at once
    after.wait(lambda p: p.terminated)
    assert after.errors == [boom]


def test_subscriber_after_completion_gets_on_complete():
    union = Union(max_policy(), final_cti=True)
    union.subscribe(Probe(MAX_DEMAND))
    union.close()
    assert union.stats().done
    late = Probe(5)
    union.subscribe(late)
    late.wait(lambda p: p.terminated)
    assert late.completed == 1 and late.items == []
    with pytest.raises(ClosedError):
        union.add(from_iterable([]), name="X")


def test_second_concurrent_subscriber_gets_on_error():
    union = Union(max_policy())
    first = Probe(1)
    union.subscribe(first)
    second = Probe(1)
    union.subscribe(second)
    second.wait(lambda p: p.terminated)
    assert len(second.errors) == 1 and isinstance(second.errors[0], ClosedError)
    assert not first.terminated


def test_new_subscriber_after_cancel_continues_the_stream():
    union = Union(max_policy())
    a = union.open_input("A", prefetch=64)
    first = Probe()
    first.cancel_after = 3
    union.subscribe(first)
    for t in range(10):
        assert a.try_send(Event.point(t))  # queued: no demand yet
    first.request(10)  # one merge turn could deliver all ten; it stops at the cancel
    assert [e.start for e in first.items] == [0, 1, 2]  # nothing after cancel (RS §1.8)
    second = Probe(MAX_DEMAND)
    union.subscribe(second)
    second.wait(lambda p: len(p.items) == 7)
    assert [e.start for e in second.items] == list(range(3, 10))
    a.complete()
    union.close()
    second.wait(lambda p: p.completed == 1)


def test_add_and_remove_while_running_from_other_threads():
    union = Union(goldilocks(Nanoseconds(5)), prefetch=16, max_buffered=64)
    probe = Probe(MAX_DEMAND)
    union.subscribe(probe)

    def endless(name):
        t = 0
        while True:
            t += 1
            yield Event.point(t, payload=name) if t % 10 else Event.cti(t)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        handles = list(pool.map(
            lambda i: union.add(from_iterable(endless(i), executor=pool), name=f"d{i}"),
            range(4)))
        # each source runs its own clock, so the fastest drags time and the others are mostly
        # late: wait for every input to have been merged, not for its events to be on time
        probe.wait(lambda p: all(s.received + s.ctis > 100 for s in union.stats().inputs))
        list(pool.map(lambda h: h.remove(), handles))
        union.close()
        probe.wait(lambda p: p.terminated)
    assert probe.completed == 1 and probe.overrun == 0
    check_output(probe.items)
    stats = union.stats()
    for s in stats.inputs:
        assert s.state == REMOVED
        assert s.received == s.emitted + s.dropped and s.buffered == 0
    assert stats.emitted == sum(1 for e in probe.items if e.kind != CTI)
    assert stats.late.records == stats.dropped


def test_remove_racing_an_arriving_event_never_strands_it():
    """remove() on one thread while the input's on_next runs on another: each event is merged
    before the leave or counted as discarded, never queued behind the leave marker where the
    completed union would leave it buffered forever (seeded; 300 races)."""

    def endless():
        t = 0
        while True:
            t += 1
            yield Event.point(t)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for seed in range(300):
            rng = random.Random(seed)
            union = Union(goldilocks(Nanoseconds(5)), prefetch=rng.choice((1, 4, 16)),
                          max_buffered=64)
            probe = Probe(MAX_DEMAND)
            union.subscribe(probe)
            handles = [union.add(from_iterable(endless(), executor=pool), name=f"d{i}")
                       for i in range(2)]
            wanted = rng.randrange(1, 50)
            probe.wait(lambda p: len(p.items) > wanted)
            for h in handles:
                h.remove()
            union.close()
            probe.wait(lambda p: p.terminated)
            assert probe.completed == 1
            for s in union.stats().inputs:
                assert s.state == REMOVED, (seed, s)
                assert s.received == s.emitted + s.dropped and s.buffered == 0, (seed, s)


@settings(max_examples=200, deadline=None)
@given(keep=st.integers(0, 4), sessions=st.lists(
    st.tuples(st.sampled_from(NAMES), st.lists(st.integers(0, 30), max_size=6),
              st.sampled_from(["complete", "error", "remove", "stay"])), max_size=14))
def test_stats_keep_the_latest_departed_inputs_and_fold_the_rest_into_the_totals(keep,
                                                                                 sessions):
    """Devices come and go for ever: stats() holds the active inputs and the latest
    ``keep_departed`` to leave; the totals still count every input ever added."""
    union = Union(max_policy(), keep_departed=keep)
    union.subscribe(Probe(MAX_DEMAND))
    union.open_input("clock").try_send(Event.cti(10))  # events before 10 are late
    sent = dropped = 0
    left: list[str] = []
    open_now: dict[str, object] = {}
    for i, (name, times, end) in enumerate(sessions):
        name = f"{name}{i}"
        em = open_now[name] = union.open_input(name)
        for t in times:
            assert em.try_send(Event.point(t))
        sent += len(times)
        dropped += sum(t < 10 for t in times)
        if end != "stay":
            getattr(open_now.pop(name), end)(*([RuntimeError(name)] if end == "error" else []))
            left.append(name)
    stats = union.stats()
    assert (stats.received, stats.dropped, stats.emitted) == (sent, dropped, sent - dropped)
    assert stats.forgotten == max(0, len(left) - keep) and stats.keep_departed == keep
    kept = [s.name for s in stats.inputs]
    assert kept == [n for n in ["clock"] + [f"{n}{i}" for i, (n, _, _) in enumerate(sessions)]
                    if n not in left or n in left[max(0, len(left) - keep):]]  # added order
    assert len(union._intake.history) <= 1 + len(open_now) + keep  # O(active + keep_departed)
    assert_accounting(stats)


def test_keep_departed_is_checked():
    with pytest.raises(ValueError, match="keep_departed"):
        Union(max_policy(), keep_departed=-1)


def test_late_output_is_bounded_and_counts_overflow():
    union = Union(max_policy(), late_capacity=3)
    union.subscribe(Probe(MAX_DEMAND))
    a = union.open_input("A")
    a.try_send(Event.cti(100))
    for t in range(5):
        a.try_send(Event.point(t))
    late = union.stats().late
    assert (late.records, late.buffered, late.peak, late.capacity, late.overflow) == \
        (5, 3, 3, 3, 2)
    assert [r.event.start for r in union.late.drain()] == [0, 1, 2]
    assert union.stats().input("A").dropped == 5  # counted even when not kept


def test_late_output_on_the_batch_path_keeps_records_that_fit_and_counts_the_rest():
    """Late entries from step_many become LateRecords as they are kept; the others are
    counted in overflow and in the input's dropped/adjusted all the same (TS §3.3)."""
    union = Union(max_policy(on_late="adjust"), late_capacity=3)
    union.subscribe(Probe(MAX_DEMAND))
    a = union.open_input("A")
    late = [Event.point(t, source="A") for t in range(4)] + [Event.interval(50, 150, "x", "A")]
    assert a.try_send_many([Event.cti(100, source="A")] + late) == 6
    stats = union.stats()
    assert (stats.late.records, stats.late.buffered, stats.late.overflow) == (5, 3, 2)
    assert (stats.input("A").dropped, stats.input("A").adjusted) == (4, 1)
    kept = union.late.drain()
    assert kept == [LateRecord("A", e, 100, DROPPED) for e in late[:3]]
    assert all(type(r) is LateRecord for r in kept)


def test_adjust_clips_overlapping_intervals_and_drops_points():
    union = Union(goldilocks(Nanoseconds(2), "adjust"))
    probe = Probe(MAX_DEMAND)
    union.subscribe(probe)
    a = union.open_input("A")
    for event in (Event.cti(10), Event.interval(5, 12, payload="x"), Event.interval(1, 8),
                  Event.point(7), Event.interval(8, 9)):
        a.try_send(event)
    assert probe.items == [Event.cti(8), Event.interval(8, 12, payload="x", source="A"),
                           Event.interval(8, 9, source="A")]
    records = union.late.drain()
    assert [(r.event.start, r.action, r.cti) for r in records] == [
        (5, ADJUSTED, 8), (1, DROPPED, 8), (7, DROPPED, 8)]
    s = union.stats().input("A")
    assert (s.received, s.ctis, s.emitted, s.dropped, s.adjusted) == (4, 1, 2, 2, 1)


def test_stats_against_hand_computed_values():
    union = Union(goldilocks(Nanoseconds(10)), prefetch=4, max_buffered=6)
    probe = Probe()
    union.subscribe(probe)
    a = union.open_input("A")
    b = union.open_input("B")
    probe.request(1)  # merges the joins; credit: A 4, B 2 (the total bound is 6)
    credit = {h.name: h._input.requested for h in (a, b)}
    assert sorted(credit.values()) == [2, 4]
    for t in (100, 101):
        assert a.try_send(Event.point(t))
    assert a.try_send(Event.cti(120))
    assert b.try_send(Event.point(50))
    s = union.stats()
    # a queued CTI counts in received and buffered until merged (received = … + buffered)
    assert (s.input("A").received, s.input("A").ctis, s.input("A").buffered) == (3, 0, 2)
    assert s.input("B").buffered == 1 and s.buffered == 3
    probe.request(MAX_DEMAND)
    s = union.stats()
    sa, sb = s.input("A"), s.input("B")
    assert [e.start for e in probe.items] == [100, 101, 110]  # B's 50 < CTI 110: late
    assert (sa.received, sa.emitted, sa.dropped, sa.last_cti, sa.lag) == (2, 2, 0, 120, -10)
    assert (sb.received, sb.emitted, sb.dropped, sb.last_cti, sb.lag) == (1, 0, 1, None, None)
    assert (s.output_cti, s.ctis, s.emitted, s.dropped) == (110, 1, 2, 1)
    assert sa.peak_buffered <= 4 and sb.peak_buffered <= 4
    assert 0 < s.peak_buffered <= 6 and s.max_buffered == 6 and not s.done


# ------------------------------------------------------------------------------- backpressure
def test_slow_subscriber_never_gets_more_than_requested_and_buffers_stay_bounded():
    union = Union(max_policy(), prefetch=5, max_buffered=8)
    probe = Probe()
    union.subscribe(probe)
    emitters = [union.open_input(n) for n in "ABC"]
    sent = 0
    for rounds in range(200):
        for i, emitter in enumerate(emitters):
            while emitter.try_send(Event.point(10 * rounds + i)):
                sent += 1
        s = union.stats()
        assert all(x.buffered <= 5 and x.peak_buffered <= 5 for x in s.inputs)
        assert s.buffered <= 8 and s.peak_buffered <= 8
        assert len(probe.items) <= probe.requested
        probe.request(rounds % 4 + 1)
    assert probe.overrun == 0
    assert len(probe.items) == probe.requested
    assert sent - len(probe.items) <= 8  # the rest waits in the union's bounded queue


def test_try_send_returns_false_without_credit():
    union = Union(max_policy(), prefetch=2)
    a = union.open_input("A")  # no subscriber yet: credit from the pool
    assert a.try_send(Event.point(1)) and a.try_send(Event.point(2))
    assert not a.try_send(Event.point(3))
    probe = Probe(1)
    union.subscribe(probe)
    probe.wait(lambda p: len(p.items) == 1)
    assert a.try_send(Event.point(3))  # one merged: held fell to the low-water mark, topped up
    assert not a.try_send(Event.point(4))
    probe.request(1)
    assert a.try_send(Event.point(4))
    assert [e.start for e in probe.items] == [1, 2]


def test_feed_events_finds_each_input_by_the_events_source_and_stops_without_credit():
    union = Union(max_policy(), prefetch=4)
    union.open_input("A"), union.open_input("B")
    events = [Event.point(t, source="AB"[t % 2]) for t in range(12)]
    assert union.feed_events(events) == 8  # no subscriber: 4 each, then no credit
    stats = union.stats()
    assert (stats.input("A").received, stats.input("B").received) == (4, 4)
    probe = Probe(MAX_DEMAND)
    union.subscribe(probe)
    assert union.feed_events(events[8:], chunk=3) == 4
    assert [(e.start, e.source) for e in probe.items] == [(t, "AB"[t % 2]) for t in range(12)]
    stats = union.stats()
    assert (stats.input("A").emitted, stats.input("B").emitted) == (6, 6)


def test_feed_events_refuses_what_names_no_open_input_and_sends_nothing_of_it():
    union = Union(max_policy())
    union.open_input("A")
    union.add(from_iterable([]), name="P")  # fed by its publisher, not by name
    good = [Event.point(t, source="A") for t in range(3)]
    for bad, pattern in [(Event.point(9, source="Z"), r"arrival 3 names input 'Z'.*'A'"),
                         (Event.point(9), r"arrival 3 names input None"),
                         (Event.point(9, source="P"), r"arrival 3 names input 'P'"),
                         # built by hand: Event.point refuses a source that is no name
                         (Event("point", 9, 10, None, ["A"]),
                          r"arrival 3 names input \['A'\]")]:
        with pytest.raises(InputError, match=pattern):
            union.feed_events(good + [bad])
    with pytest.raises(TypeError, match=r"arrival 4 is int 7; expected an engine.Event"):
        union.feed_events(good + good[:1] + [7])
    with pytest.raises(ValueError, match="chunk"):
        union.feed_events(good, chunk=0)
    assert union.stats().input("A").received == 0  # a refused block is refused whole


def test_feed_events_after_an_input_left_refuses_its_name_until_it_is_opened_again():
    union = Union(max_policy())
    a = union.open_input("A")
    union.open_input("B")
    a.complete()
    with pytest.raises(InputError, match="'A'"):  # the name is free again: no input has it
        union.feed_events([Event.point(1, source="B"), Event.point(2, source="A")])
    again = union.open_input("A")  # a new input under the old name takes the events
    assert union.feed_events([Event.point(1, source="A")]) == 1
    assert again.stats().received == 1


def test_async_send_suspends_until_there_is_demand():
    async def main():
        loop = asyncio.get_running_loop()
        union = Union(max_policy(), prefetch=2, executor=loop)
        probe = Probe()
        union.subscribe(probe)
        a = union.open_input("A")
        progress: list[int] = []

        async def produce():
            for t in range(6):
                await a.send(Event.point(t))
                progress.append(t)
            a.complete()

        task = asyncio.create_task(produce())
        for _ in range(20):
            await asyncio.sleep(0)
        stalled = len(progress)
        assert stalled <= 2 and not task.done()  # no demand: the producer waits
        probe.request(MAX_DEMAND)
        await asyncio.wait_for(task, TIMEOUT)
        union.close()

        async def finished():
            while not probe.terminated:
                await asyncio.sleep(0)
        await asyncio.wait_for(finished(), TIMEOUT)
        return [e.start for e in probe.items]

    assert asyncio.run(main()) == list(range(6))


def test_send_blocking_times_out_then_succeeds_when_demand_comes():
    union = Union(max_policy(), prefetch=1)
    probe = Probe()
    union.subscribe(probe)
    a = union.open_input("A")
    probe.request(1)
    assert a.send_blocking(Event.point(1), timeout=1.0)  # emitted at once; credit returns
    assert a.send_blocking(Event.point(2), timeout=1.0)  # queued: no demand left
    assert a.send_blocking(Event.point(3), timeout=0.05) is False  # no credit: timed out
    started = threading.Event()

    def sender():
        started.set()
        return a.send_blocking(Event.point(3), timeout=TIMEOUT)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(sender)
        started.wait(TIMEOUT)
        probe.request(1)  # merges 2: credit returns, the blocked sender proceeds
        assert future.result(TIMEOUT) is True
    probe.request(1)
    assert [e.start for e in probe.items] == [1, 2, 3]


def test_send_blocking_wakes_with_closed_error_when_removed():
    union = Union(max_policy(), prefetch=1)
    a = union.open_input("A")
    assert a.try_send(Event.point(1))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(a.send_blocking, Event.point(2), TIMEOUT)
        a.remove()
        with pytest.raises(ClosedError):
            future.result(TIMEOUT)


def test_send_many_blocking_sends_everything_in_order_as_credit_returns():
    union = Union(max_policy(), prefetch=2)
    probe = Probe()
    union.subscribe(probe)
    a = union.open_input("A")
    events = [Event.point(t, source="A") for t in range(10)]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(a.send_many_blocking, events, TIMEOUT)
        for n in range(1, 11):  # demand one at a time: the sender waits for each credit
            probe.request(1)
            probe.wait(lambda p, n=n: len(p.items) == n)
        assert future.result(TIMEOUT) == 10
    assert probe.items == events and probe.overrun == 0
    assert a.stats().peak_buffered <= 2


def test_send_many_blocking_returns_what_was_sent_when_it_times_out():
    union = Union(max_policy(), prefetch=2)
    a = union.open_input("A")  # no subscriber: two events of credit, then none
    assert a.send_many_blocking([Event.point(t) for t in range(5)], timeout=0.05) == 2
    assert a.send_many_blocking([], timeout=0.05) == 0
    assert a.stats().received == 2


def test_send_many_blocking_wakes_with_closed_error_saying_how_many_were_sent():
    union = Union(max_policy(), prefetch=2)
    a = union.open_input("A")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(a.send_many_blocking, [Event.point(t) for t in range(5)], TIMEOUT)
        wait_until(lambda: a.stats().received == 2, TIMEOUT)  # then it blocks: no credit
        a.remove()
        with pytest.raises(ClosedError, match="2 of the 5 events were sent"):
            future.result(TIMEOUT)


@pytest.mark.parametrize("seed", range(5))
def test_send_many_blocking_from_threads_keeps_order_and_accounting(seed):
    """Seeded stress: four producer threads, each a list of its own events in time order,
    into a small union drained by random demand: every event is emitted or late, once, and
    each input's emitted events keep its order."""
    rng = random.Random(seed)
    union = Union(goldilocks(Nanoseconds(3)), prefetch=rng.randint(1, 64),
                  max_buffered=rng.randint(64, 200))
    probe = Probe()
    union.subscribe(probe)
    lists = {name: [Event.cti(t, source=name) if t % 50 == 49 else Event.point(t, source=name)
                    for t in range(rng.randint(500, 3000))] for name in "ABCD"}
    emitters = {name: union.open_input(name) for name in lists}

    def produce(name):
        assert emitters[name].send_many_blocking(lists[name], TIMEOUT) == len(lists[name])
        emitters[name].complete()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(produce, name) for name in lists]
        union.close()
        while not probe.terminated:
            probe.request(rng.randint(1, 300))
            probe.wait(lambda p: len(p.items) >= p.requested or p.terminated)
        for f in futures:
            f.result(TIMEOUT)
    probe.request(MAX_DEMAND)
    probe.wait(lambda p: p.terminated)
    assert probe.completed == 1 and not probe.errors and probe.overrun == 0
    check_output(probe.items)
    stats = union.stats()
    assert_accounting(stats, union.late.drain())
    for name, sent in lists.items():
        mine = [e for e in probe.items if e.source == name]
        assert mine == sorted(mine, key=lambda e: e.start)  # each input's order kept
        s = stats.input(name)
        assert s.received == sum(e.kind != CTI for e in sent) == s.emitted + s.dropped
        assert s.ctis == sum(e.kind == CTI for e in sent)


# ------------------------------------------------------------------------------- arguments
def test_bad_arguments_are_refused_with_the_value():
    with pytest.raises(TypeError):
        Union(None)
    with pytest.raises(ValueError, match="prefetch"):
        Union(max_policy(), prefetch=0)
    union = Union(max_policy())
    union.open_input("A")
    with pytest.raises(InputError, match="'A'"):
        union.open_input("A")
    with pytest.raises(InputError):
        union.open_input("")
    with pytest.raises(TypeError):
        union.add(None)
    with pytest.raises(TypeError):
        union.subscribe(None)


def test_non_event_element_is_refused_naming_the_input():
    union = Union(max_policy())
    a = union.open_input("A")
    with pytest.raises(TypeError, match="'A'"):
        a.try_send(42)


def test_times_render_for_humans():
    assert format_ns(8 * MINUTE) == "1970-01-01T00:08:00.000000000Z"


def test_a_policy_that_passes_ctis_through_unchanged_is_counted_right():
    """A CTI returned as the very object that arrived is a CTI, not an emitted insert
    (TS §3.4), even on the merge's fast path for unchanged events."""

    class PassAll:
        name, delay, on_late = "pass-all", 0, "drop"

        def initial(self):
            return None

        def step(self, state, event):
            return state, (event,)

        def join(self, state, source):
            return state, ()

        def leave(self, state, source):
            return state, ()

    union = Union(PassAll())
    seen = []
    union.subscribe(CallbackSubscriber(seen.append))
    a = union.open_input("A")
    for event in (Event.point(1), Event.cti(2), Event.point(3), Event.cti(4)):
        assert a.try_send(event)
    a.complete()
    union.close()
    stats = union.stats()
    assert [e.kind for e in seen] == ["point", "cti", "point", "cti"]
    assert (stats.emitted, stats.ctis) == (2, 2)
    assert (stats.input("A").emitted, stats.input("A").ctis) == (2, 2)
