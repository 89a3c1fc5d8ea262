"""Clients written from docs/protocol.md alone — plain sockets with the standard library's
json and struct, and the bare websockets library — against a real server on 127.0.0.1: each
sets up, publishes, gets the acknowledgement, sends within its credit, ends its stream and
then the connection cleanly. And every example frame in the page is one the codec reads."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import struct
from pathlib import Path

from operators import max_policy
from goldilocks.net.protocol import decode_events, decode_frame

from tests.net.netsupport import TOKEN, run, start_server, until

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
T0 = 1_795_334_400_000_000_000


def _tcp_device(address: tuple[str, int], device: str) -> dict:
    """Section "A session, step by step", over TCP: a 4-byte big-endian length, then JSON."""
    sock = socket.create_connection(address, timeout=10)

    def send(obj: dict) -> None:
        data = json.dumps(obj).encode()
        sock.sendall(struct.pack(">I", len(data)) + data)

    def read_exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def recv() -> dict:
        (size,) = struct.unpack(">I", read_exactly(4))
        return json.loads(read_exactly(size))

    send({"type": "setup", "version": 1, "token": TOKEN})
    ok = recv()
    assert ok["type"] == "ok" and ok["max_depth"] == 64, ok
    send({"type": "publish", "stream": 1, "device": device})
    ack = recv()  # the acknowledgement: the first request on the stream
    assert (ack["type"], ack["stream"]) == ("request", 1) and ack["n"] >= 1, ack
    count = min(ack["n"], 10)
    send({"type": "next", "stream": 1,
          "events": [["point", T0 + i, None, {"i": i}] for i in range(count)]})
    send({"type": "keepalive"})
    send({"type": "complete", "stream": 1})
    sock.shutdown(socket.SHUT_WR)  # the clean end: a half close, then read until the
    after = []                     # server closes (request frames may still come)
    try:
        while True:
            after.append(recv())
    except EOFError:
        pass
    sock.close()
    assert all(f["type"] == "request" for f in after), after
    return {"sent": count}


def _ws_device(url: str, device: str) -> dict:
    """The same over WebSocket: one frame per message; the server's are text messages."""
    from websockets.sync.client import connect

    with connect(url, compression=None) as ws:
        ws.send(json.dumps({"type": "setup", "version": 1, "token": TOKEN}))
        ok = ws.recv()
        assert isinstance(ok, str) and json.loads(ok)["type"] == "ok"
        ws.send(json.dumps({"type": "publish", "stream": 1, "device": device}).encode())
        ack = json.loads(ws.recv())  # binary messages are taken as well as text ones
        assert (ack["type"], ack["stream"]) == ("request", 1), ack
        count = min(ack["n"], 7)
        ws.send(json.dumps({"type": "next", "stream": 1, "events": [
            ["interval", T0 + i, T0 + i + 5, None] for i in range(count)]}))
        # edge events: the id is the last element ("Edge events")
        ws.send(json.dumps({"type": "next", "stream": 1, "events": [
            ["start", T0 + 1, None, {"door": "open"}, "door-1"],
            ["end", T0 + 1, T0 + 9, None, "door-1"]]}))
        ws.send(json.dumps({"type": "complete", "stream": 1}))
        ws.close(1000)  # the clean end
        assert ws.close_code == 1000
    return {"sent": count + 2}


def test_clients_written_from_the_doc_publish_get_the_ack_and_end_cleanly():
    async def scenario():
        server = await start_server(max_policy())
        loop = asyncio.get_running_loop()
        tcp = await loop.run_in_executor(None, _tcp_device, server.tcp_address, "doc-tcp")
        ws = await loop.run_in_executor(None, _ws_device, server.ws_url, "doc-ws")
        await until(lambda: not server.stats().connections)
        stats = server.stats()
        union = stats.union
        assert union.input("doc-tcp").state == union.input("doc-ws").state == "completed"
        assert union.input("doc-tcp").received == tcp["sent"] == 10
        assert union.input("doc-ws").received == ws["sent"] == 9
        assert union.edges is not None and union.edges.closed == 1
        assert stats.protocol_errors == () and stats.disconnects == 0
        assert stats.events_received == 19 and stats.events_refused == 0
        await server.close()

    run(scenario())


def test_every_example_frame_in_the_doc_is_one_the_codec_reads():
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    frames = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert len(frames) >= 10
    types = set()
    kinds = set()
    for line in frames:
        frame = decode_frame(line.replace("…", "x").encode())
        types.add(frame.type)
        if frame.type == "next":  # stream 1 publishes, stream 2 is a subscription
            events = decode_events(frame.events, "thermo-1", stream=frame.stream,
                                   with_source=frame.stream == 2)
            kinds.update(e.kind for e in events)
    assert types == {"setup", "ok", "publish", "request", "next", "complete", "subscribe",
                     "cancel", "error", "keepalive", "durable"}
    assert kinds == {"point", "cti", "start", "end"}
