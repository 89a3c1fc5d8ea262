"""The network publishers as asyncio users meet them: the server's merged output and a
client's view of it (``RemoteOutput``) refuse what is not a subscriber at once, and both work
with ``async for``. A real server on 127.0.0.1, real connections."""

from __future__ import annotations

import asyncio

import pytest

from engine.event import Event
from operators import goldilocks
from goldilocks.net import connect

from tests.net.netsupport import TOKEN, run, start_server, until, url_of

MS = 10**6


async def _events(count: int):
    for i in range(count):
        yield Event.point(i * MS)


def test_server_and_remote_output_refuse_a_function_and_iterate_with_async_for():
    async def main():
        server = await start_server(goldilocks(0))
        url = url_of(server, "tcp")
        watcher = await connect(url, token=TOKEN)
        remote = watcher.output(prefetch=8)
        for publisher in (server, remote):
            with pytest.raises(TypeError, match=r"CallbackSubscriber\(print\)"):
                publisher.subscribe(print)

        async def read(publisher) -> list[Event]:
            return [event async for event in publisher]

        local_reader = asyncio.create_task(read(server))
        remote_reader = asyncio.create_task(read(remote))
        await until(lambda: server.output.stats().subscribers == 2,
                    what="the local and the remote subscriber joined the output")
        device = await connect(url, token=TOKEN)
        publication = device.publish(_events(20), device="A")
        assert await publication.wait(5) == "completed"
        await device.close()
        await until(lambda: all(s.state != "active" for s in server.union.stats().inputs),
                    what="the device's input left")
        await server.close()  # the merged output completes: both loops end
        local, seen = await asyncio.wait_for(asyncio.gather(local_reader, remote_reader), 5)
        await watcher.close()
        return local, seen

    local, seen = run(main())
    points = [e.start for e in local if e.kind == "point"]
    assert points == [i * MS for i in range(20)]
    assert seen == local
