"""``Union``: merge a changing set of input publishers into one stream on one clock.

::

    union = Union(policy=goldilocks("5m"), final_cti=True)
    a = union.add(device_a, name="A")          # any thread, any time
    b = union.open_input("B")                  # an emitter for imperative producers
    union.subscribe(subscriber)                # one subscriber at a time (see broadcast)
    union.late.subscribe(late_sink)            # dropped / adjusted events (TS §3.3)
    b.try_send(Event.point(t)); await b.send(e); b.send_blocking(e, timeout=1.0)
    a.remove(); b.complete(); union.close()    # completes when closed and all inputs left

    # the batch path: arrivals in, lists out (same events, same order, less per event)
    b.try_send_many(events); b.send_many_blocking(events, timeout=1.0)
    union.feed_columns(emitters, events)
    union.feed_events(named)                   # each event's source names its input
    union.batches(max_batch=1024).subscribe(list_subscriber)

Marble timeline (delay 5, goldilocks)::

    A:      5 ---- |5 ---------- 7 -- |8 --------
    B:      -- 0 ------- |0 ------------------ 1
    out:    5 -0 - |0 ---------- 7 -- |3 ------   (B's 1 < CTI 3: late, to union.late)

How it works. Every arrival — an event, an input joining, an input leaving — goes into one
queue in arrival order (TS §4.1). One drain loop (the output subscription's) takes arrivals
from it, runs the policy's pure step (``engine.policy``), and emits while downstream demand
lasts (RS §1.1); late records go to the side output. Inputs get credit: each at most
``prefetch`` events requested-or-queued, and all together at most ``max_buffered`` (TS §4.4),
so producer churn cannot exhaust memory; credit is replenished as events leave the queue.
A batch of arrivals (``try_send_many``, ``feed``, ``feed_columns``, ``feed_events``) is one
queue item that the policy runs over in one call (``step_many``); ``batches()`` hands the
output on as lists.

The union is hot: it keeps merging (within its bounds) while no one is subscribed, and a new
subscriber continues where the previous one cancelled. After the union ends, a subscriber gets
the terminal signal at once. ``stats()`` is cheap and frozen.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

from engine.contracts import MAX_DEMAND
from engine.errors import ClosedError, InputError
from engine.event import ADJUSTED, CTI, Event
from engine.executors import INLINE, as_executor
from engine.policy import Policy, step_many
from engine.sinks import PublisherBase
from engine.sources import failed
from engine.subscription import SubscriptionBase, check_subscriber, refuse_subscription
from engine.times import MAX_TIME
from engine.violations import report_violation

from operators.late import LateOutput, LateStats

__all__ = ["Union", "InputHandle", "Emitter", "InputStats", "UnionStats", "UnionBatches",
           "ACTIVE", "COMPLETED", "FAILED", "REMOVED", "SEND_TURN"]

ACTIVE = "active"
COMPLETED = "completed"
FAILED = "failed"
REMOVED = "removed"

#: ``await Emitter.send`` yields the event loop once every this many calls (a fair turn for
#: the loop's other tasks, at about 1/64 of a ``sleep(0)`` per event).
SEND_TURN = 64

_JOIN = object()   # arrival markers: the policy sees joins and leaves in arrival order
_LEAVE = object()

_KIND = attrgetter("kind")
_SOURCE = attrgetter("source")
_INPUT = itemgetter(0)   # of a late entry: LateRecord's fields as a tuple (step_many)
_ACTION = itemgetter(3)


class _Batch:
    """Arrivals queued as one item (``try_send_many``, ``feed``): ``events`` in arrival order,
    each already stamped with its input's name; ``counts``: ``(input, n)`` for every input in
    it; ``by_name``: those inputs by name (unique within a batch: a name is only reused after
    its input's leave marker, and a batch never straddles one)."""

    __slots__ = ("events", "counts", "by_name")

    def __init__(self, events: Sequence[Event], counts: list[tuple[_Input, int]]) -> None:
        self.events = events
        self.counts = counts
        self.by_name = {inp.name: inp for inp, _ in counts}


class _PolicyFailed(Exception):
    """The policy raised while merging: a bug in it, not in the subscriber (RS §1.4)."""


class InputStats(NamedTuple):
    """One input's accounting. TS §3.4: ``received = emitted + dropped + buffered`` at all
    times, so ``received = emitted + dropped`` once everything is merged. ``adjusted`` (emitted
    clipped) is counted apart, and so are CTIs (``ctis``): they are neither emitted nor dropped
    as inserts are; a CTI counts in ``received`` and ``buffered`` until it is merged."""

    name: str
    state: str
    received: int            # inserts arrived (and CTIs not yet merged, see above)
    emitted: int
    dropped: int
    adjusted: int
    last_cti: int | None
    lag: int | None          # output CTI − this input's last CTI, in ns (positive: behind);
                             # once the output is at +inf, against the CTI before it
    buffered: int            # arrived, not yet merged
    peak_buffered: int
    prefetch: int            # the per-input bound
    error: BaseException | None
    discarded: int           # arrived after remove() cancelled the input (RS §2.8)
    ctis: int                # CTIs from this input merged


class UnionStats(NamedTuple):
    inputs: tuple[InputStats, ...]   # active inputs and the latest that left, oldest first
    received: int
    emitted: int                     # inserts emitted (adjusted included)
    ctis: int                        # CTIs emitted
    dropped: int
    adjusted: int
    output_cti: int | None
    buffered: int
    peak_buffered: int
    max_buffered: int                # the total bound
    late: LateStats
    closed: bool
    done: bool
    forgotten: int = 0               # inputs that left whose own stats were let go (counted
    keep_departed: int = 0           # in the totals above); the bound on those kept
    min_credit: int = 0              # credit every input holds at least (TS §4.5)

    def input(self, name: str) -> InputStats:
        for stats in reversed(self.inputs):
            if stats.name == name:
                return stats
        raise KeyError(name)


class _Input:
    """One input's state; also its inner subscriber."""

    __slots__ = ("name", "union", "subscription", "state", "error", "requested", "received",
                 "processed", "emitted", "dropped", "adjusted", "last_cti", "peak", "prefetch",
                 "left", "discarded", "low_water", "ctis", "gate", "_credit_cond", "_waiters",
                 "sends")

    def __init__(self, union: Union, name: str, prefetch: int) -> None:
        self.name = name
        self.union = union
        self.subscription: Any = None
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
        self._credit_cond: threading.Condition | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.sends = 0       # ``await send`` calls since its task last yielded the loop

    # ---------------------------------------------------------------- inner subscriber
    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        if self.subscription is not None:
            refuse_subscription(subscription, f"union input {self.name!r}")
            return
        self.subscription = subscription
        if self.left:
            subscription.cancel()
            return
        self.union._grant()

    def on_next(self, event: Any) -> None:
        if event is None:
            raise TypeError("RS §2.13: on_next() requires an event, got None")
        union = self.union
        with self.gate:
            if self.left:
                # RS §2.8: events may still arrive after remove() cancelled; counted, not merged
                self.discarded += 1
                return
            union._queue.append((self, self.accept(event)))  # order = arrival (TS §4.1)
        output = union._output
        if output is not None:
            output.signal()

    def accept(self, event: Any) -> Event:
        """Account for one arriving event and stamp it with this input's name."""
        received = self.received + 1
        if received > self.requested:
            report_violation("RS §1.1", f"union input {self.name!r} sent event {received} but "
                             f"only {self.requested} were requested", party=self.subscription)
        self.received = received
        buffered = received - self.processed
        if buffered > self.peak:
            self.peak = buffered
        if event.__class__ is not Event:
            raise TypeError(f"union input {self.name!r} sent {type(event).__name__} "
                            f"{event!r}; expected an engine.Event")
        if event.source != self.name:
            return Event(event.kind, event.start, event.end, event.payload, self.name)
        return event

    def accept_many(self, events: Sequence[Event], who: str) -> Sequence[Event]:
        """``accept`` for a batch whose credit the caller checked, under ``gate``: one check of
        classes and names when, as usual, they are right (then ``events`` itself is queued);
        otherwise every event is checked before any is counted, so a bad one refuses the batch
        whole."""
        if set(map(type, events)) == {Event} and set(map(_SOURCE, events)) == {self.name}:
            received = self.received = self.received + len(events)
            if received - self.processed > self.peak:
                self.peak = received - self.processed
            return events
        for i, event in enumerate(events):
            if event.__class__ is not Event:
                if event is None:
                    raise TypeError(f"{who}() requires events, got None at position {i}")
                raise TypeError(f"union input {self.name!r} sent {type(event).__name__} "
                                f"{event!r} at position {i}; expected an engine.Event")
        return [self.accept(e) for e in events]

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        self.union._leave(self, FAILED, error)

    def on_complete(self) -> None:
        self.union._leave(self, COMPLETED, None)

    def __repr__(self) -> str:
        return f"<union input {self.name!r}>"

    # ---------------------------------------------------------------- emitter credit
    def _wake_senders(self) -> None:
        cond = self._credit_cond
        if cond is not None:
            with cond:
                cond.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:
                pass


def _some(names: Iterable[str], most: int = 10) -> str:
    """Up to ``most`` names for an error message, sorted, with how many more there are."""
    names = sorted(names)
    shown = ", ".join(map(repr, names[:most])) or "none"
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class InputHandle:
    """What ``Union.add`` returns: the input's ``name``, ``stats()`` and ``remove()``."""

    __slots__ = ("_input",)

    def __init__(self, inp: _Input) -> None:
        self._input = inp

    @property
    def name(self) -> str:
        return self._input.name

    def stats(self) -> InputStats:
        return self._input.union._input_stats(self._input)

    def remove(self) -> None:
        """Take the input out: its subscription is cancelled; what already arrived is merged."""
        self._input.union._remove(self._input)

    def _check_open(self) -> None:
        inp = self._input
        if inp.left:
            raise ClosedError(f"input {self.name!r} has left the union "
                              f"({inp.state}); nothing more can be sent")
        error = inp.union._error
        if error is not None:  # TS §3.3: refused loudly rather than queued and never merged
            raise ClosedError(f"input {self.name!r}: {inp.union.name} failed ({error!r}); "
                              "nothing more can be sent") from error

    def try_send_many(self, events: Sequence[Event]) -> int:
        """Send the longest prefix of ``events`` that credit allows as one batch: one queue
        item, one wake-up of the merge, the policy run over it in one loop. Returns how many
        were sent (the batch path for high-rate producers).

        On an input added with ``add``, this is the batch way in for the publisher's own
        side: arrivals handed over here count against the credit its subscription was
        granted, exactly as ``on_next`` would (RS §1.1), and must come from the same producer,
        serially with its signals (RS §1.3)."""
        self._check_open()
        inp = self._input
        room = inp.requested - inp.received
        if room <= 0 or not events:
            return 0
        batch = events if len(events) <= room else events[:room]
        union = inp.union
        with inp.gate:  # see _Input.gate
            if inp.left:  # removed meanwhile: refused as a whole, as _check_open would
                self._check_open()
            batch = inp.accept_many(batch, "try_send_many")
            union._queue.append((inp, _Batch(batch, [(inp, len(batch))])))
        union._wake()
        return len(batch)

    def __repr__(self) -> str:
        return f"InputHandle({self.name!r})"


class _EmitterSubscription:
    """The subscription between an ``Emitter`` and its union: credit in, cancel in."""

    __slots__ = ("_input",)

    def __init__(self, inp: _Input) -> None:
        self._input = inp

    def request(self, n: int) -> None:
        self._input._wake_senders()

    def cancel(self) -> None:
        self._input._wake_senders()


class Emitter(InputHandle):
    """An input fed imperatively: ``send`` waits for credit without blocking a thread (the
    asynchronous semaphore of seed 003), ``try_send`` never waits, ``send_blocking`` blocks a
    thread up to ``timeout``. Credit is the union's demand for this input (its ``prefetch``
    and the union's total bound): a slow consumer slows the producer."""

    __slots__ = ()

    def _credit(self) -> int:
        inp = self._input
        return inp.requested - inp.received

    def try_send(self, event: Event) -> bool:
        """Send if there is credit; return False (nothing sent) if there is none."""
        if event is None:
            raise TypeError("try_send() requires an event, got None")
        self._check_open()
        if self._credit() <= 0:
            return False
        self._input.on_next(event)
        return True

    async def send(self, event: Event) -> None:
        """Send, first waiting (on the running loop, no thread blocked) for credit.

        Every ``SEND_TURN``-th call yields the loop first, credit or not: the merge runs
        inside ``send`` and returns credit at once, so without it one producer task would
        run to its end before any other (``asyncio.gather`` of two producers would send one
        after the other, and the second one's events would all come out late). A task
        cancelled while it yields has sent nothing.
        """
        if event is None:
            raise TypeError("send() requires an event, got None")
        inp = self._input
        sends = inp.sends + 1
        if sends < SEND_TURN:
            inp.sends = sends
        else:
            inp.sends = 0
            await asyncio.sleep(0)  # a fair turn for the loop's other tasks
        while True:
            self._check_open()
            if self._credit() > 0:
                inp.on_next(event)
                return
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            inp._waiters.append((loop, future))
            if self._credit() > 0 or inp.left or inp.union._error is not None:
                # credit arrived (or the input closed) meanwhile: don't wait
                _resolve(future)
            inp.sends = 0  # waiting is a turn given up too
            await future

    def send_blocking(self, event: Event, timeout: float | None = None) -> bool:
        """Send from a thread, blocking up to ``timeout`` s for credit; False if it timed out."""
        if event is None:
            raise TypeError("send_blocking() requires an event, got None")
        inp = self._input
        if self._credit() > 0:  # credit in hand: no Condition, no wait
            self._check_open()
            inp.on_next(event)
            return True
        cond = inp._credit_cond
        if cond is None:
            cond = inp._credit_cond = threading.Condition()
        with cond:
            if not cond.wait_for(lambda: self._credit() > 0 or inp.left
                                 or inp.union._error is not None, timeout):
                return False
        self._check_open()
        inp.on_next(event)
        return True

    def send_many_blocking(self, events: Sequence[Event], timeout: float | None = None) -> int:
        """``send_blocking`` for many events: all of ``events`` in order, each run of them
        that credit allows going in as one batch (``try_send_many``), the thread blocking
        while there is no credit. ``timeout`` bounds the whole call; returns how many were
        sent (``len(events)`` unless it ran out). The batch path for producer threads.
        ``ClosedError`` if the input leaves or the union fails meanwhile; its message says how
        many were sent before."""
        inp = self._input
        deadline = None if timeout is None else time.monotonic() + timeout
        sent, total = 0, len(events)
        try:
            while sent < total:
                room = inp.requested - inp.received
                if room > 0:
                    sent += self.try_send_many(events[sent:sent + room])
                    continue
                self._check_open()
                cond = inp._credit_cond
                if cond is None:
                    cond = inp._credit_cond = threading.Condition()
                with cond:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not cond.wait_for(lambda: self._credit() > 0 or inp.left
                                         or inp.union._error is not None, left):
                        return sent
        except ClosedError as err:
            raise ClosedError(f"{err} ({sent} of the {total} events were sent)") from err
        return sent

    def complete(self) -> None:
        """This producer is done: the input leaves once its events are merged."""
        self._input.on_complete()

    def error(self, error: BaseException) -> None:
        """This producer failed: the input leaves with ``error`` in its stats."""
        self._input.on_error(error)

    def __repr__(self) -> str:
        return f"Emitter({self.name!r})"


class _Output(SubscriptionBase):
    """The union's output subscription: its drain loop is the merge (see module docstring).
    ``max_batch`` 0: one event per element; otherwise lists of up to that many."""

    __slots__ = ("_union", "_max_batch")

    def __init__(self, subscriber: Any, union: Union, max_batch: int = 0) -> None:
        super().__init__(subscriber, union._executor)
        self._union = union
        self._max_batch = max_batch

    def _emit(self, subscriber: Any, limit: int) -> int:
        if self._max_batch:
            return self._union._merge_batches(self, subscriber, limit)
        return self._union._merge(self, subscriber, limit)

    def _drained(self) -> bool:
        union = self._union
        if not union._pending and union._queue:
            union._settle(self)
        return union._finished_merging()

    def _on_finish(self, cancelled: bool) -> None:
        self._union._detach(self, cancelled)


class Union(PublisherBase):
    """A hot publisher merging dynamic inputs under a time policy (see the module docstring).

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
    """

    def __init__(self, policy: Policy, *, prefetch: int = 256, max_buffered: int = 65_536,
                 late_capacity: int = 10_000, fail_on_input_error: bool = False,
                 final_cti: bool = False, executor: object = None,
                 keep_departed: int = 1024, min_credit: int = 0,
                 name: str = "union") -> None:
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
        self._executor = as_executor(executor) if executor is not None else INLINE
        self._lock = threading.Lock()
        self._state = policy.initial()
        self._queue: deque[tuple[_Input, Any]] = deque()
        self._pending: deque[Event] = deque()  # outputs of one step beyond the demand
        self._inputs: dict[int, _Input] = {}   # live or still queued, by id
        # for stats(), in the order added: active inputs and the latest keep_departed to leave
        self._history: dict[int, _Input] = {}
        self._departed: deque[_Input] = deque()  # those that left and are kept, by leaving
        self._forgotten = 0                    # inputs let go from _history ...
        self._forgotten_totals = (0, 0, 0, 0)  # ... and their received, emitted, dropped, adjusted
        self._added = 0
        self._active: dict[str, _Input] = {}   # active inputs by name (names are unique)
        self._output: _Output | None = None
        self._closed = False
        self._final_sent = False
        self._done = False
        self._error: BaseException | None = None
        self._output_cti: int | None = None
        self._cti_before_final: int | None = None  # what lag is measured against after +inf
        self._ctis = 0
        self._peak = 0
        self._rotate = 0
        self._starved = False  # some input waits for credit the total bound withheld
        self._low = False      # set by the merge: some input's credit reached its low water

    # ================================================================ inputs
    def add(self, publisher: Any, *, name: str | None = None,
            prefetch: int | None = None) -> InputHandle:
        """Merge ``publisher``'s events as input ``name`` (any thread, any time)."""
        if publisher is None:
            raise TypeError(f"{self.name}.add() requires a publisher, got None")
        inp = self._new_input(name, prefetch)
        publisher.subscribe(inp)
        return InputHandle(inp)

    def open_input(self, name: str, *, prefetch: int | None = None) -> Emitter:
        """An input fed imperatively through the returned ``Emitter``."""
        inp = self._new_input(name, prefetch)
        inp.on_subscribe(_EmitterSubscription(inp))
        return Emitter(inp)

    def _new_input(self, name: str | None, prefetch: int | None) -> _Input:
        with self._lock:
            if self._closed or self._done:
                raise ClosedError(f"{self.name} is closed; no input can be added")
            if name is None:
                name = f"input-{self._added}"
            if not isinstance(name, str) or not name:
                raise InputError(f"{self.name}: input name must be a non-empty string, "
                                 f"got {name!r}")
            if name in self._active:
                raise InputError(f"{self.name}: an input named {name!r} is already active; "
                                 "names of active inputs must be unique")
            inp = _Input(self, name, prefetch or self.prefetch)
            self._active[name] = inp
            self._inputs[id(inp)] = inp
            self._history[id(inp)] = inp
            self._added += 1
            self._queue.append((inp, _JOIN))
        self._wake()
        return inp

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
        self._check_chunk("feed", chunk)
        arrivals = iter(arrivals)
        sent = 0
        while True:
            block = list(islice(arrivals, chunk))
            if not block:
                return sent
            emitters, events = zip(*block)
            n = self._feed_block(emitters, events)
            sent += n
            if n < len(block):
                return sent

    def feed_columns(self, inputs: Sequence[Emitter], events: Sequence[Event], *,
                     chunk: int = 1024) -> int:
        """``feed`` for arrivals as columns: ``events[i]`` arrived from ``inputs[i]``."""
        self._check_chunk("feed_columns", chunk)
        if len(inputs) != len(events):
            raise InputError(f"{self.name}.feed_columns(): {len(inputs)} inputs for "
                             f"{len(events)} events; expected one input per event")
        sent = 0
        for lo in range(0, len(events), chunk):
            emitters, block = inputs[lo:lo + chunk], events[lo:lo + chunk]
            n = self._feed_block(emitters, block)
            sent += n
            if n < len(block):
                break
        return sent

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
        self._check_chunk("feed_events", chunk)
        sent = 0
        for lo in range(0, len(events), chunk):
            block = events[lo:lo + chunk]
            n = self._feed_named(block, lo)
            sent += n
            if n < len(block):
                break
        return sent

    def _check_chunk(self, who: str, chunk: object) -> None:
        if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk <= 0:
            raise ValueError(f"{self.name}.{who}(): chunk must be a positive int, "
                             f"got {chunk!r}")

    def _feed_block(self, emitters: Sequence[Emitter], events: Sequence[Event]) -> int:
        """One batch if every input in the block has the credit for it and every event is an
        ``Event`` already named after its input; otherwise halves, then arrival by arrival."""
        counts = []
        names = {}
        for emitter, n in Counter(emitters).items():
            inp = getattr(emitter, "_input", None)
            if inp is None or inp.union is not self:
                raise InputError(f"{self.name}.feed(): {emitter!r} is not an input of "
                                 f"this union")
            counts.append((inp, n))
            names[emitter] = inp.name
        fits = all(inp.requested - inp.received >= n for inp, n in counts)
        if not fits and len(events) > 16:
            half = len(events) // 2
            sent = self._feed_block(emitters[:half], events[:half])
            if sent < half:
                return sent
            return sent + self._feed_block(emitters[half:], events[half:])
        # each event named after its input (an equal string is enough: equal strings built
        # apart compare as fast as one string with itself, and hash alike in the merge)
        if (not fits or list(map(type, events)).count(Event) != len(events)
                or list(map(_SOURCE, events)) != list(map(names.__getitem__, emitters))):
            return self._feed_each(emitters, events)
        return self._enqueue(counts, events, lambda: emitters)

    def _feed_named(self, events: Sequence[Event], offset: int) -> int:
        """``_feed_block`` for ``feed_events``: the inputs are found by the events' sources."""
        if list(map(type, events)).count(Event) != len(events):
            for i, event in enumerate(events):
                if event.__class__ is not Event:
                    raise TypeError(f"{self.name}.feed_events(): arrival {offset + i} is "
                                    f"{type(event).__name__} {event!r}; expected an "
                                    "engine.Event")
        sources = list(map(_SOURCE, events))
        try:
            tally = Counter(sources)
        except TypeError:  # an unhashable source: not a name
            tally = {}
        counts = []
        by_name: dict[str, Emitter] = {}
        for name, n in tally.items():
            inp = self._opened(name)
            if inp is None:
                tally = {}
                break
            counts.append((inp, n))
            by_name[name] = Emitter(inp)
        if not tally:  # name the first arrival that has no input to go to
            for i, name in enumerate(sources):
                if self._opened(name) is None:
                    raise InputError(
                        f"{self.name}.feed_events(): arrival {offset + i} names input "
                        f"{name!r}, which is not open here; expected the name of an input "
                        f"opened with open_input (open now: {_some(self._active)})")
        if not all(inp.requested - inp.received >= n for inp, n in counts):
            if len(events) > 16:
                half = len(events) // 2
                sent = self._feed_named(events[:half], offset)
                if sent < half:
                    return sent
                return sent + self._feed_named(events[half:], offset + half)
            return self._feed_each(list(map(by_name.__getitem__, sources)), events)
        return self._enqueue(counts, events, lambda: list(map(by_name.__getitem__, sources)))

    def _opened(self, name: object) -> _Input | None:
        """The active input opened with ``open_input`` under ``name``, if any."""
        inp = self._active.get(name) if isinstance(name, str) else None
        if inp is None or inp.subscription.__class__ is not _EmitterSubscription:
            return None
        return inp

    def _enqueue(self, counts: list[tuple[_Input, int]], events: Sequence[Event],
                 emitters: Callable[[], Sequence[Emitter]]) -> int:
        """Queue a checked block as one batch, under the gates of all its inputs (see
        ``_Input.gate``); if one of them has left meanwhile, arrival by arrival instead, which
        names it. ``emitters()``: the block's inputs column, built only for that."""
        counts.sort(key=lambda pair: id(pair[0]))  # one lock order for every feeder
        gates = [inp.gate for inp, _ in counts]
        for gate in gates:
            gate.acquire()
        try:
            if any(inp.left for inp, _ in counts):
                return self._feed_each(emitters(), events, locked=True)
            for inp, n in counts:
                received = inp.received = inp.received + n
                if received - inp.processed > inp.peak:
                    inp.peak = received - inp.processed
            self._queue.append((None, _Batch(events, counts)))
        finally:
            for gate in gates:
                gate.release()
        self._wake()
        return len(events)

    def _feed_each(self, emitters: Sequence[Emitter], events: Sequence[Event],
                   locked: bool = False) -> int:
        """``feed`` arrival by arrival: stamps names, stops at the first without credit, and
        raises ClosedError at the first whose input has left (checked under its gate)."""
        if locked:  # called with the gates held: the closed input is named before any is sent
            for emitter in set(emitters):
                if emitter._input.left:
                    emitter._check_open()  # raises: nothing of the block is sent
        sent = 0
        for emitter, event in zip(emitters, events):
            inp = emitter._input
            if event is None:
                raise TypeError(f"{self.name}.feed(): arrival {sent} has no event")
            if inp.requested - inp.received <= 0:
                self._wake()  # merge what was sent; credit may come back
                if inp.requested - inp.received <= 0:
                    return sent
            with inp.gate:  # see _Input.gate: never queued after the input's leave marker
                if inp.left:
                    emitter._check_open()
                self._queue.append((inp, inp.accept(event)))
            sent += 1
        self._wake()
        return sent

    def _leave(self, inp: _Input, state: str, error: BaseException | None) -> None:
        with inp.gate, self._lock:  # lock order: an input's gate, then the union's lock
            if inp.left:
                return
            inp.left = True
            inp.state = state
            inp.error = error
            inp.requested = inp.received  # unused credit returns to the pool
            del self._active[inp.name]
            self._queue.append((inp, _LEAVE))  # the policy sees the leave in arrival order
        inp._wake_senders()
        if error is not None and self.fail_on_input_error:
            self._fail(error)
        self._wake()

    def _remove(self, inp: _Input) -> None:
        subscription = inp.subscription
        self._leave(inp, REMOVED, None)
        if subscription is not None:
            subscription.cancel()

    # ================================================================ lifecycle
    def close(self) -> None:
        """No more inputs: the union completes once every input has left and been merged."""
        with self._lock:
            self._closed = True
            output = self._output
        if output is not None:
            output._completed = True  # finish once drained (TS §4.3)
        self._wake()

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._error is not None or self._done:
                return
            self._error = error
            inputs = list(self._inputs.values())
        for inp in inputs:
            if not inp.left and inp.subscription is not None:
                inp.subscription.cancel()
        output = self._output
        if output is not None:
            output._error = error
            output.signal()
        else:
            self._terminate()

    def _terminate(self) -> None:
        if self._done:
            return
        self._done = True
        if self._error is not None:
            self.late.error(self._error)
        else:
            self.late.complete()

    def _wake(self) -> None:
        output = self._output
        if output is not None:
            output.signal()
        else:
            self._grant()

    # ================================================================ output
    def subscribe(self, subscriber: Any) -> None:
        """The merged stream, one event per element (one subscriber at a time)."""
        self._subscribe(subscriber, 0)

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

    def _subscribe(self, subscriber: Any, max_batch: int) -> None:
        check_subscriber(subscriber)  # RS §1.9
        with self._lock:
            busy = self._output is not None
            if not busy:
                output = self._output = _Output(subscriber, self, max_batch)
                if self._error is not None:
                    output._error = self._error
        if busy:
            failed(ClosedError(f"{self.name} already has a subscriber; use broadcast() to "
                               "share its output")).subscribe(subscriber)
            return
        if self._done and self._error is None:
            output._completed = True
        output._completed = output._completed or self._closed
        output.start()

    def _detach(self, output: _Output, cancelled: bool) -> None:
        with self._lock:
            if self._output is output:
                self._output = None
        if not cancelled:
            self._terminate()

    def _finished_merging(self) -> bool:
        """Closed, every input left, everything merged and emitted (and the final CTI sent)."""
        if not (self._closed and not self._queue and not self._pending):
            return False
        if self._inputs:
            return False
        # A policy may itself have emitted the CTI at +inf (an input sent it, delay 0): nothing
        # can follow it (TS §2.1), so the final CTI is owed no more.
        return self._final_sent or not self.final_cti or self._output_cti == MAX_TIME

    def _merge(self, output: _Output, subscriber: Any, limit: int) -> int:
        """Merge arrivals and emit up to ``limit`` elements. Runs only on the drain."""
        queue = self._queue
        pending = self._pending
        step = self.policy.step
        state = self._state
        on_next = subscriber.on_next
        count = 0
        self._low = False  # an input's credit fell to its low-water mark: replenish after
        try:
            # RS §3.12: a cancel from inside on_next stops the loop; what was not delivered
            # stays queued for the next subscriber (the union is hot)
            while count < limit and not output._cancelled:
                if pending:
                    on_next(pending.popleft())
                    count += 1
                    continue
                if not queue:
                    break
                inp, item = queue.popleft()
                if item.__class__ is Event and item.kind != CTI:  # the hot path, inlined
                    processed = inp.processed = inp.processed + 1
                    if inp.requested - processed == inp.low_water:
                        self._low = True
                    try:
                        state, outputs = step(state, item)
                    except Exception as err:
                        raise _PolicyFailed() from err
                    if len(outputs) == 1 and outputs[0] is item:  # on time, passed on as is
                        inp.emitted += 1
                        on_next(item)
                        count += 1
                    else:
                        self._sort(inp, outputs, pending)
                else:
                    state = self._step_item(inp, item, state, pending)
        except _PolicyFailed as failure:
            return self._policy_failed(output, state, failure.__cause__, count)
        except Exception as err:  # only on_next can get here: the subscriber broke RS §2.13
            self._state = state
            output._subscriber_failed("on_next", err)
            return count
        self._state = state
        if self._low or self._starved:
            self._grant()  # credit returns as arrivals leave, emitted or not (TS §4.4)
        if count < limit and self._final_due():
            try:
                on_next(self._final())
            except Exception as err:
                output._subscriber_failed("on_next", err)
                return count
            count += 1
        return count

    def _merge_batches(self, output: _Output, subscriber: Any, limit: int) -> int:
        """``_merge`` for a batch subscriber (``batches()``): each element is a list of up to
        ``max_batch`` events. Arrivals are merged until a batch is full or none is left, so
        batches are as full as what has arrived allows."""
        queue = self._queue
        pending = self._pending
        max_batch = output._max_batch
        state = self._state
        on_next = subscriber.on_next
        count = 0
        self._low = False
        buf: list[Event] = list(pending)
        pending.clear()
        try:
            while count < limit and not output._cancelled:  # RS §3.12, as in _merge
                while len(buf) < max_batch and queue:
                    inp, item = queue.popleft()
                    if item.__class__ is _Batch:
                        state, emitted = self._step_batch(item, state)
                        if buf:
                            buf.extend(emitted)
                        else:
                            buf = emitted
                    else:
                        state = self._step_item(inp, item, state, buf)
                if not buf:
                    break
                if len(buf) <= max_batch:
                    batch, buf = buf, []
                else:
                    batch, buf = buf[:max_batch], buf[max_batch:]
                on_next(batch)  # the list is the subscriber's from here: never touched again
                count += 1
        except _PolicyFailed as failure:
            pending.extend(buf)
            return self._policy_failed(output, state, failure.__cause__, count)
        except Exception as err:  # only on_next can get here: the subscriber broke RS §2.13
            self._state = state
            output._subscriber_failed("on_next", err)
            return count
        pending.extend(buf)
        self._state = state
        if self._low or self._starved:
            self._grant()  # TS §4.4
        if count < limit and self._final_due():
            try:
                on_next([self._final()])
            except Exception as err:
                output._subscriber_failed("on_next", err)
                return count
            count += 1
        return count

    def _settle(self, output: _Output) -> None:
        """Merge without demand: joins, leaves, suppressed CTIs and late events produce no
        element, so they must not wait for a request. Stops as soon as an element is due;
        it waits in ``_pending`` for demand (RS §1.1)."""
        queue = self._queue
        pending = self._pending
        state = self._state
        self._low = False
        try:
            while not pending and queue:
                inp, item = queue.popleft()
                state = self._step_item(inp, item, state, pending)
        except _PolicyFailed as failure:
            self._policy_failed(output, state, failure.__cause__, 0)
            return
        self._state = state
        if self._low or self._starved:
            self._grant()  # TS §4.4
        if not pending and self._final_due():
            pending.append(self._final())

    def _step_item(self, inp: _Input | None, item: Any, state: Any, out: Any) -> Any:
        """Merge one queued arrival (event, batch, join or leave): accounting, late records to
        the side output, emitted events appended to ``out``. Returns the new state."""
        cls = item.__class__
        if cls is Event:
            processed = inp.processed = inp.processed + 1
            if inp.requested - processed == inp.low_water:
                self._low = True
            try:
                state, outputs = self.policy.step(state, item)
            except Exception as err:
                raise _PolicyFailed() from err
            if item.kind == CTI:
                inp.last_cti = item.start
                inp.ctis += 1  # TS §3.4: not an insert; counted apart
        elif cls is _Batch:
            state, emitted = self._step_batch(item, state)
            out.extend(emitted)
            return state
        else:
            try:
                state, outputs = self._marker(inp, item, state)
            except Exception as err:
                raise _PolicyFailed() from err
            self._low = True
        self._sort(inp, outputs, out)
        return state

    def _sort(self, inp: _Input, outputs: tuple, out: Any) -> None:
        """One step's outputs: events counted and appended to ``out``, late records counted
        and sent to the side output (TS §3.3: every late event leaves a record)."""
        for o in outputs:
            if o.__class__ is Event:
                if o.kind == CTI:
                    self._output_cti = o.start
                    self._ctis += 1
                else:
                    inp.emitted += 1
                out.append(o)
            else:
                if o.action == ADJUSTED:
                    inp.adjusted += 1
                else:
                    inp.dropped += 1
                self.late.push(o)

    def _step_batch(self, batch: _Batch, state: Any) -> tuple[Any, list[Event]]:
        """Merge a batch: the policy over all of it in one call (``step_many``), then the
        same accounting ``_step_item`` keeps event by event, per input, in bulk."""
        events = batch.events
        try:
            state, emitted, late, ctis = step_many(self.policy, state, events)
        except Exception as err:
            raise _PolicyFailed() from err
        counts = batch.counts
        by_name = batch.by_name
        inserts = {}
        for inp, n in counts:
            held = inp.requested - inp.processed
            inp.processed += n
            if held > inp.low_water >= held - n:
                self._low = True
            inserts[inp] = n
        for e in ctis:  # arrived CTIs: per input count and latest (TS §3.4)
            inp = by_name[e.source]
            inp.last_cti = e.start
            inp.ctis += 1
            inserts[inp] -= 1
        dropped = 0
        if late:
            self.late.push_entries(late)  # TS §3.3
            actions = list(map(_ACTION, late))
            adjusted = actions.count(ADJUSTED)
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
                for r in late:
                    inp = by_name[r[0]]
                    if r[3] == ADJUSTED:
                        inp.adjusted += 1  # the clipped copy is emitted: counted below
                    else:
                        inp.dropped += 1
                        inserts[inp] -= 1
        for inp, n in inserts.items():
            inp.emitted += n  # TS §3.4: each insert is emitted (maybe clipped) or dropped
        ctis = len(ctis)
        # TS §3.4 again: what was emitted beyond the surviving inserts are the output CTIs
        out_ctis = len(emitted) - (len(events) - ctis - dropped)
        if out_ctis:
            if out_ctis < 0:
                raise _PolicyFailed() from RuntimeError(
                    f"{self.policy!r}.step_many emitted {len(emitted)} events for "
                    f"{len(events) - ctis} inserts of which {dropped} were dropped: each "
                    "insert must be emitted once or dropped once (TS §3.4)")
            self._ctis += out_ctis
            for e in reversed(emitted):
                if e.kind == CTI:
                    self._output_cti = e.start
                    break
        return state, emitted

    def _final(self) -> Event:
        self._final_sent = True
        self._cti_before_final = self._output_cti
        self._output_cti = MAX_TIME
        self._ctis += 1
        return Event(CTI, MAX_TIME, None, None, None)

    def _policy_failed(self, output: _Output, state: Any, error: BaseException,
                       count: int) -> int:
        """The policy raised: a bug in it, not in the subscriber; the union fails (RS §1.4)."""
        self._state = state
        self._fail(error)
        return count

    def _final_due(self) -> bool:
        return (self.final_cti and not self._final_sent and self._closed and not self._inputs
                and not self._queue and not self._pending
                and (self._output_cti is None or self._output_cti < MAX_TIME))

    def _marker(self, inp: _Input, marker: object, state: Any) -> tuple[Any, tuple]:
        if marker is _JOIN:
            return self.policy.join(state, inp.name)
        # _LEAVE: the input is gone and everything it sent has been merged
        with self._lock:
            self._inputs.pop(id(inp), None)
            self._departed.append(inp)
            while len(self._departed) > self.keep_departed:
                self._forget(self._departed.popleft())
        return self.policy.leave(state, inp.name)

    def _forget(self, inp: _Input) -> None:
        """Fold a departed input's final counts into the totals and let it go (under the
        lock, so stats() sees it either in _history or in the totals, never both)."""
        del self._history[id(inp)]
        received, emitted, dropped, adjusted = self._forgotten_totals
        self._forgotten_totals = (received + inp.received - inp.ctis, emitted + inp.emitted,
                                  dropped + inp.dropped, adjusted + inp.adjusted)
        self._forgotten += 1

    # ================================================================ credit (TS §4.4)
    def _grant(self) -> None:
        """Give inputs credit: each up to its fair share of ``max_buffered`` (TS §4.5), all
        within ``max_buffered`` (TS §4.4), every one at least ``min_credit``."""
        grants: list[tuple[Any, int]] = []
        with self._lock:
            inputs = list(self._inputs.values())
            if not inputs:
                return
            queued = 0
            for inp in inputs:
                queued += inp.requested - inp.processed
            if queued > self._peak:
                self._peak = queued
            free = self.max_buffered - queued
            self._starved = False
            if self._error is not None:
                return
            live = [inp for inp in inputs if not inp.left and inp.subscription is not None]
            if not live:
                return
            share = self.max_buffered // len(live) or 1  # TS §4.5: re-balanced as they come and go
            floor = self.min_credit
            start = self._rotate % len(live)
            self._rotate += 1
            for inp in live[start:] + live[:start]:
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
                    self._starved = True  # the total bound held it back: retry as credit frees
                if held + n < floor:
                    n = floor - held  # beyond the total bound, by at most min_credit
                if n > 0:
                    inp.requested += n
                    free -= n
                    grants.append((inp.subscription, n))
        for subscription, n in grants:
            subscription.request(n)

    # ================================================================ stats
    def _input_stats(self, inp: _Input) -> InputStats:
        output_cti = self._output_cti
        last = inp.last_cti
        if self._final_sent:
            # the final CTI at +inf ends time; it is no time to lag behind (2**63 - 1 - last
            # says nothing): the lag is the one the input ended with
            output_cti = self._cti_before_final
        lag = None if output_cti is None or last is None else output_cti - last
        received = inp.received
        ctis = inp.ctis
        return InputStats(inp.name, inp.state, received - ctis, inp.emitted, inp.dropped,
                          inp.adjusted, last, lag, received - inp.processed, inp.peak,
                          inp.prefetch, inp.error, inp.discarded, ctis)

    def stats(self) -> UnionStats:
        """Frozen per-input and total accounting; O(active inputs + keep_departed)."""
        with self._lock:
            kept = list(self._history.values())
            forgotten, (received, emitted, dropped, adjusted) = (self._forgotten,
                                                                  self._forgotten_totals)
        inputs = tuple(self._input_stats(inp) for inp in kept)
        return UnionStats(
            inputs, received + sum(s.received for s in inputs),
            emitted + sum(s.emitted for s in inputs), self._ctis,
            dropped + sum(s.dropped for s in inputs), adjusted + sum(s.adjusted for s in inputs),
            self._output_cti, sum(s.buffered for s in inputs), self._peak, self.max_buffered,
            self.late.stats(), self._closed, self._done, forgotten, self.keep_departed,
            self.min_credit)

    def __repr__(self) -> str:
        return f"Union({self.policy!r}, inputs={len(self._inputs)})"


class UnionBatches(PublisherBase):
    """A union's output in lists of up to ``max_batch`` events: ``Union.batches()``. It is
    the union's one output, as ``subscribe`` is (one subscriber at a time, hot)."""

    __slots__ = ("union", "max_batch")

    def __init__(self, union: Union, max_batch: int) -> None:
        self.union = union
        self.max_batch = max_batch

    def subscribe(self, subscriber: Any) -> None:
        self.union._subscribe(subscriber, self.max_batch)

    def __repr__(self) -> str:
        return f"{self.union!r}.batches({self.max_batch})"


_ = MAX_DEMAND
