"""``Server``: a ``Union`` behind the wire protocol, over WebSocket and TCP (``docs/protocol.md``).

::

    server = Server(goldilocks("5m"), tokens=["s3cret"], out_dir="out/",
                    checkpoint="serve.ckpt", checkpoint_every=1.0)
    await server.start(ws=("127.0.0.1", 8765), tcp=("127.0.0.1", 8766))
    ...                                     # devices publish, subscribers subscribe
    await server.close()                    # inputs removed, files published, checkpoint

Each published device stream becomes a union input named after the device, whose credit is
the union's demand (``devices``). The union's one subscriber is the server's output
(``output``): it writes the files first, then shares the merged stream with remote
subscribers (``subscribe`` streams, paced by their ``request`` frames) and local ones
(``Server.subscribe``), none of whom can hold the union back: one that falls more than
``subscriber_lag`` events behind is cut off, and may come back from its position. Who gets in
is the admission's business (``admission``: tokens, slots for connections set up and in
setup); each connection's read loop is a ``session``, its state and counters a
``connection``. The files, the devices' positions and the checkpoint are ``durability``'s:
every ``checkpoint_every`` a commit makes a cut durable and tells each device how much of what
it sent is (``durable`` frames). Everything runs on one asyncio loop; the union's merge runs
on it too (``LoopExecutor``).

Bounds (all in ``stats()``): ``max_connections`` set up, and ``max_pending`` in setup
(``setup_timeout`` each, a setup frame of at most ``MAX_SETUP_FRAME`` bytes); ``max_streams``
active per connection; ``max_frame`` bytes per frame; per-input credit (the union's
``prefetch``, shared fairly within its ``max_buffered``, at least ``min_credit`` each); the
subscribers' lag, ``subscriber_lag`` events; each connection's outgoing queue,
``outbox_bytes`` (and one frame more); the positions of ``keep_positions`` devices not
publishing. An event that could not be written again (nested over ``MAX_DEPTH``, or too large
for an output frame) is refused on input, alone. Memory is O(connections × (streams +
``outbox_bytes`` + ``max_frame``) + the union's bounds + ``subscriber_lag`` +
``keep_positions``); a closed connection leaves only counters. docs/protocol.md, "Bounds",
gives the figures.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from collections.abc import Callable, Mapping

from engine.errors import ClosedError, InputError
from engine.executors import LoopExecutor
from engine.sinks import PublisherBase
from engine.subscription import check_subscriber
from engine.times import DurationLike, to_seconds
from goldilocks.net.admission import Admission
from goldilocks.net.connection import Connection, ConnectionStats, Limits, Tally, bounded
from goldilocks.net.devices import DeviceStream
from goldilocks.net.durability import TICK, Durability
from goldilocks.net.ledger import DEFAULT_KEEP
from goldilocks.net.output import OutputStream, ServerOutput
from goldilocks.net.protocol import DEFAULT_MAX_FRAME, MAX_SETUP_FRAME, encode_error
from goldilocks.net.session import Session, Venue
from goldilocks.net.transport import WS_LOGGER, TcpTransport, Transport, WebSocketTransport
from goldilocks.outputs import unusable_directory
from goldilocks.parts import PartStats
from operators.edges import with_edges
from operators.union import Union, UnionStats

__all__ = ["Server", "ServerStats", "StartError", "READER_LIMIT", "DEFAULT_SUBSCRIBER_LAG",
           "DEFAULT_CHECKPOINT_EVERY"]

_log = logging.getLogger("goldilocks.net")

#: The TCP stream reader's limit: it stops reading from the socket while it holds more than
#: twice this (before setup, too: a connection can pin no more than that and one read).
READER_LIMIT = 64 * 1024
#: How far (events) a subscriber may fall behind the merged stream before it is cut off.
DEFAULT_SUBSCRIBER_LAG = 65_536
#: Seconds between checkpoints when a checkpoint file is given without an interval.
DEFAULT_CHECKPOINT_EVERY = 30.0


class StartError(InputError):
    """``Server.start`` could not take what it was given: ``what`` is ``"ws"`` or ``"tcp"``
    (an address it cannot listen on) or ``"out_dir"``; ``target`` the address or directory;
    ``reason`` why, and what was expected."""

    def __init__(self, what: str, target: str, reason: str) -> None:
        label = {"ws": "WebSocket address", "tcp": "TCP address"}.get(what, what)
        super().__init__(f"{label} {target}: {reason}")
        self.what = what
        self.target = target
        self.reason = reason


def _bind_failure(err: OSError) -> str:
    """Why an address could not be bound, and what was expected, in one line."""
    code = err.errno
    if code == errno.EADDRINUSE:
        return ("address already in use (another server listens there?); expected a free "
                "port, or port 0 for any free port")
    if code == errno.EACCES:
        return ("permission denied; expected a port this user may open (1024 or above, "
                "unless privileged)")
    if code == errno.EADDRNOTAVAIL:
        return "not an address of this machine; expected one of its own, or 0.0.0.0"
    why = os.strerror(code) if code else str(err)
    return f"cannot listen there: {why}; expected an address this machine can listen on"


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
    output_buffered: int       # events kept for subscribers behind, their peak and ...
    output_peak: int
    subscriber_lag: int        # ... the bound: a subscriber further behind is cut off
    files: PartStats | None    # the event parts' writer's stats, with an out-dir
    pending: int = 0           # connections in setup (not yet authenticated) ...
    max_pending: int = 0       # ... and their bound; the oldest is let go for a new one
    setup_evictions: int = 0   # connections in setup let go for a newer one
    outbox_bytes: int = 0      # the bound on each connection's outgoing queue (bytes)
    checkpoints: int = 0       # checkpoints written (TS §8.1) ...
    checkpoint_misses: int = 0  # ... and commits that could not be made (no cut in time)
    subscribers_cut: int = 0   # subscribers cut off for falling behind (too_slow)
    position: int = 0          # the merged stream's position (the next event's seq) ...
    durable_position: int = 0  # ... and how far of it is durable
    duplicates: int = 0        # events devices sent again that the server had (skipped)
    devices: int = 0           # devices whose positions are kept ...
    keep_positions: int = 0    # ... at most this many besides those publishing
    late_files: PartStats | None = None  # the late parts' writer's stats, with an out-dir

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
    ``max_buffered`` are the union's credit bounds. ``prefetch`` is each device's credit:
    several of the client's frames (``batch``, 1024 by default) fit in it, so a device
    encodes and sends its next frames while the server merges the last; a credit of one frame
    would make each frame wait a round trip. ``subscriber_lag``: how many events a subscriber
    may fall behind the merged stream before it is cut off (``too_slow``); subscribers never
    slow the union, the devices or the files.

    ``checkpoint``: a file the union is restored from at ``start`` if it exists, and
    written to every ``checkpoint_every`` (30 s by default) and at ``close``
    (``docs/checkpoint.md``); ``final_cti`` (the output ends with a CTI at +inf) is then
    False unless given. Each checkpoint names the parts of ``out_dir`` it covers, which are
    published only then, and the devices' positions, which devices are told are durable.
    ``keep_positions``: positions kept of devices not publishing (the most recent).

    Once started: ``union`` (the ``Union``), ``output`` (its one subscriber, the
    ``ServerOutput`` every subscriber joins), ``admission`` (tokens and connection slots),
    ``ledger`` (the devices' positions: ``ledger.listen(callback)`` is told, after each
    checkpoint, the positions that became durable), ``durability``.
    """

    def __init__(self, policy: Any, *, tokens: Iterable[str], idle_timeout: DurationLike = 30.0,
                 max_frame: int = DEFAULT_MAX_FRAME, max_connections: int = 1024,
                 max_streams: int = 16, prefetch: int = 4096, max_buffered: int = 65_536,
                 subscriber_lag: int = DEFAULT_SUBSCRIBER_LAG, out_dir: str | None = None,
                 part_events: int = 100_000, part_seconds: DurationLike | None = 60.0,
                 final_cti: bool | None = None, setup_timeout: DurationLike = 5.0,
                 max_pending: int = 256,
                 outbox_bytes: int = 256 * 1024, min_credit: int = 1,
                 max_drift: DurationLike | None = None,
                 idle_after: DurationLike | None = None,
                 checkpoint: str | os.PathLike | None = None,
                 checkpoint_every: DurationLike | None = None,
                 keep_positions: int = DEFAULT_KEEP, name: str = "server") -> None:
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
                or outbox_bytes < 1 or min_credit < 0 or subscriber_lag < 1 \
                or keep_positions < 0:
            raise InputError(f"{name}: idle_timeout={idle_timeout}, "
                             f"setup_timeout={setup_timeout}, max_frame={max_frame}, "
                             f"max_connections={max_connections}, max_streams={max_streams}, "
                             f"max_pending={max_pending}, outbox_bytes={outbox_bytes}, "
                             f"subscriber_lag={subscriber_lag}, "
                             f"keep_positions={keep_positions}, "
                             f"min_credit={min_credit}; expected the timeouts > 0, max_frame "
                             f">= {MAX_SETUP_FRAME}, min_credit and keep_positions >= 0 and "
                             "the others >= 1")
        # Devices may send edge events: the union decides them as TS §7 says, under the
        # policy given (which is returned as it is if it decides edges already).
        self.policy = with_edges(policy)
        self.idle_timeout = float(idle_timeout)
        self.max_frame = max_frame
        self.max_connections = max_connections
        self.max_streams = max_streams
        self.prefetch = prefetch
        self.max_buffered = max_buffered
        self.subscriber_lag = subscriber_lag
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
        self.keep_positions = keep_positions
        self.name = name
        if checkpoint_every is not None and (checkpoint is None or not checkpoint_every > 0):
            raise InputError(f"{name}: checkpoint_every={checkpoint_every!r}; expected a "
                             "positive number of seconds, with a checkpoint file")
        self.checkpoint = None if checkpoint is None else os.fspath(checkpoint)
        if self.checkpoint is not None and checkpoint_every is None:
            checkpoint_every = DEFAULT_CHECKPOINT_EVERY
        self.checkpoint_every = checkpoint_every
        self.durability = Durability(name=name, out_dir=out_dir, checkpoint=self.checkpoint,
                                     part_events=part_events, part_seconds=part_seconds,
                                     keep_positions=keep_positions)
        self.ledger = self.durability.ledger
        self.restored = False          # start() continued from the checkpoint file
        self._committer: asyncio.Task[None] | None = None
        self.admission = Admission(tokens, max_connections=max_connections,
                                   max_pending=max_pending, setup_timeout=self.setup_timeout)
        self.union: Union | None = None         # built by start()
        self.output: ServerOutput | None = None  # built by start()
        self._venue: Venue | None = None
        self._ending: list[DeviceStream] = []  # ended by their device, last durable to come
        self._limits = Limits(max_frame, max_streams, self.idle_timeout, self.setup_timeout,
                              outbox_bytes)
        self._tally = Tally()
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._listeners: list[Any] = []
        self._total = 0
        self.ws_address: tuple[str, int] | None = None
        self.tcp_address: tuple[str, int] | None = None

    @property
    def checkpoints(self) -> int:
        """Checkpoints written."""
        return self.durability.checkpoints

    @property
    def checkpoint_misses(self) -> int:
        """Commits that could not be made (no cut within a second, a write error)."""
        return self.durability.misses

    # ---------------------------------------------------------------- lifecycle
    async def start(self, *, ws: tuple[str, int] | None = None,
                    tcp: tuple[str, int] | None = None) -> Server:
        """Build the union (restored from the checkpoint, if there is one: its out-dir
        checked first, ``CheckpointError`` otherwise, nothing touched) and listen on ``ws``
        and/or ``tcp`` (port 0: an ephemeral port).

        The addresses are bound first: one that cannot be (in use, not this machine's, a
        port this user may not open) raises ``StartError`` naming it before anything else is
        touched, and so does an ``out_dir`` that cannot be created or written."""
        if ws is None and tcp is None:
            raise InputError(f"{self.name}: nothing to listen on; expected ws=(host, port) "
                             "and/or tcp=(host, port)")
        # Bound, not yet serving: a connection is taken only once the union is built.
        if ws is not None:
            from websockets.asyncio.server import serve

            # Until setup succeeds a message may be at most 2 × MAX_SETUP_FRAME (the
            # library's limit, raised per connection after setup) and the handshake must
            # end within setup_timeout.
            await self._listen("ws", ws, lambda: serve(
                self._on_websocket, ws[0], ws[1], max_size=2 * MAX_SETUP_FRAME,
                compression=None, ping_interval=None, max_queue=4, logger=WS_LOGGER,
                open_timeout=self.setup_timeout, start_serving=False))
        if tcp is not None:
            await self._listen("tcp", tcp, lambda: asyncio.start_server(
                self._on_tcp, tcp[0], tcp[1], limit=READER_LIMIT, start_serving=False))
        try:
            self._build()
        except BaseException:
            await self._unlisten()
            raise
        for listener in self._listeners:
            await listener.start_serving()
        every = self.checkpoint_every if self.checkpoint is not None else TICK
        assert every is not None
        self._committer = asyncio.create_task(self._commit_every(every))
        return self

    async def _listen(self, kind: str, address: tuple[str, int], bind: Any) -> None:
        """Bind ``address`` (not serving yet); ``StartError`` naming it if it cannot be."""
        try:
            listener = await bind()
        except OSError as err:
            await self._unlisten()
            raise StartError(kind, f"{address[0]}:{address[1]}", _bind_failure(err)) \
                from err
        self._listeners.append(listener)
        name = listener.sockets[0].getsockname()[:2]
        if kind == "ws":
            self.ws_address = name
        else:
            self.tcp_address = name

    async def _unlisten(self) -> None:
        for listener in self._listeners:
            listener.close()
        await asyncio.gather(*(bounded(listener.wait_closed(), 1.0)
                               for listener in self._listeners))
        self._listeners.clear()
        self.ws_address = self.tcp_address = None

    def _build(self) -> None:
        """The union (restored, if there is a checkpoint), the writers and the output."""
        if self.out_dir is not None:
            why = unusable_directory(self.out_dir)
            if why is not None:
                raise StartError("out_dir", self.out_dir, why)
        executor = LoopExecutor(asyncio.get_running_loop())
        config: dict[str, Any] = dict(prefetch=self.prefetch, max_buffered=self.max_buffered,
                      final_cti=self.final_cti, executor=executor, min_credit=self.min_credit,
                      max_drift=self.max_drift, idle_after=self.idle_after, name=self.name)
        durability = self.durability
        union = self.union = durability.start(self.policy, config)
        self.restored = durability.restored
        output = self.output = ServerOutput(self.subscriber_lag, executor=executor,
                                            name=self.name, writer=durability.events,
                                            position=durability.position)
        durability.output_position = lambda: output.position
        assert output.batch is not None
        union.batches(output.batch).subscribe(output)
        self._venue = Venue(self.admission, union, output, self._forget, self.ledger,
                            self._ending)

    # ---------------------------------------------------------------- checkpoints
    async def save_checkpoint(self, timeout: float = 1.0) -> bool:
        """Commit now: write the union's checkpoint (atomically, durably), with the parts
        and positions it covers, publish the parts, tell the devices. The union offers a cut
        between arrivals once what it has taken is merged: tried as the loop turns for up to
        ``timeout`` s; False (counted in ``checkpoint_misses``, the file left as it was) if
        it had none."""
        if self.checkpoint is None or self.union is None:
            raise ClosedError(f"{self.name}: no checkpoint file, or not started")
        return await self.commit(timeout)

    async def commit(self, timeout: float = 1.0) -> bool:
        """A commit (``durability``): with a checkpoint file, ``save_checkpoint``; without
        one, the outputs flushed and the positions of what is merged raised. Then the
        subscribers and the devices are told what is durable."""
        record = await self.durability.commit(timeout)
        if record is None:
            return False
        position = self.durability.durable_position
        for stream in self._streams(OutputStream):
            stream.on_durable(position)
        self._ending[:] = [s for s in self._ending if not s.ended_durable()]
        return True

    async def _commit_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            # Shielded: cancelled at shutdown, a commit under way still ends (its checkpoint
            # write runs in a thread), and the last commit waits for it, so no older
            # checkpoint is ever renamed over a newer one.
            await asyncio.shield(self.commit())

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
        subscribers; signals come on the server's loop). Any thread. A subscriber more than
        ``subscriber_lag`` events behind gets ``on_error(TooSlowError)``."""
        check_subscriber(subscriber)  # RS §1.9
        if self.output is None:
            raise ClosedError(f"{self.name}: not started; call await start(...) first")
        self.output.elements().subscribe(subscriber)

    def on_durable(self, callback: Callable[[Mapping[str, int]], None]) -> Callable[[], None]:
        """Call ``callback({device: position})`` with the positions that became durable,
        after each checkpoint (without one, as the outputs take what is merged): how a way
        in acknowledges what its devices sent. Returns the function that stops it."""
        return self.ledger.listen(callback)

    async def close(self, timeout: float = 10.0) -> bool:
        """Stop listening and end every device stream, then end the output in order — every
        subscriber told, every file part published — and close the connections.

        Without a checkpoint: the device inputs are removed (``cancel`` frames), the union
        closes, and the output ends with it. With one: the device inputs are removed (a
        protocol-2 device is told ``closing`` and comes back from its position), restored
        inputs no device re-attached are completed, keeping their positions, and once their
        leaves are merged the last checkpoint is written — the union is not closed: time
        continues at the next start — and publishes the last parts.

        Returns True if the output ended in order within ``timeout``. Otherwise remote
        subscribers still behind are cut off, the local outputs get one more second to end,
        and False is returned. Either way it returns within ``timeout`` + 3 s.
        """
        if self.admission.closing:
            return True
        self.admission.closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for listener in self._listeners:
            if isinstance(listener, asyncio.Server):
                listener.close()
            else:  # websockets: stop accepting, but let the connections end in order
                listener.close(close_connections=False)
        for stream in self._streams(DeviceStream):
            stream.closing = True
            if stream.handle is not None:
                stream.handle.remove()
        ended = True
        if self._committer is not None:
            self._committer.cancel()
            await asyncio.gather(self._committer, return_exceptions=True)
        union, output = self.union, self.output
        if union is not None and output is not None:
            if self.checkpoint is not None:
                for name in union.detached():  # they keep their positions (the ledger)
                    union.open_input(name).complete()
                self.durability.close_parts()
                ended = await self.commit(max(0.1, deadline - loop.time()))
                output.end()
            else:
                union.close()
                ended = await bounded(self._until(self._union_done), deadline - loop.time())
                self.durability.finish()
            if await bounded(self._until(self._output_ended), deadline - loop.time()):
                if self.checkpoint is None:
                    await self.commit()  # the last durable frames: all is merged now
            else:
                ended = False
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

    def _union_done(self) -> bool:
        union = self.union
        return union is not None and union.stats().done

    def _output_ended(self) -> bool:
        """The output has ended, and every member of it has taken all and ended (a
        subscribe stream: sent all it held, and ``complete``)."""
        output = self.output
        return output is not None and output.ended and output.stats().subscribers == 0 \
            and not self._streams(OutputStream)

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
            _log.info("refusing connection from %s: too_many (%s)", transport.peer, message,
                      extra={"event": "refused", "code": "too_many", "peer": transport.peer})
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
        durability = self.durability
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
            subscriber_lag=self.subscriber_lag,
            files=durability.events.stats() if durability.events is not None else None,
            pending=len(admission.pending), max_pending=self.max_pending,
            setup_evictions=admission.evictions, outbox_bytes=self.outbox_bytes,
            checkpoints=self.checkpoints, checkpoint_misses=self.checkpoint_misses,
            subscribers_cut=out.cut if out is not None else 0,
            position=output.position if output is not None else durability.position,
            durable_position=durability.durable_position,
            duplicates=tally.duplicates, devices=len(self.ledger),
            keep_positions=self.keep_positions,
            late_files=durability.late.stats() if durability.late is not None else None)

    def __repr__(self) -> str:
        return f"Server({self.policy!r}, ws={self.ws_url}, tcp={self.tcp_url})"
