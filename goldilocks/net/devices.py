"""Device streams: a ``publish`` stream as a remote publisher of one device's events, which the
server adds to its union as an input named after the device.

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
    encode_error,
    encode_request,
    event_refusals,
)
from operators.union import InputHandle

__all__ = ["DeviceStream", "DevicePublisher"]

_log = logging.getLogger("goldilocks.net")


class DeviceStream:
    """A ``publish`` stream: a remote publisher of one device's events, and the subscription
    the union's input holds on it. Runs on the server's loop; ``request``/``cancel`` may be
    called from any thread and hop onto it."""

    __slots__ = ("conn", "id", "device", "subscriber", "handle", "granted",
                 "received", "refused", "state")

    kind = "publish"

    def __init__(self, conn: Connection, stream_id: int, device: str) -> None:
        self.conn = conn
        self.id = stream_id
        self.device = device
        self.subscriber: Any = None
        self.handle: InputHandle | None = None  # set once the union has the input
        self.granted = 0     # credit sent to the device in all (RS §3.8)
        self.received = 0    # events accepted from the device
        self.refused = 0
        self.state = OPEN

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
        self.conn.write(encode_request(self.id, n))

    def cancel(self) -> None:
        """The union removed this input: a ``cancel`` frame (RS §3.5, §3.12)."""
        self.conn.on_loop(self._cancel)

    def _cancel(self) -> None:
        if self.state != OPEN:
            return  # RS §3.7
        self.state = CANCELLED
        self.subscriber = None  # RS §3.13: drop the reference
        self.conn.write(encode_cancel(self.id))
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
        try:
            events = decode_events(rows, self.device, stream=self.id)
        except ProtocolError:
            self._refused(count)
            raise
        self.received += count
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
        if refusals:
            _, code, message = refusals[0]
            more = f" ({len(refusals)} events of the frame refused)" if len(refusals) > 1 else ""
            self.refuse(code, message + more)

    def _refused(self, count: int) -> None:
        self.refused += count
        self.conn.refused += count

    def refuse(self, code: str, message: str) -> None:
        """End this stream from the server's side: ``error(stream, code)`` to the device, and
        the input leaves the union as failed with the same reason (the connection stays)."""
        if self.state != OPEN:
            return
        self.conn.tally.error(code)
        _log.info("refusing stream %d (%r) from %s: %s (%s)", self.id, self.device,
                  self.conn.transport.peer, code, message)
        self.conn.write(encode_error(self.id, code, message))
        self._end(FAILED, ProtocolError(code, message, stream=self.id))

    def on_complete_frame(self) -> None:
        if self.state == OPEN:
            self._end(COMPLETED, None)

    def on_error_frame(self, frame: Frame) -> None:
        if self.state == OPEN:
            self._end(FAILED, RemoteError(frame.code or "error", frame.message or "",
                                          stream=self.id))

    def on_lost(self, reason: BaseException | None) -> None:
        if self.state == OPEN:
            self._end(FAILED, reason or ClosedError(f"device stream {self.id} lost"))

    def _end(self, state: str, error: BaseException | None) -> None:
        subscriber = self.subscriber
        self.state = state
        self.subscriber = None
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
