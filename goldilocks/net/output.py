"""The server's output: the union's one subscriber, shared with remote and local subscribers.

``ServerOutput`` is a live ``Multicast`` in batch mode (``engine.multicast``): it takes the
union's output as lists (``Union.batches``) of at most ``batch`` events, a quarter of its
``capacity`` (at most 1024), and shares them through one bounded buffer paced by the slowest
member. It counts every insert and CTI that leaves the union. With no member the output is
counted and let go, so the union keeps merging (the output is live).

Its members: each ``subscribe`` stream (``OutputStream``, taking lists and sending what its
remote subscriber has credit for as ``next`` frames) and local subscribers of single events
(``elements()``: the ``RollingFileSink`` of ``out_dir``, ``Server.subscribe``). The members'
drains run on the server's loop, so a member takes what arrived during a turn of the loop as
one list: one ``next`` frame per member per turn.
"""

from __future__ import annotations

import operator
from typing import Any

from engine.contracts import MAX_DEMAND
from engine.event import CTI, Event
from engine.multicast import Multicast
from goldilocks.net.connection import Connection
from goldilocks.net.protocol import (
    CANCELLED,
    COMPLETED,
    FAILED,
    OPEN,
    encode_complete,
    encode_error,
    encode_next,
)

__all__ = ["ServerOutput", "OutputStream"]

_KIND = operator.attrgetter("kind")


class ServerOutput(Multicast):
    """The union's one subscriber: a live, batch-mode multicast that counts what leaves the
    union (``events``: inserts; ``ctis``). Memory: O(``capacity``) events."""

    def __init__(self, capacity: int, *, executor: object = None, name: str = "server") -> None:
        super().__init__(capacity, batch=max(1, min(1024, capacity // 4)), live=True,
                         executor=executor, name=f"{name} output")
        self.events = 0  # inserts that left the union
        self.ctis = 0

    def on_next(self, item: Any) -> None:
        if item is not None:
            ctis = list(map(_KIND, item)).count(CTI)
            self.ctis += ctis
            self.events += len(item) - ctis
        super().on_next(item)


class OutputStream:
    """A ``subscribe`` stream: a member of the server's output that sends what its remote
    subscriber has credit for (``request`` frames, RS §3.8) as ``next`` frames, while its
    connection's outgoing queue has room.

    It asks the output for one list at a time, and only with credit, room and nothing held:
    a list it could not send whole (credit or room ran out) is all it holds, so a subscriber
    that does not read keeps its place in the output, whose buffer fills and holds the union
    back, which holds the devices' credit back (backpressure end to end). The events held
    here are among the last the output let go of: all streams together hold at most one
    batch of events beyond the output's ``capacity``.
    """

    __slots__ = ("conn", "id", "credit", "state", "sent", "subscription", "held", "asked",
                 "ended", "error")

    kind = "subscribe"

    def __init__(self, conn: Connection, stream_id: int) -> None:
        self.conn = conn
        self.id = stream_id
        self.credit = 0           # requested by the remote subscriber, not yet sent
        self.state = OPEN
        self.sent = 0
        self.subscription: Any = None
        self.held: list[Event] = []  # taken from the output, not yet sent
        self.asked = False        # a list requested of the output, not yet received
        self.ended = False        # the output ended (with ``error``, if it failed)
        self.error: BaseException | None = None

    # ---------------------------------------------------------------- member of the output
    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        if self.subscription is None and self.state == OPEN:
            self.subscription = subscription
            self.flush()
        else:
            subscription.cancel()  # RS §2.5 (or the stream ended before it began)

    def on_next(self, events: list[Event]) -> None:
        self.asked = False
        if self.state == OPEN:  # RS §2.8: after cancel, what was in flight is dropped
            self.held = events
            self.flush()

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        self._ended(error)

    def on_complete(self) -> None:
        self._ended(None)

    def _ended(self, error: BaseException | None) -> None:
        """The output ended (failed with ``error``): say so once what is held is sent, or at
        once for an error."""
        self.ended = True
        self.error = error
        self.flush()

    def flush(self) -> None:
        """Send what credit and room allow; then end the stream, or ask for the next list."""
        if self.state != OPEN:
            return
        held = self.held
        if held and self.credit > 0:
            sent = self._send(held if len(held) <= self.credit else held[:self.credit])
            self.held = held[sent:] if sent < len(held) else []
            self.credit -= sent
            self.sent += sent
            self.conn.events_out += sent
            if self.state != OPEN:
                return
        if self.error is not None:  # RS §1.4, §4.2: at once, whatever is held
            self.conn.write(encode_error(self.id, "upstream_error",
                                         f"the union's output failed: {self.error}"))
            self._finish(FAILED)
        elif self.ended:
            if not self.held:
                self.conn.write(encode_complete(self.id))  # RS §1.5: after its last events
                self._finish(COMPLETED)
        elif not self.held and not self.asked and self.credit > 0 \
                and self.subscription is not None:
            if self.conn.has_room():
                self.asked = True
                self.subscription.request(1)  # one list (RS §1.1: demand counts lists)
            else:
                self.conn.wait_for_room()

    def _send(self, events: list[Event]) -> int:
        """``next`` frames for a prefix of ``events``, each frame within ``max_frame``, while
        the outgoing queue has room (``outbox_bytes``; it may go over by one frame). Returns
        how many events were written; when not all, ``flush`` runs again once the queue has
        room."""
        conn = self.conn
        max_frame = conn.limits.max_frame
        total = len(events)
        done = 0
        step = total
        while done < total:
            if not conn.has_room():
                conn.wait_for_room()
                break
            end = min(total, done + step)
            data = encode_next(self.id, events[done:end], with_source=True)
            while len(data) > max_frame and end - done > 1:
                step = max(1, (end - done) // 2)
                end = done + step
                data = encode_next(self.id, events[done:end], with_source=True)
            if len(data) > max_frame:
                # Devices' events are measured on input (too_large), so only a local
                # publisher could get here; the subscriber is told and this stream ends.
                conn.write(encode_error(self.id, "oversized",
                                        f"an event of {len(data)} bytes does not fit in a "
                                        f"frame of at most {max_frame} bytes"))
                self.close()
                break
            conn.write(data)
            done = end
        return done

    # ---------------------------------------------------------------- frames in
    def on_request_frame(self, n: int) -> None:
        self.credit = min(self.credit + n, MAX_DEMAND)  # RS §3.8, §3.17
        self.flush()

    def on_cancel_frame(self) -> None:
        self.close()

    def close(self) -> None:
        """The remote side cancelled, or is gone: leave the output (RS §3.12)."""
        if self.state != OPEN:
            return
        subscription = self.subscription
        self._finish(CANCELLED)
        if subscription is not None:
            subscription.cancel()

    def on_lost(self, reason: BaseException | None) -> None:
        self.close()

    def _finish(self, state: str) -> None:
        self.state = state
        self.held = []
        self.subscription = None  # RS §3.13: drop the reference
        self.conn.stream_ended(self)

    def __repr__(self) -> str:
        return f"<subscribe stream {self.id} {self.state}>"
