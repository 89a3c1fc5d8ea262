"""What producers hold: ``InputHandle`` (what ``Union.add`` returns) and ``Emitter`` (what
``Union.open_input`` returns: an input fed imperatively, whose ``send`` waits for credit
without blocking a thread — the asynchronous semaphore of the async-semaphore backpressure
article, design.md §7.4).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

from engine.errors import ClosedError
from engine.event import Event
from operators.union.inputs import Input, wake_future
from operators.union.merge import Merge, Output
from operators.union.stats import InputStats, input_stats

__all__ = ["InputHandle", "Emitter", "EmitterSubscription", "SEND_TURN", "input_of"]

#: ``await Emitter.send`` yields the event loop once every this many calls (a fair turn for
#: the loop's other tasks, at about 1/64 of a ``sleep(0)`` per event).
SEND_TURN = 64


class InputHandle:
    """What ``Union.add`` returns: the input's ``name``, ``stats()`` and ``remove()``."""

    __slots__ = ("_input", "_merge")

    def __init__(self, inp: Input, merge: Merge) -> None:
        self._input = inp
        self._merge = merge

    @property
    def name(self) -> str:
        return self._input.name

    def stats(self) -> InputStats:
        return input_stats(self._input, self._merge.lag_reference, self._merge.ahead())

    def remove(self) -> None:
        """Take the input out: its subscription is cancelled; what already arrived is merged."""
        self._input.intake.remove(self._input)

    def try_send_many(self, events: Sequence[Event]) -> int:
        """Send the longest prefix of ``events`` that credit allows as one batch: one queue
        item, one wake-up of the merge, the policy run over it in one loop. Returns how many
        were sent (the batch path for high-rate producers).

        On an input added with ``add``, this is the batch way in for the publisher's own
        side: arrivals handed over here count against the credit its subscription was
        granted, exactly as ``on_next`` would (RS §1.1), and must come from the same producer,
        serially with its signals (RS §1.3)."""
        return self._input.send_batch(events, "try_send_many")

    def __repr__(self) -> str:
        return f"InputHandle({self.name!r})"


def input_of(handle: object) -> Input | None:
    """The input behind ``handle``, if it is an ``InputHandle`` (or ``Emitter``)."""
    return handle._input if isinstance(handle, InputHandle) else None


class EmitterSubscription:
    """The subscription between an ``Emitter`` and its union: credit in, cancel in."""

    __slots__ = ("_input",)

    def __init__(self, inp: Input) -> None:
        self._input = inp

    def request(self, n: int) -> None:
        self._input.wake_senders()

    def cancel(self) -> None:
        self._input.wake_senders()


class Emitter(InputHandle):
    """An input fed imperatively: ``send`` waits for credit without blocking a thread (the
    asynchronous semaphore of the async-semaphore backpressure article), ``try_send`` never
    waits, ``send_blocking`` blocks a thread up to ``timeout``. Credit is the union's demand for
    this input (its ``prefetch`` and the union's total bound): a slow consumer slows the
    producer."""

    __slots__ = ()

    def _credit(self) -> int:
        inp = self._input
        return inp.requested - inp.received

    def _can_go(self) -> bool:
        """Credit, or a reason to stop waiting for it (the input left, the union failed)."""
        inp = self._input
        return inp.requested > inp.received or inp.left or inp.intake.error is not None

    def _condition(self) -> threading.Condition:
        inp = self._input
        cond = inp.credit_cond
        if cond is None:
            cond = inp.credit_cond = threading.Condition()
        return cond

    def try_send(self, event: Event) -> bool:
        """Send if there is credit; return False (nothing sent) if there is none.

        The event is merged and handed on right here when this thread can run the merge
        (``Output.arrive_now``: the union's executor is ``None``, no drain runs, there is
        demand), else queued for the drain; either way with the same result."""
        if event is None:
            raise TypeError("try_send() requires an event, got None")
        inp = self._input
        intake = inp.intake
        if inp.left or intake.error is not None:
            inp.check_open()
        if inp.requested - inp.received <= 0:
            return False
        output: Output | None = intake.output  # type: ignore[assignment]
        if output is None or not output.arrive_now(inp, event):
            inp.on_next(event)
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
        while not self.try_send(event):
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            inp.waiters.append((loop, future))
            if self._can_go():  # credit arrived (or the input closed) meanwhile: don't wait
                wake_future(future)
            inp.sends = 0  # waiting is a turn given up too
            await future

    def send_blocking(self, event: Event, timeout: float | None = None) -> bool:
        """Send from a thread, blocking up to ``timeout`` s for credit; False if it timed out."""
        if event is None:
            raise TypeError("send_blocking() requires an event, got None")
        if self.try_send(event):  # credit in hand: no Condition, no wait
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        cond = self._condition()
        while True:
            with cond:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not cond.wait_for(self._can_go, left):
                    return False
            if self.try_send(event):
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
                inp.check_open()
                cond = self._condition()
                with cond:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not cond.wait_for(self._can_go, left):
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
