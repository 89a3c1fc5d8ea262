"""No subscriber holds the devices hostage: one that stops reading is cut off once it is more
than ``subscriber_lag`` events behind, told why and where, while the devices keep their rate
and the files keep every event; it then comes back from its position and gets the rest of
the merged stream exactly — from the files, as the server's memory has moved on."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from goldilocks.net import connect
from goldilocks.net.protocol import (
    LENGTH,
    decode_frame,
    encode_request,
    encode_setup,
    encode_subscribe,
)
from operators import goldilocks

from tests.net.netsupport import TOKEN, run, start_server, until
from tests.net.serveproc import read_parts
from tests.net.test_exactly_once import MS, paced


async def _subscriber(address, start=None, rcvbuf=None):
    """A subscriber over plain TCP (protocol 2): it asks for 10^9 events and reads only when
    told to. With ``rcvbuf``, its socket's receive buffer is that small."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address)
    reader, writer = await asyncio.open_connection(sock=sock)

    def send(frame: bytes) -> None:
        writer.write(LENGTH.pack(len(frame)) + frame)

    async def recv():
        (size,) = LENGTH.unpack(await reader.readexactly(4))
        return decode_frame(await reader.readexactly(size), 1 << 22)

    send(encode_setup(TOKEN))
    assert (await recv()).type == "ok"
    send(encode_subscribe(1, start))
    send(encode_request(1, 10**9))
    return writer, recv


def _row(record: dict) -> tuple:
    """A record of the files as (kind, start, source, payload), as the wire gives it."""
    kind = "point" if record["kind"] == "insert" else record["kind"]
    return kind, record["start"], record.get("source"), record.get("payload")


@pytest.mark.slow
def test_a_subscriber_that_stops_reading_is_cut_off_and_resumes_from_its_position(tmp_path):
    total, devices, lag = 3000, 2, 2000

    async def scenario():
        server = await start_server(goldilocks("1m"), out_dir=str(tmp_path), idle_timeout=30,
                                    subscriber_lag=lag, final_cti=False,
                                    outbox_bytes=16 * 1024)
        deaf, deaf_recv = await _subscriber(server.tcp_address, rcvbuf=4096)
        await until(lambda: any(c.streams for c in server.stats().connections))
        # the kernel's buffers on the server's side small too (it would grow them and take
        # the whole run): what the subscriber does not read soon holds its stream
        for conn in server._connections:
            conn.transport._writer_stream.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        base = time.time_ns() // MS * MS
        clients = [await connect(server.tcp_url, token=TOKEN) for _ in range(devices)]
        loop = asyncio.get_running_loop()
        began = loop.time()
        publications = [c.publish(paced(f"dev-{d}", total, base), device=f"dev-{d}",
                                  batch=64) for d, c in enumerate(clients)]
        for publication in publications:
            assert await publication.wait(20) == "completed"
        took = loop.time() - began
        stats = server.stats()
        assert stats.subscribers_cut == 1 and stats.errors("too_slow") == 1
        # the deaf subscriber reads now: what was sent to it, then why it was cut off
        got, error = [], None
        while error is None:
            frame = await asyncio.wait_for(deaf_recv(), 10)
            if frame.type == "next":
                assert frame.first == len(got)  # each frame says its first position
                got += frame.events
            elif frame.type == "error":
                error = frame
        assert (error.code, error.position) == ("too_slow", len(got))
        assert f"more than {lag} events behind" in error.message
        assert f"--subscriber-lag {lag}" in error.message
        # it comes back from its position: the rest, from the files and then memory
        end = server.stats().position
        assert end - error.position > lag  # it was that far behind when cut off
        back, back_recv = await _subscriber(server.tcp_address, start=error.position)
        while len(got) < end:
            frame = await asyncio.wait_for(back_recv(), 10)
            assert frame.type == "next", frame
            assert frame.first == len(got)
            got += frame.events
        back.close()
        deaf.close()
        for client in clients:
            await client.close()
        await server.close()
        return took, got

    took, got = run(scenario(), timeout=60)
    # the devices kept their rate (1000 events/s each): before, they were held back until
    # the deaf subscriber's connection was cut off after the idle timeout (30 s here)
    assert took < 1.5 * total / 1000, took
    files = [_row(r) for r in read_parts(tmp_path)]
    assert len(files) == len(got) and sum(r[0] == "point" for r in files) == devices * total
    assert [(r[0], r[1], r[4], r[3]) for r in got] == files  # the merged stream, exactly
