"""``goldilocks serve --checkpoint`` (TS §8.1): the server restores its union at start,
writes it at shutdown and on an interval; a device that publishes again under its name is
re-attached to its restored input. A real server on 127.0.0.1, real connections."""

from __future__ import annotations

import asyncio

import pytest

from engine import CallbackSubscriber
from engine.event import Event
from goldilocks.cli import main
from goldilocks.net import connect
from operators import goldilocks
from operators.checkpoint import CheckpointError

from tests.net.netsupport import TOKEN, run, start_server, until, url_of

MS = 10**6


async def _publish(events, hold: asyncio.Event | None = None):
    for e in events:
        yield e
    if hold is not None:
        await hold.wait()  # the device stays connected


def test_a_restarted_server_continues_its_time(tmp_path):
    ckpt = tmp_path / "serve.ckpt"

    async def first():
        server = await start_server(goldilocks(0), checkpoint=ckpt, checkpoint_every=0.05)
        assert not server.restored
        device = await connect(url_of(server, "tcp"), token=TOKEN)
        pub = device.publish(_publish([Event.point(i * MS) for i in range(5)]
                                      + [Event.cti(10 * MS)]), device="A")
        assert await pub.wait(5) == "completed"
        await until(lambda: server.union.stats().output_cti == 10 * MS, what="the CTI")
        await device.close()
        assert await server.close()
        return server.stats()

    async def second():
        server = await start_server(goldilocks(0), checkpoint=ckpt, checkpoint_every=0.05)
        assert server.restored
        got: list[Event] = []
        server.subscribe(CallbackSubscriber(got.append))
        device = await connect(url_of(server, "tcp"), token=TOKEN)
        pub = device.publish(_publish([Event.point(5 * MS), Event.point(20 * MS),
                                       Event.cti(30 * MS)]), device="A")
        assert await pub.wait(5) == "completed"
        await until(lambda: server.union.stats().output_cti == 30 * MS, what="the CTI")
        late = server.union.late.drain()
        await device.close()
        await server.close()
        return server.stats(), got, late

    before = run(first())
    assert before.checkpoints >= 2 and ckpt.exists()  # on the interval, and at shutdown
    after, got, late = run(second())
    u = after.union
    assert [(e.kind, e.start) for e in got] == [("point", 20 * MS), ("cti", 30 * MS)]
    assert [(r.event.start, r.cti) for r in late] == [(5 * MS, 10 * MS)]  # time continued
    assert (u.received, u.emitted, u.dropped, u.ctis) == (5 + 2, 5 + 1, 1, 2)  # inserts
    assert [s.name for s in u.inputs] == ["A", "A"]  # the first run's line, and the new one


def test_a_device_re_attaches_to_its_input_restored_from_an_interval_checkpoint(tmp_path):
    ckpt = tmp_path / "serve.ckpt"
    saved: list[bytes] = []

    async def crashed():
        server = await start_server(goldilocks(0), checkpoint=ckpt, checkpoint_every=0.02)
        device = await connect(url_of(server, "tcp"), token=TOKEN)
        hold = asyncio.Event()
        device.publish(_publish([Event.point(i * MS) for i in range(5)]
                                + [Event.cti(10 * MS)], hold), device="A")
        await until(lambda: server.union.stats().output_cti == 10 * MS, what="the CTI")
        written = server.checkpoints
        await until(lambda: server.checkpoints >= written + 2, what="two more checkpoints")
        saved.append(ckpt.read_bytes())  # as a crash would leave it: A still attached
        hold.set()
        await device.close()
        await server.close()

    async def restarted():
        server = await start_server(goldilocks(0), checkpoint=ckpt, checkpoint_every=0.05)
        assert server.union.detached() == ("A",)
        device = await connect(url_of(server, "tcp"), token=TOKEN)
        pub = device.publish(_publish([Event.point(12 * MS), Event.cti(20 * MS)]),
                             device="A")
        assert await pub.wait(5) == "completed"
        await until(lambda: server.union.stats().output_cti == 20 * MS, what="the CTI")
        stats = server.union.stats()
        await device.close()
        await server.close()
        return stats

    run(crashed())
    ckpt.write_bytes(saved[0])
    stats = run(restarted())
    assert [(s.name, s.received, s.emitted, s.ctis) for s in stats.inputs] == [
        ("A", 5 + 1, 6, 2)]  # one input: its counts continued


def test_a_bad_checkpoint_stops_serve_with_the_reason(tmp_path, capsys):
    ckpt = tmp_path / "serve.ckpt"
    ckpt.write_bytes(b"GLDLCKPT\x00\x07" + bytes(14) + b"{}")
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(TOKEN + "\n")

    async def start():
        with pytest.raises(CheckpointError, match="format 7, newer than this version"):
            await start_server(goldilocks(0), checkpoint=ckpt)
    run(start())
    assert ckpt.read_bytes()[:10] == b"GLDLCKPT\x00\x07"  # left as it was
    assert main(["serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens),
                 "--checkpoint", str(ckpt)]) == 1
    assert "format 7, newer than this version reads" in capsys.readouterr().err
    assert main(["serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens),
                 "--checkpoint-every", "5s"]) == 2
    assert "argument --checkpoint-every: goes with --checkpoint" in capsys.readouterr().err
