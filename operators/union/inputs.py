"""Inputs and credit: each input's inner subscriber and accounting (``Input``), the one queue
every arrival goes into, the set of inputs and the credit they are granted (``Intake``).

Every arrival is one item of ``Intake.queue``, in arrival order (TS §4.1): ``(input, event)``
for one event, ``(input, JOIN)`` and ``(input, LEAVE)`` for an input joining and leaving (the
policy sees those in arrival order too), ``(input, Batch)`` for a block from one input and
``(None, Batch)`` for a block fed from several. The merge (``operators.union.merge``) takes
them from there; credit returns as they leave the queue, merged, emitted or not (TS §4.4).

These classes are the package's internals; the attributes they document are how its modules
talk to each other (no module writes another's underscored state).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from contextlib import nullcontext
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from engine.errors import ClosedError, InputError
from engine.event import CTI, Event
from engine.subscription import SerialUpstream, SubscriptionBase, refuse_subscription
from engine.violations import report_violation
from operators.union.align import Alignment

__all__ = ["Input", "Intake", "Batch", "JOIN", "LEAVE", "ACTIVE", "COMPLETED", "FAILED",
           "REMOVED", "wake_future"]

# an input's state, as its stats show it
ACTIVE = "active"
COMPLETED = "completed"
FAILED = "failed"
REMOVED = "removed"

JOIN = object()   # arrival markers: the policy sees joins and leaves in arrival order
LEAVE = object()

_SOURCE = attrgetter("source")
_ID = attrgetter("id")


def _no_edges(name: str, event: Event) -> InputError:
    """An edge event sent to a union whose policy does not decide edges (TS §7.1)."""
    return InputError(f"union input {name!r} sent the edge event {event!r}; edges need a "
                      "policy that decides them: Union(with_edges(policy), ...) "
                      "(operators.edges)")


class Batch:
    """Arrivals queued as one item (``try_send_many``, ``feed``): ``events`` in arrival order,
    each already stamped with its input's name; ``counts``: ``(input, n)`` for every input in
    it; ``by_name``: those inputs by name (unique within a batch: a name is only reused after
    its input's leave marker, and a batch never straddles one)."""

    __slots__ = ("events", "counts", "by_name")

    def __init__(self, events: Sequence[Event], counts: list[tuple[Input, int]]) -> None:
        self.events = events
        self.counts = counts
        self.by_name: dict[str | None, Input] = {inp.name: inp for inp, _ in counts}


def wake_future(future: asyncio.Future[None]) -> None:
    """Resolve a waiting sender's future (on its loop), unless it is already done."""
    if not future.done():
        future.set_result(None)


class Input:
    """One input: its accounting, and the inner subscriber of a publisher added with ``add``
    (an emitter's events come in through the same ``on_next``).

    Who writes what: the input's own signals, serially (RS §1.3): ``subscription``,
    ``received``, ``peak``, ``discarded``, ``sends``; the merge, on its drain: ``processed``,
    ``emitted``, ``dropped``, ``adjusted``, ``ctis``, ``last_cti``; credit granting, under the
    intake's lock: ``requested``, ``low_water``; leaving, under ``gate`` and the lock:
    ``left``, ``state``, ``error`` (``left`` and the credit taken back under the output's lock
    as well: the fast path counts an arrival under that lock alone). An emitter's senders wait on ``credit_cond`` (threads) and
    ``waiters`` (asyncio futures), which ``wake_senders`` wakes.
    """

    __slots__ = ("name", "intake", "subscription", "imperative", "state", "error", "requested",
                 "received", "processed", "emitted", "dropped", "adjusted", "last_cti", "peak",
                 "prefetch", "left", "discarded", "low_water", "ctis", "gate", "credit_cond",
                 "waiters", "sends", "tracking", "progress", "timed", "heard", "idle", "idles",
                 "paused", "pauses", "resumed")

    def __init__(self, intake: Intake, name: str, prefetch: int, imperative: bool) -> None:
        self.name = name
        self.intake = intake
        self.subscription: Any = None
        self.imperative = imperative  # opened with open_input: fed through an Emitter
        self.state = ACTIVE
        self.error: BaseException | None = None
        self.requested = 0   # credit granted in all
        self.received = 0    # events arrived (touched only by this input's signals, RS §1.3)
        self.processed = 0   # events merged (touched only by the drain)
        self.ctis = 0        # CTIs merged (touched only by the drain)
        self.emitted = 0
        self.dropped = 0
        self.adjusted = 0
        self.last_cti: int | None = None
        self.peak = 0
        self.prefetch = prefetch
        self.low_water = prefetch // 2  # credit is topped up when what it holds falls to this
        self.left = False    # no more arrivals will come
        self.discarded = 0   # arrived after remove() (RS §2.8), counted but not merged
        # Orders arrivals against leaving: an event is either queued before the leave marker or
        # discarded, never queued after it (remove() runs on any thread, concurrently with
        # this input's signals). Held only around the check and the append.
        self.gate = threading.Lock()
        self.credit_cond: threading.Condition | None = None
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.sends = 0       # ``await send`` calls since its task last yielded the loop
        # Alignment and idleness (operators.union.align), noted only when the union has them:
        # ``progress``, its latest CTI (``timed``: it has sent one) or else its latest insert
        # start; ``heard``, the clock time of its latest arrival (or of credit after none);
        # ``idle``/``idles``, idle now / times it went idle; ``paused``/``pauses``, withheld
        # credit for being ahead now / times it was; ``resumed`` (written by the merge too).
        align = intake.align
        self.tracking = align is not None
        self.progress: int | None = None
        self.timed = False
        self.heard = 0 if align is None else align.now()
        self.idle = False
        self.idles = 0
        self.paused = False
        self.pauses = 0
        self.resumed = False  # resumed from idle and no CTI of its own merged since (TS §4.7)

    # ---------------------------------------------------------------- inner subscriber
    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        if self.subscription is not None:
            refuse_subscription(subscription, f"union input {self.name!r}")
            return
        if not self.imperative:
            # RS §2.7: credit is granted from whichever thread merges, another input's
            # on_subscribe, remove() and the idle alarm; the publisher's subscription sees
            # those calls one at a time (an emitter's own subscription is safe from any thread)
            subscription = SerialUpstream(subscription)
        self.subscription = subscription
        if self.left:
            subscription.cancel()
            return
        self.intake.grant()

    def on_next(self, event: Any) -> None:
        if event is None:
            raise TypeError("RS §2.13: on_next() requires an event, got None")
        intake = self.intake
        with self.gate:
            if self.left:
                # RS §2.8: events may still arrive after remove() cancelled; counted, not merged
                self.discarded += 1
                return
            intake.queue.append((self, self.accept(event)))  # order = arrival (TS §4.1)
        output = intake.output
        if output is not None:
            output.signal()

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        self.intake.leave(self, FAILED, error)

    def on_complete(self) -> None:
        self.intake.leave(self, COMPLETED, None)

    # ---------------------------------------------------------------- arrivals
    def accept(self, event: Any) -> Event:
        """Account for one arriving event and stamp it with this input's name.

        An arrival the union cannot take (not an ``Event``; an edge under a policy that does
        not decide edges) is refused before it is counted: a refused ``try_send``, ``send`` or
        ``send_blocking`` uses no credit and changes no count (TS §3.4)."""
        if event.__class__ is not Event:
            raise TypeError(f"union input {self.name!r} sent {type(event).__name__} "
                            f"{event!r}; expected an engine.Event")
        if event.id is not None and not self.intake.edges:
            raise _no_edges(self.name, event)
        received = self.received + 1
        if received > self.requested:
            report_violation("RS §1.1", f"union input {self.name!r} sent event {received} but "
                             f"only {self.requested} were requested", party=self.subscription)
        self.received = received
        buffered = received - self.processed
        if buffered > self.peak:
            self.peak = buffered
        if self.tracking:
            self.saw(event)
        if event.source != self.name:
            return Event(event.kind, event.start, event.end, event.payload, self.name,
                         event.id)
        return event

    def accept_many(self, events: Sequence[Event], who: str) -> Sequence[Event]:
        """``accept`` for a batch whose credit the caller checked, under ``gate``: one check of
        classes and names when, as usual, they are right (then ``events`` itself is queued);
        otherwise every event is checked before any is counted, so a bad one refuses the batch
        whole."""
        if (set(map(type, events)) == {Event} and set(map(_SOURCE, events)) == {self.name}
                and (self.intake.edges or set(map(_ID, events)) == {None})):
            self.arrived(len(events))
            if self.tracking:
                for event in events:
                    self.saw(event)
            return events
        edges = self.intake.edges
        for i, event in enumerate(events):
            if event.__class__ is not Event:
                if event is None:
                    raise TypeError(f"{who}() requires events, got None at position {i}")
                raise TypeError(f"union input {self.name!r} sent {type(event).__name__} "
                                f"{event!r} at position {i}; expected an engine.Event")
            if event.id is not None and not edges:
                raise _no_edges(self.name, event)
        return [self.accept(e) for e in events]

    def arrived(self, n: int) -> None:
        """``n`` more arrived whose credit and form were checked (a batch): counted, peak kept."""
        received = self.received = self.received + n
        if received - self.processed > self.peak:
            self.peak = received - self.processed

    def saw(self, event: Event) -> None:
        """Note an arrival for alignment (TS §4.6) and idleness (TS §4.7): its progress, the
        clock time it was heard, and an idle input resumed."""
        t = event.start
        if event.kind == CTI:
            if not self.timed or t > self.progress:  # type: ignore[operator]
                self.progress = t
                self.timed = True
        elif not self.timed and (self.progress is None or t > self.progress):
            self.progress = t
        align = self.intake.align
        if align is not None and align.idle_after is not None:
            self.heard = align.now()
            if self.idle:
                self.idle = False  # TS §4.7: its next arrival resumes it
                self.resumed = True

    def went_idle(self) -> None:
        """Quiet for ``idle_after`` while holding credit (TS §4.7; under the intake's lock)."""
        self.idle = True
        self.idles += 1

    def send_batch(self, events: Sequence[Event], who: str) -> int:
        """Queue the longest prefix of ``events`` that credit allows as one ``Batch`` (one
        queue item, one wake-up of the merge); return how many were queued."""
        self.check_open()
        room = self.requested - self.received
        if room <= 0 or not events:
            return 0
        batch = events if len(events) <= room else events[:room]
        with self.gate:  # see gate
            if self.left:  # removed meanwhile: refused as a whole, as check_open would
                self.check_open()
            batch = self.accept_many(batch, who)
            self.intake.queue.append((self, Batch(batch, [(self, len(batch))])))
        self.intake.wake()
        return len(batch)

    def check_open(self) -> None:
        """``ClosedError`` if nothing more can be sent: the input left, or the union failed."""
        if self.left:
            raise ClosedError(f"input {self.name!r} has left the union "
                              f"({self.state}); nothing more can be sent")
        error = self.intake.error
        if error is not None:  # TS §3.3: refused loudly rather than queued and never merged
            raise ClosedError(f"input {self.name!r}: {self.intake.name} failed ({error!r}); "
                              "nothing more can be sent") from error

    # ---------------------------------------------------------------- emitter credit
    def wake_senders(self) -> None:
        """Credit came, or the input closed: every sender waiting for credit looks again."""
        cond = self.credit_cond
        if cond is not None:
            with cond:
                cond.notify_all()
        waiters, self.waiters = self.waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(wake_future, future)
            except RuntimeError:
                pass

    def __repr__(self) -> str:
        return f"<union input {self.name!r}>"


class Intake:
    """Where arrivals come in: the queue (TS §4.1), the inputs and their credit (TS §4.4, §4.5).

    ``inputs``: live or still queued, by id; ``active``: those that have not left, by name
    (names of active inputs are unique); ``history``: for ``stats()``, in the order added, the
    active inputs and the latest ``keep_departed`` to leave (older ones are folded into
    ``forgotten_totals``). ``lock`` guards all of these and credit; an input's ``gate`` is
    taken before it. ``output``: the subscription whose drain merges, if any (signalled on
    every arrival). The union's lifecycle as inputs see it: ``closed``, no more inputs may be
    added; ``done``, the union has ended; ``error``, the union failed: nothing more is
    accepted and no more credit is granted. ``low`` (set by the merge) and
    ``starved`` (set here: the total bound or alignment withheld some input's credit) ask for
    credit to be granted after a merge turn. ``align``: alignment and idleness (TS §4.6,
    §4.7), or ``None``. ``fail``: how the
    union fails, given by the union (for an input's error under ``fail_on_input_error``).
    """

    __slots__ = ("name", "prefetch", "max_buffered", "min_credit", "keep_departed",
                 "fail_on_input_error", "fail", "lock", "queue", "inputs", "active", "history",
                 "departed", "forgotten", "forgotten_totals", "added", "output", "closed",
                 "done", "error", "peak", "rotate", "starved", "low", "align", "edges")

    def __init__(self, name: str, *, prefetch: int, max_buffered: int, min_credit: int,
                 keep_departed: int, fail_on_input_error: bool,
                 fail: Callable[[BaseException], None], align: Alignment | None = None,
                 edges: bool = False) -> None:
        self.name = name
        self.prefetch = prefetch
        self.max_buffered = max_buffered
        self.min_credit = min_credit
        self.keep_departed = keep_departed
        self.fail_on_input_error = fail_on_input_error
        self.fail = fail
        self.lock = threading.Lock()
        self.queue: deque[tuple[Input | None, Any]] = deque()
        self.inputs: dict[int, Input] = {}
        self.active: dict[str, Input] = {}
        self.history: dict[int, Input] = {}
        self.departed: deque[Input] = deque()  # those that left and are kept, by leaving
        self.forgotten = 0                     # inputs let go from history ...
        self.forgotten_totals = (0, 0, 0, 0)   # ... and their received, emitted, dropped, adjusted
        self.added = 0
        self.output: SubscriptionBase | None = None
        self.closed = False
        self.done = False
        self.error: BaseException | None = None
        self.peak = 0
        self.rotate = 0
        self.starved = False  # some input waits for credit the total bound withheld
        self.low = False      # some input's credit reached its low water: replenish
        self.align = align    # alignment and idleness (TS §4.6, §4.7), if the union has them
        self.edges = edges    # the policy decides edge events (TS §7); else they are refused

    # ---------------------------------------------------------------- joining and leaving
    def new_input(self, name: str | None, prefetch: int | None, imperative: bool) -> Input:
        with self.lock:
            if self.closed or self.done:
                raise ClosedError(f"{self.name} is closed; no input can be added")
            if name is None:
                name = f"input-{self.added}"
            if not isinstance(name, str) or not name:
                raise InputError(f"{self.name}: input name must be a non-empty string, "
                                 f"got {name!r}")
            if name in self.active:
                raise InputError(f"{self.name}: an input named {name!r} is already active; "
                                 "names of active inputs must be unique")
            inp = Input(self, name, prefetch or self.prefetch, imperative)
            self.active[name] = inp
            self.inputs[id(inp)] = inp
            self.history[id(inp)] = inp
            self.added += 1
            self.queue.append((inp, JOIN))
        self.wake()
        return inp

    def opened(self, name: object) -> Input | None:
        """The active input opened with ``open_input`` under ``name``, if any."""
        inp = self.active.get(name) if isinstance(name, str) else None
        if inp is None or not inp.imperative:
            return None
        return inp

    def leave(self, inp: Input, state: str, error: BaseException | None) -> None:
        """``inp`` sends no more: its leave marker is queued behind what it sent."""
        # lock order: an input's gate, the intake's lock, the output's (the fast path counts
        # an arrival under that one alone: Output.arrive_now)
        with inp.gate, self.lock:
            output = self.output
            with nullcontext() if output is None else output.lock:  # type: ignore[attr-defined]
                if inp.left:
                    return
                inp.left = True
                inp.requested = inp.received  # unused credit returns to the pool
            inp.state = state
            inp.error = error
            del self.active[inp.name]
            self.queue.append((inp, LEAVE))  # the policy sees the leave in arrival order
        inp.wake_senders()
        if error is not None and self.fail_on_input_error:
            self.fail(error)
        self.wake()

    def remove(self, inp: Input) -> None:
        subscription = inp.subscription
        self.leave(inp, REMOVED, None)
        if subscription is not None:
            subscription.cancel()

    def depart(self, inp: Input) -> None:
        """The merge reached ``inp``'s leave marker: everything it sent has been merged."""
        with self.lock:
            self.inputs.pop(id(inp), None)
            self.departed.append(inp)
            while len(self.departed) > self.keep_departed:
                self._forget(self.departed.popleft())

    def _forget(self, inp: Input) -> None:
        """Fold a departed input's final counts into the totals and let it go (under the
        lock, so stats() sees it either in history or in the totals, never both)."""
        del self.history[id(inp)]
        received, emitted, dropped, adjusted = self.forgotten_totals
        self.forgotten_totals = (received + inp.received - inp.ctis, emitted + inp.emitted,
                                 dropped + inp.dropped, adjusted + inp.adjusted)
        self.forgotten += 1

    # ---------------------------------------------------------------- credit (TS §4.4)
    def wake(self) -> None:
        """Something arrived or changed: the output's drain merges it; with no output,
        credit is granted here (the union is hot: it keeps taking arrivals within its
        bounds while nobody is subscribed)."""
        output = self.output
        if output is not None:
            output.signal()
        else:
            self.grant()

    def grant(self) -> None:
        """Give inputs credit: each up to its fair share of ``max_buffered`` (TS §4.5), all
        within ``max_buffered`` (TS §4.4), every one at least ``min_credit``."""
        grants: list[tuple[Any, int]] = []
        with self.lock:
            inputs = list(self.inputs.values())
            if not inputs:
                return
            queued = 0
            for inp in inputs:
                queued += inp.requested - inp.processed
            if queued > self.peak:
                self.peak = queued
            free = self.max_buffered - queued
            self.starved = False
            if self.error is not None:
                return
            live = [inp for inp in inputs if not inp.left and inp.subscription is not None]
            if not live:
                return
            share = self.max_buffered // len(live) or 1  # TS §4.5: re-balanced as they come and go
            align = self.align
            now = 0
            if align is not None:
                now = align.now()
                if align.review(live, now):
                    self.starved = True  # TS §4.6: review again as the floor rises
            floor = self.min_credit
            start = self.rotate % len(live)
            self.rotate += 1
            for inp in live[start:] + live[:start]:
                if inp.paused:
                    continue  # TS §4.6: ahead of the floor by more than max_drift
                target = inp.prefetch if inp.prefetch < share else share
                # Set before ``held`` is read: the merge compares against it unlocked, so a
                # crossing it misses was already seen here.
                inp.low_water = target // 2
                held = inp.requested - inp.processed
                if held > inp.low_water:
                    continue  # top up in batches; above its share: no more until used
                want = target - held
                n = want if want < free else max(free, 0)
                if n < want:
                    self.starved = True  # the total bound held it back: retry as credit frees
                if held + n < floor:
                    n = floor - held  # beyond the total bound, by at most min_credit
                if n > 0:
                    if align is not None and inp.requested <= inp.received:
                        inp.heard = now  # TS §4.7: quiet time counts from when it can send
                    inp.requested += n
                    free -= n
                    grants.append((inp.subscription, n))
        for subscription, n in grants:
            subscription.request(n)
