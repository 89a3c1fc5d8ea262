"""``Server``: a ``Union`` behind the wire protocol, over WebSocket and TCP (``docs/protocol.md``).

::

    server = Server(goldilocks("5m"), tokens=["s3cret"], out_dir="out/")
    await server.start(ws=("127.0.0.1", 8765), tcp=("127.0.0.1", 8766))
    ...                                     # devices publish, subscribers subscribe
    await server.close()                    # inputs removed, union closed, files published

Each published device stream becomes a union input named after the device, whose credit is
the union's demand (``devices``). The union's one subscriber is the server's output
(``output``): a live multicast that counts what leaves the union and shares it, through one
bounded buffer paced by the slowest member, with remote subscribers (``subscribe`` streams,
paced by their ``request`` frames) and local ones (an optional ``RollingFileSink``,
``Server.subscribe``). Who gets in is the admission's business (``admission``: tokens, slots
for connections set up and in setup); each connection's read loop is a ``session``, its
state and counters a ``connection``. Everything runs on one asyncio loop; the union's merge
runs on it too (``LoopExecutor``).

Bounds (all in ``stats()``): ``max_connections`` set up, and ``max_pending`` in setup
(``setup_timeout`` each, a setup frame of at most ``MAX_SETUP_FRAME`` bytes); ``max_streams``
active per connection; ``max_frame`` bytes per frame; per-input credit (the union's
``prefetch``, shared fairly within its ``max_buffered``, at least ``min_credit`` each); the
output's ``capacity``; each connection's outgoing queue, ``outbox_bytes`` (and one frame
more): a subscriber that does not read holds the output, which holds the union, which holds
the devices' credit back, until it has taken nothing for ``idle_timeout`` and is cut off. An
event that could not be written again (nested over ``MAX_DEPTH``, or too large for an output
frame) is refused on input, alone. Memory is O(connections × (streams + ``outbox_bytes`` +
``max_frame``) + the union's bounds + the output's); a closed connection leaves only
counters. docs/protocol.md, "Bounds", gives the figures.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.errors import ClosedError, InputError
from engine.executors import LoopExecutor
from engine.sinks import PublisherBase
from engine.subscription import check_subscriber
from engine.times import DurationLike, to_seconds
from eventlog import RollingFileSink, SinkStats
from goldilocks.net.admission import Admission
from goldilocks.net.connection import Connection, ConnectionStats, Limits, Tally, bounded
from goldilocks.net.devices import DeviceStream
from goldilocks.net.output import OutputStream, ServerOutput
from goldilocks.net.protocol import DEFAULT_MAX_FRAME, MAX_SETUP_FRAME, encode_error
from goldilocks.net.session import Session, Venue
from goldilocks.net.transport import WS_LOGGER, TcpTransport, Transport, WebSocketTransport
from goldilocks.outputs import write_atomic
from operators.checkpoint import CheckpointError
from operators.edges import with_edges
from operators.union import Union, UnionStats

__all__ = ["Server", "ServerStats", "READER_LIMIT"]

#: The TCP stream reader's limit: it stops reading from the socket while it holds more than
#: twice this (before setup, too: a connection can pin no more than that and one read).
READER_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class ServerStats:
    """Totals since start (closed connections included) and the live parts' bounds.

    Accounting: every event that arrived in a ``next`` frame is either ``events_received``
    (merged by the union: ``union.received``) or ``events_refused``; the union accounts for
    the received ones (emitted, dropped late, adjusted, still buffered).
    """

    connections: tuple[ConnectionStats, ...]
    connections_total: int
    connections_refused: int   # over max_connections (or max_pending)
    auth_failures: int
    protocol_errors: tuple[tuple[str, int], ...]   # (code, count), sorted
    disconnects: int           # connections lost with streams still open
    events_received: int
    events_refused: int
    events_sent: int           # to remote subscribers
    output_events: int         # inserts that left the union (counted by the output)
    output_ctis: int
    max_connections: int
    max_streams: int
    max_frame: int
    union: UnionStats | None   # None before start
    output_buffered: int       # the output's buffer (events), its peak and its bound
    output_peak: int
    output_capacity: int
    files: SinkStats | None    # the rolling event-log sink's stats, if any
    pending: int = 0           # connections in setup (not yet authenticated) ...
    max_pending: int = 0       # ... and their bound; the oldest is let go for a new one
    setup_evictions: int = 0   # connections in setup let go for a newer one
    outbox_bytes: int = 0      # the bound on each connection's outgoing queue (bytes)
    checkpoints: int = 0       # checkpoints written (TS §8.1) ...
    checkpoint_misses: int = 0  # ... and times the union had no cut to offer in time

    def errors(self, code: str) -> int:
        return dict(self.protocol_errors).get(code, 0)


class Server(PublisherBase):
    """A ``Union`` under ``policy`` fed by devices over the network (see the module doc).
    The union decides edge events too (``with_edges(policy)``, TS §7).

    Durations (``idle_timeout``, ``setup_timeout``, ``part_seconds``, ``checkpoint_every``,
    ``max_drift``, ``idle_after``) take the engine's forms (``engine.times.DurationLike``):
    ``"30s"``, ``"5m"``, a ``timedelta``, or a bare number of seconds.

    ``tokens``: accepted tokens (at least one; compared in constant time, never logged).
    ``idle_timeout``: how long without any frame after which a connection is closed and its
    device inputs leave the union with the reason. ``out_dir``: write the merged output (and
    late records, prefix ``late``) as rolling event-log parts for Spark. ``prefetch`` and
    ``max_buffered`` are the union's credit bounds; ``output_capacity`` the output's.
    ``prefetch`` is each device's credit: several of the client's frames (``batch``, 1024 by
    default) fit in it, so a device encodes and sends its next frames while the server merges
    the last; a credit of one frame would make each frame wait a round trip.

    ``checkpoint``: a file the union is restored from at ``start`` if it exists, and
    written to every ``checkpoint_every`` and at ``close`` (``docs/checkpoint.md``);
    ``final_cti`` (the output ends with a CTI at +inf) is then False unless given.

    Once started: ``union`` (the ``Union``), ``output`` (its one subscriber, the
    ``ServerOutput`` every subscriber joins), ``admission`` (tokens and connection slots).
    """

    def __init__(self, policy: Any, *, tokens: Iterable[str], idle_timeout: DurationLike = 30.0,
                 max_frame: int = DEFAULT_MAX_FRAME, max_connections: int = 1024,
                 max_streams: int = 16, prefetch: int = 4096, max_buffered: int = 65_536,
                 output_capacity: int = 4096, out_dir: str | None = None,
                 part_events: int = 100_000, part_seconds: DurationLike | None = 60.0,
                 final_cti: bool | None = None, setup_timeout: DurationLike = 5.0,
                 max_pending: int = 256,
                 outbox_bytes: int = 256 * 1024, min_credit: int = 1,
                 max_drift: DurationLike | None = None,
                 idle_after: DurationLike | None = None,
                 checkpoint: str | os.PathLike | None = None,
                 checkpoint_every: DurationLike | None = None, name: str = "server") -> None:
        idle_timeout = to_seconds(idle_timeout, what=f"{name}: idle_timeout")
        setup_timeout = to_seconds(setup_timeout, what=f"{name}: setup_timeout")
        if part_seconds is not None:
            part_seconds = to_seconds(part_seconds, what=f"{name}: part_seconds")
        if checkpoint_every is not None:
            checkpoint_every = to_seconds(checkpoint_every, what=f"{name}: checkpoint_every")
        tokens = [t for t in (tokens or ()) if t]
        if not tokens or not all(isinstance(t, str) for t in tokens):
            raise InputError(f"{name}: tokens must be a non-empty list of non-empty strings; "
                             "a server without a token would accept anyone")
        if idle_timeout <= 0 or setup_timeout <= 0 or max_frame < MAX_SETUP_FRAME \
                or max_connections < 1 or max_streams < 1 or max_pending < 1 \
                or outbox_bytes < 1 or min_credit < 0 or output_capacity < 1:
            raise InputError(f"{name}: idle_timeout={idle_timeout}, "
                             f"setup_timeout={setup_timeout}, max_frame={max_frame}, "
                             f"max_connections={max_connections}, max_streams={max_streams}, "
                             f"max_pending={max_pending}, outbox_bytes={outbox_bytes}, "
                             f"output_capacity={output_capacity}, "
                             f"min_credit={min_credit}; expected the timeouts > 0, max_frame "
                             f">= {MAX_SETUP_FRAME}, min_credit >= 0 and the others >= 1")
        # Devices may send edge events: the union decides them as TS §7 says, under the
        # policy given (which is returned as it is if it decides edges already).
        self.policy = with_edges(policy)
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
        # with a checkpoint, time continues at the next start: no CTI at +inf by default
        self.final_cti = checkpoint is None if final_cti is None else final_cti
        self.setup_timeout = float(setup_timeout)
        self.max_pending = max_pending
        self.outbox_bytes = outbox_bytes
        self.min_credit = min_credit
        self.max_drift = max_drift    # alignment through demand (TS §4.6): a device ahead
        self.idle_after = idle_after  # gets credit later; idleness (TS §4.7)
        self.name = name
        if checkpoint_every is not None and (checkpoint is None or not checkpoint_every > 0):
            raise InputError(f"{name}: checkpoint_every={checkpoint_every!r}; expected a "
                             "positive number of seconds, with a checkpoint file")
        self.checkpoint = None if checkpoint is None else os.fspath(checkpoint)
        self.checkpoint_every = checkpoint_every
        self.restored = False          # start() continued from the checkpoint file
        self.checkpoints = 0           # checkpoints written
        self.checkpoint_misses = 0     # times the union had no cut to offer within a second
        self._saver: asyncio.Task[None] | None = None
        self.admission = Admission(tokens, max_connections=max_connections,
                                   max_pending=max_pending, setup_timeout=self.setup_timeout)
        self.union: Union | None = None         # built by start()
        self.output: ServerOutput | None = None  # built by start()
        self.sink: RollingFileSink | None = None
        self.late_sink: RollingFileSink | None = None
        self._venue: Venue | None = None
        self._limits = Limits(max_frame, max_streams, self.idle_timeout, self.setup_timeout,
                              outbox_bytes)
        self._tally = Tally()
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._listeners: list[Any] = []
        self._total = 0
        self.ws_address: tuple[str, int] | None = None
        self.tcp_address: tuple[str, int] | None = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self, *, ws: tuple[str, int] | None = None,
                    tcp: tuple[str, int] | None = None) -> Server:
        """Build the union and listen on ``ws`` and/or ``tcp`` (port 0: an ephemeral port)."""
        if ws is None and tcp is None:
            raise InputError(f"{self.name}: nothing to listen on; expected ws=(host, port) "
                             "and/or tcp=(host, port)")
        executor = LoopExecutor(asyncio.get_running_loop())
        config: dict[str, Any] = dict(prefetch=self.prefetch, max_buffered=self.max_buffered,
                      final_cti=self.final_cti, executor=executor, min_credit=self.min_credit,
                      max_drift=self.max_drift, idle_after=self.idle_after, name=self.name)
        if self.checkpoint is not None and os.path.exists(self.checkpoint):
            with open(self.checkpoint, "rb") as f:
                data = f.read()
            # TS §8.1: devices re-attach by name as they publish again (union.add)
            union = self.union = Union.restore(data, policy=self.policy, **config)
            self.restored = True
        else:
            union = self.union = Union(self.policy, **config)
        output = self.output = ServerOutput(self.output_capacity, executor=executor,
                                            name=self.name)
        assert output.batch is not None
        union.batches(output.batch).subscribe(output)
        self._venue = Venue(self.admission, union, output, self._forget)
        if self.out_dir is not None:
            self.sink = RollingFileSink(self.out_dir, prefix="events",
                                        max_events=self.part_events,
                                        max_seconds=self.part_seconds)
            output.elements().subscribe(self.sink)
            self.late_sink = RollingFileSink(self.out_dir, prefix="late",
                                             max_events=self.part_events,
                                             max_seconds=self.part_seconds)
            union.late.subscribe(self.late_sink)
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
        if self.checkpoint_every is not None:
            self._saver = asyncio.create_task(self._save_every(self.checkpoint_every))
        return self

    # ---------------------------------------------------------------- checkpoints
    async def save_checkpoint(self, timeout: float = 1.0) -> bool:
        """Write the union's checkpoint to the checkpoint file (atomically, durably). The
        union offers a cut between arrivals once what it has taken is merged: tried as the
        loop turns for up to ``timeout`` s; False (counted in ``checkpoint_misses``, the file
        left as it was) if it had none."""
        union = self.union
        if self.checkpoint is None or union is None:
            raise ClosedError(f"{self.name}: no checkpoint file, or not started")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                data = union.checkpoint()
                break
            except CheckpointError:
                if loop.time() >= deadline:
                    self.checkpoint_misses += 1
                    return False
                await asyncio.sleep(0.002)
        await asyncio.to_thread(write_atomic, self.checkpoint, data)
        self.checkpoints += 1
        return True

    async def _save_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            await self.save_checkpoint()

    @property
    def ws_url(self) -> str | None:
        return None if self.ws_address is None else \
            f"ws://{self.ws_address[0]}:{self.ws_address[1]}"

    @property
    def tcp_url(self) -> str | None:
        return None if self.tcp_address is None else \
            f"tcp://{self.tcp_address[0]}:{self.tcp_address[1]}"

    def subscribe(self, subscriber: Any) -> None:
        """Subscribe locally to the merged output, one event at a time (shared with remote
        subscribers; signals come on the server's loop). Any thread."""
        check_subscriber(subscriber)  # RS §1.9
        if self.output is None:
            raise ClosedError(f"{self.name}: not started; call await start(...) first")
        self.output.elements().subscribe(subscriber)

    async def close(self, timeout: float = 10.0) -> bool:
        """Stop listening, remove every device input (``cancel`` frames), close the union and
        wait (up to ``timeout`` s) until its output has ended — every subscriber told, every
        file part published — then close the connections.

        Returns True if the output ended in order within ``timeout``. Otherwise remote
        subscribers still behind are cut off, the local outputs get one more second to end,
        and False is returned. Either way it returns within ``timeout`` + 3 s.
        """
        if self.admission.closing:
            return True
        self.admission.closing = True
        for listener in self._listeners:
            if isinstance(listener, asyncio.Server):
                listener.close()
            else:  # websockets: stop accepting, but let the connections end in order
                listener.close(close_connections=False)
        for stream in self._streams(DeviceStream):
            if stream.handle is not None:
                stream.handle.remove()
        ended = True
        if self._saver is not None:
            self._saver.cancel()
            await asyncio.gather(self._saver, return_exceptions=True)
        if self.checkpoint is not None and self.union is not None:
            # TS §8.1: once the devices' leaves are merged, before the union closes
            await self.save_checkpoint(timeout)
        if self.union is not None:
            self.union.close()
            ended = await bounded(self._until(self._output_ended), timeout)
            if not ended:
                for stream in self._streams(OutputStream):
                    stream.conn.transport.abort()  # its read loop ends, its streams leave
                await bounded(self._until(self._output_ended), 1.0)
        connections = list(self._connections)
        if connections:  # together: the bound does not grow with the number of connections
            await asyncio.gather(*(bounded(conn.transport.close(1001, "server closing"), 1.0)
                                   for conn in connections))
        for conn in connections:
            conn.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        await asyncio.gather(*(bounded(listener.wait_closed(), 1.0)
                               for listener in self._listeners))
        return ended

    def _streams(self, kind: type) -> list[Any]:
        """The open streams of that class, over every connection."""
        return [stream for conn in list(self._connections)
                for stream in list(conn.streams.values()) if isinstance(stream, kind)]

    def _output_ended(self) -> bool:
        """The union is done, and every member of its output has taken all and ended (a
        subscribe stream: sent all it held, and ``complete``)."""
        union, output = self.union, self.output
        return union is not None and output is not None and union.stats().done \
            and output.stats().subscribers == 0 and not self._streams(OutputStream)

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
        venue = self._venue
        assert venue is not None, "listening starts once the union and output are built"
        now = asyncio.get_running_loop().time()
        refusal = self.admission.refusal(now)
        if refusal is not None:
            message, reason = refusal
            self._tally.error("too_many")
            transport.write(encode_error(0, "too_many", message))
            await bounded(transport.close(1013, reason), 1.0)
            transport.abort()
            return
        conn = Connection(transport, self._limits, self._tally)
        self.admission.arrived(conn, now)
        self._connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await Session(conn, venue).run()
        finally:
            if task is not None:
                self._tasks.discard(task)

    def _forget(self, conn: Connection) -> None:
        known = conn in self._connections
        self._connections.discard(conn)
        self.admission.left(conn, known and conn.authenticated)
        if known:
            self._tally.closed(conn)

    # ---------------------------------------------------------------- stats
    def stats(self) -> ServerStats:
        conns = tuple(c.stats() for c in list(self._connections))
        tally = self._tally
        admission = self.admission
        output = self.output
        out = output.stats() if output is not None else None
        return ServerStats(
            connections=conns, connections_total=self._total,
            connections_refused=admission.refused, auth_failures=admission.auth_failures,
            protocol_errors=tuple(sorted(tally.errors.items())),
            disconnects=tally.disconnects,
            events_received=tally.events_in + sum(c.events_in for c in conns),
            events_refused=tally.refused + sum(c.refused for c in conns),
            events_sent=tally.events_out + sum(c.events_out for c in conns),
            output_events=output.events if output is not None else 0,
            output_ctis=output.ctis if output is not None else 0,
            max_connections=self.max_connections, max_streams=self.max_streams,
            max_frame=self.max_frame,
            union=self.union.stats() if self.union is not None else None,
            output_buffered=out.buffered if out is not None else 0,
            output_peak=out.peak if out is not None else 0,
            output_capacity=self.output_capacity,
            files=self.sink.stats() if self.sink is not None else None,
            pending=len(admission.pending), max_pending=self.max_pending,
            setup_evictions=admission.evictions, outbox_bytes=self.outbox_bytes,
            checkpoints=self.checkpoints, checkpoint_misses=self.checkpoint_misses)

    def __repr__(self) -> str:
        return f"Server({self.policy!r}, ws={self.ws_url}, tcp={self.tcp_url})"
