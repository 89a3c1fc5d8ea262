"""The merge: arrivals from the intake's queue through the policy, in arrival order, out to
the subscriber — one loop, whatever the shape of what it hands on.

``Merge`` holds what outlives any one subscriber (the union is hot): the policy's state, the
events merged but not yet handed on (``pending``), the output's accounting. ``Output`` is the
subscription of the union's one subscriber; its drain runs the loop (``Output.merge``), which
is parameterised by where its output goes:

- ``subscribe``: one event per ``on_next``;
- ``batches(n)``: lists of up to ``n`` events per ``on_next``, as full as what has arrived
  allows;
- settling (no demand, the output closed): no ``on_next`` at all. Joins, leaves, suppressed
  CTIs and late events produce no element, so they must not wait for a request; merging stops
  as soon as an element is due, which waits in ``pending`` for demand (RS §1.1).

An emitter's single event may skip the queue: when the sending thread can be the drain,
``Output.arrive_now`` merges it and hands it on right there, through the same steps and
accounting (the single-event fast path; everything it does not handle goes to a full turn).

Only user code is wrapped in ``try``: the policy's ``step``/``step_many``/``join``/``leave``
(a raise fails the union with the policy's error, RS §1.4) and the subscriber's ``on_next``
(a raise breaks RS §2.13: reported, the subscription cancelled, the union goes on for the
next subscriber). Anything else that raises in a drain turn is a defect of the union's own:
the union fails with that very error (``Output._emit``), never blamed on a user.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from engine.codes import Reason
from engine.event import ADJUSTED, CTI, Event, LateRecord
from engine.contracts import MAX_DEMAND
from engine.executors import INLINE, Executor
from engine.policy import LateEntry, Outputs, Policy, on_time_at_high, step_many
from engine.subscription import SubscriptionBase
from engine.times import MAX_TIME
from operators.late import LateOutput
from operators.union.inputs import JOIN, Batch, Input, Intake

__all__ = ["Merge", "Output", "PolicyFailed"]

#: a late record's reason for an input that resumed from idle (TS §4.7)
RESUMED = Reason.RESUMED.text

_INPUT = attrgetter("input")    # of a late entry (engine.policy.LateEntry)
_ACTION = attrgetter("action")


class PolicyFailed(Exception):
    """The policy raised ``error`` while merging: a defect in it, not in the subscriber; the
    union fails with the policy's error (RS §1.4)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def _call_policy(method: Callable[[Any, Any], tuple[Any, Outputs]], state: Any,
                 arg: Any) -> tuple[Any, Outputs]:
    try:
        return method(state, arg)
    except Exception as err:  # user code: the policy (RS §1.4)
        raise PolicyFailed(err) from err


def _resumed_records(events: Any, late: list[LateEntry], ctis: list[Event],
                     resumed: list[str]) -> list[LateRecord]:
    """A batch's late records when some of its inputs had resumed from idle (TS §4.7): each
    of theirs before their first CTI in the batch has the reason ``"resumed"``."""
    at = {id(e): i for i, e in enumerate(events)}
    until: dict[str | None, int] = {name: len(events) for name in resumed}
    for cti in reversed(ctis):
        if cti.source in until:
            until[cti.source] = at[id(cti)]
    return [LateRecord(entry.input, entry.event, entry.cti, entry.action, entry.adjusted,
                       RESUMED if at[id(entry.event)] < until.get(entry.input, -1)
                       else entry[5] if len(entry) > 5 else None)  # see LateEntry.reason
            for entry in late]


def _settling(element: Any) -> None:
    """Where settling's output goes: nowhere (its limit is 0, so this is never called)."""
    raise AssertionError(f"settling handed on {element!r}")


class Merge:
    """The merge's state, which outlives any one subscriber. Runs only on the output's drain.

    ``pending``: events merged, not yet handed on (the outputs of one step beyond demand, or of
    a batch beyond a list). ``output_cti``: the last CTI emitted; ``ctis``: how many were;
    ``final_sent``, ``cti_before_final``: the CTI at +inf was emitted, and the one before it
    (what inputs' lag is measured against after it).
    """

    __slots__ = ("policy", "intake", "late", "final_cti", "queue", "pending", "state",
                 "output_cti", "cti_before_final", "ctis", "final_sent", "at_high")

    def __init__(self, policy: Policy, intake: Intake, late: LateOutput, final_cti: bool) -> None:
        self.policy = policy
        self.intake = intake
        self.late = late
        self.final_cti = final_cti
        self.queue = intake.queue
        self.pending: list[Event] = []
        self.state = policy.initial()
        self.output_cti: int | None = None
        self.cti_before_final: int | None = None
        self.ctis = 0
        self.final_sent = False
        # the fast path may decide an on-time insert without calling ``step`` (its promise)
        self.at_high = on_time_at_high(policy)

    # ---------------------------------------------------------------- one arrival
    def arrive(self, inp: Input | None, item: Any, state: Any, out: list[Event]) -> Any:
        """Merge one queued arrival (event, batch, join or leave): accounting, late records to
        the side output, emitted events appended to ``out``. Returns the policy's new state.
        (The loop inlines the commonest case, an insert, before it gets here.)"""
        cls = item.__class__
        if cls is Batch:
            return self.arrive_batch(item, state, out)
        assert inp is not None  # only a batch from several inputs is queued without one
        intake = self.intake
        if cls is Event:
            processed = inp.processed = inp.processed + 1
            if inp.requested - processed == inp.low_water:
                intake.low = True
            state, outputs = _call_policy(self.policy.step, state, item)
            if item.kind == CTI:
                inp.last_cti = item.start
                inp.ctis += 1  # TS §3.4: not an insert; counted apart
                inp.resumed = False  # TS §4.7: its own time is known again
        elif item is JOIN:
            state, outputs = _call_policy(self.policy.join, state, inp.name)
            intake.low = True  # the fair share changed (TS §4.5)
        else:  # LEAVE: the input is gone and everything it sent has been merged
            intake.depart(inp)
            state, outputs = _call_policy(self.policy.leave, state, inp.name)
            intake.low = True
        self.account(inp, outputs, out)
        return state

    def account(self, inp: Input, outputs: Outputs, out: list[Event]) -> None:
        """One step's outputs: events counted and appended to ``out``, late records counted
        and sent to the side output (TS §3.3: every late event leaves a record)."""
        for o in outputs:
            if isinstance(o, Event):
                if o.kind == CTI:
                    self.output_cti = o.start
                    self.ctis += 1
                else:
                    inp.emitted += 1
                out.append(o)
            else:
                if o.action == ADJUSTED:
                    inp.adjusted += 1
                else:
                    inp.dropped += 1
                if inp.resumed:
                    o.reason = RESUMED  # TS §4.7
                self.late.push(o)

    def arrive_batch(self, batch: Batch, state: Any, out: list[Event]) -> Any:
        """Merge a batch: the policy over all of it in one call (``step_many``), then the
        same accounting ``arrive`` keeps event by event, per input, in bulk."""
        events = batch.events
        try:
            state, emitted, late, ctis = step_many(self.policy, state, events)
        except Exception as err:  # user code: the policy (RS §1.4)
            raise PolicyFailed(err) from err
        counts = batch.counts
        by_name = batch.by_name
        intake = self.intake
        resumed = [inp.name for inp, _ in counts if inp.resumed]  # TS §4.7
        inserts = {}
        for inp, n in counts:
            held = inp.requested - inp.processed
            inp.processed += n
            if held > inp.low_water >= held - n:
                intake.low = True
            inserts[inp] = n
        for e in ctis:  # arrived CTIs: per input count and latest (TS §3.4)
            inp = by_name[e.source]  # stamped with its input's name
            inp.last_cti = e.start
            inp.ctis += 1
            inp.resumed = False
            inserts[inp] -= 1
        dropped = 0
        if late:
            if not resumed:
                self.late.push_entries(late)  # TS §3.3
            else:  # TS §4.7: the records of inputs that resumed say so, until their CTI
                self.late.push_many(_resumed_records(events, late, ctis, resumed))
            adjusted = list(map(_ACTION, late)).count(ADJUSTED)
            dropped = len(late) - adjusted
            if len(counts) == 1:
                inp = counts[0][0]
                inp.adjusted += adjusted
                inp.dropped += dropped
                inserts[inp] -= dropped
            elif not adjusted:
                for name, n in Counter(map(_INPUT, late)).items():
                    inp = by_name[name]
                    inp.dropped += n
                    inserts[inp] -= n
            else:
                for entry in late:
                    inp = by_name[entry.input]  # named as it arrived
                    if entry.action == ADJUSTED:
                        inp.adjusted += 1  # the clipped copy is emitted: counted below
                    else:
                        inp.dropped += 1
                        inserts[inp] -= 1
        for inp, n in inserts.items():
            inp.emitted += n  # TS §3.4: each insert is emitted (maybe clipped) or dropped
        n_ctis = len(ctis)
        # TS §3.4 again: what was emitted beyond the surviving inserts are the output CTIs
        out_ctis = len(emitted) - (len(events) - n_ctis - dropped)
        if out_ctis:
            if out_ctis < 0:
                error = RuntimeError(
                    f"{self.policy!r}.step_many emitted {len(emitted)} events for "
                    f"{len(events) - n_ctis} inserts of which {dropped} were dropped: each "
                    "insert must be emitted once or dropped once (TS §3.4)")
                raise PolicyFailed(error)
            self.ctis += out_ctis
            for e in reversed(emitted):
                if e.kind == CTI:
                    self.output_cti = e.start
                    break
        out.extend(emitted)
        return state

    # ---------------------------------------------------------------- the end of time
    def final_due(self) -> bool:
        """The CTI at +inf is owed: asked for, closed, every input left and all merged."""
        return (self.final_cti and not self.final_sent and self.intake.closed
                and not self.intake.inputs and not self.queue and not self.pending
                and (self.output_cti is None or self.output_cti < MAX_TIME))

    def final(self) -> Event:
        self.final_sent = True
        self.cti_before_final = self.output_cti
        self.output_cti = MAX_TIME
        self.ctis += 1
        return Event(CTI, MAX_TIME, None, None, None)

    def finished(self) -> bool:
        """Closed, every input left, everything merged and emitted (and the final CTI sent)."""
        if not (self.intake.closed and not self.queue and not self.pending):
            return False
        if self.intake.inputs:
            return False
        # A policy may itself have emitted the CTI at +inf (an input sent it, delay 0): nothing
        # can follow it (TS §2.1), so the final CTI is owed no more.
        return self.final_sent or not self.final_cti or self.output_cti == MAX_TIME

    def ahead(self) -> frozenset:
        """The inputs the policy flags ahead now (TS §2.5, §2.6), if it flags any."""
        flag = getattr(self.policy, "ahead", None)
        return frozenset() if flag is None else flag(self.state)

    @property
    def lag_reference(self) -> int | None:
        """What inputs' lag is measured against: the output CTI, or after the CTI at +inf
        the one before it (+inf ends time; it is no time to lag behind)."""
        return self.cti_before_final if self.final_sent else self.output_cti


class Output(SubscriptionBase):
    """The subscription of the union's one subscriber: its drain loop is the merge.

    ``size``: events per element, handed on as lists when ``lists`` (``batches()``), else one
    by one. ``on_finish(output, cancelled)``: the union's, called once when it ends.
    """

    __slots__ = ("merge", "size", "lists", "on_finish", "inline")

    def __init__(self, subscriber: Any, merge: Merge, executor: Executor, size: int,
                 lists: bool, on_finish: Callable[[Output, bool], None]) -> None:
        super().__init__(subscriber, executor)
        self.merge = merge
        self.size = size
        self.lists = lists
        self.on_finish = on_finish
        self.inline = executor is INLINE and not lists  # arrive_now may merge on the caller

    def _emit(self, subscriber: Any, limit: int) -> int:
        try:
            return self.merge_into(subscriber.on_next, limit, self.size)
        except Exception as err:
            # Not user code (that is handled where it is called): the union's own work broke.
            # It fails with that very error (RS §1.4) rather than leave this drain holding its
            # counter with nobody told; see the module docstring.
            self.merge.intake.fail(err)
            return 0

    def _drained(self) -> bool:
        merge = self.merge
        try:
            if not merge.pending and merge.queue:
                self.merge_into(_settling, 0, 1)  # merge without demand
            return merge.finished()
        except Exception as err:  # the union's own work, as in _emit
            merge.intake.fail(err)
            return False

    def _on_finish(self, cancelled: bool) -> None:
        self.on_finish(self, cancelled)

    def arrive_now(self, inp: Input, event: Event) -> bool:
        """The single-event fast path: merge ``event`` from ``inp`` (whose credit the caller
        checked) and hand on what it gives right here, on the calling thread, instead of
        queueing it and running a drain for it. Returns False, having done nothing, where
        that is not allowed (the caller then queues the event: ``Input.on_next``); True once
        the event was taken (merged, or discarded if ``inp`` left meanwhile, RS §2.8).

        Allowed when the caller can be the drain: the merge runs inline (``executor=None``,
        one element per ``on_next``) and no task runs on this thread's trampoline (the caller
        is not inside another drain, so the subscriber is called at depth 1, RS §3.3); nothing
        is queued or pending (arrival order, TS §4.1); the subscriber has started, has not
        ended and has demand (RS §1.1); the input has not left and holds credit; and no drain
        runs. All of that is decided under one lock, the one ``signal`` claims the drain
        under: the work counter goes from 0 to 1 (signals stay serial, RS §1.3) and the
        arrival is counted (``Input.accept``'s count) in the same hold; ``Intake.leave``
        takes that lock too, so the count is before the input left or not at all. Once
        claimed, the event is merged as the loop below merges it (the policy's ``step``, or
        no call where the policy promises the answer, ``on_time_at_high``; ``Merge.account``;
        credit) and an on-time insert goes to ``on_next``. Anything else — a CTI, what a
        step puts in ``pending``, a failing policy (RS §1.4) or subscriber (RS §2.13), a
        request, cancel or arrival meanwhile — is left to a full drain turn, run here before
        returning with the counter still held, so it ends as the queued path would.
        """
        if not self.inline or event.__class__ is not Event or event.id is not None:
            # not an Event: the queued path refuses it, naming the input; an edge (TS §7.1):
            # it checks that the policy decides edges, and stamps the input keeping the id
            return False
        try:
            trampoline = INLINE.local.trampoline
        except AttributeError:
            trampoline = INLINE.here()
        merge = self.merge
        if trampoline.running or merge.queue or merge.pending:
            return False
        lock = self._lock
        # One lock for the claim and the arrival: the drain is claimed as ``signal`` claims
        # it, and the event counted against the input's credit as ``Input.accept`` counts it,
        # ``Intake.leave`` taking this lock too (``Output.lock``), so an arrival is counted
        # before the input left or not at all (RS §2.8) and never beyond credit (RS §1.1).
        lock.acquire()
        added = self._added
        demand = self._demand + added
        if (self._wip or demand <= 0 or self._done or self._cancelled or not self._started
                or inp.left or inp.received >= inp.requested or merge.queue or merge.pending):
            lock.release()  # a drain runs or is due, no demand, the input left: queued
            return False
        self._wip = 1  # the drain is ours (RS §1.3)
        if added:
            self._added = 0
            self._demand = demand = demand if demand < MAX_DEMAND else MAX_DEMAND  # RS §3.17
        received = inp.received = inp.received + 1
        lock.release()
        trampoline.running = True  # drains scheduled from on_next run after ours, not inside
        held = True  # the counter is ours until released below or handed to a drain turn
        try:
            if received - inp.processed > inp.peak:
                inp.peak = received - inp.processed
            if inp.tracking:
                inp.saw(event)  # TS §4.6, §4.7
            item = event
            if event.source != inp.name:
                item = Event(event.kind, event.start, event.end, event.payload, inp.name)
            if item.kind == CTI:
                merge.queue.append((inp, item))  # a CTI takes the loop's way (TS §4.1)
                held = False
                self._drain()
                return True
            intake = merge.intake
            processed = inp.processed = inp.processed + 1
            if inp.requested - processed == inp.low_water:
                intake.low = True  # granted after on_next, as the loop grants after its turn
            if merge.at_high and ((high := merge.state.high) is None or item.start >= high):
                outputs = None  # on time by the policy's promise (on_time_at_high): no step
            else:
                try:
                    state, outputs = merge.policy.step(merge.state, item)
                except Exception as err:  # user code: the policy (RS §1.4)
                    intake.fail(err)
                    held = False
                    self._drain()
                    return True
                merge.state = state
                if len(outputs) == 1 and outputs[0] is item:
                    outputs = None  # on time
            if outputs is None:  # on time, handed on as is
                inp.emitted += 1
                if demand != MAX_DEMAND:  # RS §3.17: "effectively unbounded" is not counted
                    self._demand = demand - 1
                try:
                    self._subscriber.on_next(item)
                except Exception as err:  # user code: the subscriber broke RS §2.13
                    self._subscriber_failed("on_next", err)
            else:
                try:
                    merge.account(inp, outputs, merge.pending)  # TS §3.3: late records kept
                except Exception as err:  # the union's own work broke: as in _emit
                    intake.fail(err)
            lock.acquire()
            held = False
            if self._wip == 1 and not self._done and not merge.pending:
                self._wip = 0  # nothing happened meanwhile: the drain is released
                lock.release()
            else:
                lock.release()
                # What is pending, or a request, cancel, arrival or end meanwhile: a full
                # turn takes it (and grants credit at its end, as below)
                self._drain()
            if intake.low or intake.starved:
                intake.low = False
                intake.grant()  # credit returns as arrivals leave the queue (TS §4.4)
        except BaseException:  # a caller's bad event (Input.accept), or a defect
            if held:
                self._drain()  # release the counter through a turn, then re-raise
            raise
        finally:
            if trampoline.queue:
                trampoline.run_queued()
            else:
                trampoline.running = False
        return True

    def hold(self) -> bool:
        """Claim the drain for work done outside it (a checkpoint, TS §8.1): True once the
        work counter moved from 0 to 1, as ``signal`` claims it, so nothing merges
        meanwhile (RS §1.3); False, having done nothing, if a drain runs or is due. The
        holder merges what is queued with ``settle`` and ends with ``let_go``."""
        with self._lock:
            if self._wip:
                return False
            self._wip = 1
        return True

    def settle(self) -> None:
        """Merge queued arrivals without handing anything on (only while held)."""
        if not self.merge.pending and self.merge.queue:
            self.merge_into(_settling, 0, 1)

    def let_go(self) -> None:
        """End a ``hold``: a drain turn takes the counter and whatever arrived meanwhile."""
        self._schedule()

    @property
    def lock(self) -> Any:
        """The lock of the drain's claim, which ``arrive_now`` also counts an arrival under:
        ``Intake.leave`` holds it while the input leaves."""
        return self._lock

    def merge_into(self, on_next: Callable[[Any], None], limit: int, size: int) -> int:
        """The merge loop. Merges queued arrivals until an element of ``size`` events is due
        (or none is left), hands it to ``on_next``, and so on, until ``limit`` elements were
        handed on, the subscriber cancelled (RS §3.12) or nothing is left; returns how many
        were. With ``limit`` 0 it only settles: it stops as soon as an element is due."""
        merge = self.merge
        intake = merge.intake
        queue = merge.queue
        buf = merge.pending
        step = merge.policy.step
        state = merge.state
        lists = self.lists
        count = 0
        try:
            while True:
                while queue and len(buf) < size:
                    inp, item = queue.popleft()
                    if item.__class__ is Event and item.kind != CTI:  # an insert, inlined
                        assert inp is not None  # an event is queued with its input
                        processed = inp.processed = inp.processed + 1
                        if inp.requested - processed == inp.low_water:
                            intake.low = True
                        try:
                            state, outputs = step(state, item)
                        except Exception as err:  # user code: the policy (RS §1.4)
                            raise PolicyFailed(err) from err
                        if len(outputs) == 1 and outputs[0] is item:  # on time, passed on as is
                            inp.emitted += 1
                            buf.append(item)
                        else:
                            merge.account(inp, outputs, buf)
                    else:
                        state = merge.arrive(inp, item, state, buf)
                if not buf:  # everything merged was handed on
                    if not (merge.final_cti and merge.final_due()):
                        break
                    buf.append(merge.final())
                if not limit:
                    break  # settling: what is due waits for demand (RS §1.1)
                # What is due, as elements: the next list of up to ``size`` events (handed
                # over whole, never touched again), or events one by one as far as demand
                # goes (the subscriber cannot reach ``buf`` while it runs: a request or an
                # arrival from inside on_next only schedules, RS §3.3).
                elements: list[Any]
                if lists:
                    if len(buf) <= size:
                        elements = [buf]
                        buf = merge.pending = []
                    else:
                        elements = [buf[:size]]
                        del buf[:size]
                else:
                    room = limit - count
                    elements = buf if len(buf) <= room else buf[:room]
                start = count
                for element in elements:
                    count += 1
                    try:
                        on_next(element)
                    except Exception as err:  # user code: the subscriber broke RS §2.13
                        self._subscriber_failed("on_next", err)
                        break
                    if self._cancelled:
                        break  # RS §3.12; what was not handed on stays pending (hot)
                if not lists:
                    del buf[:count - start]
                if count == limit or self._cancelled:
                    break
        except PolicyFailed as failure:
            merge.state = state
            intake.fail(failure.error)
            return count
        merge.state = state
        if intake.low or intake.starved:  # an input's credit fell to its low-water mark
            intake.low = False
            intake.grant()  # credit returns as arrivals leave, emitted or not (TS §4.4)
        return count
