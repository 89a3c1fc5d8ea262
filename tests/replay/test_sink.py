"""RollingFileSink: a Reactive Streams subscriber publishing parts by atomic rename."""

from __future__ import annotations

import os

import pytest

from engine.event import Event, LateRecord
from eventlog import RollingFileSink, read_records


class ListPublisher:
    """A tiny publisher that honours request(n): delivers only what was requested."""

    def __init__(self, items, fail_with=None):
        self.items = list(items)
        self.fail_with = fail_with
        self.requests: list[int] = []
        self.cancelled = False

    def subscribe(self, subscriber):
        pub = self

        class Subscription:
            def __init__(self):
                self.pos = 0
                self.demand = 0
                self.busy = False

            def request(self, n):
                pub.requests.append(n)
                self.demand += n
                if self.busy:  # RS §3.3: a request from inside on_next only adds demand
                    return
                self.busy = True
                while self.demand > 0 and self.pos < len(pub.items) and not pub.cancelled:
                    item = pub.items[self.pos]
                    self.pos += 1
                    self.demand -= 1
                    subscriber.on_next(item)
                self.busy = False
                if self.pos == len(pub.items) and not pub.cancelled:
                    pub.cancelled = True
                    if pub.fail_with is not None:
                        subscriber.on_error(pub.fail_with)
                    else:
                        subscriber.on_complete()

            def cancel(self):
                pub.cancelled = True

        subscriber.on_subscribe(Subscription())


def _events(n):
    return [Event.point(i, payload={"i": i}, source="A") if i % 5 else Event.cti(i, source="A")
            for i in range(n)]


def test_parts_are_published_complete_and_in_order(tmp_path):
    sink = RollingFileSink(tmp_path, max_events=10, prefix="fleet", batch=4)
    pub = ListPublisher(_events(25))
    pub.subscribe(sink)
    names = sorted(os.listdir(tmp_path))
    assert names == ["fleet-000000.jsonl", "fleet-000001.jsonl", "fleet-000002.jsonl"]
    assert [len((tmp_path / n).read_bytes().splitlines()) for n in names] == [10, 10, 5]
    assert max(pub.requests) <= 4  # demand in batches, never unbounded
    records = list(read_records([tmp_path / n for n in names]))
    assert [r["start"] for r in records] == list(range(25))
    assert sink.stats().count == 25


def test_no_partial_part_is_visible_while_writing(tmp_path):
    seen = []

    class Watching(RollingFileSink):
        def on_next(self, item):
            super().on_next(item)
            for name in os.listdir(tmp_path):
                if not name.startswith("."):
                    seen.append((name, len((tmp_path / name).read_bytes().splitlines())))

    ListPublisher(_events(7)).subscribe(Watching(tmp_path, max_events=3))
    assert seen and all(lines == 3 for _, lines in seen)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_numbering_continues_and_time_based_roll(tmp_path):
    now = [0.0]
    first = RollingFileSink(tmp_path, max_events=100, max_seconds=1.0, clock=lambda: now[0])
    pub = ListPublisher(_events(6))
    original = first.on_next

    def on_next(item):
        now[0] += 0.4
        original(item)

    first.on_next = on_next  # type: ignore[method-assign]
    pub.subscribe(first)
    assert len(first.published) == 2
    second = RollingFileSink(tmp_path, max_events=100)
    ListPublisher(_events(2)).subscribe(second)
    assert os.path.basename(second.published[0]) == "events-000002.jsonl"


def test_late_records_and_error_publish_what_was_written(tmp_path):
    late = LateRecord("B", Event.point(1, source="B"), 5, "dropped")
    boom = RuntimeError("upstream failed")
    sink = RollingFileSink(tmp_path, max_events=10)
    ListPublisher([Event.point(7, source="A"), late], fail_with=boom).subscribe(sink)
    assert sink.error is boom and sink.done
    text = (tmp_path / "events-000000.jsonl").read_bytes()
    assert b'"action":"dropped"' in text and text.count(b"\n") == 2


def test_rs_2_13_none_arguments_raise_type_error(tmp_path):
    sink = RollingFileSink(tmp_path)
    for call in (sink.on_subscribe, sink.on_next, sink.on_error):
        with pytest.raises(TypeError):
            call(None)
    with pytest.raises(TypeError):
        RollingFileSink(None)  # type: ignore[arg-type]


def test_rs_2_5_second_subscription_is_cancelled(tmp_path, violations):
    sink = RollingFileSink(tmp_path)

    class Idle:
        cancelled = False

        def request(self, n):
            pass

        def cancel(self):
            Idle.cancelled = True

    sink.on_subscribe(Idle())
    other = Idle.__new__(Idle)
    sink.on_subscribe(other)
    assert Idle.cancelled
    assert [v.rule for v in violations] == ["RS §2.5"]  # refused, and reported like any other


def test_with_the_engines_iterable_publisher(tmp_path):
    from engine.sources import from_iterable

    sink = RollingFileSink(tmp_path, max_events=4, batch=3)
    from_iterable(_events(10)).subscribe(sink)
    assert sink.done and sink.error is None
    assert len(sink.published) == 3
    records = list(read_records(sink.published))
    assert [r["start"] for r in records] == list(range(10))
