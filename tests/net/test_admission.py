"""Before a connection has shown its token, against a real server on 127.0.0.1: it may send
one small frame (the setup), it has a short time to do so, and connections in setup have
slots of their own, so sockets that never set up cannot keep devices out."""

from __future__ import annotations

import asyncio

import pytest

from engine.sources import from_iterable
from operators import max_policy
from goldilocks.net import RemoteError, connect

from tests.net.netsupport import TOKEN, Raw, points, run, start_server, until, url_of

#: The documented bounds (docs/protocol.md, "Before setup").
MAX_SETUP_FRAME = 4096


def _padded_setup(size: int) -> bytes:
    """A valid setup frame of ``size`` bytes (an unknown field pads it; decoders ignore it)."""
    base = len(b'{"type":"setup","version":1,"token":"%b","pad":""}' % TOKEN.encode())
    data = b'{"type":"setup","version":1,"token":"%b","pad":"%b"}' % (TOKEN.encode(),
                                                                    b"x" * (size - base))
    assert len(data) == size
    return data


async def _device(server, transport: str, name: str) -> None:
    client = await connect(url_of(server, transport), token=TOKEN)
    publication = client.publish(from_iterable(points(range(5))), device=name)
    assert await publication.wait(5) == "completed"
    await client.close()


@pytest.mark.parametrize("size", [MAX_SETUP_FRAME + 1, 100_000])
def test_a_setup_frame_over_4_kib_is_refused_before_the_token_is_checked(transport, size):
    """Before, an unauthenticated connection could make the server read and hold a whole
    frame of up to max_frame (1 MiB) before its token was looked at."""
    async def scenario():
        server = await start_server(max_policy())
        raw = await Raw.open(url_of(server, transport), setup=False)
        raw.send(_padded_setup(size))
        try:
            frames = await raw.closed()
        except RemoteError:  # pragma: no cover - a transport may report it this way
            frames = []
        assert [f.type for f in frames] in ([], ["error"]), frames
        if frames:
            assert frames[0].code == "oversized" and "before setup" in frames[0].message
        assert server.stats().errors("oversized") == 1
        raw = await Raw.open(url_of(server, transport), setup=False)  # at the limit: fine
        raw.send(_padded_setup(MAX_SETUP_FRAME))
        assert (await raw.recv()).type == "ok"
        await raw.close()
        await _device(server, transport, "after")
        await server.close()

    run(scenario())


def test_a_connection_that_never_sets_up_is_closed_after_the_setup_timeout(transport):
    """Apart from the idle timeout (30 s here), and much shorter."""
    async def scenario():
        server = await start_server(max_policy(), idle_timeout=30, setup_timeout=0.3)
        loop = asyncio.get_running_loop()
        opened = loop.time()
        raw = await Raw.open(url_of(server, transport), setup=False)
        frames = await raw.closed(timeout=5)
        assert [(f.type, f.code) for f in frames] == [("error", "setup_timeout")]
        assert loop.time() - opened < 5
        stats = server.stats()
        assert stats.errors("setup_timeout") == 1 and stats.pending == 0
        await _device(server, transport, "after")
        await server.close()

    run(scenario())


def test_silent_sockets_do_not_take_the_slots_of_devices():
    """max_connections counts connections that have set up; sockets that never do wait in
    slots of their own. Before, four silent sockets locked every device out of a server of
    four connections until the idle timeout."""
    async def scenario():
        server = await start_server(max_policy(), max_connections=4, max_pending=8,
                                    idle_timeout=30, setup_timeout=30)
        silent = [await Raw.open(url_of(server, ("ws", "tcp")[i % 2]), setup=False)
                  for i in range(4)]
        await until(lambda: len(server.stats().connections) == 4, what="four silent sockets")
        devices = [await connect(url_of(server, ("tcp", "ws")[i % 2]), token=TOKEN)
                   for i in range(4)]
        publications = [d.publish(from_iterable(points(range(3))), device=f"dev-{i}")
                        for i, d in enumerate(devices)]
        assert [await p.wait(5) for p in publications] == ["completed"] * 4
        # a fifth device is over max_connections, and told so
        with pytest.raises(RemoteError) as info:
            await connect(server.tcp_url, token=TOKEN)
        assert info.value.code == "too_many"
        for device in devices:
            await device.close()
        for raw in silent:
            await raw.close()
        await server.close()

    run(scenario())


def test_when_every_setup_slot_is_held_by_a_silent_socket_the_oldest_makes_room():
    """Silent sockets fill the slots for connections in setup: a device that comes after
    they have had a tenth of the setup timeout takes the slot of the oldest."""
    async def scenario():
        server = await start_server(max_policy(), max_pending=6, setup_timeout=2.0,
                                    idle_timeout=30)
        loop = asyncio.get_running_loop()
        silent = [await Raw.open(url_of(server, ("tcp", "ws")[i % 2]), setup=False)
                  for i in range(6)]
        await until(lambda: server.stats().pending == 6)
        # within the first tenth of the setup timeout, a burst of new connections is refused
        # rather than let the oldest go (it may be a device whose setup is on its way)
        with pytest.raises(RemoteError) as info:
            await connect(server.tcp_url, token=TOKEN)
        assert info.value.code == "too_many"
        settled = loop.time() + server.setup_timeout / 10
        await until(lambda: loop.time() > settled, what="the silent sockets are not new")
        for i in range(3):  # the first takes the oldest's slot; it then leaves it free
            await _device(server, ("ws", "tcp")[i % 2], f"dev-{i}")
        stats = server.stats()
        assert stats.setup_evictions == 1 and stats.pending == 5
        assert [s.state for s in stats.union.inputs] == ["completed"] * 3
        assert await silent[0].closed(timeout=5) == []  # let go without a word
        for raw in silent:
            await raw.close()
        await server.close()

    run(scenario())
