"""The window operator in the conformance kit: as a pipe stage and as a processor
(``transform``). Element counts must be exact for the kit, so the streams here come out one
for one: a point, then the CTI that closes its window (its result, then the CTI)."""

from __future__ import annotations

import itertools

from engine import Event, failed, from_iterable, pipe, transform
from engine.tck import ProcessorVerification, PublisherVerification
from engine.times import Nanoseconds
from operators import tumbling


class paired:
    """``count`` elements whose windows come out one for one: a point at ``i`` then the CTI
    ``i + 1`` that closes its window ``[i, i + 1)`` (result, then the CTI); an odd count
    ends with a CTI alone (passed on as itself). Lazy and iterable again and again."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self):
        count = self.count
        for i in itertools.islice(itertools.count(), count):
            alone = i == count - 1 and i % 2 == 0
            yield Event.point(i // 2) if i % 2 == 0 and not alone else Event.cti(i // 2 + 1)


class TestTumblingStage(PublisherVerification):
    def create_publisher(self, elements):
        return pipe(from_iterable(paired(elements)), tumbling(Nanoseconds(1), prefetch=8))

    def create_failed_publisher(self):
        return pipe(failed(RuntimeError("upstream failed on purpose")), tumbling(Nanoseconds(1)))


class TestTumblingProcessor(ProcessorVerification):
    """``transform(tumbling(...))``: fed CTIs only, each passes through as itself."""

    hot = True
    max_upstream_lead = 16 + 8

    def create_processor(self):
        return transform(tumbling(Nanoseconds(1), prefetch=8), capacity=16)

    def create_upstream(self, elements):
        return from_iterable(paired(elements))

    def create_element(self, index):
        return Event.cti(index + 1)
