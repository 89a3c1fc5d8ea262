"""``Server``: a ``Union`` behind the wire protocol, over WebSocket and TCP (``docs/protocol.md``).

::

    server = Server(goldilocks("5m"), tokens=["s3cret"], out_dir="out/")
    await server.start(ws=("127.0.0.1", 8765), tcp=("127.0.0.1", 8766))
    ...                                     # devices publish, subscribers subscribe
    await server.close()                    # inputs removed, union closed, files published

Each published device stream becomes a union input named after the device. The stream is a
remote publisher: the union's ``request(n)`` for that input goes out as a ``request`` frame
(RS §3.8 on the wire), so the device's credit is exactly the union's demand and a slow
consumer slows the devices end to end. Events beyond the credit are refused, counted, and
the connection is closed (RS §1.1). The union's one subscriber is the server's output fan-out:
it counts every element that leaves the union and shares it, through one bounded buffer paced
by the slowest member, with remote subscribers (``subscribe`` streams, paced by their
``request`` frames) and local ones (an optional ``RollingFileSink``, ``Server.subscribe``).
With no member, the output is counted and let go, so the union keeps merging (it is live).

Everything runs on one asyncio loop; the union's merge runs on it too (``LoopExecutor``). A
``next`` frame's events reach the union as one batch (``InputHandle.try_send_many``: one lock,
one wake of the merge) and are merged in one drain turn.

Bounds (all in ``stats()``): ``max_connections`` set up, and ``max_pending`` in setup
(``setup_timeout`` each, a setup frame of at most ``MAX_SETUP_FRAME`` bytes); ``max_streams``
active per connection; ``max_frame`` bytes per frame; per-input credit (the union's
``prefetch``, shared fairly within its ``max_buffered``, at least ``min_credit`` each); the
output fan-out's ``capacity``; each connection's outgoing queue, ``outbox_bytes`` (and one
frame more): a subscriber that does not read holds the fan-out, which holds the union, which
holds the devices' credit back, until it has taken nothing for ``idle_timeout`` and is cut
off. An event that could not be written again (nested over ``MAX_DEPTH``, or too large for
an output frame) is refused on input, alone. Memory is O(connections × (streams +
``outbox_bytes`` + ``max_frame``) + the union's bounds); a closed connection leaves only
counters. docs/protocol.md, "Bounds", gives the figures.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import operator
import threading
from collections import Counter, deque
from typing import Any, Iterable, NamedTuple

from engine.contracts import MAX_DEMAND
from engine.errors import ClosedError, InputError
from engine.event import CTI, Event
from eventlog import RollingFileSink, SinkStats
from engine.executors import LoopExecutor
from engine.sources import failed
from engine.multicast import CursorSubscription
from engine.sinks import PublisherBase
from engine.subscription import check_subscriber
from engine.violations import report_violation

from operators.late import LateStats
from goldilocks.net.protocol import (
    DEFAULT_MAX_FRAME,
    MAX_BATCH,
    MAX_DEPTH,
    MAX_SETUP_FRAME,
    SUPPORTED_VERSIONS,
    VERSION,
    ConnectionLost,
    Frame,
    ProtocolError,
    RemoteError,
    decode_events,
    decode_frame,
    encode_cancel,
    encode_complete,
    encode_error,
    encode_next,
    encode_ok,
    encode_request,
    event_refusals,
)
from goldilocks.net.transport import (
    WS_LOGGER,
    ConnectionClosed,
    TcpTransport,
    Transport,
    WebSocketTransport,
)
from operators.union import InputHandle, Union, UnionStats

__all__ = ["Server", "ServerStats", "ConnectionStats", "load_tokens"]

_log = logging.getLogger("goldilocks.net")

#: Bytes a connection may read (and hand to the union) before its read loop yields the
#: event loop; about one frame of 1024 small events.
READ_BUDGET = 64 * 1024
#: The TCP stream reader's limit: it stops reading from the socket while it holds more than
#: twice this (before setup, too: a connection can pin no more than that and one read).
READER_LIMIT = 64 * 1024
_KIND = operator.attrgetter("kind")

OPEN = "open"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"


def load_tokens(path: str) -> list[str]:
    """Tokens from a file: one per line; blank lines and ``#`` comments are ignored."""
    try:
        with open(path, encoding="utf-8") as f:
            tokens = [line.strip() for line in f
                      if line.strip() and not line.lstrip().startswith("#")]
    except OSError as err:
        raise InputError(f"token file {path!r}: {err.strerror}; expected a readable file "
                         "with one token per line") from err
    if not tokens:
        raise InputError(f"token file {path!r} holds no token; expected one token per line")
    return tokens


class ConnectionStats(NamedTuple):
    peer: str
    transport: str             # "ws" or "tcp"
    authenticated: bool
    streams: int               # active streams
    frames_in: int
    frames_out: int
    events_in: int             # accepted into the union
    events_out: int            # sent to this connection's subscribe streams
    refused: int               # events refused (overrun, limits, after the stream ended)
    outbox: int                # frames waiting to be written
    outbox_peak: int
    outbox_bytes: int = 0      # bytes written and not yet taken by the socket ...
    outbox_bytes_peak: int = 0  # ... their peak (bound: the server's outbox_bytes + max_frame)


class ServerStats(NamedTuple):
    """Totals since start (closed connections included) and the live parts' bounds.

    Accounting: every event that arrived in a ``next`` frame is either ``events_received``
    (merged by the union: ``union.received``) or ``events_refused``; the union accounts for
    the received ones (emitted, dropped late, adjusted, still buffered).
    """

    connections: tuple[ConnectionStats, ...]
    connections_total: int
    connections_refused: int   # over max_connections
    auth_failures: int
    protocol_errors: tuple[tuple[str, int], ...]   # (code, count), sorted
    disconnects: int           # connections lost with streams still open
    events_received: int
    events_refused: int
    events_sent: int           # to remote subscribers
    output_events: int         # inserts that left the union (counted by the tap)
    output_ctis: int
    max_connections: int
    max_streams: int
    max_frame: int
    union: UnionStats
    output_buffered: int       # the output fan-out's buffer, its peak and its bound
    output_peak: int
    output_capacity: int
    files: SinkStats | None    # the rolling event-log sink's stats, if any
    pending: int = 0           # connections in setup (not yet authenticated) ...
    max_pending: int = 0       # ... and their bound; the oldest is let go for a new one
    setup_evictions: int = 0   # connections in setup let go for a newer one
    outbox_bytes: int = 0      # the bound on each connection's outgoing queue (bytes)

    def errors(self, code: str) -> int:
        return dict(self.protocol_errors).get(code, 0)


# ============================================================================ device streams
class _DeviceStream:
    """A ``publish`` stream: a remote publisher of one device's events, and the subscription
    the union's input holds on it. Runs on the server's loop; ``request``/``cancel`` may be
    called from any thread and hop onto it."""

    __slots__ = ("conn", "id", "device", "subscriber", "handle", "granted",
                 "received", "refused", "state")

    kind = "publish"

    def __init__(self, conn: _Connection, stream_id: int, device: str) -> None:
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
        conn = self.conn
        if threading.get_ident() != conn.server._thread:
            conn.server._call(self._grant, n)
        else:
            self._grant(n)

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
        conn = self.conn
        if threading.get_ident() != conn.server._thread:
            conn.server._call(self._cancel)
        else:
            self._cancel()

    def _cancel(self) -> None:
        if self.state != OPEN:
            return  # RS §3.7
        self.state = CANCELLED
        self.subscriber = None  # RS §3.13: drop the reference
        self.conn.write(encode_cancel(self.id))
        self.conn._stream_ended(self)

    # ---------------------------------------------------------------- frames from the device
    def on_next_frame(self, frame: Frame) -> None:
        rows = frame.events or []
        count = len(rows)
        if self.state != OPEN:
            # In flight when the union cancelled (RS §2.8 on the wire): counted, not merged.
            self.refused += count
            self.conn.refused += count
            return
        credit = self.granted - self.received
        if count > credit:
            self.refused += count
            self.conn.refused += count
            raise ProtocolError(
                "overrun", f"device {self.device!r} (stream {self.id}) sent {count} events "
                f"with only {credit} requested ({self.received} of {self.granted} used); "
                "expected at most the credit granted by request frames",
                stream=self.id, rule="RS §1.1")
        try:
            events = decode_events(rows, self.device, stream=self.id)
        except ProtocolError:
            self.refused += count
            self.conn.refused += count
            raise
        self.received += count
        server = self.conn.server
        refusals = event_refusals(events, frame.size, server.max_frame, stream=self.id)
        if refusals:
            # Well formed, but beyond a limit: those events are refused alone (the others
            # are merged) and the stream ends with the first reason; the connection and its
            # other streams carry on.
            bad = {i for i, _, _ in refusals}
            events = [e for i, e in enumerate(events) if i not in bad]
            self.refused += len(bad)
            self.conn.refused += len(bad)
        # One frame, one arrival batch: the union queues the whole frame under one lock and
        # wakes its merge once, where on_next per event would take both per event. The credit
        # checked above is the union's own (``granted`` is what it requested of this input),
        # so the batch fits whole; anything not taken is counted, never silently lost.
        sent = 0
        if events:
            try:
                sent = self.handle.try_send_many(events)  # type: ignore[union-attr]
            except ClosedError:
                sent = 0  # the input left meanwhile (RS §2.8): counted, not merged
        self.conn.events_in += sent
        if sent < len(events):
            self.refused += len(events) - sent
            self.conn.refused += len(events) - sent
        if refusals:
            _, code, message = refusals[0]
            more = f" ({len(refusals)} events of the frame refused)" if len(refusals) > 1 else ""
            self.refuse(code, message + more)

    def refuse(self, code: str, message: str) -> None:
        """End this stream from the server's side: ``error(stream, code)`` to the device, and
        the input leaves the union as failed with the same reason (the connection stays)."""
        if self.state != OPEN:
            return
        server = self.conn.server
        server._errors[code] += 1
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

    def on_lost(self, reason: BaseException) -> None:
        if self.state == OPEN:
            self._end(FAILED, reason)

    def _end(self, state: str, error: BaseException | None) -> None:
        subscriber = self.subscriber
        self.state = state
        self.subscriber = None
        self.conn._stream_ended(self)
        if subscriber is None:
            return
        if error is None:
            subscriber.on_complete()
        else:
            subscriber.on_error(error)

    def __repr__(self) -> str:
        return f"<device stream {self.id} {self.device!r} {self.state}>"


class _DevicePublisher(PublisherBase):
    """The device stream as a publisher: one subscriber (the union's input), then closed."""

    __slots__ = ("_stream",)

    def __init__(self, stream: _DeviceStream) -> None:
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


# ============================================================================ output fan-out
class _LocalMember(CursorSubscription):
    """A local subscriber of the fan-out (the file sink, ``Server.subscribe``): a cursor into
    the shared buffer, drained on the server's loop; ``pump`` is the fan-out's member call."""

    __slots__ = ()

    pump = CursorSubscription.signal

class _Fanout:
    """The union's one subscriber: counts every element that leaves the union and shares it
    with the server's outputs — remote ``subscribe`` streams and local subscribers — through
    one bounded buffer, paced by the slowest member (the broadcast design, in batches: one
    ``next`` frame per member per loop turn rather than one call per element).

    It takes the union's output as lists (``Union.batches``) of at most ``batch`` events:
    demand counts lists, so at most ``capacity // batch`` lists are requested or buffered at
    once and the buffer never holds more than ``capacity`` events.

    Members see what arrives after they joined. With no member the output is counted and
    let go, so the union keeps merging (the output is live). Memory: O(``capacity``).
    Runs on the server's loop only.
    """

    def __init__(self, server: Server, capacity: int) -> None:
        self.server = server
        self.capacity = capacity
        self.batch = max(1, min(1024, capacity // 4))  # events per list, at most
        self.window = capacity // self.batch           # lists requested or buffered, at most
        self.ring: deque[Event] = deque()
        self.base = 0             # absolute index of ring[0]
        self.members: list[Any] = []
        self.subscription: Any = None
        self.outstanding = 0      # lists requested from the union, not yet received
        self.events = 0
        self.ctis = 0
        self.peak = 0
        self.error: BaseException | None = None
        self.completed = False
        self._scheduled = False

    # ---------------------------------------------------------------- subscriber of the union
    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        if self.subscription is not None:
            subscription.cancel()  # RS §2.5
            return
        self.subscription = subscription
        self._advance()

    def on_next(self, events: list[Event]) -> None:
        count = len(events)
        ctis = list(map(_KIND, events)).count(CTI)
        self.ctis += ctis
        self.events += count - ctis
        self.outstanding -= 1
        if self.outstanding < 0:
            report_violation("RS §1.1", "the union sent more lists than the server's output "
                             "requested", party=self.subscription)
        if self.members:
            ring = self.ring
            ring.extend(events)
            if len(ring) > self.peak:
                self.peak = len(ring)
            self._schedule()
        else:
            self.base += count
            if self.outstanding <= self.window // 2:
                self._advance()

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self._terminal()

    def on_complete(self) -> None:
        self.completed = True
        self._terminal()

    def _terminal(self) -> None:
        for member in list(self.members):
            if isinstance(member, _LocalMember):
                if self.error is not None:
                    member._error = self.error  # RS §4.2: at once, demand or not
                else:
                    member._completed = True
        self._schedule()

    # ---------------------------------------------------------------- members
    def join(self, member: Any) -> None:
        member.cursor = self.base + len(self.ring)
        if self.error is not None or self.completed:
            if isinstance(member, _LocalMember):
                member._error = self.error
                member._completed = self.error is None
        self.members.append(member)
        self._schedule()

    def subscribe_local(self, subscriber: Any) -> None:
        loop = self.server._loop
        assert loop is not None, "the server is started before anyone subscribes"
        member = _LocalMember(subscriber, self, 0, LoopExecutor(loop))
        self.join(member)
        member.start()

    def _leave(self, member: Any, cancelled: bool = True) -> None:
        try:
            self.members.remove(member)
        except ValueError:
            return
        self._advance()

    def _window(self, cursor: int, limit: int) -> list[Event]:  # for CursorSubscription
        offset = cursor - self.base  # only on the server's loop: no lock
        return list(itertools.islice(self.ring, offset, offset + limit))

    def _end(self) -> int:
        return self.base + len(self.ring)

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.server._loop.call_soon(self._pump)  # type: ignore[union-attr]

    def _pump(self) -> None:
        self._scheduled = False
        for member in list(self.members):
            member.pump()
        self._advance()

    def _advance(self) -> None:
        """Trim what every member has taken; ask the union for the free room in batches."""
        ring = self.ring
        members = self.members
        if members:
            low = min(member.cursor for member in members)
            while self.base < low and ring:
                ring.popleft()
                self.base += 1
        else:
            self.base += len(ring)
            ring.clear()
        subscription = self.subscription
        if subscription is None or self.completed or self.error is not None:
            return
        # Demand counts lists of up to ``batch`` events: what is buffered plus what may
        # still come stays within ``capacity`` events.
        want = (self.capacity - len(ring)) // self.batch - self.outstanding
        if want > 0 and want >= (self.window + 1) // 2:
            self.outstanding += want
            subscription.request(want)

    def stats(self) -> tuple[int, int, int]:
        return len(self.ring), self.peak, self.capacity


# ============================================================================ output streams
class _OutputStream:
    """A ``subscribe`` stream: a member of the output fan-out that sends what it has credit
    for (the remote side's ``request`` frames, RS §3.8) as ``next`` frames."""

    __slots__ = ("conn", "id", "cursor", "credit", "state", "sent", "requested")

    kind = "subscribe"

    def __init__(self, conn: _Connection, stream_id: int) -> None:
        self.conn = conn
        self.id = stream_id
        self.cursor = 0
        self.credit = 0           # requested by the remote subscriber, not yet sent
        self.state = OPEN
        self.sent = 0
        self.requested = 0

    def pump(self) -> None:
        if self.state != OPEN:
            return
        fanout = self.conn.server._fanout
        available = fanout.base + len(fanout.ring) - self.cursor
        take = available if available < self.credit else self.credit
        if take > 0:  # RS §1.1: never more than requested
            offset = self.cursor - fanout.base
            events = list(itertools.islice(fanout.ring, offset, offset + take))
            # Only as much as the connection's outgoing queue has room for: the rest waits
            # in the fan-out's buffer, which then fills and holds the union back, which
            # holds the devices' credit back (backpressure end to end).
            sent = self.conn.write_events(self.id, events)
            self.cursor += sent
            self.credit -= sent
            self.sent += sent
            self.conn.events_out += sent
            available -= sent
        if available == 0 and (fanout.completed or fanout.error is not None):
            self.state = FAILED if fanout.error is not None else COMPLETED
            if fanout.error is None:
                self.conn.write(encode_complete(self.id))  # RS §1.5
            else:
                self.conn.write(encode_error(self.id, "upstream_error",  # RS §1.4
                                             f"the union's output failed: {fanout.error}"))
            self._detach()

    # ---------------------------------------------------------------- frames in
    def on_request_frame(self, n: int) -> None:
        self.requested = min(self.requested + n, MAX_DEMAND)
        self.credit = min(self.credit + n, MAX_DEMAND)  # RS §3.8, §3.17
        self.conn.server._fanout._schedule()

    def on_cancel_frame(self) -> None:
        self.close()

    def close(self) -> None:
        if self.state != OPEN:
            return
        self.state = CANCELLED  # RS §3.12: stop, drop the references
        self._detach()

    def _detach(self) -> None:
        self.conn._stream_ended(self)
        self.conn.server._fanout._leave(self)

    def on_lost(self, reason: BaseException) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<subscribe stream {self.id} {self.state}>"


# ============================================================================ connections
class _Connection:
    """One client connection: setup, then frames dispatched to its streams."""

    def __init__(self, server: Server, transport: Transport) -> None:
        self.server = server
        self.transport = transport
        self.authenticated = False
        self.streams: dict[int, Any] = {}
        self.finished: deque[tuple[int, Any]] = deque(maxlen=64)  # recently ended streams
        self.last_id = 0
        self.frames_in = 0
        self.events_in = 0
        self.events_out = 0
        self.refused = 0
        self.closed = False
        self.evicted = False

    def write(self, frame: bytes) -> None:
        if not self.closed:
            self.transport.write(frame)

    def write_events(self, stream_id: int, events: list[Event]) -> int:
        """``next`` frames for a prefix of ``events``, each frame within ``max_frame``, while
        the outgoing queue has room (``outbox_bytes``; it may go over by one frame). Returns
        how many events were written; when not all, the fan-out is woken once the queue has
        room again."""
        transport = self.transport
        limit = self.server.outbox_bytes
        max_frame = self.server.max_frame
        total = len(events)
        done = 0
        step = total
        while done < total:
            if transport.queued >= limit or self.closed:
                transport.room = limit // 2 or 1
                transport.on_room = self.server._fanout._schedule
                break
            end = min(total, done + step)
            data = encode_next(stream_id, events[done:end], with_source=True)
            while len(data) > max_frame and end - done > 1:
                step = max(1, (end - done) // 2)
                end = done + step
                data = encode_next(stream_id, events[done:end], with_source=True)
            if len(data) > max_frame:
                # Devices' events are measured on input (too_large), so only a local
                # publisher could get here; the subscriber is told and this stream ends.
                stream = self.streams.get(stream_id)
                self.write(encode_error(stream_id, "oversized",
                                        f"an event of {len(data)} bytes does not fit in a "
                                        f"frame of at most {max_frame} bytes"))
                if stream is not None:
                    stream.close()
                break
            self.write(data)
            done = end
        return done

    def stats(self) -> ConnectionStats:
        t = self.transport
        return ConnectionStats(t.peer, t.kind, self.authenticated, len(self.streams),
                               self.frames_in, t.frames_out, self.events_in, self.events_out,
                               self.refused, t.pending, t.peak, t.queued, t.queued_peak)

    # ---------------------------------------------------------------- the read loop
    async def run(self) -> None:
        server = self.server
        transport = self.transport
        loop = asyncio.get_running_loop()
        idle = server.idle_timeout
        reason: BaseException | None = None
        try:
            # Before setup: one frame of at most MAX_SETUP_FRAME bytes, within setup_timeout.
            async with asyncio.timeout(server.setup_timeout) as deadline:
                data = await transport.recv()
                self.frames_in += 1
                self._setup(decode_frame(data, MAX_SETUP_FRAME))
                transport.raise_limit()
                budget = READ_BUDGET
                while True:
                    # The idle timer restarts once a whole frame has been read and handled.
                    deadline.reschedule(loop.time() + idle)
                    data = await transport.recv()
                    self.frames_in += 1
                    self._dispatch(decode_frame(data, server.max_frame))
                    budget -= len(data)
                    if budget <= 0:
                        # Bounded work per turn: frames already buffered are read without
                        # the loop turning, so yield to it now and then. The merge runs,
                        # the credit it frees goes out while the device still sends, and
                        # other connections get their turn.
                        budget = READ_BUDGET
                        await asyncio.sleep(0)
        except TimeoutError:
            if self.authenticated:
                reason = ProtocolError("idle_timeout", f"no frame from {transport.peer} for "
                                       f"{idle} s; expected data or a keepalive within the "
                                       "idle timeout")
            else:
                reason = ProtocolError("setup_timeout", f"no setup from {transport.peer} "
                                       f"within {server.setup_timeout} s of connecting; "
                                       "expected a setup frame at once")
            self._refuse(reason)
        except ProtocolError as err:
            reason = err
            self._refuse(err)
        except ConnectionClosed as err:
            if transport.stalled:
                server._errors["stalled"] += 1
                reason = ConnectionLost(f"connection from {transport.peer} cut off: it took "
                                        f"nothing the server sent for {idle} s")
            elif self.evicted:
                reason = ConnectionLost(f"connection from {transport.peer} let go before its "
                                        "setup: the server had too many connections in setup")
            else:
                reason = ConnectionLost(f"connection from {transport.peer} ended: {err}")
            if self.streams:
                server._disconnects += 1
        except asyncio.CancelledError:
            reason = ConnectionLost(f"server closed the connection from {transport.peer}")
            raise
        finally:
            self.closed = True
            for stream in list(self.streams.values()):
                stream.on_lost(reason)
            server._forget(self)
            if isinstance(reason, ProtocolError):
                await _bounded(transport.close(1008, reason.code), 1.0)
            else:
                await _bounded(transport.close(), 1.0)
            transport.abort()

    def _refuse(self, err: ProtocolError) -> None:
        server = self.server
        server._errors[err.code] += 1
        if err.code == "unauthorized":
            server._auth_failures += 1
        _log.info("closing connection from %s: %s (%s)", self.transport.peer, err.code, err)
        self.transport.write(encode_error(0, err.code, str(err)))

    def _setup(self, frame: Frame) -> None:
        if frame.type != "setup":
            raise ProtocolError("out_of_order", f"first frame was {frame.type!r}; expected "
                                "setup (with the protocol version and the token)")
        if frame.version not in SUPPORTED_VERSIONS:
            raise ProtocolError("unsupported_version", f"protocol version {frame.version}; "
                                f"this server speaks {sorted(SUPPORTED_VERSIONS)}")
        if not self.server._check_token(frame.token):
            raise ProtocolError("unauthorized", "setup refused: missing or wrong token")
        server = self.server
        server._pending.pop(self, None)
        if server._authenticated >= server.max_connections:
            server._refused_connections += 1
            raise ProtocolError("too_many", f"the server has {server._authenticated} "
                                f"connections; at most {server.max_connections} are allowed")
        server._authenticated += 1
        self.authenticated = True
        self.transport.stall_timeout = server.idle_timeout
        self.write(encode_ok(VERSION, max_frame=server.max_frame,
                             idle_timeout=server.idle_timeout,
                             keepalive=server.idle_timeout / 3, max_batch=MAX_BATCH,
                             max_streams=server.max_streams, max_depth=MAX_DEPTH))
        _log.info("connection from %s (%s) ready", self.transport.peer, self.transport.kind)

    def _dispatch(self, frame: Frame) -> None:
        ftype = frame.type
        if ftype == "keepalive":
            return
        sid = frame.stream
        stream = self.streams.get(sid)
        if ftype == "next":
            if stream is None:
                count = len(frame.events or ())
                if self._finished(sid) is None:
                    self.refused += count
                    raise ProtocolError("out_of_order", f"next frame for stream {sid}, which "
                                        "was never opened; expected publish first", stream=sid)
                self.refused += count
                return  # in flight when the stream ended (RS §2.8)
            if stream.kind != "publish":
                raise ProtocolError("out_of_order", f"next frame from the client on "
                                    f"subscribe stream {sid}; a subscribe stream carries "
                                    "events from the server only", stream=sid)
            stream.on_next_frame(frame)
        elif ftype == "request":
            if stream is None:
                self._late(sid, ftype)
            elif stream.kind != "subscribe":
                raise ProtocolError("out_of_order", f"request frame from the client on "
                                    f"publish stream {sid}; on a publish stream the server "
                                    "grants the credit", stream=sid)
            else:
                stream.on_request_frame(frame.n)
        elif ftype == "cancel":
            if stream is None:
                self._late(sid, ftype)
            elif stream.kind != "subscribe":
                raise ProtocolError("out_of_order", f"cancel frame from the client on publish "
                                    f"stream {sid}; a device ends its stream with complete "
                                    "or error", stream=sid)
            else:
                stream.on_cancel_frame()
        elif ftype == "complete" or ftype == "error":
            if sid == 0:  # the client gives up on the connection
                raise ConnectionClosed(f"client error {frame.code!r}: {frame.message}")
            if stream is None:
                self._late(sid, ftype)
            elif stream.kind != "publish":
                if ftype == "error":
                    stream.close()
                    return
                raise ProtocolError("out_of_order", f"complete frame from the client on "
                                    f"subscribe stream {sid}; a subscriber ends its stream "
                                    "with cancel", stream=sid)
            elif ftype == "complete":
                stream.on_complete_frame()
            else:
                stream.on_error_frame(frame)
        elif ftype == "publish" or ftype == "subscribe":
            self._open(frame)
        else:  # setup, ok
            raise ProtocolError("out_of_order", f"{ftype} frame after setup; expected "
                                "publish, subscribe, request, cancel, next, complete, error "
                                "or keepalive")

    def _finished(self, sid: int) -> Any:
        for fid, stream in self.finished:
            if fid == sid:
                return stream
        return None if sid > self.last_id else True

    def _late(self, sid: int, ftype: str) -> None:
        if self._finished(sid) is None:
            raise ProtocolError("out_of_order", f"{ftype} frame for stream {sid}, which was "
                                "never opened", stream=sid)
        # otherwise: crossed with the end of the stream on the wire; nothing to do

    def _open(self, frame: Frame) -> None:
        sid = frame.stream
        if sid <= self.last_id:
            raise ProtocolError("out_of_order", f"{frame.type} opens stream {sid} after "
                                f"stream {self.last_id}; expected a new, increasing stream "
                                "id", stream=sid)
        self.last_id = sid
        server = self.server
        if len(self.streams) >= server.max_streams:
            self.write(encode_error(sid, "too_many", f"this connection already has "
                                    f"{len(self.streams)} open streams; at most "
                                    f"{server.max_streams} are allowed"))
            self.finished.append((sid, None))
            return
        if server._closing:
            self.write(encode_error(sid, "closing", "the server is shutting down"))
            self.finished.append((sid, None))
            return
        if frame.type == "subscribe":
            out = _OutputStream(self, sid)
            self.streams[sid] = out
            server._fanout.join(out)
            return
        stream = _DeviceStream(self, sid, frame.device)  # type: ignore[arg-type]
        self.streams[sid] = stream
        try:
            # Credit flows through the publisher's subscription (the union's request(n) goes
            # out as request frames); arrivals take the input's batch path (try_send_many).
            stream.handle = server.union.add(_DevicePublisher(stream), name=frame.device)
        except (InputError, ClosedError) as err:
            del self.streams[sid]
            stream.state = FAILED
            self.finished.append((sid, stream))
            code = "name_in_use" if isinstance(err, InputError) else "closing"
            self.write(encode_error(sid, code, str(err)))

    def _stream_ended(self, stream: Any) -> None:
        if self.streams.pop(stream.id, None) is not None:
            self.finished.append((stream.id, stream))


async def _bounded(coro: Any, timeout: float) -> bool:
    """Await ``coro`` for at most ``timeout`` s; whether it ended in time (and did not fail)."""
    try:
        await asyncio.wait_for(coro, timeout)
    except (asyncio.TimeoutError, Exception):
        return False
    return True


# ============================================================================ the server
class Server(PublisherBase):
    """A ``Union`` under ``policy`` fed by devices over the network (see the module doc).

    ``tokens``: accepted tokens (at least one; compared in constant time, never logged).
    ``idle_timeout``: seconds without any frame after which a connection is closed and its
    device inputs leave the union with the reason. ``out_dir``: write the merged output (and
    late records, prefix ``late``) as rolling event-log parts for Spark. ``prefetch`` and
    ``max_buffered`` are the union's credit bounds; ``output_capacity`` the broadcast's.
    ``prefetch`` is each device's credit: several of the client's frames (``batch``, 1024 by
    default) fit in it, so a device encodes and sends its next frames while the server merges
    the last; a credit of one frame would make each frame wait a round trip.
    """

    def __init__(self, policy: Any, *, tokens: Iterable[str], idle_timeout: float = 30.0,
                 max_frame: int = DEFAULT_MAX_FRAME, max_connections: int = 1024,
                 max_streams: int = 16, prefetch: int = 4096, max_buffered: int = 65_536,
                 output_capacity: int = 4096, out_dir: str | None = None,
                 part_events: int = 100_000, part_seconds: float | None = 60.0,
                 final_cti: bool = True, setup_timeout: float = 5.0, max_pending: int = 256,
                 outbox_bytes: int = 256 * 1024, min_credit: int = 1,
                 name: str = "server") -> None:
        tokens = [t for t in (tokens or ()) if t]
        if not tokens or not all(isinstance(t, str) for t in tokens):
            raise InputError(f"{name}: tokens must be a non-empty list of non-empty strings; "
                             "a server without a token would accept anyone")
        if idle_timeout <= 0 or setup_timeout <= 0 or max_frame < MAX_SETUP_FRAME \
                or max_connections < 1 or max_streams < 1 or max_pending < 1 \
                or outbox_bytes < 1 or min_credit < 0:
            raise InputError(f"{name}: idle_timeout={idle_timeout}, "
                             f"setup_timeout={setup_timeout}, max_frame={max_frame}, "
                             f"max_connections={max_connections}, max_streams={max_streams}, "
                             f"max_pending={max_pending}, outbox_bytes={outbox_bytes}, "
                             f"min_credit={min_credit}; expected the timeouts > 0, max_frame "
                             f">= {MAX_SETUP_FRAME}, min_credit >= 0 and the others >= 1")
        self._tokens = [t.encode("utf-8") for t in tokens]
        self.policy = policy
        self.idle_timeout = float(idle_timeout)
        self.max_frame = max_frame
        self.max_connections = max_connections
        self.max_streams = max_streams
        self.prefetch = prefetch
        self.max_buffered = max_buffered
        self.output_capacity = output_capacity
        self.out_dir = out_dir
        self.part_events = part_events
        self.part_seconds = part_seconds
        self.final_cti = final_cti
        self.setup_timeout = float(setup_timeout)
        self.max_pending = max_pending
        self.outbox_bytes = outbox_bytes
        self.min_credit = min_credit
        self.name = name
        self.union: Union = None  # type: ignore[assignment]  # built by start()
        self._fanout: _Fanout = None  # type: ignore[assignment]  # built by start()
        self.sink: RollingFileSink | None = None
        self.late_sink: RollingFileSink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = -1
        self._connections: set[_Connection] = set()
        self._pending: dict[_Connection, float] = {}  # in setup: since when, oldest first
        self._authenticated = 0
        self._evictions = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._listeners: list[Any] = []
        self._closing = False
        self._errors: Counter[str] = Counter()
        self._auth_failures = 0
        self._refused_connections = 0
        self._total = 0
        self._disconnects = 0
        self._closed_totals = [0, 0, 0, 0]  # events_in, events_out, refused, frames_in
        self.ws_address: tuple[str, int] | None = None
        self.tcp_address: tuple[str, int] | None = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self, *, ws: tuple[str, int] | None = None,
                    tcp: tuple[str, int] | None = None) -> Server:
        """Build the union and listen on ``ws`` and/or ``tcp`` (port 0: an ephemeral port)."""
        if ws is None and tcp is None:
            raise InputError(f"{self.name}: nothing to listen on; expected ws=(host, port) "
                             "and/or tcp=(host, port)")
        loop = self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self.union = Union(self.policy, prefetch=self.prefetch, max_buffered=self.max_buffered,
                           final_cti=self.final_cti, executor=LoopExecutor(loop),
                           min_credit=self.min_credit, name=self.name)
        self._fanout = _Fanout(self, self.output_capacity)
        self.union.batches(self._fanout.batch).subscribe(self._fanout)
        if self.out_dir is not None:
            self.sink = RollingFileSink(self.out_dir, prefix="events",
                                        max_events=self.part_events,
                                        max_seconds=self.part_seconds)
            self._fanout.subscribe_local(self.sink)
            self.late_sink = RollingFileSink(self.out_dir, prefix="late",
                                             max_events=self.part_events,
                                             max_seconds=self.part_seconds)
            self.union.late.subscribe(self.late_sink)
        if ws is not None:
            from websockets.asyncio.server import serve

            # Until setup succeeds a message may be at most 2 × MAX_SETUP_FRAME (the
            # library's limit, raised per connection after setup) and the handshake must
            # end within setup_timeout.
            listener = await serve(self._on_websocket, ws[0], ws[1],
                                   max_size=2 * MAX_SETUP_FRAME, compression=None,
                                   ping_interval=None, max_queue=4, logger=WS_LOGGER,
                                   open_timeout=self.setup_timeout)
            self._listeners.append(listener)
            self.ws_address = listener.sockets[0].getsockname()[:2]
        if tcp is not None:
            tcp_listener = await asyncio.start_server(self._on_tcp, tcp[0], tcp[1],
                                                      limit=READER_LIMIT)
            self._listeners.append(tcp_listener)
            self.tcp_address = tcp_listener.sockets[0].getsockname()[:2]
        return self

    @property
    def ws_url(self) -> str | None:
        return None if self.ws_address is None else \
            f"ws://{self.ws_address[0]}:{self.ws_address[1]}"

    @property
    def tcp_url(self) -> str | None:
        return None if self.tcp_address is None else \
            f"tcp://{self.tcp_address[0]}:{self.tcp_address[1]}"

    def subscribe(self, subscriber: Any) -> None:
        """Subscribe locally to the merged output (shared with remote subscribers)."""
        check_subscriber(subscriber)  # RS §1.9
        if self._fanout is None:
            raise ClosedError(f"{self.name}: not started; call await start(...) first")
        self._soon(self._fanout.subscribe_local, subscriber)

    async def close(self, timeout: float = 10.0) -> bool:
        """Stop listening, remove every device input (``cancel`` frames), close the union and
        wait (up to ``timeout`` s) until its output has ended — every subscriber told, every
        file part published — then close the connections.

        Returns True if the output ended in order within ``timeout``. Otherwise remote
        subscribers still behind are cut off, the local outputs get one more second to end,
        and False is returned. Either way it returns within ``timeout`` + 3 s.
        """
        if self._closing:
            return True
        self._closing = True
        for listener in self._listeners:
            if isinstance(listener, asyncio.Server):
                listener.close()
            else:  # websockets: stop accepting, but let the connections end in order
                listener.close(close_connections=False)
        for conn in list(self._connections):
            for stream in list(conn.streams.values()):
                if stream.kind == "publish" and stream.handle is not None:
                    stream.handle.remove()
        ended = True
        if self.union is not None:
            self.union.close()
            ended = await _bounded(self._until(self._output_ended), timeout)
            if not ended:
                for conn in list(self._connections):
                    if any(stream.kind == "subscribe" for stream in conn.streams.values()):
                        conn.transport.abort()  # its read loop ends, its streams leave
                await _bounded(self._until(self._output_ended), 1.0)
        connections = list(self._connections)
        if connections:  # together: the bound does not grow with the number of connections
            await asyncio.gather(*(_bounded(conn.transport.close(1001, "server closing"), 1.0)
                                   for conn in connections))
        for conn in connections:
            conn.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        await asyncio.gather(*(_bounded(listener.wait_closed(), 1.0)
                               for listener in self._listeners))
        return ended

    def _output_ended(self) -> bool:
        return self.union.stats().done and not self._fanout.members

    async def _until(self, predicate: Any) -> None:
        """Wait on the loop until ``predicate()`` holds (checked as the loop turns)."""
        while not predicate():
            await asyncio.sleep(0.005)

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- accepting
    async def _on_websocket(self, ws: Any) -> None:
        await self._serve(WebSocketTransport(ws, self.max_frame, MAX_SETUP_FRAME))

    async def _on_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._serve(TcpTransport(reader, writer, self.max_frame, MAX_SETUP_FRAME))

    async def _serve(self, transport: Transport) -> None:
        self._total += 1
        if self._authenticated >= self.max_connections or self._closing:
            self._refused_connections += 1
            self._errors["too_many"] += 1
            transport.write(encode_error(0, "too_many", f"the server has "
                                         f"{self._authenticated} connections; at most "
                                         f"{self.max_connections} are allowed"))
            await _bounded(transport.close(1013, "too many connections"), 1.0)
            transport.abort()
            return
        now = asyncio.get_running_loop().time()
        if len(self._pending) >= self.max_pending:
            # Connections in setup have their own slots, apart from max_connections. The
            # oldest of them makes room for this one if it has had a tenth of the setup
            # timeout (a device sends its setup at once), so sockets that never set up cannot
            # keep devices out; in a burst of new connections the newest is refused instead.
            oldest, since = next(iter(self._pending.items()))
            if now - since < self.setup_timeout / 10:
                self._refused_connections += 1
                self._errors["too_many"] += 1
                transport.write(encode_error(0, "too_many", f"{len(self._pending)} "
                                             "connections are in setup; try again"))
                await _bounded(transport.close(1013, "too many connections in setup"), 1.0)
                transport.abort()
                return
            del self._pending[oldest]
            self._evictions += 1
            oldest.evicted = True
            _log.info("letting go of %s: still in setup after %.1f s, and %d connections "
                      "are", oldest.transport.peer, now - since, self.max_pending)
            oldest.transport.abort()
        conn = _Connection(self, transport)
        self._pending[conn] = now
        self._connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.run()
        finally:
            if task is not None:
                self._tasks.discard(task)

    def _forget(self, conn: _Connection) -> None:
        self._pending.pop(conn, None)
        if conn in self._connections:
            self._connections.discard(conn)
            if conn.authenticated:
                self._authenticated -= 1
            totals = self._closed_totals
            totals[0] += conn.events_in
            totals[1] += conn.events_out
            totals[2] += conn.refused
            totals[3] += conn.frames_in

    def _check_token(self, token: str | None) -> bool:
        if token is None:
            return False
        given = token.encode("utf-8", "surrogatepass")
        ok = False
        for accepted in self._tokens:  # every token compared, in constant time each
            ok |= hmac.compare_digest(given, accepted)
        return ok

    # ---------------------------------------------------------------- loop helpers
    def _call(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closing: nothing left to do

    def _soon(self, fn: Any, *args: Any) -> None:
        if threading.get_ident() == self._thread:
            self._loop.call_soon(fn, *args)  # type: ignore[union-attr]
        else:
            self._call(fn, *args)

    # ---------------------------------------------------------------- stats
    def stats(self) -> ServerStats:
        conns = tuple(c.stats() for c in list(self._connections))
        totals = self._closed_totals
        received = totals[0] + sum(c.events_in for c in conns)
        sent = totals[1] + sum(c.events_out for c in conns)
        refused = totals[2] + sum(c.refused for c in conns)
        fanout = self._fanout
        return ServerStats(
            conns, self._total, self._refused_connections, self._auth_failures,
            tuple(sorted(self._errors.items())), self._disconnects, received, refused, sent,
            fanout.events if fanout else 0, fanout.ctis if fanout else 0, self.max_connections, self.max_streams,
            self.max_frame, self.union.stats() if self.union is not None else None,
            len(fanout.ring) if fanout else 0, fanout.peak if fanout else 0,
            self.output_capacity,
            self.sink.stats() if self.sink is not None else None, len(self._pending),
            self.max_pending, self._evictions, self.outbox_bytes)

    def __repr__(self) -> str:
        return f"Server({self.policy!r}, ws={self.ws_url}, tcp={self.tcp_url})"


_ = LateStats
