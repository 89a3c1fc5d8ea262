"""Kills at the worst moments of a commit, each tested: a real ``goldilocks serve`` process
dies by ``SIGKILL`` at a failpoint (``GOLDILOCKS_FAILPOINT``, docs/checkpoint.md) — during a
checkpoint write, between the parts' ``fsync`` and the checkpoint's rename, during a part's
publication — while devices publish; it is started again without the failpoint, and the
published parts must still hold every event sent exactly once."""

from __future__ import annotations

import asyncio
import time

import pytest

from goldilocks.net import connect
from operators.checkpoint import unpack

from tests.net.doc_device import DocDevice
from tests.net.netsupport import run
from tests.net.serveproc import TOKEN, Serve, check_exactly_once
from tests.net.test_exactly_once import MS, paced


def _temps(serve: Serve) -> list[str]:
    return sorted(p.name for p in serve.tmp.glob(".serve.ckpt.*.tmp"))


def _torn_checkpoint(serve: Serve) -> None:
    """The kill left half a checkpoint beside the last whole one."""
    (temp,) = _temps(serve)
    data = (serve.tmp / temp).read_bytes()
    with pytest.raises(Exception, match="truncated"):
        unpack(data, "union")
    unpack(serve.ckpt.read_bytes(), "union")  # the previous one, whole


def _unrenamed_checkpoint(serve: Serve) -> None:
    """The kill left a whole, durable checkpoint not yet renamed over the last one."""
    (temp,) = _temps(serve)
    newer = unpack((serve.tmp / temp).read_bytes(), "union")
    older = unpack(serve.ckpt.read_bytes(), "union")
    assert newer["stages"]["serve"]["state"]["position"] >= \
        older["stages"]["serve"]["state"]["position"]


def _half_published(serve: Serve) -> None:
    """The kill came between two parts' renames: the checkpoint names closed parts that are
    published and closed parts that are still temporary."""
    record = unpack(serve.ckpt.read_bytes(), "union")["stages"]["serve"]["state"]["events"]
    closed = [n for n, _ in record["closed"]]
    published = [n for n in closed if (serve.out / f"events-{n:06d}.jsonl").exists()]
    waiting = [n for n in closed if (serve.out / f".events-{n:06d}.jsonl.tmp").exists()]
    assert published and waiting, (closed, published, waiting)


CASES = [("checkpoint.write:2", _torn_checkpoint),
         ("checkpoint.rename:2", _unrenamed_checkpoint),
         ("part.publish:3", _half_published)]


@pytest.mark.slow
@pytest.mark.parametrize("point, left", CASES, ids=[c[0].split(":")[0] for c in CASES])
def test_a_kill_at_the_worst_moment_loses_and_repeats_nothing(tmp_path, point, left):
    total = 3500  # the failpoint fires at the second checkpoint, about 2 s in
    serve = Serve(tmp_path, "--checkpoint-every", "1s", "--part-events", "300")
    base = time.time_ns() // MS * MS

    async def scenario():
        await serve.start(failpoint=point)
        clients, publications = [], {}
        for d in range(3):
            name = f"lib-{d}"
            client = await connect(serve.tcp_url if d % 2 else serve.ws_url, token=TOKEN,
                                   reconnect=30)
            clients.append(client)
            publications[name] = client.publish(paced(name, total, base), device=name,
                                                batch=128)
        doc = DocDevice("doc-0", serve.tcp_port, TOKEN, total, base)
        doc_run = asyncio.create_task(doc.run())
        status = await serve.died(timeout=30)  # the failpoint killed it
        assert status == -9, serve.stderr[-1]
        assert not all(p.state != "open" for p in publications.values())  # mid-stream
        left(serve)
        await serve.start()
        for name, publication in publications.items():
            assert await publication.wait(60) == "completed", (name, publication.error)
        await asyncio.wait_for(doc_run, 60)
        stopped = await serve.stop()
        for client in clients:
            await client.close()
        return stopped, doc

    try:
        stopped, doc = run(scenario(), timeout=120)
    finally:
        serve.cleanup()
    assert stopped == 0, serve.stderr[-1]
    assert "restored from" in serve.stderr[-1]
    assert not _temps(serve)  # the torn or unrenamed write was cleared at start
    check_exactly_once(serve.out, {f"lib-{d}": total for d in range(3)} | {doc.name: total})
