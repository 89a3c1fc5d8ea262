"""Helpers for the network tests: real sockets on 127.0.0.1 (ephemeral ports), every test
bounded in time, waits on conditions (never a sleep to let things happen)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from engine.event import POINT, Event
from goldilocks.net.protocol import (
    LENGTH,
    decode_frame,
    encode_request,
    encode_setup,
    encode_subscribe,
)
from goldilocks.net.server import Server
from goldilocks.net.transport import open_transport

HOST = "127.0.0.1"
TOKEN = "test-token-7f3a9c"


def run(coro: Any, timeout: float = 15.0) -> Any:
    """Run ``coro`` on a fresh loop, failing (not hanging) after ``timeout`` seconds."""
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


async def until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Wait, turning the loop, until ``predicate()`` holds; fail after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {what or predicate}")
        await asyncio.sleep(0.002)


async def start_server(policy: Any, **options: Any) -> Server:
    options.setdefault("tokens", [TOKEN])
    options.setdefault("idle_timeout", 5.0)
    return await Server(policy, **options).start(ws=(HOST, 0), tcp=(HOST, 0))


def url_of(server: Server, transport: str) -> str:
    return server.ws_url if transport == "ws" else server.tcp_url


class Raw:
    """A hand-driven connection: send any bytes as a frame, read frames back."""

    def __init__(self, transport: Any) -> None:
        self.t = transport

    @classmethod
    async def open(cls, url: str, *, token: str | None = TOKEN, setup: bool = True,
                   max_frame: int = 1 << 22) -> Raw:
        raw = cls(await open_transport(url, max_frame=max_frame))
        if setup:
            raw.send(encode_setup(token))
            ok = await raw.recv()
            assert ok.type == "ok", ok
        return raw

    def send(self, data: bytes) -> None:
        self.t.write(data)

    async def recv(self, timeout: float = 5.0) -> Any:
        return decode_frame(await asyncio.wait_for(self.t.recv(), timeout), 1 << 22)

    async def recv_until(self, ftype: str, timeout: float = 5.0) -> Any:
        while True:
            frame = await self.recv(timeout)
            if frame.type == ftype:
                return frame

    async def closed(self, timeout: float = 5.0) -> list:
        """Read until the server closes the connection; return the frames seen."""
        from goldilocks.net.transport import ConnectionClosed

        frames = []
        try:
            while True:
                frames.append(await self.recv(timeout))
        except ConnectionClosed:
            return frames

    async def close(self) -> None:
        await self.t.close()
        self.t.abort()


def points(times: list[int], payload: Any = None) -> list[Event]:
    return [Event.point(t, payload) for t in times]


class LazyPoints:
    """``count`` points made as they are asked for, so a device holds none in advance."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self):
        return (Event(POINT, t, t + 1, t, None) for t in range(self.count))


async def deaf_subscriber(address: tuple[str, int]) -> asyncio.StreamWriter:
    """A TCP subscriber written by hand: it sets up, asks for 10^9 events and reads nothing
    more (with a small receive buffer, so the kernel holds little for it). Returns its
    writer: frames may still be sent on it (keepalives), and closing it ends it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address)
    reader, writer = await asyncio.open_connection(sock=sock)
    setup = encode_setup(TOKEN)
    writer.write(LENGTH.pack(len(setup)) + setup)
    (size,) = LENGTH.unpack(await reader.readexactly(4))
    assert decode_frame(await reader.readexactly(size)).type == "ok"
    for frame in (encode_subscribe(1), encode_request(1, 10**9)):
        writer.write(LENGTH.pack(len(frame)) + frame)
    return writer


def input_of(server: Server, name: str) -> Any:
    """The union's stats for input ``name``, or None before it joined."""
    for stats in server.stats().union.inputs:
        if stats.name == name:
            return stats
    return None
