"""One client connection of a server: its streams, its limits, what it counts, and the way
its frames leave. The read loop that drives it is ``session.Session``; its streams are
``devices.DeviceStream`` (``publish``) and ``output.OutputStream`` (``subscribe``).

A connection lives on the server's loop; ``on_loop`` is how a call from another thread (a
union drained elsewhere) reaches it.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from goldilocks.net.transport import Transport

__all__ = ["Connection", "ConnectionStats", "Limits", "Tally", "Stream", "bounded"]


@dataclass(frozen=True, slots=True)
class ConnectionStats:
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


@dataclass(frozen=True, slots=True)
class Limits:
    """What a server holds each of its connections to (its settings when it started)."""

    max_frame: int          # bytes per frame, after setup
    max_streams: int        # open streams per connection
    idle_timeout: float     # seconds without a frame (or without taking one) before closing
    setup_timeout: float    # seconds from connecting to a set-up connection
    outbox_bytes: int       # the bound on the outgoing queue (bytes; it may go over by a frame)


class Tally:
    """What a server counts across its connections, the closed ones included: protocol
    errors by code, connections lost with streams open, and the counters of those closed."""

    __slots__ = ("errors", "disconnects", "events_in", "events_out", "refused", "frames_in",
                 "duplicates")

    def __init__(self) -> None:
        self.duplicates = 0  # events devices sent again that the server had (``from``)
        self.errors: Counter[str] = Counter()
        self.disconnects = 0
        self.events_in = 0
        self.events_out = 0
        self.refused = 0
        self.frames_in = 0

    def error(self, code: str) -> None:
        self.errors[code] += 1

    def disconnect(self) -> None:
        self.disconnects += 1

    def closed(self, conn: Connection) -> None:
        """Keep the counters of a connection that is gone."""
        self.events_in += conn.events_in
        self.events_out += conn.events_out
        self.refused += conn.refused
        self.frames_in += conn.frames_in


class Stream(Protocol):
    """What a connection knows of its streams."""

    id: int
    kind: str  # "publish" or "subscribe"

    def on_lost(self, reason: BaseException | None) -> None:
        """The connection ended under the stream: end it with ``reason``."""


class Connection:
    """One client connection: its transport, streams and counters (see the module doc)."""

    def __init__(self, transport: Transport, limits: Limits, tally: Tally) -> None:
        self.streams: dict[int, Any] = {}  # open streams by id
        self.last_id = 0                   # the last stream id opened (or refused)
        self.transport = transport
        self.limits = limits
        self.tally = tally
        self.authenticated = self.closed = self.evicted = False  # set up; ended; let go
        self.version = 1  # the protocol version agreed at setup
        self.frames_in = self.events_in = self.events_out = self.refused = 0
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def write(self, frame: bytes) -> None:
        if not self.closed:
            self.transport.write(frame)

    def on_loop(self, fn: Any, *args: Any) -> None:
        """``fn(*args)`` now if called on the connection's loop, else as soon as it turns
        (nothing, once the loop is closing)."""
        if threading.get_ident() == self._thread:
            fn(*args)
            return
        loop = self._loop
        if loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closing: nothing left to do

    def wait_for_room(self) -> None:
        """The outgoing queue is full: once it is half empty, the subscribe streams are told
        (``flush``) and send what they hold."""
        transport = self.transport
        transport.room = self.limits.outbox_bytes // 2 or 1
        transport.on_room = self._room

    def has_room(self) -> bool:
        return self.transport.queued < self.limits.outbox_bytes and not self.closed

    def _room(self) -> None:
        for stream in list(self.streams.values()):
            if stream.kind == "subscribe":
                stream.flush()

    def stream_ended(self, stream: Stream) -> None:
        self.streams.pop(stream.id, None)

    def has_ended(self, sid: int) -> bool:
        """Whether stream ``sid``, not open now, was opened (or refused when opened) before:
        a frame for it crossed its end on the wire and is no fault. Ids only increase, so
        that is any id up to the last one opened."""
        return sid <= self.last_id

    def evict(self) -> None:
        """Let go of this connection before its setup: its slot is taken by a newer one."""
        self.evicted = True
        self.transport.abort()

    def stats(self) -> ConnectionStats:
        t = self.transport
        return ConnectionStats(t.peer, t.kind, self.authenticated, len(self.streams),
                               self.frames_in, t.frames_out, self.events_in, self.events_out,
                               self.refused, t.pending, t.peak, t.queued, t.queued_peak)

    def __repr__(self) -> str:
        return f"<connection from {self.transport.peer}, {len(self.streams)} streams>"


async def bounded(awaitable: Any, timeout: float) -> bool:
    """Await ``awaitable`` for at most ``timeout`` s; whether it ended in time (and did not
    fail)."""
    try:
        await asyncio.wait_for(awaitable, timeout)
    except (asyncio.TimeoutError, Exception):
        return False
    return True
