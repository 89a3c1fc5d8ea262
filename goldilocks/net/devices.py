"""Device streams: a ``publish`` stream as a remote publisher of one device's events, which the
server adds to its union as an input named after the device.

Positions (``ledger``): the stream's first ``request`` frame (the acknowledgement) says how
many of the device's events the server has (``position``); a ``next`` frame may say the
number of its first event (``from``): events the server has already are skipped (their
credit given back at once), a frame that would leave a gap is refused (``gap``, the stream
ends). On a protocol-2 connection the stream is told as its events become durable
(``durable`` frames), and once more after it ended, when everything it sent is durable.

The union's ``request(n)`` for that input goes out as a ``request`` frame (RS §3.8 on the
wire), so the device's credit is exactly the union's demand and a slow consumer slows the
devices end to end. Events beyond the credit are refused, counted, and the connection is
closed (RS §1.1). A ``next`` frame's events reach the union as one batch
(``InputHandle.try_send_many``: one lock, one wake of the merge). An event that could not be
written again (``event_refusals``) is refused alone and ends the stream; the connection and
its other streams carry on.
"""

from __future__ import annotations

import logging
from typing import Any

from engine.contracts import MAX_DEMAND
from engine.errors import ClosedError
from engine.sinks import PublisherBase
from engine.sources import failed
from engine.subscription import check_subscriber
from goldilocks.net.connection import Connection
from goldilocks.net.protocol import (
    CANCELLED,
    COMPLETED,
    FAILED,
    OPEN,
    Frame,
    ProtocolError,
    RemoteError,
    decode_events,
    encode_cancel,
    encode_durable,
    encode_error,
    encode_request,
    event_refusals,
)
from goldilocks.net.ledger import Ledger
from operators.union import InputHandle

__all__ = ["DeviceStream", "DevicePublisher"]

_log = logging.getLogger("goldilocks.net")


class DeviceStream:
    """A ``publish`` stream: a remote publisher of one device's events, and the subscription
    the union's input holds on it. Runs on the server's loop; ``request``/``cancel`` may be
    called from any thread and hop onto it."""

    __slots__ = ("conn", "id", "device", "subscriber", "handle", "granted",
                 "received", "refused", "state", "ledger", "acked", "durable", "skipped",
                 "closing", "final", "_unwatch")

    kind = "publish"

    def __init__(self, conn: Connection, stream_id: int, device: str,
                 ledger: Ledger | None = None) -> None:
        self.conn = conn
        self.id = stream_id
        self.device = device
        self.subscriber: Any = None
        self.handle: InputHandle | None = None  # set once the union has the input
        self.granted = 0     # credit sent to the device in all (RS §3.8)
        self.received = 0    # events of next frames counted against that credit
        self.refused = 0
        self.skipped = 0     # events the server had already (``from``): credit given back
        self.state = OPEN
        self.ledger = ledger if ledger is not None else Ledger()
        self.acked = False   # the first request frame (with the position) was sent
        self.durable = 0     # the durable position last sent
        self.closing = False  # the server is shutting down: say so instead of cancel
        self.final: int | None = None  # ended by the device: its last position
        self._unwatch: Any = None
        if conn.version >= 2:
            self._unwatch = self.ledger.watch(device, self.on_durable)

    @property
    def position(self) -> int:
        """How many of the device's events the server has (its next event's number)."""
        return self.ledger.position(self.device)

    # ---------------------------------------------------------------- Subscription
    def request(self, n: int) -> None:
        """Grant the device ``n`` more events: a ``request`` frame. Never raises (RS §3.16)."""
        self.conn.on_loop(self._grant, n)

    def _grant(self, n: int) -> None:
        if self.state != OPEN:
            return  # RS §3.6: after cancel or termination, request is a NOP
        if n.__class__ is not int or n <= 0:  # RS §3.9
            self._end(FAILED, ValueError(f"RS §3.9: request({n!r}) is illegal; the number "
                                         "requested must be a positive integer"))
            self.conn.write(encode_cancel(self.id))
            return
        if self.granted >= MAX_DEMAND:
            return  # RS §3.17: already effectively unbounded
        granted = self.granted + n
        if granted > MAX_DEMAND:
            n = MAX_DEMAND - self.granted
            granted = MAX_DEMAND
        self.granted = granted
        if self.acked:
            self.conn.write(encode_request(self.id, n))
        else:  # the acknowledgement: where the device goes on from (TS §8.4)
            self.acked = True
            self.conn.write(encode_request(self.id, n, self.position))

    def cancel(self) -> None:
        """The union removed this input: a ``cancel`` frame (RS §3.5, §3.12)."""
        self.conn.on_loop(self._cancel)

    def _cancel(self) -> None:
        if self.state != OPEN:
            return  # RS §3.7
        self.state = CANCELLED
        self.subscriber = None  # RS §3.13: drop the reference
        if self.closing and self.conn.version >= 2:
            # not the end of the device's stream: the server goes away, the device comes
            # back from its position (a protocol-1 device is told cancel, as it always was)
            self.conn.write(encode_error(self.id, "closing", f"the server is shutting "
                                         f"down; {self.position} events of device "
                                         f"{self.device!r} are taken: publish again from "
                                         "there", position=self.position))
        else:
            self.conn.write(encode_cancel(self.id))
        self._left("removed: the server is shutting down" if self.closing else "removed")
        self._stop_watching()
        self.conn.stream_ended(self)

    # ---------------------------------------------------------------- frames from the device
    def on_next_frame(self, frame: Frame) -> None:
        rows = frame.events or []
        count = len(rows)
        if self.state != OPEN:
            # In flight when the union cancelled (RS §2.8 on the wire): counted, not merged.
            self._refused(count)
            return
        credit = self.granted - self.received
        if count > credit:
            self._refused(count)
            raise ProtocolError(
                "overrun", f"device {self.device!r} (stream {self.id}) sent {count} events "
                f"with only {credit} requested ({self.received} of {self.granted} used); "
                "expected at most the credit granted by request frames",
                stream=self.id, rule="RS §1.1")
        self.received += count
        first = frame.first
        if first is not None:
            expected = self.position
            if first > expected:
                self._refused(count)
                self.refuse("gap", f"device {self.device!r} (stream {self.id}): this next "
                            f"frame starts at event {first}, but the server has events 0 to "
                            f"{expected - 1} of this device; expected from {expected} (events "
                            f"{expected} to {first - 1} are missing)", position=expected)
                return
            skip = expected - first
            if skip:
                # Kafka's idempotent producer: what the server has is not merged again; the
                # credit those events used is given back at once (they take no room)
                skip = min(skip, count)
                self.skipped += skip
                self.conn.tally.duplicates += skip
                self._give_back(skip)
                if skip == count:
                    return
                rows = rows[skip:]
                count -= skip
        try:
            events = decode_events(rows, self.device, stream=self.id)
        except ProtocolError:
            self._refused(count)
            raise
        refusals = event_refusals(events, frame.size, self.conn.limits.max_frame,
                                  stream=self.id)
        if refusals:
            # Well formed, but beyond a limit: those events are refused alone (the others
            # are merged) and the stream ends with the first reason; the connection and its
            # other streams carry on.
            bad = {i for i, _, _ in refusals}
            events = [e for i, e in enumerate(events) if i not in bad]
            self._refused(len(bad))
        # One frame, one arrival batch: the union queues the whole frame under one lock and
        # wakes its merge once, where on_next per event would take both per event. The credit
        # checked above is the union's own (``granted`` is what it requested of this input),
        # so the batch fits whole; anything not taken is counted, never silently lost.
        sent = 0
        handle = self.handle
        if events and handle is not None:
            try:
                sent = handle.try_send_many(events)
            except ClosedError:
                sent = 0  # the input left meanwhile (RS §2.8): counted, not merged
        self.conn.events_in += sent
        if sent < len(events):
            self._refused(len(events) - sent)
        else:  # dealt with: merged, or refused for good (sending them again would not help)
            self.ledger.take(self.device, count)
        if refusals:
            _, code, message = refusals[0]
            more = f" ({len(refusals)} events of the frame refused)" if len(refusals) > 1 else ""
            self.refuse(code, message + more)

    def _give_back(self, n: int) -> None:
        """Credit for events that took no room in the union: granted again at once."""
        if self.granted < MAX_DEMAND:
            n = min(n, MAX_DEMAND - self.granted)
            self.granted += n
            self.conn.write(encode_request(self.id, n))

    def on_durable(self, position: int) -> None:
        """The device's first ``position`` events are durable (protocol 2): tell it, while
        its stream is open (after it ended: ``ended_durable``)."""
        if self.state == OPEN and position > self.durable:
            self.durable = position
            self.conn.write(encode_durable(self.id, position))

    def ended_durable(self) -> bool:
        """Called after each checkpoint for a stream the device ended: once everything it
        sent is durable, say so (the last ``durable`` frame of the stream) and return True."""
        if self.final is None or self.conn.closed:
            return True
        position = self.ledger.durable(self.device)
        if position < self.final:
            return False
        self.conn.write(encode_durable(self.id, position))
        return True

    def _stop_watching(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _refused(self, count: int) -> None:
        self.refused += count
        self.conn.refused += count

    def refuse(self, code: str, message: str, position: int | None = None) -> None:
        """End this stream from the server's side: ``error(stream, code)`` to the device, and
        the input leaves the union as failed with the same reason (the connection stays)."""
        if self.state != OPEN:
            return
        self.conn.tally.error(code)
        _log.info("refusing stream %d (%r) from %s: %s (%s)", self.id, self.device,
                  self.conn.transport.peer, code, message,
                  extra={"event": "refused", "code": code, "device": self.device,
                         "peer": self.conn.transport.peer})
        self.conn.write(encode_error(self.id, code, message, position=position))
        self._end(FAILED, ProtocolError(code, message, stream=self.id))

    def on_complete_frame(self) -> None:
        if self.state == OPEN:
            if self._unwatch is not None:
                self.final = self.position  # told once every event it sent is durable
            self._end(COMPLETED, None)

    def on_error_frame(self, frame: Frame) -> None:
        if self.state == OPEN:
            self._end(FAILED, RemoteError(frame.code or "error", frame.message or "",
                                          stream=self.id))

    def on_lost(self, reason: BaseException | None) -> None:
        if self.state == OPEN:
            self._end(FAILED, reason or ClosedError(f"device stream {self.id} lost"))

    def _left(self, how: str) -> None:
        _log.info("device %r left: %s (%d events received on stream %d from %s)",
                  self.device, how, self.received, self.id, self.conn.transport.peer,
                  extra={"event": "left", "device": self.device, "how": how.split(":")[0],
                         "received": self.received, "peer": self.conn.transport.peer})

    def _end(self, state: str, error: BaseException | None) -> None:
        self._left("completed" if error is None else f"{state}: {error}")
        subscriber = self.subscriber
        self.state = state
        self.subscriber = None
        self._stop_watching()
        self.conn.stream_ended(self)
        if subscriber is None:
            return
        if error is None:
            subscriber.on_complete()
        else:
            subscriber.on_error(error)

    def __repr__(self) -> str:
        return f"<device stream {self.id} {self.device!r} {self.state}>"


class DevicePublisher(PublisherBase):
    """The device stream as a publisher: one subscriber (the union's input), then closed."""

    __slots__ = ("_stream",)

    def __init__(self, stream: DeviceStream) -> None:
        self._stream = stream

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)  # RS §1.9
        stream = self._stream
        if stream.subscriber is not None or stream.state != OPEN:
            failed(ClosedError(f"device stream {stream.device!r} already has its subscriber"))\
                .subscribe(subscriber)
            return
        stream.subscriber = subscriber
        subscriber.on_subscribe(stream)  # RS §1.9: first signal
