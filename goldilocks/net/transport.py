"""Two transports behind one small interface: WebSocket (``websockets``) and TCP (asyncio).

A ``Transport`` moves whole frames: ``await recv() -> bytes`` (one frame; raises
``ConnectionClosed`` when the peer is gone and ``ProtocolError`` for a frame over the size
limit), ``write(frame)`` (queue one frame; never blocks, never raises), ``await drain()``
(wait until the queue is written — the transport's own backpressure), ``close()``.

On WebSocket a frame is one message (sent as a text message: it is JSON); on TCP it is a
4-byte big-endian length and the frame (``protocol.LENGTH``). Outgoing frames wait in a
queue written by one writer task, so the order of frames is the order of ``write`` calls.
``queued`` is the bytes written and not yet taken by the socket (the queue and the batch
being sent; ``queued_peak`` its peak): a writer that must bound it checks it before writing
and sets ``on_room``, called once the writer has sent a batch and ``queued`` is below
``room``. ``stall_timeout``: a peer that takes none of what is being sent for that long is
cut off (``stalled``).

``recv`` reads frames of at most ``limit`` bytes (``max_frame`` unless lowered, as the server
does until a connection's setup succeeds; ``raise_limit`` restores it).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from goldilocks.net.protocol import LENGTH, ProtocolError

__all__ = ["ConnectionClosed", "Transport", "TcpTransport", "WebSocketTransport",
           "open_transport", "parse_address", "WS_LOGGER"]


class _NoFrameDumps(logging.Filter):
    """The ``websockets`` library logs every frame's contents at DEBUG (``"< %s"``,
    ``"> %s"``); a setup frame carries the token, so those records are never emitted."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in ("< %s", "> %s")


#: The logger handed to ``websockets`` (server and client): its own messages, no frame dumps.
WS_LOGGER = logging.getLogger("goldilocks.net.websockets")
WS_LOGGER.addFilter(_NoFrameDumps())


class ConnectionClosed(Exception):
    """The connection ended (closed by either side, reset, or lost)."""


def parse_address(text: str, what: str = "address") -> tuple[str, int]:
    """``"HOST:PORT"`` → ``(host, port)``; port 0 means an ephemeral port."""
    from engine.errors import InputError

    if not isinstance(text, str) or ":" not in text:
        raise InputError(f"{what} {text!r}; expected HOST:PORT, e.g. 127.0.0.1:8765")
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise InputError(f"{what} {text!r}; expected HOST:PORT with a port from 0 to 65535")
    return host, int(port)


class Transport:
    """The common part: an outgoing queue written by one task."""

    kind = "?"

    def __init__(self) -> None:
        self._out: deque[bytes] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._writer_task: asyncio.Task[None] | None = None
        self.peak = 0
        self.frames_out = 0
        self.bytes_out = 0
        self.queued = 0           # bytes written, not yet taken by the socket
        self.queued_peak = 0
        self.on_room: Any = None  # called once queued < room after a batch is sent
        self.room = 0
        self.stall_timeout: float | None = None
        self.stalled = False
        self._sent = 0            # frames the current batch has handed to the socket
        self.peer = "?"

    @property
    def pending(self) -> int:
        return len(self._out)

    def write(self, frame: bytes) -> None:
        if self._closed:
            return
        out = self._out
        out.append(frame)
        queued = self.queued = self.queued + len(frame)
        if queued > self.queued_peak:
            self.queued_peak = queued
        if len(out) > self.peak:
            self.peak = len(out)
        if len(out) == 1:
            self._idle.clear()
            self._wake.set()
        if self._writer_task is None:
            self._writer_task = asyncio.get_running_loop().create_task(self._writer())

    async def drain(self) -> None:
        if not self._closed and not self._idle.is_set():
            await self._idle.wait()  # set by the writer once the queue is empty and written

    async def _writer(self) -> None:
        out = self._out
        try:
            while not self._closed:
                if not out:
                    self._idle.set()
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                batch = list(out)
                out.clear()
                size = sum(map(len, batch))
                if self.stall_timeout is None:
                    await self._send_all(batch)
                else:
                    await self._send_watched(batch)
                self.frames_out += len(batch)
                self.bytes_out += size
                self.queued -= size
                on_room = self.on_room
                if on_room is not None and self.queued < self.room:
                    self.on_room = None
                    on_room()
        except (ConnectionClosed, OSError, asyncio.CancelledError):
            pass
        except Exception:  # a library error on send: the connection is unusable
            pass
        finally:
            out.clear()
            self.queued = 0
            self._idle.set()

    async def _send_watched(self, batch: list[bytes]) -> None:
        """``_send_all`` that gives up when the peer takes nothing for ``stall_timeout``
        seconds: progress is a frame handed over or the socket's buffer shrinking."""
        send = asyncio.ensure_future(self._send_all(batch))
        try:
            self._sent = 0
            last = (self._sent, self._unsent())
            while True:
                done, _ = await asyncio.wait((send,), timeout=self.stall_timeout)
                if done:
                    send.result()
                    return
                now = (self._sent, self._unsent())
                if now[0] == last[0] and now[1] >= last[1]:
                    self.stalled = True
                    self.abort()
                    raise ConnectionClosed(f"the peer took nothing for {self.stall_timeout} s")
                last = now
        finally:
            if not send.done():
                send.cancel()

    def _unsent(self) -> int:
        """Bytes in the socket transport's own write buffer."""
        return 0

    async def _send_all(self, frames: list[bytes]) -> None:
        raise NotImplementedError

    async def recv(self) -> bytes:
        raise NotImplementedError

    def raise_limit(self) -> None:
        """Read frames up to ``max_frame`` from now on (after a lowered ``limit``)."""
        raise NotImplementedError

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Write what is queued (bounded by ``timeout`` of the caller), then close."""
        raise NotImplementedError

    def abort(self) -> None:
        """Close at once, dropping what is queued."""
        raise NotImplementedError


class TcpTransport(Transport):
    kind = "tcp"

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 max_frame: int, limit: int | None = None) -> None:
        super().__init__()
        self._reader = reader
        self._writer_stream = writer
        self._max = max_frame
        self.limit = max_frame if limit is None else limit
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    async def _send_all(self, frames: list[bytes]) -> None:
        w = self._writer_stream
        pack = LENGTH.pack
        w.writelines([part for f in frames for part in (pack(len(f)), f)])
        self._sent += len(frames)
        try:
            await w.drain()
        except (ConnectionError, RuntimeError) as err:
            raise ConnectionClosed(str(err)) from err

    def _unsent(self) -> int:
        transport = self._writer_stream.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    async def recv(self) -> bytes:
        try:
            head = await self._reader.readexactly(4)
            (size,) = LENGTH.unpack(head)
            if size > self.limit:
                what = "" if self.limit == self._max else " before setup"
                raise ProtocolError("oversized", f"frame of {size} bytes (by its length "
                                    f"prefix) exceeds the maximum of {self.limit} bytes{what}")
            return await self._reader.readexactly(size)
        except asyncio.IncompleteReadError as err:
            raise ConnectionClosed("connection closed by the peer") from err
        except (ConnectionError, OSError) as err:
            raise ConnectionClosed(str(err)) from err

    def raise_limit(self) -> None:
        self.limit = self._max

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self._closed:
            await self.drain()
            self._closed = True
            self._wake.set()
            w = self._writer_stream
            try:
                w.close()
                await w.wait_closed()
            except (ConnectionError, OSError):
                pass

    def abort(self) -> None:
        self._closed = True
        self._wake.set()
        transport = self._writer_stream.transport
        if transport is not None:
            transport.abort()


class WebSocketTransport(Transport):
    kind = "ws"

    def __init__(self, ws: Any, max_frame: int, limit: int | None = None) -> None:
        super().__init__()
        self._ws = ws
        self._max = max_frame
        self.limit = max_frame if limit is None else limit
        peer = getattr(ws, "remote_address", None)
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    async def _send_all(self, frames: list[bytes]) -> None:
        from websockets.exceptions import ConnectionClosed as WsClosed

        ws = self._ws
        try:
            for f in frames:
                await ws.send(f, text=True)
                self._sent += 1
        except WsClosed as err:
            raise ConnectionClosed(str(err)) from err

    def _unsent(self) -> int:
        transport = getattr(self._ws, "transport", None)
        return transport.get_write_buffer_size() if transport is not None else 0

    async def recv(self) -> bytes:
        from websockets.exceptions import ConnectionClosed as WsClosed
        from websockets.exceptions import PayloadTooBig

        try:
            data = await self._ws.recv(decode=False)
        except WsClosed as err:
            if err.rcvd is None and isinstance(err.__cause__, PayloadTooBig):
                raise ProtocolError("oversized", f"message exceeds the WebSocket limit "
                                    f"({err.__cause__})") from err
            raise ConnectionClosed(str(err)) from err
        if len(data) > self.limit:
            what = "" if self.limit == self._max else " before setup"
            raise ProtocolError("oversized", f"frame of {len(data)} bytes exceeds the "
                                f"maximum of {self.limit} bytes{what}")
        return data

    def raise_limit(self) -> None:
        """The library's own message limit too (``2 × max_frame``, so that a frame a little
        over ``max_frame`` is answered with ``oversized`` rather than close code 1009)."""
        self.limit = self._max
        protocol = getattr(self._ws, "protocol", None)
        if protocol is not None:
            if hasattr(protocol, "max_message_size"):  # websockets >= 15
                protocol.max_message_size = 2 * self._max
            else:
                protocol.max_size = 2 * self._max

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self._closed:
            await self.drain()
            self._closed = True
            self._wake.set()
            try:
                await self._ws.close(code, reason[:120])
            except Exception:
                pass

    def abort(self) -> None:
        self._closed = True
        self._wake.set()
        transport = getattr(self._ws, "transport", None)
        if transport is not None:
            transport.abort()


async def open_transport(url: str, *, max_frame: int, open_timeout: float = 10.0) -> Transport:
    """Connect to ``ws://HOST:PORT`` or ``tcp://HOST:PORT``."""
    from engine.errors import InputError

    if url.startswith("tcp://"):
        host, port = parse_address(url[6:].rstrip("/"), "url")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=max_frame + 8), open_timeout)
        return TcpTransport(reader, writer, max_frame)
    if url.startswith("ws://") or url.startswith("wss://"):
        from websockets.asyncio.client import connect

        ws = await connect(url, max_size=2 * max_frame, compression=None,
                           open_timeout=open_timeout, ping_interval=None, logger=WS_LOGGER)
        return WebSocketTransport(ws, max_frame)
    raise InputError(f"url {url!r}; expected ws://HOST:PORT or tcp://HOST:PORT")
