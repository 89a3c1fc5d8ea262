"""Positions on the wire (protocol 2, docs/protocol.md "Exactly once"): the acknowledgement
says how many of a device's events the server has, ``durable`` frames say how many are
durable, a ``next`` frame's ``from`` skips what the server has and refuses a gap; a client of
protocol 1 sees none of it; a checkpoint that does not match its out-dir is refused at start,
nothing touched; a restored server whose devices never come back stops in order."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from engine import CallbackSubscriber
from engine.errors import TooSlowError
from engine.event import Event
from engine.sources import from_iterable
from goldilocks.cli import main
from goldilocks.net import RemoteError, connect
from goldilocks.net.protocol import (
    encode_complete,
    encode_next,
    encode_publish,
    encode_setup,
)
from operators import goldilocks, max_policy
from operators.checkpoint import CheckpointError

from tests.net.netsupport import TOKEN, Raw, run, start_server, until, url_of
from tests.net.serveproc import TOKEN as SERVE_TOKEN
from tests.net.serveproc import Serve

T0 = 1_795_334_400_000_000_000


def _points(first: int, count: int) -> list[Event]:
    return [Event.point(T0 + i, {"i": i}) for i in range(first, first + count)]


async def _publish(raw: Raw, sid: int, device: str):
    raw.send(encode_publish(sid, device))
    return await raw.recv_until("request")


def test_the_acknowledgement_gives_the_position_and_durable_frames_follow(transport):
    async def scenario():
        server = await start_server(max_policy())
        raw = await Raw.open(url_of(server, transport))
        ack = await _publish(raw, 1, "thermo-1")
        assert ack.position == 0  # a device the server does not know
        raw.send(encode_next(1, _points(0, 10), first=0))
        durable = await raw.recv_until("durable")  # merged and handed to the outputs
        assert (durable.stream, durable.position) == (1, 10)
        raw.send(encode_complete(1))
        raw.send(encode_publish(2, "thermo-1"))  # the same device again, on a new stream
        again = await raw.recv_until("request")
        assert (again.stream, again.position) == (2, 10)  # its numbering goes on
        raw.send(encode_next(2, _points(10, 5), first=10))
        assert (await raw.recv_until("durable")).position == 15
        await raw.close()
        await until(lambda: server.stats().union.received == 15)
        await server.close()

    run(scenario())


def test_a_gap_is_refused_on_the_stream_naming_the_expected_and_the_given_number():
    async def scenario():
        server = await start_server(max_policy())
        raw = await Raw.open(server.tcp_url)
        await _publish(raw, 1, "door-1")
        raw.send(encode_next(1, _points(0, 5), first=0))
        raw.send(encode_next(1, _points(8, 3), first=8))
        error = await raw.recv_until("error")
        assert (error.stream, error.code, error.position) == (1, "gap", 5)
        assert "starts at event 8" in error.message and "expected from 5" in error.message
        assert "events 5 to 7 are missing" in error.message
        ack = await _publish(raw, 2, "door-1")  # the connection carries on
        assert ack.position == 5
        stats = server.stats()
        assert stats.errors("gap") == 1 and stats.union.received == 5
        await raw.close()
        await server.close()

    run(scenario())


def test_a_frame_overlapping_what_the_server_has_merges_only_the_new_events(tmp_path):
    async def scenario():
        server = await start_server(max_policy(), out_dir=str(tmp_path), final_cti=False)
        raw = await Raw.open(server.ws_url)
        ack = await _publish(raw, 1, "door-1")
        raw.send(encode_next(1, _points(0, 5), first=0))
        raw.send(encode_next(1, _points(3, 5), first=3))  # 3 and 4 again, then 5, 6, 7
        given_back = await raw.recv_until("request")  # the credit of the two skipped
        assert given_back.n == 2 and given_back.position is None
        raw.send(encode_next(1, _points(0, 8), first=0))  # all of it again: nothing new
        raw.send(encode_complete(1))
        await until(lambda: server.stats().union.received == 8
                    and server.stats().duplicates == 2 + 8)
        stats = server.stats()
        assert stats.duplicates == 2 + 8 and stats.events_refused == 0
        assert ack.n >= 16
        await raw.close()
        await server.close()
        lines = (tmp_path / "events-000000.jsonl").read_text().splitlines()
        assert [f'"i":{i}' in line for i, line in enumerate(lines)] == [True] * 8

    run(scenario())


def test_a_client_of_protocol_1_gets_no_durable_frame_and_behaves_as_before():
    async def scenario():
        server = await start_server(max_policy())
        raw = await Raw.open(server.tcp_url, setup=False)
        raw.send(encode_setup(TOKEN, 1))
        assert (await raw.recv()).version == 1
        ack = await _publish(raw, 1, "old")
        raw.send(encode_next(1, _points(0, 10)))  # no "from": as a device always did
        raw.send(encode_complete(1))
        await until(lambda: server.stats().union.received == 10)
        await asyncio.sleep(3 * 0.2)  # several commits without a checkpoint
        await server.close()
        frames = await raw.closed()
        assert all(f.type != "durable" for f in frames), frames
        assert ack.position == 0  # a key a client of protocol 1 ignores

    run(scenario())


def test_the_client_library_falls_back_to_protocol_1_with_a_server_that_speaks_only_it(
        monkeypatch):
    import goldilocks.net.session as session

    monkeypatch.setattr(session, "SUPPORTED_VERSIONS", frozenset({1}))

    async def scenario():
        server = await start_server(max_policy())
        client = await connect(server.tcp_url, token=TOKEN)
        assert client.version == 1
        publication = client.publish(from_iterable(_points(0, 50)), device="d")
        assert await publication.wait(5) == "completed"
        assert publication.stats().outbox == 0 and publication.durable == 0
        await client.close()
        await until(lambda: server.stats().union.received == 50)
        await server.close()

    run(scenario())


def test_a_local_subscriber_that_falls_behind_is_cut_off_with_its_position():
    async def scenario():
        server = await start_server(max_policy(), subscriber_lag=64, final_cti=False)
        errors: list[BaseException] = []
        taken: list[Event] = []

        class Stalled:
            def on_subscribe(self, s):
                s.request(5)

            def on_next(self, e):
                taken.append(e)

            def on_error(self, e):
                errors.append(e)

            def on_complete(self):
                pass

        server.subscribe(Stalled())
        client = await connect(server.tcp_url, token=TOKEN)

        async def slowly():  # a few events at a time: the subscriber's drain keeps up
            for i, e in enumerate(_points(0, 500)):
                yield e
                if i % 4 == 3:
                    await asyncio.sleep(0.002)

        assert await client.publish(slowly(), device="d", batch=4).wait(5) == "completed"
        await until(lambda: errors, what="the stalled subscriber cut off")
        assert isinstance(errors[0], TooSlowError) and errors[0].position == len(taken) == 5
        assert "more than 64 elements behind" in str(errors[0])
        got: list[Event] = []
        server.subscribe(CallbackSubscriber(got.append))  # joins at what comes next
        await client.close()
        await server.close()
        assert server.stats().subscribers_cut == 1

    run(scenario())


# ---------------------------------------------------------------------- checkpoints at start
async def _crash_image(tmp: Path) -> tuple[Path, Path]:
    """A server's checkpoint and out-dir as a crash would leave them: copied right after a
    checkpoint, while a part is open and devices are publishing."""
    ckpt, out = tmp / "run" / "serve.ckpt", tmp / "run" / "out"
    out.mkdir(parents=True)
    server = await start_server(goldilocks("1m"), checkpoint=ckpt, checkpoint_every=60,
                                out_dir=str(out))
    client = await connect(server.tcp_url, token=TOKEN)
    hold = asyncio.Event()

    async def events():
        for e in _points(0, 100):
            yield e
        await hold.wait()

    client.publish(events(), device="d")
    await until(lambda: server.stats().union.received == 100)
    assert await server.save_checkpoint()
    image = tmp / "image"
    shutil.copytree(ckpt.parent, image)
    hold.set()
    await client.close()
    await server.close()
    return image / "serve.ckpt", image / "out"


def _listing(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders for p in sorted(f.rglob("*"))
            if p.is_file()}


MISMATCHES = [
    ("another server's out-dir", lambda ckpt, out, other: other,
     "belongs to another server's checkpoint"),
    ("the open part deleted",
     lambda ckpt, out, other: (next(out.glob(".events-*.tmp")).unlink(), out)[1],
     "is missing, the checkpoint needs its first"),
    ("the out-dir emptied",
     lambda ckpt, out, other: ([p.unlink() for p in list(out.iterdir())], out)[1],
     "holds no record of the server that wrote the checkpoint"),
]


@pytest.mark.parametrize("what, change, words", MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_a_checkpoint_that_does_not_match_its_out_dir_is_refused_at_start(
        tmp_path, capsys, what, change, words):
    ckpt, out = run(_crash_image(tmp_path))
    other_ckpt, other = run(_crash_image(tmp_path / "other"))
    out = change(ckpt, out, other)
    before = _listing(ckpt.parent, out)
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(TOKEN + "\n")
    code = main(["serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens),
                 "--delay", "1m", "--checkpoint", str(ckpt), "--out-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and len(err.splitlines()) == 1 and words in err, err
    assert _listing(ckpt.parent, out) == before  # nothing touched

    async def direct():
        with pytest.raises(CheckpointError, match=words):
            await start_server(goldilocks("1m"), checkpoint=ckpt, out_dir=str(out))
    run(direct())


def test_a_checkpoint_written_with_an_out_dir_needs_one(tmp_path, capsys):
    ckpt, out = run(_crash_image(tmp_path))
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(TOKEN + "\n")
    assert main(["serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens),
                 "--delay", "1m", "--checkpoint", str(ckpt)]) == 1
    err = capsys.readouterr().err
    assert f"written by a server with --out-dir {os.path.realpath(out.parent.parent / 'run' / 'out')}" \
        in err and "started without one" in err, err


def test_the_crash_image_resumes_with_the_open_part_cut_back(tmp_path):
    """The same image, with nothing changed, is taken up: the open part cut back to what the
    checkpoint recorded and written on, numbering and seq continuing."""
    ckpt, out = run(_crash_image(tmp_path))
    (temp,) = out.glob(".events-*.tmp")
    with open(temp, "ab") as f:
        f.write(b'{"seq":100,"source":"d","kind":"insert","sta')  # a torn, unrecorded tail

    async def resumed():
        server = await start_server(goldilocks("1m"), checkpoint=ckpt, out_dir=str(out))
        assert server.restored and server.union.detached() == ("d",)
        raw = await Raw.open(server.tcp_url)
        assert (await _publish(raw, 1, "d")).position == 100
        raw.send(encode_next(1, _points(100, 10), first=100))
        raw.send(encode_complete(1))
        await until(lambda: server.stats().union.received == 110)
        await raw.close()
        await server.close()

    run(resumed())
    lines = [line for part in sorted(out.glob("events-*.jsonl"))
             for line in part.read_text().splitlines()]
    assert [f'"seq":{i},' in line and f'"i":{i}' in line
            for i, line in enumerate(lines)] == [True] * 110


@pytest.mark.slow
def test_a_restored_server_whose_devices_never_come_back_stops_in_order(tmp_path):
    """Before, it waited for them on SIGTERM and exited 1 after the shutdown timeout. Now a
    restored input nobody re-attached is completed at shutdown, and the device's position
    stays in the checkpoint: publishing later, it goes on from there."""
    serve = Serve(tmp_path, "--checkpoint-every", "1s", "--shutdown-timeout", "5s")

    async def scenario():
        await serve.start()
        raw = await Raw.open(serve.tcp_url, token=SERVE_TOKEN)
        await _publish(raw, 1, "gone")
        raw.send(encode_next(1, _points(0, 20), first=0))
        assert (await raw.recv_until("durable", timeout=10)).position == 20
        await serve.kill()  # the device goes with it and never comes back
        raw.t.abort()
        await serve.start()
        loop = asyncio.get_running_loop()
        began = loop.time()
        status = await serve.stop()
        took = loop.time() - began
        await serve.start()
        again = await Raw.open(serve.tcp_url, token=SERVE_TOKEN)
        ack = await _publish(again, 1, "gone")
        await again.close()
        await serve.stop()
        return status, took, ack.position

    try:
        status, took, position = run(scenario(), timeout=90)
    finally:
        serve.cleanup()
    assert status == 0, serve.stderr
    assert took < 5, took
    assert "1 devices to re-attach" in serve.stderr[1]
    assert position == 20


# ---------------------------------------------------------------------- the client's side
class Counting:
    """A publisher of endless points that counts what it was asked for."""

    def __init__(self):
        self.asked = 0
        self.sent = 0

    def subscribe(self, subscriber):
        source = self

        class Subscription:
            def request(self, n):
                source.asked += n
                for _ in range(n):
                    subscriber.on_next(Event.point(T0 + source.sent))
                    source.sent += 1

            def cancel(self):
                pass

        subscriber.on_subscribe(Subscription())


def test_a_full_outbox_stops_asking_the_local_publisher_until_events_are_durable(tmp_path):
    async def scenario():
        server = await start_server(max_policy(), checkpoint=tmp_path / "c.ckpt",
                                    checkpoint_every=60)
        client = await connect(server.tcp_url, token=TOKEN)
        source = Counting()
        publication = client.publish(source, device="d", batch=64, outbox=256)
        await until(lambda: publication.stats().outbox == 256)
        await asyncio.sleep(0.2)  # it stays there: nothing durable, nothing more asked
        assert source.asked == 256 and publication.stats().outbox_bound == 256
        assert await server.save_checkpoint()
        await until(lambda: publication.durable == 256 and source.asked > 256)
        assert client.stats().unacked <= 256
        await client.close()
        await server.close()

    run(scenario())


def test_a_publication_fails_only_after_its_reconnect_deadline_saying_what_is_durable():
    async def scenario():
        server = await start_server(max_policy())
        client = await connect(server.tcp_url, token=TOKEN, reconnect=1.0)

        async def forever():
            i = 0
            while True:
                yield Event.point(T0 + i)
                i += 1
                if i % 50 == 0:
                    await asyncio.sleep(0.01)

        publication = client.publish(forever(), device="d")
        await until(lambda: publication.durable > 0)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await server.close()  # and it never comes back
        assert await publication.wait(10) == "failed"
        took = loop.time() - began
        message = str(publication.error)
        assert 1.0 <= took < 4, took
        assert "could not connect again" in message and "within 1.0 s" in message
        assert f"{publication.durable} events of device 'd' are durable" in message
        await client.close()

    run(scenario())


class Blipper:
    """A TCP proxy between devices and the server that can lose the devices' connections
    the way a network blip does: the device side is dropped, while the server side stays
    open and silent (the server notices only at its idle timeout)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self.tasks: list[asyncio.Task] = []
        self.silent: list[asyncio.StreamWriter] = []  # kept: a writer let go closes

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"tcp://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader, writer):
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.pairs.append((writer, up_writer))

        async def pump(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
            except (ConnectionError, OSError):
                pass

        self.tasks += [asyncio.create_task(pump(reader, up_writer)),
                       asyncio.create_task(pump(up_reader, writer))]

    def blip(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.tasks = []
        for device_side, server_side in self.pairs:
            device_side.transport.abort()
            self.silent.append(server_side)  # kept open and silent
        self.pairs = []


def test_a_network_blip_the_server_notices_late_loses_and_repeats_nothing(tmp_path):
    """The device connects again at once; the server still holds its stream (name_in_use)
    until its idle timeout lets the silent connection go; the device keeps trying and goes
    on from its position."""
    async def scenario():
        server = await start_server(max_policy(), out_dir=str(tmp_path), idle_timeout=1.0,
                                    final_cti=False)
        proxy = Blipper(server.tcp_address)
        url = await proxy.start()
        client = await connect(url, token=TOKEN, keepalive=0.2, reconnect=10)
        total = 3000

        async def readings():
            for i in range(total):
                yield Event.point(T0 + i, {"i": i})
                if i % 100 == 99:
                    await asyncio.sleep(0.01)

        publication = client.publish(readings(), device="d", batch=50)
        await until(lambda: publication.sent > 500)
        proxy.blip()
        assert await publication.wait(20) == "completed"
        assert publication.stats().streams >= 2 and server.stats().errors("name_in_use") >= 1
        await client.close()
        await server.close()

    run(scenario())
    lines = [line for part in sorted(tmp_path.glob("events-*.jsonl"))
             for line in part.read_text().splitlines()]
    assert [f'"i":{i}' in line for i, line in enumerate(lines)] == [True] * 3000
