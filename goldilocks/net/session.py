"""A connection's session: its read loop, from ``setup`` to the end, and what each frame does.

Before setup a connection may send one frame of at most ``MAX_SETUP_FRAME`` bytes within
``setup_timeout``; the admission decides whether its token gets it a slot. After setup, the
idle timer restarts with every whole frame, ``publish`` and ``subscribe`` open streams (at
most ``max_streams`` at once), and the other frames go to their stream. A protocol fault is
answered on stream 0 and closes the connection; a refusal on a stream ends only that stream.
A connection reads at most ``READ_BUDGET`` bytes of frames before letting the loop turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import ClosedError, InputError
from goldilocks.net.admission import Admission
from goldilocks.net.connection import Connection, bounded
from goldilocks.net.devices import DevicePublisher, DeviceStream
from goldilocks.net.ledger import Ledger
from goldilocks.net.output import OutputStream, ServerOutput
from goldilocks.net.protocol import (
    FAILED,
    MAX_BATCH,
    MAX_DEPTH,
    MAX_SETUP_FRAME,
    SUPPORTED_VERSIONS,
    VERSION,
    ConnectionLost,
    Frame,
    ProtocolError,
    decode_frame,
    encode_error,
    encode_ok,
)
from goldilocks.net.transport import ConnectionClosed
from operators.union import Union

__all__ = ["Session", "Venue", "READ_BUDGET"]

_log = logging.getLogger("goldilocks.net")

#: Bytes a connection may read (and hand to the union) before its read loop yields the
#: event loop; about one frame of 1024 small events.
READ_BUDGET = 64 * 1024
#: Codes that refuse a connection at setup (the others close one set up).
_REFUSALS = frozenset({"unauthorized", "too_many", "unsupported_version", "setup_timeout"})
#: Why a subscriber's frame has no place on a publish stream.
_NOT_ON_PUBLISH = {"request": "on a publish stream the server grants the credit",
                   "cancel": "a device ends its stream with complete or error"}


@dataclass(frozen=True, slots=True)
class Venue:
    """What a server's connections share: who gets in, the union device streams feed, the
    output subscribe streams join, how a connection that ended is let go, the devices'
    positions, and the device streams ended by their device whose last ``durable`` frame is
    still to come (``ending``)."""

    admission: Admission
    union: Union
    output: ServerOutput
    forget: Callable[[Connection], None]
    ledger: Ledger
    ending: list[DeviceStream]


class Session:
    """The read loop of one connection (see the module doc); ``run`` returns once it ended,
    every stream of it ended and its transport closed."""

    def __init__(self, conn: Connection, venue: Venue) -> None:
        self.conn = conn
        self.venue = venue

    async def run(self) -> None:
        conn = self.conn
        transport = conn.transport
        limits = conn.limits
        loop = asyncio.get_running_loop()
        idle = limits.idle_timeout
        reason: BaseException | None = None
        try:
            # Before setup: one frame of at most MAX_SETUP_FRAME bytes, within setup_timeout.
            async with asyncio.timeout(limits.setup_timeout) as deadline:
                data = await transport.recv()
                conn.frames_in += 1
                self._setup(decode_frame(data, MAX_SETUP_FRAME))
                transport.raise_limit()
                budget = READ_BUDGET
                while True:
                    # The idle timer restarts once a whole frame has been read and handled.
                    deadline.reschedule(loop.time() + idle)
                    data = await transport.recv()
                    conn.frames_in += 1
                    self._dispatch(decode_frame(data, limits.max_frame))
                    budget -= len(data)
                    if budget <= 0:
                        # Bounded work per turn: frames already buffered are read without
                        # the loop turning, so yield to it now and then. The merge runs,
                        # the credit it frees goes out while the device still sends, and
                        # other connections get their turn.
                        budget = READ_BUDGET
                        await asyncio.sleep(0)
        except TimeoutError:
            if conn.authenticated:
                reason = ProtocolError("idle_timeout", f"no frame from {transport.peer} for "
                                       f"{idle} s; expected data or a keepalive within the "
                                       "idle timeout")
            else:
                reason = ProtocolError("setup_timeout", f"no setup from {transport.peer} "
                                       f"within {limits.setup_timeout} s of connecting; "
                                       "expected a setup frame at once")
            self._refuse(reason)
        except ProtocolError as err:
            reason = err
            self._refuse(err)
        except ConnectionClosed as err:
            if transport.stalled:
                conn.tally.error("stalled")
                reason = ConnectionLost(f"connection from {transport.peer} cut off: it took "
                                        f"nothing the server sent for {idle} s")
            elif conn.evicted:
                reason = ConnectionLost(f"connection from {transport.peer} let go before its "
                                        "setup: the server had too many connections in setup")
            else:
                reason = ConnectionLost(f"connection from {transport.peer} ended: {err}")
            if conn.streams:
                conn.tally.disconnect()
        except asyncio.CancelledError:
            reason = ConnectionLost(f"server closed the connection from {transport.peer}")
            raise
        finally:
            conn.closed = True
            if conn.authenticated and not isinstance(reason, ProtocolError):
                _log.info("%s", reason or f"connection from {transport.peer} closed",
                          extra={"event": "disconnected", "peer": transport.peer,
                                 "open_streams": len(conn.streams)})
            for stream in list(conn.streams.values()):
                stream.on_lost(reason)
            self.venue.forget(conn)
            if isinstance(reason, ProtocolError):
                await bounded(transport.close(1008, reason.code), 1.0)
            else:
                await bounded(transport.close(), 1.0)
            transport.abort()

    def _refuse(self, err: ProtocolError) -> None:
        self.conn.tally.error(err.code)
        _log.info("closing connection from %s: %s (%s)", self.conn.transport.peer, err.code,
                  err, extra={"event": "refused" if err.code in _REFUSALS else "closing",
                              "code": err.code, "peer": self.conn.transport.peer})
        self.conn.transport.write(encode_error(0, err.code, str(err)))

    def _setup(self, frame: Frame) -> None:
        if frame.type != "setup":
            raise ProtocolError("out_of_order", f"first frame was {frame.type!r}; expected "
                                "setup (with the protocol version and the token)")
        if frame.version not in SUPPORTED_VERSIONS:
            raise ProtocolError("unsupported_version", f"protocol version {frame.version}; "
                                f"this server speaks {sorted(SUPPORTED_VERSIONS)}")
        conn = self.conn
        self.venue.admission.set_up(conn, frame.token)
        conn.authenticated = True
        conn.version = frame.version  # the client's: a version-1 client gets no durable frame
        limits = conn.limits
        conn.transport.stall_timeout = limits.idle_timeout
        conn.write(encode_ok(frame.version, max_frame=limits.max_frame,
                             idle_timeout=limits.idle_timeout,
                             keepalive=limits.idle_timeout / 3, max_batch=MAX_BATCH,
                             max_streams=limits.max_streams, max_depth=MAX_DEPTH))
        _log.info("connection from %s (%s) ready", conn.transport.peer, conn.transport.kind,
                  extra={"event": "connected", "peer": conn.transport.peer,
                         "transport": conn.transport.kind})

    def _dispatch(self, frame: Frame) -> None:
        ftype = frame.type
        if ftype == "keepalive":
            return
        sid = frame.stream
        stream = self.conn.streams.get(sid)
        if ftype == "next":
            if stream is None:
                count = len(frame.events or ())
                self.conn.refused += count
                if not self.conn.has_ended(sid):
                    raise ProtocolError("out_of_order", f"next frame for stream {sid}, which "
                                        "was never opened; expected publish first", stream=sid)
                return  # in flight when the stream ended (RS §2.8)
            if not isinstance(stream, DeviceStream):
                raise ProtocolError("out_of_order", f"next frame from the client on "
                                    f"subscribe stream {sid}; a subscribe stream carries "
                                    "events from the server only", stream=sid)
            stream.on_next_frame(frame)
        elif ftype == "request" or ftype == "cancel":
            if stream is None:
                self._late(sid, ftype)
            elif not isinstance(stream, OutputStream):
                raise ProtocolError("out_of_order", f"{ftype} frame from the client on "
                                    f"publish stream {sid}; {_NOT_ON_PUBLISH[ftype]}",
                                    stream=sid)
            elif ftype == "request":
                stream.on_request_frame(frame.n or 0)
            else:
                stream.on_cancel_frame()
        elif ftype == "complete" or ftype == "error":
            if sid == 0:  # the client gives up on the connection
                raise ConnectionClosed(f"client error {frame.code!r}: {frame.message}")
            if stream is None:
                self._late(sid, ftype)
            elif isinstance(stream, OutputStream):
                if ftype == "error":
                    stream.close()
                    return
                raise ProtocolError("out_of_order", f"complete frame from the client on "
                                    f"subscribe stream {sid}; a subscriber ends its stream "
                                    "with cancel", stream=sid)
            elif ftype == "complete":
                stream.on_complete_frame()
                if stream.final is not None:  # its last durable frame is still to come
                    self.venue.ending.append(stream)
            else:
                stream.on_error_frame(frame)
        elif ftype == "publish" or ftype == "subscribe":
            self._open(frame)
        else:  # setup, ok, durable
            raise ProtocolError("out_of_order", f"{ftype} frame after setup; expected "
                                "publish, subscribe, request, cancel, next, complete, error "
                                "or keepalive" + (" (durable frames come from the server)"
                                                  if ftype == "durable" else ""))

    def _late(self, sid: int, ftype: str) -> None:
        if not self.conn.has_ended(sid):
            raise ProtocolError("out_of_order", f"{ftype} frame for stream {sid}, which was "
                                "never opened", stream=sid)
        # otherwise: crossed with the end of the stream on the wire; nothing to do

    def _open(self, frame: Frame) -> None:
        conn = self.conn
        sid = frame.stream
        if sid <= conn.last_id:
            raise ProtocolError("out_of_order", f"{frame.type} opens stream {sid} after "
                                f"stream {conn.last_id}; expected a new, increasing stream "
                                "id", stream=sid)
        conn.last_id = sid
        if len(conn.streams) >= conn.limits.max_streams:
            conn.write(encode_error(sid, "too_many", f"this connection already has "
                                    f"{len(conn.streams)} open streams; at most "
                                    f"{conn.limits.max_streams} are allowed"))
            return
        venue = self.venue
        if venue.admission.closing:
            conn.write(encode_error(sid, "closing", "the server is shutting down"))
            return
        if frame.type == "subscribe":
            out = OutputStream(conn, sid, venue.output)
            conn.streams[sid] = out
            why = out.start(frame.first)
            if why is not None:
                del conn.streams[sid]
                out.state = FAILED
                conn.tally.error("bad_position")
                _log.info("refusing subscribe stream %d from %s: bad_position (%s)", sid,
                          conn.transport.peer, why,
                          extra={"event": "refused", "code": "bad_position",
                                 "peer": conn.transport.peer})
                conn.write(encode_error(sid, "bad_position", why))
            else:
                _log.info("subscriber from %s on stream %d%s", conn.transport.peer, sid,
                          "" if frame.first is None else f", from position {frame.first}",
                          extra={"event": "subscribed", "peer": conn.transport.peer,
                                 "position": frame.first})
            return
        stream = DeviceStream(conn, sid, frame.device or "", venue.ledger)
        conn.streams[sid] = stream
        try:
            # Credit flows through the publisher's subscription (the union's request(n) goes
            # out as request frames); arrivals take the input's batch path (try_send_many).
            stream.handle = venue.union.add(DevicePublisher(stream), name=stream.device)
        except (InputError, ClosedError) as err:
            del conn.streams[sid]
            stream.state = FAILED
            stream._stop_watching()
            code = "name_in_use" if isinstance(err, InputError) else "closing"
            conn.tally.error(code)
            _log.info("refusing device %r from %s: %s (%s)", stream.device,
                      conn.transport.peer, code, err,
                      extra={"event": "refused", "code": code, "device": stream.device,
                             "peer": conn.transport.peer})
            conn.write(encode_error(sid, code, str(err)))
            return
        position = stream.position
        _log.info("device %r joined from %s (stream %d%s)", stream.device, conn.transport.peer,
                  sid, f", the server has its first {position} events" if position else "",
                  extra={"event": "joined", "device": stream.device,
                         "peer": conn.transport.peer, "position": position})
