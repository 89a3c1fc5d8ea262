"""The operators in the conformance kit: the union's output, cti_sync (as a pipe stage and as
the StreamInsight transform subject), the late side output and broadcast.

Element counts must be exact for the kit, so the streams here are on time by construction:
points at increasing times, with CTIs that each advance the clock — every input element comes
out, one for one.
"""

from __future__ import annotations

import concurrent.futures
import itertools

from engine import Event, LateRecord, failed, from_iterable, pipe, transform
from engine.event import DROPPED
from engine.tck import ProcessorVerification, PublisherVerification
from engine.times import Nanoseconds
from operators import LateOutput, Union, broadcast, cti_sync, goldilocks

POOL = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="tck-operators")
DELAY = Nanoseconds(3)


class OnTime:
    """``count`` events, each emitted one for one by goldilocks(DELAY): points at increasing
    times and every 10th a CTI at that time (delayed, it still advances: TS §2.1). Iterable
    again and again, so a cold publisher over it is cold."""

    def __init__(self, count: int, source: str = "a", ctis: bool = True) -> None:
        self.count = count
        self.source = source
        self.ctis = ctis

    def __iter__(self):
        for i in itertools.islice(itertools.count(), self.count):
            if self.ctis and i % 10 == 9:
                yield Event.cti(i + DELAY, source=self.source)
            else:
                yield Event.point(i + DELAY, source=self.source)


def on_time(count: int, source: str = "a", ctis: bool = True) -> OnTime:
    return OnTime(count, source, ctis)


def expected_output(event: Event) -> Event:
    if event.kind == "cti":
        return Event.cti(event.start - DELAY)
    return event


# ------------------------------------------------------------------------------ the union
class TestUnionOutput(PublisherVerification):
    multiple_subscribers = False  # one subscriber at a time; broadcast() fans out

    def create_publisher(self, elements):
        union = Union(goldilocks(DELAY), prefetch=16, max_buffered=64)
        union.add(from_iterable(on_time(elements)), name="a")
        union.close()  # completes once "a" has left and everything is merged (TS §4.3)
        return union

    def create_failed_publisher(self):
        union = Union(goldilocks(DELAY), fail_on_input_error=True)
        union.add(failed(RuntimeError("input failed on purpose")), name="a")
        return union


class TestUnionOutputFedFromAPool(TestUnionOutput):
    def create_publisher(self, elements):
        union = Union(goldilocks(DELAY), prefetch=16, max_buffered=64)
        union.add(from_iterable(on_time(elements), executor=POOL), name="a")
        union.close()
        return union


class TestUnionOutputOfTwoInputs(TestUnionOutput):
    def create_publisher(self, elements):
        union = Union(goldilocks(DELAY), prefetch=8, max_buffered=64)
        # points only: a CTI from one input would make the other's points late (and the
        # kit needs exact counts)
        union.add(from_iterable(on_time(elements // 2, "a", ctis=False)), name="a")
        union.add(from_iterable(on_time(elements - elements // 2, "b", ctis=False)), name="b")
        union.close()
        return union


class TestUnionBatchesOfOne(TestUnionOutput):
    """``Union.batches(1)``: every element a list of one event, from a lazy source."""

    def create_publisher(self, elements):
        return TestUnionOutput.create_publisher(self, elements).batches(1)

    def create_failed_publisher(self):
        return TestUnionOutput.create_failed_publisher(self).batches(1)


class TestUnionBatches(TestUnionOutput):
    """``Union.batches(3)`` over arrivals queued as batches of three (``try_send_many``)
    before anyone subscribes: each queued batch comes out as one list."""

    max_elements = 1000  # every event is sent up front

    def create_publisher(self, elements):
        union = Union(goldilocks(DELAY), prefetch=3 * elements + 1,
                      max_buffered=3 * elements + 1)
        emitter = union.open_input("a")
        events = list(on_time(3 * elements))
        for i in range(0, len(events), 3):
            assert emitter.try_send_many(events[i:i + 3]) == 3
        emitter.complete()
        union.close()
        return union.batches(3)

    def create_failed_publisher(self):
        return TestUnionOutput.create_failed_publisher(self).batches(3)


# ------------------------------------------------------------------------------ cti_sync
class TestCtiSyncStage(PublisherVerification):
    def create_publisher(self, elements):
        return pipe(from_iterable(on_time(elements)), cti_sync(DELAY, prefetch=8))

    def create_failed_publisher(self):
        return pipe(failed(RuntimeError("upstream failed on purpose")), cti_sync(DELAY))


class TestCtiSyncSubject(ProcessorVerification):
    """``transform(cti_sync(delay))``: the StreamInsight CTI synchronizing subject."""

    hot = True
    max_upstream_lead = 16 + 8

    def create_processor(self):
        return transform(cti_sync(DELAY, prefetch=8), capacity=16)

    def create_upstream(self, elements):
        return from_iterable(on_time(elements))

    def create_element(self, index):
        return Event.point(DELAY + index, source="a")

    def output_of(self, element):
        return expected_output(element)


# ------------------------------------------------------------------------------ side output
class TestLateOutput(PublisherVerification):
    multiple_subscribers = False
    max_elements = 1024  # its capacity: more would be counted as overflow, not delivered

    def create_publisher(self, elements):
        late = LateOutput(capacity=1024)
        for i in range(elements):
            late.push(LateRecord("a", Event.point(i), i + 1, DROPPED))
        late.complete()
        return late

    def create_failed_publisher(self):
        late = LateOutput(capacity=16)
        late.error(RuntimeError("union failed on purpose"))
        return late


# ------------------------------------------------------------------------------ broadcast
class TestBroadcast(PublisherVerification):
    hot = True

    def create_publisher(self, elements):
        return pipe(from_iterable(on_time(elements)), broadcast(capacity=16))

    def create_failed_publisher(self):
        return pipe(failed(RuntimeError("upstream failed on purpose")), broadcast())
