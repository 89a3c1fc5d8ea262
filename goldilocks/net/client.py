"""The client: publish device streams to a ``Server`` and subscribe to its merged output.

::

    client = await connect("ws://127.0.0.1:8765", token="s3cret")
    publication = client.publish(events, device="thermo-1")   # a Publisher or async iterable
    await publication.wait()          # completed (every event durable) / cancelled / failed
    merged = client.output(prefetch=1024)                     # a Publisher of the merged stream
    async for event in iterate(merged): ...
    await client.close()

Publishing honours the server's credit end to end: the local publisher is asked, through its
own subscription, for the events the server granted with ``request`` frames (RS §3.8 on the
wire) and no more, so it never sends beyond its credit (RS §1.1). The credit is passed on a
step (``max(batch, 1024)`` events) at a time with a turn of the loop in between, so frames are
written while the next ones are made. Events are batched: what the local publisher emits
within one turn of the loop leaves in one ``next`` frame (at most ``batch`` events).

**Each event once, whatever happens to the connection** (protocol 2, ``docs/protocol.md``,
"Exactly once"). A publication numbers its events from the position the server gives when
it acknowledges the stream, and keeps those the server has not yet made durable in a bounded
outbox (``outbox`` events; a full outbox stops asking the local publisher, as credit does).
``durable`` frames empty it. When the connection is lost — the server restarting, a network
blip — the client connects again with backoff (``reconnect``: the deadline, in seconds),
publishes again under the same name, and resends from the position the server gives: events
the server has are never sent twice, none it lacks is skipped. A publication fails only when
the deadline passes, saying how many of its events are durable. ``wait()`` returns
``completed`` once every event of the stream is durable. Against a server of protocol 1 a
publication is what it always was: nothing is kept, nothing resumed.

``output()`` is a publisher built on ``engine.subscription.BufferedSubscription``: each
subscriber gets its own ``subscribe`` stream (``start``: from a position of the merged
stream); its demand becomes ``request`` frames, never more outstanding than ``prefetch`` (the
local buffer's bound), and a server that sends beyond that credit is a protocol error (RS
§1.1). Signals are delivered on the client's loop (or the ``executor`` given). A subscription
ends with the connection; its ``position`` says where to subscribe again from.

Every client object belongs to the loop it was connected on; ``publish``, ``output`` and the
subscriptions may be used from other threads (they hop onto the loop).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from engine.contracts import MAX_DEMAND
from engine.errors import ClosedError, InputError
from engine.event import Event
from engine.executors import LoopExecutor, as_executor
from engine.sinks import PublisherBase
from engine.sources import failed, from_async_iterable
from engine.subscription import BufferedSubscription, check_subscriber
from engine.times import DurationLike, to_seconds
from engine.violations import report_violation

from goldilocks.net.protocol import (
    CANCELLED,
    COMPLETED,
    DEFAULT_MAX_FRAME,
    FAILED,
    MAX_BATCH,
    MAX_DEPTH,
    OPEN,
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
    encode_keepalive,
    encode_next,
    encode_publish,
    encode_request,
    encode_setup,
    encode_subscribe,
)
from goldilocks.net.transport import ConnectionClosed, Transport, open_transport

__all__ = ["connect", "Client", "Publication", "RemoteOutput", "ClientStats",
           "PublicationStats", "DEFAULT_RECONNECT", "DEFAULT_OUTBOX"]

_log = logging.getLogger("goldilocks.net.client")

#: Events a publication asks of its local publisher in one step (or ``batch``, if larger).
PULL_STEP = 1024
#: Seconds a client keeps trying to connect again after losing its connection.
DEFAULT_RECONNECT = 60.0
#: Events a publication keeps until the server says they are durable.
DEFAULT_OUTBOX = 65_536
#: The first and the longest wait between two attempts to connect again (seconds; doubled
#: after each failed attempt, with a random part so devices do not come back in step).
BACKOFF = (0.05, 2.0)
#: Codes of a connection's end that are worth connecting again for.
_TRANSIENT = frozenset({"idle_timeout", "setup_timeout", "too_many", "closing"})


@dataclass(frozen=True, slots=True)
class ClientStats:
    streams: int
    frames_in: int
    frames_out: int
    events_sent: int
    events_received: int
    outbox: int             # frames waiting to be written
    outbox_peak: int
    closed: bool
    error: BaseException | None
    reconnects: int = 0     # connections made again after one was lost
    unacked: int = 0        # events the publications keep until they are durable


@dataclass(frozen=True, slots=True)
class PublicationStats:
    """One publication: events sent (resends included) and resent, its position (the next
    event's number), how many of its events are durable, and its outbox (events kept until
    durable) with the outbox's bound."""

    device: str
    state: str
    sent: int
    resent: int
    position: int
    durable: int
    outbox: int
    outbox_bound: int
    streams: int            # streams it was published on (1, and one more per resumption)


class _Fatal(Exception):
    """A reason a connection ended that connecting again would not cure."""


async def connect(url: str, *, token: str | None, max_frame: int = DEFAULT_MAX_FRAME,
                  timeout: DurationLike = 10.0, keepalive: DurationLike | None = None,
                  reconnect: DurationLike | None = DEFAULT_RECONNECT) -> Client:
    """Connect to ``ws://HOST:PORT`` or ``tcp://HOST:PORT`` and set up (version, token).

    Raises ``RemoteError`` when the server refuses the setup (``code`` ``unauthorized``,
    ``unsupported_version``, ``too_many``). ``timeout``: for connecting and setting up.
    ``keepalive``: the time between keepalive frames (default: what the server advises, a
    third of its idle timeout; 0 disables them). ``reconnect``: how long to keep trying to
    connect again when the connection is lost, publications resuming where the server's
    positions say (``None`` or 0: a lost connection fails them, as a protocol-1 server's
    always does). All are durations (``engine.times.DurationLike``: ``"10s"``, a
    ``timedelta``, or a number of seconds). Speaks protocol 2, and 1 to a server that speaks
    only that.
    """
    timeout = to_seconds(timeout, what="connect: timeout")
    if keepalive is not None:
        keepalive = to_seconds(keepalive, what="connect: keepalive")
    if reconnect is not None:
        reconnect = to_seconds(reconnect, what="connect: reconnect")
    client = Client(url, token, max_frame, timeout, reconnect)
    await client._connect()
    client._keepalive_every = keepalive
    client._start()
    return client


async def _open(url: str, token: str | None, max_frame: int, timeout: float,
                version: int) -> tuple[Transport, Frame]:
    """A transport set up with ``version``; its ``ok`` frame."""
    transport = await open_transport(url, max_frame=max_frame, open_timeout=timeout)
    try:
        async def setup() -> Frame:
            transport.write(encode_setup(token, version))
            return decode_frame(await transport.recv(), max_frame)
        frame = await asyncio.wait_for(setup(), timeout)
        if frame.type == "error":
            raise RemoteError(frame.code or "error", frame.message or "", stream=0)
        if frame.type != "ok":
            raise ProtocolError("out_of_order", f"server answered setup with {frame.type!r}; "
                                "expected ok or error")
    except BaseException:
        transport.abort()
        raise
    return transport, frame


class Client:
    """One connection to a server, made again when lost (``reconnect``); see ``connect`` and
    the module docstring."""

    def __init__(self, url: str, token: str | None, max_frame: int, timeout: float = 10.0,
                 reconnect: float | None = DEFAULT_RECONNECT) -> None:
        self.url = url
        self.max_frame = max_frame
        self.timeout = timeout
        self.reconnect = reconnect if reconnect and reconnect > 0 else None
        self._token = token
        self.transport: Transport = None  # type: ignore[assignment]  # set by _connect
        self.version = VERSION
        self.server_info: dict = {}
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._streams: dict[int, Any] = {}
        self._publications: list[Publication] = []  # open, on this connection or waiting
        self._next_id = 1
        self._reader: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._keepalive_every: float | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._closed = False    # for good: closed, aborted, or the deadline passed
        self._closing = False   # close() or abort() was called
        self._error: BaseException | None = None
        self.frames_in = 0
        self.events_sent = 0
        self.events_received = 0
        self.reconnects = 0
        self.done = asyncio.Event()

    # ---------------------------------------------------------------- connecting
    async def _connect(self) -> None:
        """Connect and set up: protocol 2, or 1 when the server speaks only that."""
        try:
            transport, ok = await _open(self.url, self._token, self.max_frame, self.timeout,
                                        self.version)
        except RemoteError as err:
            if err.code != "unsupported_version" or self.version == 1:
                raise
            self.version = 1  # a server from before positions: publications as they were
            transport, ok = await _open(self.url, self._token, self.max_frame, self.timeout,
                                        1)
        self.transport = transport
        self.frames_in += 1
        self.server_info = dict(ok.info or {})
        self.server_info["version"] = ok.version
        self.version = ok.version or 1

    def _start(self) -> None:
        self._streams = {}
        self._next_id = 1
        self._reader = self._loop.create_task(self._read(self.transport))
        keepalive = self._keepalive_every
        if keepalive is None:
            keepalive = float(self.server_info.get("keepalive") or 0)
        if keepalive > 0:
            self._keepalive = self._loop.create_task(self._ping(keepalive, self.transport))

    async def _ping(self, every: float, transport: Transport) -> None:
        while not self._closed and transport is self.transport:
            await asyncio.sleep(every)
            transport.write(encode_keepalive())

    async def _read(self, transport: Transport) -> None:
        reason: BaseException
        fatal = True
        try:
            while True:
                data = await transport.recv()
                self.frames_in += 1
                self._dispatch(decode_frame(data, self.max_frame))
        except ProtocolError as err:
            reason = err
            transport.write(encode_error(0, err.code, str(err)))
        except RemoteError as err:
            reason = err
            fatal = err.code not in _TRANSIENT
        except ConnectionClosed as err:
            reason = ConnectionLost(f"connection to {self.url} ended: {err}")
            fatal = False
        except asyncio.CancelledError:
            reason = ClosedError(f"client for {self.url} closed")
        await _quietly(transport.close(), 1.0)
        transport.abort()
        self._lost(reason, fatal)

    def _lost(self, reason: BaseException, fatal: bool) -> None:
        """The connection ended: connect again (``reconnect``) for what can resume, or
        end everything with ``reason``."""
        if self._keepalive is not None:
            self._keepalive.cancel()
        streams = list(self._streams.values())
        self._streams.clear()
        resuming = [p for p in self._publications if p.resumable()]
        if fatal or self._closing or self.reconnect is None or not resuming:
            self._terminate(reason, streams)
            return
        for stream in streams:
            if isinstance(stream, Publication):
                stream._detach()
            else:
                stream._lost(reason)
        self._error = None
        self._reconnecting = self._loop.create_task(self._come_back(reason))

    async def _come_back(self, reason: BaseException) -> None:
        """Connect again with backoff until the ``reconnect`` deadline; then publish again
        every publication waiting. Past the deadline they fail, saying what is durable."""
        assert self.reconnect is not None
        deadline = self._loop.time() + self.reconnect
        wait, longest = BACKOFF
        last: BaseException = reason
        while not self._closing:
            pause = min(wait * (0.5 + random.random()), deadline - self._loop.time())
            if pause <= 0:
                break
            await asyncio.sleep(pause)
            wait = min(wait * 2, longest)
            try:
                await self._connect()
            except RemoteError as err:
                if err.code not in _TRANSIENT:
                    last = err
                    break
                last = err
                continue
            except (OSError, ConnectionClosed, TimeoutError, ProtocolError) as err:
                last = err
                continue
            self.reconnects += 1
            _log.info("connected again to %s (the connection had ended: %s)", self.url,
                      reason)
            self._reconnecting = None  # connected: publications open their streams now
            self._start()
            for publication in list(self._publications):
                publication._republish()
            return
        self._terminate(ConnectionLost(
            f"could not connect again to {self.url} within {self.reconnect} s "
            f"(the connection ended: {reason}; last attempt: {last})"), [])

    def _terminate(self, reason: BaseException, streams: list[Any]) -> None:
        if self._error is None:
            self._error = reason
        self._closed = True
        for stream in streams:
            stream._lost(reason)
        for publication in list(self._publications):
            publication._lost(reason)
        self._streams.clear()
        if self._keepalive is not None:
            self._keepalive.cancel()
        self.done.set()

    def _dispatch(self, frame: Frame) -> None:
        ftype = frame.type
        if ftype == "keepalive":
            return
        if frame.stream == 0:
            if ftype == "error":
                raise RemoteError(frame.code or "error", frame.message or "", stream=0)
            raise ProtocolError("out_of_order", f"{ftype} frame from the server after setup; "
                                "expected stream frames or keepalive")
        stream = self._streams.get(frame.stream)
        if stream is None:
            if frame.stream >= self._next_id:
                raise ProtocolError("out_of_order", f"{ftype} frame for stream "
                                    f"{frame.stream}, which this client never opened",
                                    stream=frame.stream)
            return  # crossed with the stream's end on the wire
        stream._frame(frame)

    # ---------------------------------------------------------------- API
    def publish(self, source: Any, *, device: str, batch: int = 1024,
                outbox: int = DEFAULT_OUTBOX) -> Publication:
        """Publish ``source`` (a Publisher or an async iterable of ``Event``) as ``device``.

        Events are sent only as the server grants credit; the returned ``Publication`` tells
        how it ended (``await publication.wait()``). ``outbox``: events kept until the server
        says they are durable (protocol 2; at least ``batch``): while it is full, the local
        publisher is asked for nothing more."""
        if source is None:
            raise TypeError("publish() requires a publisher or an async iterable, got None")
        if not isinstance(device, str) or not device:
            raise InputError(f"publish(): device {device!r}; expected a non-empty name")
        if not 1 <= batch <= MAX_BATCH:
            raise InputError(f"publish(): batch={batch}; expected 1 to {MAX_BATCH}")
        if not isinstance(outbox, int) or outbox < batch:
            raise InputError(f"publish(): outbox={outbox!r}; expected at least batch "
                             f"({batch}) events")
        if not callable(getattr(source, "subscribe", None)):
            if not hasattr(source, "__aiter__"):
                hint = ("; for events in a list, publish engine.from_iterable(events)"
                        if hasattr(source, "__iter__") else "")
                raise TypeError(f"publish(): {type(source).__name__} is neither a publisher "
                                f"nor an async iterable{hint}")
            source = from_async_iterable(source, loop=self._loop, capacity=batch)
        publication = Publication(self, device, batch, outbox)
        self._on_loop(self._open_publication, publication, source)
        return publication

    def output(self, *, prefetch: int = 1024, executor: object = None,
               start: int | None = None) -> RemoteOutput:
        """The server's merged output as a local publisher (one stream per subscriber):
        what it merges from now on, or, with ``start``, from that position of the merged
        stream (a subscription's ``position`` where it ended)."""
        if prefetch <= 0:
            raise InputError(f"output(): prefetch={prefetch}; expected > 0")
        if start is not None and (not isinstance(start, int) or start < 0):
            raise InputError(f"output(): start={start!r}; expected a position >= 0")
        return RemoteOutput(self, prefetch, executor, start)

    async def close(self, timeout: float = 5.0) -> None:
        """Write what is queued and close the connection (open streams fail with
        ``ClosedError``, saying what of a publication is durable); no more reconnecting."""
        self._closing = True
        if self._reconnecting is not None and not self._reconnecting.done():
            self._reconnecting.cancel()
            await _quietly(self._reconnecting, timeout)
            if not self._closed:
                self._terminate(ClosedError(f"client for {self.url} closed"), [])
        if not self._closed:
            await _quietly(self.transport.drain(), timeout)
            if self._reader is not None:
                self._reader.cancel()
                await _quietly(self._reader, timeout)
            else:
                self._terminate(ClosedError(f"client for {self.url} closed"),
                                list(self._streams.values()))
                await _quietly(self.transport.close(), timeout)

    def abort(self) -> None:
        """Drop the connection at once, as a crashed device would (no reconnecting)."""
        self._closing = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            if not self._closed:
                self._terminate(ClosedError(f"client for {self.url} aborted"), [])
        self.transport.abort()

    @property
    def error(self) -> BaseException | None:
        return self._error

    def stats(self) -> ClientStats:
        t = self.transport
        return ClientStats(len(self._streams), self.frames_in, t.frames_out, self.events_sent,
                           self.events_received, t.pending, t.peak, self._closed, self._error,
                           self.reconnects,
                           sum(len(p._outbox) for p in self._publications))

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- internals
    def _on_loop(self, fn: Any, *args: Any) -> None:
        if threading.get_ident() == self._thread:
            fn(*args)
        elif not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:
                pass

    @property
    def _connected(self) -> bool:
        return not self._closed and (self._reconnecting is None or self._reconnecting.done())

    def _new_stream(self, stream: Any) -> int | None:
        if self._closed:
            stream._lost(self._error or ClosedError(f"client for {self.url} is closed"))
            return None
        sid = self._next_id
        self._next_id += 1
        stream.id = sid
        self._streams[sid] = stream
        return sid

    def _open_publication(self, publication: Publication, source: Any) -> None:
        if self._closed:
            publication._lost(self._error or ClosedError(f"client for {self.url} is closed"))
            return
        self._publications.append(publication)
        publication._source = source
        if self._connected:
            publication._republish()
        # else: published once connected again

    def _write(self, frame: bytes) -> None:
        if not self._closed:
            self.transport.write(frame)

    def _ended(self, stream: Any) -> None:
        sid = stream.id
        if self._streams.get(sid) is stream:
            self._streams.pop(sid)
        if isinstance(stream, Publication) and stream.state != OPEN \
                and stream in self._publications:
            self._publications.remove(stream)


async def _quietly(awaitable: Any, timeout: float) -> None:
    try:
        await asyncio.wait_for(awaitable, timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
        pass


# ============================================================================ publishing
class Publication:
    """One published device stream. It is the local publisher's subscriber: the server's
    ``request`` frames become ``request(n)`` on the local subscription, its events leave in
    ``next`` frames, its completion or error ends the stream.

    The server's credit is passed on to the local publisher a step at a time (at most
    ``max(batch, 1024)`` events asked and not yet received), with a turn of the loop between
    steps: a synchronous publisher given all the credit at once would fill every frame it
    allows before the first one is written, and the server would wait for all of them.

    With a protocol-2 server every event has a number (from the position the server gave
    when it acknowledged the stream); the events not yet durable stay in the outbox, are
    sent again on a new stream after a lost connection (from the position the server gives
    then), and leave it with ``durable`` frames. ``stats()`` shows all of it."""

    def __init__(self, client: Client, device: str, batch: int, outbox: int) -> None:
        self.client = client
        self.device = device
        self.batch = batch
        self.outbox_bound = outbox
        self.id = 0
        self.state = OPEN
        self.error: BaseException | None = None
        self.credit = 0          # granted by the server on this stream, not yet used
        self.granted = 0         # granted in all
        self.sent = 0            # events sent in all (resends included)
        self.resent = 0
        self.streams = 0
        self.durable = 0         # how many of this device's events the server made durable
        self._source: Any = None
        self._subscription: Any = None
        self._step = max(batch, PULL_STEP)
        self._asked = 0          # requested of the local publisher, not yet received
        self._pull_scheduled = False
        self._flush_scheduled = False
        self._outbox: deque[Event] = deque()  # taken, not known durable (not sent: at the end)
        self._base = 0           # the number of the outbox's first event
        self._sent_to = 0        # the number of the next event to send on this stream
        self._numbered = False   # the server gave a position: the numbers are known
        self._tracked = False    # protocol 2: the outbox is kept until durable
        self._acked = False      # this stream's acknowledgement came
        self._on_stream = False  # a stream is open for it on the current connection
        self._local_done = False  # the local publisher completed
        self._local_error: BaseException | None = None
        self._complete_sent = False
        self._name_deadline: float | None = None  # retrying a name the server still holds
        self._done = asyncio.Event()

    # ---------------------------------------------------------------- numbers
    @property
    def position(self) -> int:
        """The number the next event taken from the local publisher gets."""
        return self._base + len(self._outbox)

    def stats(self) -> PublicationStats:
        return PublicationStats(self.device, self.state, self.sent, self.resent,
                                self.position, self.durable, len(self._outbox),
                                self.outbox_bound, self.streams)

    def resumable(self) -> bool:
        """Whether a lost connection leaves this publication to resume (not to fail)."""
        return self.state == OPEN and self._tracked

    # ---------------------------------------------------------------- streams
    def _republish(self) -> None:
        """Open a stream for it on the current connection (the first, or after a lost
        one); the local publisher is subscribed to once."""
        client = self.client
        if self.state != OPEN or self._on_stream or not client._connected:
            return
        if client._new_stream(self) is None:
            return
        self.streams += 1
        self._on_stream = True
        self._acked = False
        self._complete_sent = False
        self.credit = 0
        self._tracked = client.version >= 2
        client._write(encode_publish(self.id, self.device))
        source, self._source = self._source, None
        if source is not None:
            source.subscribe(self)

    def _detach(self) -> None:
        """The connection is gone; the publication waits to be published again."""
        self._on_stream = False
        self.credit = 0

    # ---------------------------------------------------------------- local subscriber side
    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        if self._subscription is not None or self.state != OPEN:
            subscription.cancel()  # RS §2.5
            return
        self._subscription = subscription
        self._pull()

    def on_next(self, event: Event) -> None:
        if event is None:
            raise TypeError("RS §2.13: on_next() requires an event, got None")
        if threading.get_ident() == self.client._thread:
            self._take(event)  # the usual case, once per event: no hop
        else:
            self.client._on_loop(self._take, event)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        self.client._on_loop(self._end_local, error)

    def on_complete(self) -> None:
        self.client._on_loop(self._end_local, None)

    def _take(self, event: Event) -> None:
        if self.state != OPEN:
            return  # RS §2.8: after cancel, elements may still come
        if self._asked <= 0:  # the local publisher broke RS §1.1: drop and say so
            report_violation("RS §1.1", f"publisher of device {self.device!r} sent an event "
                             "beyond what was requested", party=self._subscription)
            return
        if event.__class__ is not Event:
            self._fail_local(TypeError(f"device {self.device!r}: the publisher sent "
                                       f"{type(event).__name__} {event!r}; expected an "
                                       "engine.Event"))
            return
        self._asked -= 1
        self._outbox.append(event)
        if self._on_stream and self.position - self._sent_to >= self.batch:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.client._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Send what the outbox holds beyond what this stream has sent, as credit allows;
        then the next step from the local publisher."""
        self._flush_scheduled = False
        if self.state != OPEN or not self._on_stream or not self._acked:
            return
        outbox = self._outbox
        while self.credit > 0 and self._sent_to < self.position:
            start = self._sent_to - self._base
            n = min(self.batch, self.credit, len(outbox) - start)
            if start == 0 and n == len(outbox):
                events = list(outbox)
            else:
                events = [outbox[i] for i in range(start, start + n)]
            if not self._send(events, self._sent_to):
                return
        if not self._tracked:  # protocol 1: nothing is kept once sent
            outbox.clear()
            self._base = self._sent_to
        if self._local_done and self._sent_to == self.position and not self._complete_sent:
            self._complete_sent = True
            if self._local_error is None:
                self.client._write(encode_complete(self.id))
                if not self._tracked or self.durable >= self.position:
                    self._finish(COMPLETED, None)
            else:
                error = self._local_error
                self.client._write(encode_error(self.id, "device_error",
                                                f"{type(error).__name__}: {error}"))
                self._finish(FAILED, error)
            return
        if not self._pull_scheduled:
            # the next step after this turn, once the transport has written this frame
            self._pull_scheduled = True
            self.client._loop.call_soon(self._pull)

    def _room(self) -> int:
        """Events the local publisher may be asked for now: the credit not needed for the
        outbox's unsent events, within the outbox's bound and a step."""
        unsent = self.position - self._sent_to if self._on_stream else len(self._outbox)
        free = self.credit - unsent if self._on_stream and self._acked else 0
        return min(free, self.outbox_bound - len(self._outbox), self._step) - self._asked

    def _pull(self) -> None:
        """Pass the next step of the server's credit on to the local publisher (RS §3.8)."""
        self._pull_scheduled = False
        subscription = self._subscription
        if subscription is None or self.state != OPEN or self._local_done:
            return
        n = self._room()
        if n <= 0:
            return
        self._asked += n
        subscription.request(n)
        if self._on_stream and self._sent_to < self.position:
            self._flush()  # a synchronous publisher emitted inside request(): send it now

    def _send(self, events: list[Event], first: int) -> bool:
        try:
            data = encode_next(self.id, events, first=first if self._tracked else None)
        except (TypeError, ValueError) as err:  # orjson: not JSON, or nested too deep
            self._fail_local(InputError(f"device {self.device!r}: an event of this frame "
                                        f"cannot be sent as JSON ({err}); payloads must be "
                                        f"JSON values nested at most {MAX_DEPTH} deep"))
            return False
        if len(data) > self.client.max_frame and len(events) > 1:
            half = len(events) // 2
            return self._send(events[:half], first) and self._send(events[half:],
                                                                   first + half)
        if len(data) > self.client.max_frame:
            self._fail_local(InputError(f"device {self.device!r}: an event of {len(data)} "
                                        "bytes does not fit in a frame of at most "
                                        f"{self.client.max_frame} bytes"))
            return False
        n = len(events)
        self.sent += n
        self.client.events_sent += n
        self.credit -= n
        self._sent_to = first + n
        self.client._write(data)
        return True

    def _end_local(self, error: BaseException | None) -> None:
        if self.state != OPEN or self._local_done:
            return
        self._local_done = True
        self._local_error = error
        self._subscription = None
        self._flush()

    def _fail_local(self, error: BaseException) -> None:
        subscription = self._subscription
        self._subscription = None
        if self._on_stream:
            self.client._write(encode_error(self.id, "device_error",
                                            f"{type(error).__name__}: {error}"))
        self._finish(FAILED, error)
        if subscription is not None:
            subscription.cancel()

    # ---------------------------------------------------------------- frames from the server
    def _frame(self, frame: Frame) -> None:
        ftype = frame.type
        if ftype == "request":
            n = frame.n or 0
            if not self._acked:
                self._acked = True
                self._acknowledged(frame.position)
            self.granted = min(self.granted + n, MAX_DEMAND)
            self.credit = min(self.credit + n, MAX_DEMAND)  # RS §3.17
            self._flush()  # RS §3.8: the server's credit, for the outbox, then the source
            if not self._pull_scheduled:
                self._pull()
        elif ftype == "durable":
            self._made_durable(frame.position or 0)
        elif ftype == "cancel":
            subscription = self._subscription
            self._outbox.clear()
            self._finish(CANCELLED, None)
            if subscription is not None:
                subscription.cancel()
        elif ftype == "error":
            self._refused(frame)
        else:
            raise ProtocolError("out_of_order", f"{ftype} frame from the server on publish "
                                f"stream {self.id}; expected request, durable, cancel or "
                                "error", stream=self.id)

    def _acknowledged(self, position: int | None) -> None:
        """The first ``request`` of a stream: the server has ``position`` of this device's
        events (protocol 2); resend the outbox from there."""
        self._name_deadline = None
        if not self._tracked or position is None:
            self._sent_to = self.position
            return
        outbox = self._outbox
        if not self._numbered:  # a new publication: its numbers start where the server is
            self._numbered = True
            self._base = self._sent_to = self.durable = position
            return
        if position > self.position:  # more than this publication ever took: not ours
            _log.warning("device %r: the server has %d of its events, this publication "
                         "took %d; another publisher of the same name? going on from %d",
                         self.device, position, self.position, position)
            outbox.clear()
            self._base = position
        elif position >= self._base:
            for _ in range(position - self._base):
                outbox.popleft()  # the server has them
            self._base = position
        else:
            # the server has fewer than it said were durable (it forgot this device, or
            # restarted without a checkpoint): what is in the outbox goes on from there
            _log.warning("device %r: the server has %d of its events, fewer than the %d it "
                         "said were durable; the %d events kept are sent as %d on",
                         self.device, position, self._base, len(outbox), position)
            self._base = position
        self.durable = min(self.durable, position)
        self.resent += self.position - position
        self._sent_to = position

    def _made_durable(self, position: int) -> None:
        if position <= self.durable:
            return
        self.durable = position
        outbox = self._outbox
        drop = min(position - self._base, len(outbox))
        for _ in range(max(drop, 0)):
            outbox.popleft()
        self._base = max(self._base, position)
        if self._sent_to < self._base:
            self._sent_to = self._base
        if self._complete_sent and self._local_error is None and position >= self.position:
            self._finish(COMPLETED, None)  # every event of the stream is durable
        elif drop > 0 and not self._pull_scheduled:
            self._pull()  # room in the outbox

    def _refused(self, frame: Frame) -> None:
        """An ``error`` on the stream: ``closing`` (the server goes away: come back) and a
        ``gap`` the outbox can fill are resumed; anything else ends the publication."""
        code = frame.code or "error"
        if self._tracked and code == "closing":
            self.client._ended(self)
            self._detach()  # published again once the connection is back
            return
        if self._tracked and code == "gap" and frame.position is not None \
                and frame.position >= self._base:
            self.client._ended(self)
            self._detach()
            self._republish()  # at once, on this connection: its ack gives the position
            return
        if self._tracked and code == "name_in_use" and self.streams > 1 \
                and self.client.reconnect is not None:
            # the server has not yet noticed the lost connection (it will within its idle
            # timeout): try again shortly, until the reconnect deadline
            loop = self.client._loop
            if self._name_deadline is None:
                self._name_deadline = loop.time() + self.client.reconnect
            if loop.time() < self._name_deadline:
                self.client._ended(self)
                self._detach()
                loop.call_later(min(1.0, self.client.timeout), self._republish)
                return
        subscription = self._subscription
        self._finish(FAILED, RemoteError(code, frame.message or "", stream=self.id,
                                         position=frame.position))
        if subscription is not None:
            subscription.cancel()

    def _lost(self, reason: BaseException) -> None:
        subscription = self._subscription
        if self.state == OPEN:
            if self._tracked:
                reason = type(reason)(f"{reason} ({self.durable} events of device "
                                      f"{self.device!r} are durable on the server, "
                                      f"{self.position - self.durable} are not)") \
                    if isinstance(reason, (ConnectionLost, ClosedError)) else reason
            self._finish(FAILED, reason)
            if subscription is not None:
                subscription.cancel()

    def _finish(self, state: str, error: BaseException | None) -> None:
        if self.state != OPEN:
            return
        self.state = state
        self.error = error
        self._subscription = None
        self.client._ended(self)
        self._done.set()

    async def wait(self, timeout: float | None = None) -> str:
        """Wait until the stream ended and its last frame is written; return its state
        (``completed``: with a protocol-2 server, once every event is durable; ``cancelled``
        by the server; or ``failed`` — then ``error`` says why)."""
        async def ended() -> None:
            await self._done.wait()
            await self.client.transport.drain()

        await asyncio.wait_for(ended(), timeout)
        return self.state

    def __repr__(self) -> str:
        return f"Publication({self.device!r}, stream={self.id}, {self.state})"


# ============================================================================ subscribing
class _RemoteSubscription(BufferedSubscription):
    """One ``subscribe`` stream: the buffer holds at most ``capacity`` events, and the wire
    credit never exceeds the free room (RS §1.1 on both sides). ``position``: the position
    of the merged stream the subscriber's next event has (where to subscribe again from);
    ``durable``: the server's durable position of the merged stream, as last told."""

    __slots__ = ("_client", "id", "_wanted", "_outstanding", "_opened", "state", "_start",
                 "_received_to", "durable")

    kind = "subscribe"

    def __init__(self, subscriber: Any, client: Client, capacity: int, executor: Any,
                 start: int | None = None) -> None:
        super().__init__(subscriber, capacity, executor)
        self._client = client
        self.id = 0
        self._wanted = 0        # local demand not yet passed on as wire credit
        self._outstanding = 0   # wire credit not yet used by the server
        self._opened = False
        self.state = OPEN
        self._start = start
        self._received_to: int | None = start  # the position after the last event received
        self.durable = 0

    @property
    def position(self) -> int | None:
        """The position of the next event the subscriber gets (``None`` until the server
        said one: a server of protocol 1)."""
        received = self._received_to
        return None if received is None else received - len(self._buffer)

    def request(self, n: int) -> None:
        super().request(n)
        if n.__class__ is int and n > 0:
            self._client._on_loop(self._want, n)

    def _want(self, n: int) -> None:
        self._wanted = min(self._wanted + n, MAX_DEMAND)
        self._top_up()

    def _top_up(self) -> None:
        if not self._opened or self.state != OPEN:
            return
        room = self.capacity - len(self._buffer) - self._outstanding
        grant = min(room, self._wanted)
        # top up in batches: when at least half the window is free, or all that is wanted
        if grant > 0 and (grant >= self.capacity // 2 or grant == self._wanted):
            self._wanted -= grant
            self._outstanding += grant
            self._client._write(encode_request(self.id, grant))

    def _open(self) -> None:  # on the loop
        if self._client._new_stream(self) is None:
            return
        self._opened = True
        self._client._write(encode_subscribe(self.id, self._start))
        self._top_up()

    def _frame(self, frame: Frame) -> None:  # on the loop
        ftype = frame.type
        if ftype == "next":
            rows = frame.events or []
            if len(rows) > self._outstanding:
                raise ProtocolError("overrun", f"server sent {len(rows)} events on subscribe "
                                    f"stream {self.id} with only {self._outstanding} "
                                    "requested", stream=self.id, rule="RS §1.1")
            events = decode_events(rows, None, stream=self.id, with_source=True)
            self._outstanding -= len(rows)
            self._client.events_received += len(rows)
            if self.state != OPEN:
                return  # RS §2.8: after cancel, in-flight events are dropped
            if frame.first is not None:
                self._received_to = frame.first + len(rows)
            for event in events:
                self.offer(event)  # fits: buffer + outstanding <= capacity
        elif ftype == "durable":
            self.durable = max(self.durable, frame.position or 0)
        elif ftype == "complete":
            self._end()
            self.complete()
        elif ftype == "error":
            self._end()
            self.fail(RemoteError(frame.code or "error", frame.message or "", stream=self.id,
                                  position=frame.position))
        else:
            raise ProtocolError("out_of_order", f"{ftype} frame from the server on subscribe "
                                f"stream {self.id}; expected next, durable, complete or error",
                                stream=self.id)

    def _end(self) -> None:
        if self.state == OPEN:
            self.state = COMPLETED
            self._client._ended(self)

    def _lost(self, reason: BaseException) -> None:
        if self.state == OPEN:
            self.state = FAILED
            self.fail(reason)

    def _on_emitted(self, count: int) -> None:
        self._client._on_loop(self._top_up)

    def _on_finish(self, cancelled: bool) -> None:
        if cancelled:
            self._client._on_loop(self._cancel_remote)

    def _cancel_remote(self) -> None:
        if self.state == OPEN:
            self.state = CANCELLED
            if self._opened:
                self._client._write(encode_cancel(self.id))
            self._client._ended(self)


class RemoteOutput(PublisherBase):
    """The server's merged output as a publisher: each ``subscribe`` opens a wire stream that
    sees what the union merges from then on (the output is live, RS §1.11: multicast), or
    from position ``start`` of the merged stream."""

    __slots__ = ("_client", "_prefetch", "_executor", "_start")

    def __init__(self, client: Client, prefetch: int, executor: object,
                 start: int | None = None) -> None:
        self._client = client
        self._prefetch = prefetch
        self._executor = as_executor(executor) if executor is not None \
            else LoopExecutor(client._loop)
        self._start = start

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)  # RS §1.9
        client = self._client
        if client._closed:
            failed(client._error or ClosedError(f"client for {client.url} is closed"))\
                .subscribe(subscriber)
            return
        subscription = _RemoteSubscription(subscriber, client, self._prefetch, self._executor,
                                           self._start)
        subscription.start()
        client._on_loop(subscription._open)

    def __repr__(self) -> str:
        return f"RemoteOutput({self._client.url}, prefetch={self._prefetch})"
