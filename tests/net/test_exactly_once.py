"""Each event exactly once in the files, across crashes: a real ``goldilocks serve`` process
with ``--checkpoint … --checkpoint-every 1s --out-dir …``, killed with a real ``SIGKILL`` at
seeded moments and started again, while devices publish — through the client library, and
one written from docs/protocol.md alone. Then it is stopped in order, and the published parts
must hold every event sent exactly once, in each device's order, with no ``seq`` repeated.

Before, the same run (five devices, one kill) lost 20,250 of 34,400 events: the open part
was not in the checkpoint, the devices could not know where to resume, and ``seq`` started
again at 0.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from engine.event import Event
from goldilocks.net import connect

from tests.net.doc_device import DocDevice
from tests.net.netsupport import run
from tests.net.serveproc import TOKEN, Serve, check_exactly_once

MS = 1_000_000


async def paced(name: str, total: int, base: int, rate: float = 1000.0,
                late_every: int = 0):
    """``total`` points at ``rate`` a second (a CTI after every 100th), as a device's
    sensor would give them; the payload says which device and which reading. With
    ``late_every``, every such reading is three minutes old: late, once time has begun."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    for i in range(total):
        old = late_every and i % late_every == late_every - 1
        yield Event.point(base + i * MS - (180_000 * MS if old else 0), {"d": name, "i": i})
        if (i + 1) % 100 == 0:
            yield Event.cti(base + i * MS)
        ahead = (i + 1) / rate - (loop.time() - began)
        if ahead > 0.02:
            await asyncio.sleep(ahead)


@pytest.mark.slow
def test_every_event_once_in_the_files_across_three_sigkills(tmp_path):
    seed = 20261127
    rng = random.Random(seed)
    total = 7000  # per device: about 7 s at 1000 events/s, with the outages more
    # one moment in each third of the run, so that each restart has devices to take back
    kills = [rng.uniform(1.0, 2.0), rng.uniform(3.0, 4.0), rng.uniform(5.0, 6.0)]
    serve = Serve(tmp_path, "--checkpoint-every", "1s", "--part-events", "5000",
                  "--idle-timeout", "5s")
    base = time.time_ns() // MS * MS

    async def scenario():
        await serve.start()
        clients, publications = [], {}
        for d in range(8):
            name = f"lib-{d}"
            client = await connect(serve.ws_url if d % 2 else serve.tcp_url, token=TOKEN,
                                   reconnect=30)
            clients.append(client)
            publications[name] = client.publish(
                paced(name, total, base, late_every=10 if d == 7 else 0), device=name,
                batch=256)
        doc = DocDevice("doc-0", serve.tcp_port, TOKEN, total, base)
        doc_run = asyncio.create_task(doc.run())
        loop = asyncio.get_running_loop()
        began = loop.time()
        for at in kills:
            await asyncio.sleep(max(0.0, began + at - loop.time()))
            await serve.kill()
            await serve.start()  # the same arguments: restored from the checkpoint
        for name, publication in publications.items():
            assert await publication.wait(60) == "completed", (name, publication.error)
        await asyncio.wait_for(doc_run, 60)
        status = await serve.stop()
        stats = {name: p.stats() for name, p in publications.items()}
        for client in clients:
            await client.close()
        return status, stats, doc

    try:
        status, stats, doc = run(scenario(), timeout=150)
    finally:
        serve.cleanup()
    assert status == 0, serve.stderr[-1]
    restored = [err for err in serve.stderr if "restored from" in err]
    assert len(restored) == 3, serve.stderr  # every start after a kill continued
    sent = {name: total for name in stats} | {doc.name: total}
    seen = check_exactly_once(serve.out, sent)
    assert seen["late"] > 500  # lib-7's old readings: in the late parts, each once too
    # each device numbered its events (points and CTIs) and every one of them is durable
    for name, s in stats.items():
        assert s.durable == s.position == total + total // 100 and s.outbox == 0, (name, s)
    assert doc.durable == len(doc.rows) == total + total // 100
    # the kills did land while devices were publishing: they had to resume
    assert sum(s.streams - 1 for s in stats.values()) >= 8 and doc.connections >= 2
    print(f"seed {seed}: kills at {[round(k, 2) for k in kills]} s; {seen}; resent "
          f"{sum(s.resent for s in stats.values()) + doc.resent} events, skipping none twice")
