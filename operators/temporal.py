"""Temporal operators for ``pipe``: ``cti_sync``, ``advance_time``, ``reorder``, ``broadcast``.

Each is a ``step_operator`` over a per-subscription step, so a pipeline can be subscribed
twice or replayed, and each sends its late events to a bounded side output (``.late``, a
``LateOutput``) — nothing disappears without a record (TS §3.3).

``engine.transform(cti_sync(delay))`` is the StreamInsight CTI synchronizing subject::

    subject = transform(cti_sync("5m"))
    subject.subscribe(sink)
    source.subscribe(subject)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.contracts import Publisher
from engine.errors import InputError
from engine.event import CTI, DROPPED, Event, LateRecord
from engine.multicast import Multicast
from engine.stage import StagePublisher
from engine.times import DurationLike, format_duration_ns

from operators.edges import EdgeState, with_edges
from operators.late import LateOutput
from operators.policies import goldilocks
from operators.reorder_buffer import ReorderBuffer
from operators.timegen import AdvanceTime

__all__ = ["cti_sync", "advance_time", "reorder", "broadcast", "TemporalOperator", "split_late"]


class TemporalOperator:
    """A pipe operator (``Publisher → Publisher``) with a late side output ``late``."""

    def __init__(self, name: str, make_step: Callable[[], Callable[[Any], tuple]], *,
                 late: LateOutput, prefetch: int) -> None:
        self.name = name
        self.late = late
        self._make_step = make_step
        self._prefetch = prefetch

    def __call__(self, upstream: Publisher) -> Publisher:
        return StagePublisher(upstream, self._make_step, name=self.name,
                              prefetch=self._prefetch)

    def __repr__(self) -> str:
        return self.name


def split_late(late: LateOutput, outputs: tuple) -> tuple:
    """Route ``LateRecord`` items to the side output; keep the events (usually all of them)."""
    for out in outputs:
        if out.__class__ is not Event:
            break
    else:
        return outputs
    kept = []
    for out in outputs:
        if out.__class__ is Event:
            kept.append(out)
        else:
            late.push(out)
    return tuple(kept)


def _no_edges(who: str, event: Event) -> InputError:
    return InputError(f"{who}: {event!r} is an edge event, which {who} does not decide; "
                      "decide edges with cti_sync, or a Union(with_edges(policy)) (TS §7)")


def cti_sync(delay: DurationLike, on_late: str = "drop", *, late_capacity: int = 10_000,
             prefetch: int = 64) -> TemporalOperator:
    """Delay every advancing CTI by ``delay`` and drop or adjust what arrives too late, on a
    single stream — the Goldilocks policy (design.md §4.2) as a pipe operator.

    Edge events (TS §7) are decided as ``with_edges`` decides them: the start edges still
    open at completion are reported on ``late`` (``"not_closed"``).

    O(1) per event (an edge: O(open edges)); memory O(``prefetch``) plus the late side
    output's ``late_capacity`` and the open edges (at most ``max_open``, 100,000).
    """
    policy = goldilocks(delay, on_late)
    edges = with_edges(policy)
    late = LateOutput(late_capacity, name="cti_sync.late")

    def make_step() -> Callable[[Event], tuple]:
        # the policy's own state, stepped directly; the open edges beside it, joined to it
        # only when an edge arrives (an edge carries an id, nothing else does)
        state, table, counts = edges.initial()
        step = policy.step

        def sync(event: Event) -> tuple:
            nonlocal state, table, counts
            if event.id is None:
                state, outputs = step(state, event)
            else:
                (state, table, counts), outputs = edges.step(
                    EdgeState(state, table, counts), event)
            return split_late(late, outputs)

        def flush() -> tuple:  # TS §7.5: the start edges never closed
            nonlocal state, table, counts
            (state, table, counts), records = edges.finish(EdgeState(state, table, counts))
            return split_late(late, records)

        sync.flush = flush  # type: ignore[attr-defined]
        return sync

    return TemporalOperator(f"cti_sync({format_duration_ns(policy.delay)}, {on_late})",
                            make_step, late=late, prefetch=prefetch)


def advance_time(every_events: int | None = None, every: DurationLike | None = None,
                 delay: DurationLike = 0,
                 on_late: str = "drop", *, final_cti: bool = False,
                 late_capacity: int = 10_000, prefetch: int = 64) -> TemporalOperator:
    """Generate CTIs from a stream's own event times (StreamInsight's
    AdvanceTimeGenerationSettings): every ``every_events`` inserts and/or whenever event time
    advanced by ``every``, at (largest start − ``delay``). ``final_cti``: a CTI at +∞ on
    completion. O(1) per event. Edge events are refused (the stream fails with an
    ``InputError`` naming the event): generate CTIs upstream of ``cti_sync`` instead.
    """
    AdvanceTime(every_events, every, delay, on_late)  # validate the arguments now
    late = LateOutput(late_capacity, name="advance_time.late")

    def make_step() -> Callable[[Event], tuple]:
        generator = AdvanceTime(every_events, every, delay, on_late)
        generate = generator.step

        def step(event: Event) -> tuple:
            if event.id is not None:  # TS §7.1: an end edge judged by its start could be
                raise _no_edges("advance_time", event)  # dropped after its start went out
            return split_late(late, generate(event))

        step.flush = lambda: split_late(late, generator.flush(to_infinity=final_cti))  # type: ignore[attr-defined]
        return step

    return TemporalOperator(f"advance_time({every_events}, {every}, {delay})", make_step,
                            late=late, prefetch=prefetch)


def reorder(capacity: int = 65_536, *, late_capacity: int = 10_000,
            prefetch: int = 64) -> TemporalOperator:
    """Release inserts in start-time order as CTIs pass them (a sortedcontainers buffer).

    Memory O(events within the delay), bounded by ``capacity``: a stream that holds more
    than ``capacity`` inserts without a CTI fails with an ``InputError`` that says so, rather
    than growing without bound. Inserts that start before the last CTI go to ``late``.
    Remaining inserts are released in order at completion.
    """
    if capacity <= 0:
        raise ValueError(f"reorder(): capacity must be > 0, got {capacity}")
    late = LateOutput(late_capacity, name="reorder.late")

    def record(events: list[Event], cti: int | None) -> None:
        for event in events:
            late.push(LateRecord(event.source, event, cti if cti is not None else 0, DROPPED))

    def make_step() -> Callable[[Event], tuple]:
        buffer = ReorderBuffer(capacity)

        def step(event: Event) -> tuple:
            if event.kind == CTI:
                before = buffer.last_cti
                out, late_events = buffer.release(event.start)
                record(late_events, before)
                return tuple(out)
            if not buffer.push(event):
                raise InputError(
                    f"reorder(): {capacity} inserts are waiting for a CTI; expected CTIs "
                    "often enough to keep the buffer within its capacity (raise capacity or "
                    "generate CTIs with advance_time)")
            late_events = buffer.take_late()
            if late_events:
                record(late_events, buffer.last_cti)
            return ()

        def flush() -> tuple:
            out, late_events = buffer.flush()
            record(late_events, buffer.last_cti)
            return tuple(out)

        step.flush = flush  # type: ignore[attr-defined]
        step.stats = buffer.stats  # type: ignore[attr-defined]
        return step

    return TemporalOperator(f"reorder({capacity})", make_step, late=late, prefetch=prefetch)


def broadcast(capacity: int = 256) -> Callable[[Publisher], Multicast]:
    """Share one subscription to upstream among any number of subscribers, paced by the
    slowest; memory O(``capacity``). Use it on a ``Union`` to fan its output out."""
    def operator(upstream: Publisher) -> Multicast:
        multicast = Multicast(capacity, name="broadcast")
        upstream.subscribe(multicast)
        return multicast

    return operator
