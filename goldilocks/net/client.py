"""The client: publish device streams to a ``Server`` and subscribe to its merged output.

::

    client = await connect("ws://127.0.0.1:8765", token="s3cret")
    publication = client.publish(events, device="thermo-1")   # a Publisher or async iterable
    await publication.wait()                                  # completed / cancelled / failed
    merged = client.output(prefetch=1024)                     # a Publisher of the merged stream
    async for event in iterate(merged): ...
    await client.close()

Publishing honours the server's credit end to end: the local publisher is asked, through its
own subscription, for the events the server granted with ``request`` frames (RS §3.8 on the
wire) and no more, so it never sends beyond its credit (RS §1.1). The credit is passed on a
step (``max(batch, 1024)`` events) at a time with a turn of the loop in between, so frames are
written while the next ones are made. Events are batched: what the local publisher emits
within one turn of the loop leaves in one ``next`` frame (at most ``batch`` events).

``output()`` is a publisher built on ``engine.subscription.BufferedSubscription``: each
subscriber gets its own ``subscribe`` stream; its demand becomes ``request`` frames, never
more outstanding than ``prefetch`` (the local buffer's bound), and a server that sends beyond
that credit is a protocol error (RS §1.1). Signals are delivered on the client's loop (or the
``executor`` given).

Every client object belongs to the loop it was connected on; ``publish``, ``output`` and the
subscriptions may be used from other threads (they hop onto the loop).
"""

from __future__ import annotations

import asyncio
import logging
import threading
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

__all__ = ["connect", "Client", "Publication", "RemoteOutput", "ClientStats"]

_log = logging.getLogger("goldilocks.net.client")

#: Events a publication asks of its local publisher in one step (or ``batch``, if larger).
PULL_STEP = 1024

@dataclass(frozen=True, slots=True)
class ClientStats:
    streams: int
    frames_in: int
    frames_out: int
    events_sent: int
    events_received: int
    outbox: int
    outbox_peak: int
    closed: bool
    error: BaseException | None


async def connect(url: str, *, token: str | None, max_frame: int = DEFAULT_MAX_FRAME,
                  timeout: DurationLike = 10.0, keepalive: DurationLike | None = None
                  ) -> Client:
    """Connect to ``ws://HOST:PORT`` or ``tcp://HOST:PORT`` and set up (version, token).

    Raises ``RemoteError`` when the server refuses the setup (``code`` ``unauthorized``,
    ``unsupported_version``, ``too_many``). ``timeout``: for connecting and setting up.
    ``keepalive``: the time between keepalive frames (default: what the server advises, a
    third of its idle timeout; 0 disables them). Both are durations
    (``engine.times.DurationLike``: ``"10s"``, a ``timedelta``, or a number of seconds).
    """
    timeout = to_seconds(timeout, what="connect: timeout")
    if keepalive is not None:
        keepalive = to_seconds(keepalive, what="connect: keepalive")
    transport = await open_transport(url, max_frame=max_frame, open_timeout=timeout)
    client = Client(transport, url, max_frame)
    try:
        await asyncio.wait_for(client._setup(token), timeout)
    except BaseException:
        transport.abort()
        raise
    client._start(keepalive)
    return client


class Client:
    """One connection to a server; see ``connect`` and the module docstring."""

    def __init__(self, transport: Transport, url: str, max_frame: int) -> None:
        self.transport = transport
        self.url = url
        self.max_frame = max_frame
        self.server_info: dict = {}
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._streams: dict[int, Any] = {}
        self._next_id = 1
        self._reader: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._closed = False
        self._error: BaseException | None = None
        self.frames_in = 0
        self.events_sent = 0
        self.events_received = 0
        self.done = asyncio.Event()

    # ---------------------------------------------------------------- setup and reading
    async def _setup(self, token: str | None) -> None:
        self.transport.write(encode_setup(token, VERSION))
        frame = decode_frame(await self.transport.recv(), self.max_frame)
        self.frames_in += 1
        if frame.type == "error":
            raise RemoteError(frame.code or "error", frame.message or "", stream=0)
        if frame.type != "ok":
            raise ProtocolError("out_of_order", f"server answered setup with {frame.type!r}; "
                                "expected ok or error")
        self.server_info = dict(frame.info or {})
        self.server_info["version"] = frame.version

    def _start(self, keepalive: float | None) -> None:
        self._reader = self._loop.create_task(self._read())
        if keepalive is None:
            keepalive = float(self.server_info.get("keepalive") or 0)
        if keepalive > 0:
            self._keepalive = self._loop.create_task(self._ping(keepalive))

    async def _ping(self, every: float) -> None:
        while not self._closed:
            await asyncio.sleep(every)
            self.transport.write(encode_keepalive())

    async def _read(self) -> None:
        transport = self.transport
        reason: BaseException
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
        except ConnectionClosed as err:
            reason = ConnectionLost(f"connection to {self.url} ended: {err}")
        except asyncio.CancelledError:
            reason = ClosedError(f"client for {self.url} closed")
        self._terminate(reason)
        await _quietly(transport.close(), 1.0)
        transport.abort()

    def _terminate(self, reason: BaseException) -> None:
        if self._error is None:
            self._error = reason
        self._closed = True
        for stream in list(self._streams.values()):
            stream._lost(reason)
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
    def publish(self, source: Any, *, device: str, batch: int = 1024) -> Publication:
        """Publish ``source`` (a Publisher or an async iterable of ``Event``) as ``device``.

        Events are sent only as the server grants credit; the returned ``Publication`` tells
        how it ended (``await publication.wait()``)."""
        if source is None:
            raise TypeError("publish() requires a publisher or an async iterable, got None")
        if not isinstance(device, str) or not device:
            raise InputError(f"publish(): device {device!r}; expected a non-empty name")
        if not 1 <= batch <= MAX_BATCH:
            raise InputError(f"publish(): batch={batch}; expected 1 to {MAX_BATCH}")
        if not callable(getattr(source, "subscribe", None)):
            if not hasattr(source, "__aiter__"):
                raise TypeError(f"publish(): {type(source).__name__} is neither a publisher "
                                "nor an async iterable")
            source = from_async_iterable(source, loop=self._loop, capacity=batch)
        publication = Publication(self, device, batch)
        self._on_loop(self._open_publication, publication, source)
        return publication

    def output(self, *, prefetch: int = 1024, executor: object = None) -> RemoteOutput:
        """The server's merged output as a local publisher (one stream per subscriber)."""
        if prefetch <= 0:
            raise InputError(f"output(): prefetch={prefetch}; expected > 0")
        return RemoteOutput(self, prefetch, executor)

    async def close(self, timeout: float = 5.0) -> None:
        """Write what is queued and close the connection (open streams fail with
        ``ClosedError``)."""
        if not self._closed:
            await _quietly(self.transport.drain(), timeout)
            if self._reader is not None:
                self._reader.cancel()
                await _quietly(self._reader, timeout)
            else:
                self._terminate(ClosedError(f"client for {self.url} closed"))
                await _quietly(self.transport.close(), timeout)

    def abort(self) -> None:
        """Drop the connection at once, as a crashed device would."""
        self.transport.abort()

    @property
    def error(self) -> BaseException | None:
        return self._error

    def stats(self) -> ClientStats:
        t = self.transport
        return ClientStats(len(self._streams), self.frames_in, t.frames_out, self.events_sent,
                           self.events_received, t.pending, t.peak, self._closed, self._error)

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
        sid = self._new_stream(publication)
        if sid is None:
            return
        self.transport.write(encode_publish(sid, publication.device))
        source.subscribe(publication)

    def _write(self, frame: bytes) -> None:
        if not self._closed:
            self.transport.write(frame)

    def _ended(self, stream: Any) -> None:
        self._streams.pop(stream.id, None)


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
    allows before the first one is written, and the server would wait for all of them."""

    def __init__(self, client: Client, device: str, batch: int) -> None:
        self.client = client
        self.device = device
        self.batch = batch
        self.id = 0
        self.state = OPEN
        self.error: BaseException | None = None
        self.credit = 0          # granted by the server, not yet used
        self.granted = 0
        self.sent = 0
        self._subscription: Any = None
        self._step = max(batch, PULL_STEP)
        self._unasked = 0        # credit not yet passed on to the local publisher
        self._asked = 0          # passed on (requested locally), not yet received
        self._pull_scheduled = False
        self._buffer: list[Event] = []
        self._flush_scheduled = False
        self._done = asyncio.Event()

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
                             f"beyond the {self.granted - self._unasked} requested",
                             party=self._subscription)
            return
        if event.__class__ is not Event:
            self._fail_local(TypeError(f"device {self.device!r}: the publisher sent "
                                       f"{type(event).__name__} {event!r}; expected an "
                                       "engine.Event"))
            return
        self._asked -= 1
        self.credit -= 1
        buffer = self._buffer
        buffer.append(event)
        if len(buffer) >= self.batch:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.client._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        buffer = self._buffer
        if not buffer or self.state != OPEN:
            buffer.clear()
            return
        self._buffer = []
        self._send(buffer)
        if self._unasked and not self._pull_scheduled:
            # the next step after this turn, once the transport has written this frame
            self._pull_scheduled = True
            self.client._loop.call_soon(self._pull)

    def _pull(self) -> None:
        """Pass the next step of the server's credit on to the local publisher (RS §3.8)."""
        self._pull_scheduled = False
        subscription = self._subscription
        if subscription is None or self.state != OPEN:
            return
        n = min(self._step - self._asked, self._unasked)
        if n <= 0:
            return
        self._unasked -= n
        self._asked += n
        subscription.request(n)
        if self._buffer:
            self._flush()  # a synchronous publisher emitted inside request(): send it now

    def _send(self, events: list[Event]) -> None:
        try:
            data = encode_next(self.id, events)
        except (TypeError, ValueError) as err:  # orjson: not JSON, or nested too deep
            self._fail_local(InputError(f"device {self.device!r}: an event of this frame "
                                        f"cannot be sent as JSON ({err}); payloads must be "
                                        f"JSON values nested at most {MAX_DEPTH} deep"))
            return
        if len(data) > self.client.max_frame and len(events) > 1:
            half = len(events) // 2
            self._send(events[:half])
            self._send(events[half:])
            return
        if len(data) > self.client.max_frame:
            self._fail_local(InputError(f"device {self.device!r}: an event of {len(data)} "
                                        "bytes does not fit in a frame of at most "
                                        f"{self.client.max_frame} bytes"))
            return
        self.sent += len(events)
        self.client.events_sent += len(events)
        self.client._write(data)

    def _end_local(self, error: BaseException | None) -> None:
        if self.state != OPEN:
            return
        self._flush()
        if error is None:
            self.client._write(encode_complete(self.id))
            self._finish(COMPLETED, None)
        else:
            self.client._write(encode_error(self.id, "device_error",
                                            f"{type(error).__name__}: {error}"))
            self._finish(FAILED, error)

    def _fail_local(self, error: BaseException) -> None:
        subscription = self._subscription
        self._end_local(error)
        if subscription is not None:
            subscription.cancel()

    # ---------------------------------------------------------------- frames from the server
    def _frame(self, frame: Frame) -> None:
        ftype = frame.type
        if ftype == "request":
            n = frame.n or 0
            self.granted = min(self.granted + n, MAX_DEMAND)
            self.credit = min(self.credit + n, MAX_DEMAND)
            self._unasked = min(self._unasked + n, MAX_DEMAND)  # RS §3.17
            self._pull()  # RS §3.8: the server's credit, passed on
        elif ftype == "cancel":
            subscription = self._subscription
            self._buffer.clear()
            self._finish(CANCELLED, None)
            if subscription is not None:
                subscription.cancel()
        elif ftype == "error":
            subscription = self._subscription
            self._finish(FAILED, RemoteError(frame.code or "error", frame.message or "",
                                             stream=self.id))
            if subscription is not None:
                subscription.cancel()
        else:
            raise ProtocolError("out_of_order", f"{ftype} frame from the server on publish "
                                f"stream {self.id}; expected request, cancel or error",
                                stream=self.id)

    def _lost(self, reason: BaseException) -> None:
        subscription = self._subscription
        if self.state == OPEN:
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
        (``completed``, ``cancelled`` by the server, or ``failed`` — then ``error`` says
        why)."""
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
    credit never exceeds the free room (RS §1.1 on both sides)."""

    __slots__ = ("_client", "id", "_wanted", "_outstanding", "_opened", "state")

    kind = "subscribe"

    def __init__(self, subscriber: Any, client: Client, capacity: int, executor: Any) -> None:
        super().__init__(subscriber, capacity, executor)
        self._client = client
        self.id = 0
        self._wanted = 0        # local demand not yet passed on as wire credit
        self._outstanding = 0   # wire credit not yet used by the server
        self._opened = False
        self.state = OPEN

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
        self._client._write(encode_subscribe(self.id))
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
            for event in events:
                self.offer(event)  # fits: buffer + outstanding <= capacity
        elif ftype == "complete":
            self._end()
            self.complete()
        elif ftype == "error":
            self._end()
            self.fail(RemoteError(frame.code or "error", frame.message or "", stream=self.id))
        else:
            raise ProtocolError("out_of_order", f"{ftype} frame from the server on subscribe "
                                f"stream {self.id}; expected next, complete or error",
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
    sees what the union merges from then on (the output is live, RS §1.11: multicast)."""

    __slots__ = ("_client", "_prefetch", "_executor")

    def __init__(self, client: Client, prefetch: int, executor: object) -> None:
        self._client = client
        self._prefetch = prefetch
        self._executor = as_executor(executor) if executor is not None \
            else LoopExecutor(client._loop)

    def subscribe(self, subscriber: Any) -> None:
        check_subscriber(subscriber)  # RS §1.9
        client = self._client
        if client._closed:
            failed(client._error or ClosedError(f"client for {client.url} is closed"))\
                .subscribe(subscriber)
            return
        subscription = _RemoteSubscription(subscriber, client, self._prefetch, self._executor)
        subscription.start()
        client._on_loop(subscription._open)

    def __repr__(self) -> str:
        return f"RemoteOutput({self._client.url}, prefetch={self._prefetch})"
