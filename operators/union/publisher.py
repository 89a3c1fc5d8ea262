"""``Union`` itself: its configuration, inputs joining, its lifecycle (close, fail, end) and
its one output (``subscribe``, ``batches``). The work is done by the modules beside it:
``inputs`` (arrivals and credit), ``ways_in`` (recorded arrivals in blocks), ``merge`` (the
loop), ``stats``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.errors import ClosedError
from engine.event import Event
from engine.clock import Clock
from engine.executors import as_executor
from engine.policy import Policy
from engine.sinks import PublisherBase
from engine.sources import failed
from engine.subscription import check_subscriber
from engine.times import DurationLike
from operators.edges import EdgePolicy, edge_stats
from operators.late import LateOutput
import operators.union.checkpoint as checkpoint
import operators.union.ways_in as ways_in
from operators.union.align import aligning
from operators.union.handles import Emitter, EmitterSubscription, InputHandle
from operators.union.inputs import Input, Intake
from operators.union.merge import Merge, Output
from operators.union.stats import UnionStats, input_stats

__all__ = ["Union", "UnionBatches"]


class Union(PublisherBase):
    """A hot publisher merging dynamic inputs under a time policy (see ``operators.union``).

    ``policy``: any ``engine.policy.Policy`` (``goldilocks(delay)``, ``min_policy()``, …).
    ``prefetch``: per-input credit. ``max_buffered``: total credit across inputs (TS §4.4).
    ``late_capacity``: the late side output's buffer. ``fail_on_input_error``: an input's error
    fails the union instead of only removing that input. ``final_cti``: end with a CTI at +∞.
    ``executor``: where the merge runs (``None``: on whichever thread signals, trampolined).
    ``keep_departed``: how many inputs that have left keep their own line in ``stats()``
    (the latest to leave); older ones are folded into the totals and counted in
    ``forgotten``, so a union that sees devices come and go for months holds O(active +
    keep_departed) of them, not every one it ever saw.

    Credit is shared (TS §4.5): each active input's credit is at most its fair share,
    ``min(prefetch, max_buffered // active inputs)``, topped up when it falls to half of
    that; an input holding more than its share (given when fewer inputs shared the bound)
    gets no more until it has used it. ``min_credit``: credit every input holds at least,
    even when the total bound is spent (by inputs holding credit they do not use), so a new
    input gets credit at once; the total is then at most ``max_buffered + min_credit ×
    active inputs``. 0 (the default) keeps the total within ``max_buffered``.

    Alignment through demand (TS §4.6): with ``max_drift`` (a duration), an input whose
    progress — its latest CTI, or its latest insert start until it sends a CTI — is more
    than ``max_drift`` ahead of the slowest live input gets no new credit (``min_credit``
    included) until the others catch up; nothing is dropped for being early. Idleness
    (TS §4.7): with ``idle_after`` (a duration), an input that holds credit and sends nothing
    for that long is idle (it no longer holds the others back) until its next arrival;
    ``max_drift`` without ``idle_after`` uses ``DEFAULT_IDLE_AFTER``, so a producer that goes
    quiet never holds the aligned inputs forever. ``clock``: where idleness is measured
    (``engine.clock``; the wall clock by default, a ``VirtualClock`` in tests and replays).
    See ``operators.union.align``.

    Edge events (TS §7): the union decides them when its policy does —
    ``Union(with_edges(goldilocks("5s")))`` (``operators.edges``); the open and unmatched
    edges show in ``stats().edges``, and the start edges still open when the union completes
    are reported on ``late`` (``"not_closed"``). Under any other policy an edge event is
    refused where it is sent (``InputError``): an end edge decided as an interval could be
    dropped while its start edge went out.

    The configuration is fixed at construction.
    """

    def __init__(self, policy: Policy, *, prefetch: int = 256, max_buffered: int = 65_536,
                 late_capacity: int = 10_000, fail_on_input_error: bool = False,
                 final_cti: bool = False, executor: object = None,
                 keep_departed: int = 1024, min_credit: int = 0,
                 max_drift: DurationLike | None = None,
                 idle_after: DurationLike | None = None,
                 clock: Clock | None = None, name: str = "union") -> None:
        if policy is None or not callable(getattr(policy, "step", None)):
            raise TypeError(f"{name}: policy must provide initial/step/join/leave, "
                            f"got {policy!r}")
        if prefetch <= 0 or max_buffered <= 0:
            raise ValueError(f"{name}: prefetch and max_buffered must be > 0, got "
                             f"{prefetch} and {max_buffered}")
        if not isinstance(keep_departed, int) or keep_departed < 0:
            raise ValueError(f"{name}: keep_departed must be an int >= 0, got "
                             f"{keep_departed!r}")
        if not isinstance(min_credit, int) or min_credit < 0:
            raise ValueError(f"{name}: min_credit must be an int >= 0, got {min_credit!r}")
        self.policy = policy
        self.name = name
        self.prefetch = prefetch
        self.max_buffered = max_buffered
        self.fail_on_input_error = fail_on_input_error
        self.final_cti = final_cti
        self.keep_departed = keep_departed
        self.min_credit = min_credit
        self.late = LateOutput(late_capacity, name=f"{name}.late")
        self._executor = as_executor(executor)
        align = aligning(name, max_drift, idle_after, clock)
        self.max_drift = None if align is None else align.max_drift
        self.idle_after = None if align is None else align.idle_after
        self._intake = Intake(name, prefetch=prefetch, max_buffered=max_buffered,
                              min_credit=min_credit, keep_departed=keep_departed,
                              fail_on_input_error=fail_on_input_error, fail=self._fail,
                              align=align, edges=isinstance(policy, EdgePolicy))
        if align is not None:
            align.wake = self._intake.grant
        self._merge = Merge(policy, self._intake, self.late, final_cti)
        self._detached: dict[str, Input] = {}  # restored inputs not yet re-attached (TS §8.1)

    # ================================================================ inputs
    def add(self, publisher: Any, *, name: str | None = None,
            prefetch: int | None = None) -> InputHandle:
        """Merge ``publisher``'s events as input ``name`` (any thread, any time)."""
        if publisher is None:
            raise TypeError(f"{self.name}.add() requires a publisher, got None")
        inp = self._reattach(name, prefetch, False) or self._intake.new_input(
            name, prefetch, imperative=False)
        publisher.subscribe(inp)
        return InputHandle(inp, self._merge)

    def open_input(self, name: str, *, prefetch: int | None = None) -> Emitter:
        """An input fed imperatively through the returned ``Emitter``."""
        inp = self._reattach(name, prefetch, True) or self._intake.new_input(
            name, prefetch, imperative=True)
        inp.on_subscribe(EmitterSubscription(inp))
        return Emitter(inp, self._merge)

    def _reattach(self, name: str | None, prefetch: int | None,
                  imperative: bool) -> Input | None:
        """The restored input ``name`` waiting to be re-attached, if any (TS §8.1)."""
        inp = self._detached.pop(name, None) if self._detached and name is not None else None
        if inp is not None:
            inp.imperative = imperative
            if prefetch:
                inp.prefetch = prefetch
        return inp

    # ================================================================ checkpoints
    def checkpoint(self, *, stages: Mapping[str, Any] | None = None) -> bytes:
        """The union's state as checkpoint bytes (``docs/checkpoint.md``, TS §8.1).

        Membership, every input's counts and last CTI, progress and idleness, the policy's
        state, the merge's output CTI and the events merged but not yet handed on, the late
        records waiting: what ``restore`` needs to continue exactly. ``stages``: stateful
        stages downstream of the union to save with it, by name (``Windows``,
        ``ReorderBuffer``). Call it between sends, not from inside the subscriber's
        ``on_next``; arrivals still queued behind a subscriber without demand refuse it
        (``CheckpointError``), since they are part of no cut. See
        ``operators.union.checkpoint``.
        """
        config = {"name": self.name, "prefetch": self.prefetch,
                  "max_buffered": self.max_buffered, "late_capacity": self.late.capacity,
                  "fail_on_input_error": self.fail_on_input_error,
                  "final_cti": self.final_cti, "keep_departed": self.keep_departed,
                  "min_credit": self.min_credit, "max_drift": self.max_drift,
                  "idle_after": self.idle_after}
        return checkpoint.take(self.name, config, self.policy, self._intake, self._merge,
                               self.late, stages or {})

    @classmethod
    def restore(cls, data: bytes, *, policy: Policy,
                stages: Mapping[str, Any] | None = None, **options: Any) -> Union:
        """A new union continuing from ``checkpoint()``'s ``data`` under ``policy`` (the
        same policy as the checkpoint's: checked). The configuration is the checkpoint's;
        ``options`` (``Union``'s keywords: ``executor``, ``clock``…) override it. Its active
        inputs wait to be re-attached by name (``add(publisher, name=…)``,
        ``open_input(name)``); each one's ``stats().received`` tells its producer where to
        resend from. ``stages``: fresh stages of the same definitions to load the saved
        ones into. A checkpoint that is not one, of a newer format, truncated, corrupted or
        made under another policy raises ``CheckpointError`` and nothing is changed (TS
        §8.2)."""
        saved = checkpoint.read(data, policy, stages or {})
        union = cls(policy, **{**saved.config, **options})
        union._detached = saved.apply(union._intake, union._merge, union.late)
        return union

    def detached(self) -> tuple[str, ...]:
        """The restored inputs not yet re-attached (TS §8.1), by name."""
        return tuple(self._detached)

    def feed(self, arrivals: Iterable[tuple[Emitter, Event]], *, chunk: int = 1024) -> int:
        """Send recorded arrivals ``(emitter, event)`` in their order, as credit allows.

        The batch path behind replaying a recording through a live union: the same as calling
        ``try_send`` on each in turn, but up to ``chunk`` arrivals go into the merge as one
        batch (one queue item, one wake-up, the policy run over it in one loop). Returns how
        many were sent: the first arrival without credit (after merging what was sent) stops
        the feed, and the caller resumes from there. ``feed_columns`` takes the same arrivals
        as two parallel sequences, which spares building and splitting the pairs. As with an
        emitter's sends, an input's arrivals come from one producer at a time (RS §1.3): two
        threads may feed at once only if no input is fed by both.
        """
        return ways_in.feed(self._intake, arrivals, chunk)

    def feed_columns(self, inputs: Sequence[Emitter], events: Sequence[Event], *,
                     chunk: int = 1024) -> int:
        """``feed`` for arrivals as columns: ``events[i]`` arrived from ``inputs[i]``."""
        return ways_in.feed_columns(self._intake, inputs, events, chunk)

    def feed_events(self, events: Sequence[Event], *, chunk: int = 1024) -> int:
        """``feed`` for arrivals that name their input: ``events[i]`` arrived from the input
        opened (``open_input``) under the name ``events[i].source``.

        For recordings whose events carry their device's name, as replayed logs do: there is
        no column of inputs to build or to check against the names, which makes this the
        cheapest way in. A source that names no input opened here (an input added with
        ``add`` is fed by its publisher, not by name) raises ``InputError`` naming the
        arrival, and nothing of its block is sent; an input that leaves while its block is
        being queued raises ``ClosedError``, as ``try_send`` would.
        """
        return ways_in.feed_events(self._intake, events, chunk)

    # ================================================================ lifecycle
    def close(self) -> None:
        """No more inputs: the union completes once every input has left and been merged."""
        intake = self._intake
        with intake.lock:
            intake.closed = True
            output = intake.output
            if output is not None:
                output.finish()  # complete once drained (TS §4.3)
        intake.wake()

    def _fail(self, error: BaseException) -> None:
        """The union fails with ``error`` (RS §1.4): inputs cancelled, the subscriber told at
        once (RS §4.2), the late output ended with it; the first error wins."""
        intake = self._intake
        with intake.lock:
            if intake.error is not None or intake.done:
                return
            intake.error = error
            inputs = list(intake.inputs.values())
            output = intake.output
            if output is not None:
                output.finish(error)
        for inp in inputs:
            if not inp.left and inp.subscription is not None:
                inp.subscription.cancel()
        if output is not None:
            output.signal()
        else:
            self._terminate()

    def _terminate(self) -> None:
        intake = self._intake
        if intake.done:
            return
        intake.done = True
        if intake.error is not None:
            self.late.error(intake.error)
        else:
            if isinstance(self.policy, EdgePolicy):  # TS §7.5: the edges never closed
                merge = self._merge
                merge.state, records = self.policy.finish(merge.state)
                self.late.push_many(list(records))
            self.late.complete()

    # ================================================================ output
    def subscribe(self, subscriber: Any) -> None:
        """The merged stream, one event per element (one subscriber at a time)."""
        self._subscribe(subscriber, 1, False)

    def batches(self, max_batch: int = 1024) -> UnionBatches:
        """The same merged stream as a publisher of lists of up to ``max_batch`` events.

        Demand counts lists (RS §3.9 applies to them), so a subscriber bounds what it holds
        to ``n × max_batch`` events. Events are the same, in the same order, as ``subscribe``
        would deliver; a list is handed over whole and never touched again. The per-element
        cost of delivery (one ``on_next``, one demand check) is paid once per list: the path
        for consumers that process events in bulk (files, columns, the network).
        """
        if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch <= 0:
            raise ValueError(f"{self.name}.batches(): max_batch must be a positive int, "
                             f"got {max_batch!r}")
        return UnionBatches(self, max_batch)

    def _subscribe(self, subscriber: Any, size: int, lists: bool) -> None:
        check_subscriber(subscriber)  # RS §1.9
        intake = self._intake
        with intake.lock:
            busy = intake.output is not None
            if not busy:
                output = intake.output = Output(subscriber, self._merge, self._executor, size,
                                                lists, self._detach)
                if intake.error is not None:
                    output.finish(intake.error)
                elif intake.closed or intake.done:
                    output.finish()  # complete once drained (TS §4.3)
        if busy:
            failed(ClosedError(f"{self.name} already has a subscriber; use broadcast() to "
                               "share its output")).subscribe(subscriber)
            return
        output.start()

    def _detach(self, output: Output, cancelled: bool) -> None:
        intake = self._intake
        with intake.lock:
            if intake.output is output:
                intake.output = None
        if not cancelled:
            self._terminate()

    # ================================================================ stats
    def stats(self) -> UnionStats:
        """Frozen per-input and total accounting; O(active inputs + keep_departed)."""
        intake = self._intake
        with intake.lock:
            kept = list(intake.history.values())
            forgotten, (received, emitted, dropped, adjusted) = (intake.forgotten,
                                                                 intake.forgotten_totals)
        merge = self._merge
        against = merge.lag_reference
        ahead = merge.ahead()
        inputs = tuple(input_stats(inp, against, ahead) for inp in kept)
        return UnionStats(
            inputs, received + sum(s.received for s in inputs),
            emitted + sum(s.emitted for s in inputs), merge.ctis,
            dropped + sum(s.dropped for s in inputs), adjusted + sum(s.adjusted for s in inputs),
            merge.output_cti, sum(s.buffered for s in inputs), intake.peak, self.max_buffered,
            self.late.stats(), intake.closed, intake.done, forgotten, self.keep_departed,
            self.min_credit, self.max_drift, self.idle_after,
            sum(s.paused for s in inputs), sum(s.idle for s in inputs),
            None if intake.align is None else intake.align.floor,
            edge_stats(self.policy, merge.state))

    def __repr__(self) -> str:
        return f"Union({self.policy!r}, inputs={len(self._intake.inputs)})"


class UnionBatches(PublisherBase):
    """A union's output in lists of up to ``max_batch`` events: ``Union.batches()``. It is
    the union's one output, as ``subscribe`` is (one subscriber at a time, hot)."""

    __slots__ = ("union", "max_batch")

    def __init__(self, union: Union, max_batch: int) -> None:
        self.union = union
        self.max_batch = max_batch

    def subscribe(self, subscriber: Any) -> None:
        self.union._subscribe(subscriber, self.max_batch, True)

    def __repr__(self) -> str:
        return f"{self.union!r}.batches({self.max_batch})"
