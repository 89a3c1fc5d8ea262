"""A device written from docs/protocol.md alone — plain TCP, JSON frames, no code of this
project — that keeps the promise "each event exactly once" through restarts of the server:
it numbers its events, resends from the position the server acknowledges, forgets what
``durable`` frames cover, and reconnects when the connection is lost (section "Exactly
once": the device's side)."""

from __future__ import annotations

import asyncio
import json
import random
import struct
from collections import deque
from typing import Any

LENGTH = struct.Struct(">I")


class DocDevice:
    """Publishes ``total`` events — a point with payload ``{"d": name, "i": i}`` every
    millisecond of its clock from ``base``, and a CTI after every 100th — at ``rate``
    events per second, over TCP to ``port`` of 127.0.0.1."""

    def __init__(self, name: str, port: int, token: str, total: int, base: int,
                 rate: float = 1000.0, reconnect: float = 60.0) -> None:
        self.name = name
        self.port = port
        self.token = token
        self.total = total
        self.base = base
        self.rate = rate
        self.reconnect = reconnect
        self.rows: list[list[Any]] = []       # every event made, by its number
        self.made = 0                         # points made (payload i)
        self.kept: deque[int] = deque()       # numbers not yet durable (the rows kept)
        self.durable = 0
        self.connections = 0
        self.resent = 0
        self.errors: list[dict[str, Any]] = []

    def _make(self, n: int) -> None:
        """The next ``n`` points (and the CTIs after every 100th) into ``rows``."""
        for _ in range(n):
            if self.made >= self.total:
                return
            t = self.base + self.made * 1_000_000
            self.rows.append(["point", t, None, {"d": self.name, "i": self.made}])
            self.made += 1
            if self.made % 100 == 0:
                self.rows.append(["cti", t, None, None])

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = None
        wait = 0.05
        while True:
            try:
                await self._session(loop)
                return
            except (ConnectionError, asyncio.IncompleteReadError, OSError) as err:
                if deadline is None:
                    deadline = loop.time() + self.reconnect
                if loop.time() > deadline:
                    raise AssertionError(f"{self.name}: gave up reconnecting: {err}") from err
                await asyncio.sleep(wait * (0.5 + random.random()))
                wait = min(wait * 2, 2.0)
                continue
            finally:
                pass

    async def _session(self, loop: asyncio.AbstractEventLoop) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)

        def send(frame: dict[str, Any]) -> None:
            data = json.dumps(frame, separators=(",", ":")).encode()
            writer.write(LENGTH.pack(len(data)) + data)

        async def recv() -> dict[str, Any]:
            (size,) = LENGTH.unpack(await reader.readexactly(4))
            return json.loads(await reader.readexactly(size))

        try:
            send({"type": "setup", "version": 2, "token": self.token})
            ok = await recv()
            assert ok["type"] == "ok" and ok["version"] == 2, ok
            self.connections += 1
            send({"type": "publish", "stream": 1, "device": self.name})
            ack = await recv()
            while ack["type"] != "request":  # (nothing else comes first on a new stream)
                assert ack["type"] == "keepalive", ack
                ack = await recv()
            position = ack["position"]
            credit = ack["n"]
            # the server has events 0 .. position-1: forget them, resend from position
            if position < self.durable or position > len(self.rows):
                raise AssertionError(f"{self.name}: acknowledged at {position}, durable "
                                     f"{self.durable}, made {len(self.rows)}")
            self.resent += len(self.rows) - position
            self.durable = max(self.durable, position)
            sent_to = position
            completed = False
            state = {"credit": credit, "durable": self.durable, "closed": False}

            async def read() -> None:
                try:
                    while True:
                        frame = await recv()
                        if frame["type"] == "request":
                            state["credit"] += frame["n"]
                        elif frame["type"] == "durable":
                            state["durable"] = max(state["durable"], frame["position"])
                        elif frame["type"] == "error":
                            self.errors.append(frame)
                            state["closed"] = True
                            return
                except (asyncio.IncompleteReadError, ConnectionError, OSError):
                    state["closed"] = True

            reading = loop.create_task(read())
            began = loop.time()
            made_at_start = self.made
            try:
                while True:
                    if state["closed"]:
                        raise ConnectionError("connection lost")
                    self.durable = state["durable"]
                    # make events at the device's rate
                    due = made_at_start + int((loop.time() - began) * self.rate)
                    if due > self.made:
                        self._make(due - self.made)
                    # send what credit allows, numbered by "from"
                    n = min(state["credit"], len(self.rows) - sent_to, 1024)
                    if n > 0:
                        send({"type": "next", "stream": 1, "from": sent_to,
                              "events": self.rows[sent_to:sent_to + n]})
                        sent_to += n
                        state["credit"] -= n
                        await writer.drain()
                    if self.made >= self.total and sent_to == len(self.rows):
                        if not completed:
                            send({"type": "complete", "stream": 1})
                            completed = True
                        if self.durable >= len(self.rows):
                            return  # every event durable: done
                    await asyncio.sleep(0.01)
            finally:
                reading.cancel()
        finally:
            writer.close()
