"""The operator's view of ``goldilocks serve``, as a real process on 127.0.0.1: its log on
stderr (connections, refusals, devices joining, leaving, idle and lagging, a status line),
``--log-format json``, the summary per device (this run's counts after a restore), a second
Ctrl-C that forces the exit, and one-line errors for a port in use or an ``--out-dir`` it
cannot create. Every wait is on a line of the server's stderr, with a timeout."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.event import Event
from engine.sources import from_async_iterable, from_iterable
from goldilocks.net import connect
from goldilocks.net.protocol import RemoteError, encode_subscribe
from tests.net.netsupport import Raw, run

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "operator-token-5e2b"
T = 1_795_334_400 * 10**9  # 2026-11-22T08:00:00Z
S = 10**9
_CODE = ("import sys; from goldilocks.cli import main, register_command; "
         "from goldilocks.net.cli import SERVE; register_command(SERVE); "
         "sys.exit(main(sys.argv[1:]))")


def _argv(tmp: Path, *extra: str) -> list[str]:
    tokens = tmp / "tokens.txt"
    tokens.write_text(f"# devices\n{TOKEN}\n")
    return [sys.executable, "-c", _CODE, "serve", "--listen", "127.0.0.1:0", "--token-file",
            str(tokens), *extra]


class Served:
    """A ``goldilocks serve`` process whose stderr is read line by line as it comes."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.lines: list[str] = []
        self.urls: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._news = asyncio.Event()

    async def __aenter__(self) -> Served:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
        self._reader = asyncio.create_task(self._read())
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        assert line.startswith(b"listening on "), (line, self.lines)
        self.urls.append(line.decode().split()[-1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            await asyncio.wait([self._reader], timeout=5)

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line.decode().rstrip("\n"))
            self._news.set()

    def records(self) -> list[dict[str, Any]]:
        """The lines as JSON records (``--log-format json``); any other line fails."""
        return [json.loads(line) for line in self.lines]

    async def line(self, predicate: Callable[[str], bool], what: str,
                   timeout: float = 20) -> str:
        """The first line of stderr that satisfies ``predicate``, waiting for it."""
        async def found() -> str:
            while True:
                for line in self.lines:
                    if predicate(line):
                        return line
                self._news.clear()
                await self._news.wait()
        try:
            return await asyncio.wait_for(found(), timeout)
        except TimeoutError:
            raise AssertionError(f"no line {what} within {timeout} s; stderr (the first "
                                 "and last 20 lines):\n" + "\n".join(self.lines[:20]
                                                                     + self.lines[-20:])) \
                from None

    async def record(self, what: str, timeout: float = 20, **fields: Any) -> dict[str, Any]:
        """The first JSON record with these fields, waiting for it."""
        def matches(line: str) -> bool:
            record = json.loads(line)
            return all(record.get(k) == v for k, v in fields.items())
        return json.loads(await self.line(matches, what, timeout))

    async def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 5)
        return code


class Feed:
    """A device's events as the test hands them over; open until ``end()``."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue()

    def send(self, *events: Event) -> None:
        for event in events:
            self.queue.put_nowait(event)

    def end(self) -> None:
        self.queue.put_nowait(None)

    async def _events(self):
        while (event := await self.queue.get()) is not None:
            yield event

    def publisher(self) -> Any:
        return from_async_iterable(self._events())


async def _durable(publication: Any, n: int, timeout: float = 20) -> None:
    """Wait until the server says the first ``n`` events of ``publication`` are merged and
    kept (its ``durable`` frames): then they are decided."""
    async def done() -> None:
        while publication.stats().durable < n:
            await asyncio.sleep(0.005)
    await asyncio.wait_for(done(), timeout)


def test_serve_logs_devices_refusals_lag_and_status_at_info_and_nothing_worse(tmp_path):
    """Two devices (one lagging: its clock is far behind, so its events go late) and one
    wrong token: one INFO line for each, a status line naming the device behind, the
    summary per device, and nothing at WARNING or above in this clean run."""
    argv = _argv(tmp_path, "--tcp", "127.0.0.1:0", "--delay", "2s", "--log-format", "json",
                 "--status-every", "300ms", "--out-dir", str(tmp_path / "out"))

    async def scenario() -> Served:
        async with Served(argv) as served:
            assert served.proc is not None and served.proc.stdout is not None
            served.urls.append((await served.proc.stdout.readline()).decode().split()[-1])
            ws, tcp = served.urls
            steady = await connect(ws, token=TOKEN)
            feed = Feed()
            on_time = steady.publish(feed.publisher(), device="steady")
            feed.send(*[Event.point(T + i * S, {"i": i}) for i in range(50)],
                      Event.cti(T + 60 * S))
            await served.record("steady joined", event="joined", device="steady")
            await _durable(on_time, 51)  # the output CTI is now T + 58 s

            with pytest.raises(RemoteError, match="unauthorized"):
                await connect(tcp, token="not-the-token")
            await served.record("a refused token", event="refused", code="unauthorized")

            laggy = await connect(tcp, token=TOKEN)
            behind = Feed()
            late = laggy.publish(behind.publisher(), device="laggy")
            behind.send(*[Event.point(T + i * S, {"i": i}) for i in range(5)],
                        Event.cti(T + 5 * S))
            lagging = await served.record("laggy lagging", event="lagging", device="laggy")
            # seen at once (the usual), or while its first events were merged, before its CTI
            assert (lagging["late"], lagging["lag"]) == (5, 53 * S) \
                or 1 <= lagging["late"] < 5 and lagging["lag"] is None, lagging
            status = await served.record("a status naming laggy", event="status",
                                         most_behind="laggy", devices=2)
            assert status["lagging"] == 1 and status["late_total"] == 5, status
            behind.end()
            assert await late.wait(10) == "completed"
            await served.record("laggy left", event="left", device="laggy")
            assert await served.stop() == 0
            feed.end()
            await steady.close()
            await laggy.close()
            return served

    served = run(scenario(), timeout=60)
    records = served.records()  # every line is one JSON object
    worse = [r for r in records if r["level"] not in ("INFO", "DEBUG")]
    assert not worse, worse

    def count(**fields: Any) -> int:
        return sum(all(r.get(k) == v for k, v in fields.items()) for r in records)

    assert count(event="refused", code="unauthorized") == 1
    assert count(event="connected") == 2  # the refused one never was
    assert count(event="joined", device="steady") == count(event="joined", device="laggy") == 1
    assert count(event="lagging", device="laggy") == 1
    assert count(event="lagging", device="steady") == 0
    assert count(event="left", device="laggy", how="completed") == 1
    assert count(event="left", device="steady", how="removed") == 1  # at the stop
    assert count(event="stopping", signal="SIGINT") == 1
    statuses = [r for r in records if r.get("event") == "status"]
    assert any(r["events_per_s"] > 0 for r in statuses), statuses  # the devices' arrivals
    assert statuses[-1]["late_total"] == 5
    assert all(r["logger"].startswith("goldilocks.") and r["message"] for r in records)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", records[0]["time"])
    summary = {r["device"]: r for r in records if r.get("event") == "device"}
    assert (summary["laggy"]["received"], summary["laggy"]["dropped"],
            summary["laggy"]["emitted"]) == (5, 5, 0)
    assert (summary["steady"]["received"], summary["steady"]["emitted"]) == (50, 50)
    assert TOKEN not in "\n".join(served.lines)


def test_text_log_idle_and_the_summary_after_a_restore_counts_this_run(tmp_path):
    """The text format, a device going idle and active again (--idle-after), and after a
    restore from the checkpoint a summary of this run's counts with the carried apart."""
    argv = _argv(tmp_path, "--delay", "1s", "--idle-after", "300ms", "--checkpoint",
                 str(tmp_path / "serve.ckpt"), "--checkpoint-every", "100ms", "--out-dir",
                 str(tmp_path / "out"))
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO "

    async def once(first: int, count: int) -> Served:
        async with Served(argv) as served:
            client = await connect(served.urls[0], token=TOKEN)
            feed = Feed()
            publication = client.publish(feed.publisher(), device="d")
            feed.send(*[Event.point(T + (first + i) * S, {"i": first + i})
                        for i in range(count)])
            await _durable(publication, count)
            await served.line(lambda s: re.match(stamp + r"goldilocks\.serve: device 'd' idle",
                                                 s) is not None, "d idle")
            feed.send(Event.point(T + (first + count) * S, {"i": first + count}))
            await served.line(lambda s: "device 'd' active again" in s, "d active again")
            await _durable(publication, count + 1)
            feed.end()
            assert await publication.wait(10) == "completed"
            await client.close()
            assert await served.stop() == 0
            return served

    first = run(once(0, 4), timeout=60)
    assert any(re.match(stamp + r"goldilocks\.net: device 'd' joined from 127\.0\.0\.1:",
                        line) for line in first.lines), first.lines
    assert any("5 events received" in line for line in first.lines), first.lines
    second = run(once(5, 2), timeout=60)
    text = "\n".join(second.lines)
    assert re.search(stamp + r"goldilocks\.serve: restored from .*serve\.ckpt: 0 devices to "
                     r"re-attach, output CTI none yet, merged stream at position 5", text), text
    assert "3 events received, 0 refused; 3 emitted" in text, text
    assert "counts of this run: the checkpoint carried 5 received, 5 emitted" in text, text
    row = next(line for line in second.lines if re.search(r"[│|] d\s", line))
    assert re.search(r"[│|] d\s+[│|] completed\s+[│|]\s+3 [│|]\s+3 [│|]\s+0 [│|]", row), row
    assert row.rstrip().rstrip("│|").rstrip().endswith("5"), row  # carried


def test_a_second_ctrl_c_forces_the_exit(tmp_path):
    """A subscriber that asks for nothing holds the output back at the stop; the first
    SIGINT says what the server waits for, the second ends it at once."""
    argv = _argv(tmp_path, "--delay", "1s", "--shutdown-timeout", "60s", "--idle-timeout",
                 "60s", "--out-dir", str(tmp_path / "out"))

    async def scenario() -> tuple[int, Served]:
        async with Served(argv) as served:
            url = served.urls[0]
            deaf = await Raw.open(url, token=TOKEN)
            deaf.send(encode_subscribe(1))  # and never a request
            await served.line(lambda s: "subscriber from" in s, "the subscriber")
            client = await connect(url, token=TOKEN)
            assert await client.publish(from_iterable([Event.point(T + i) for i in range(3)]),
                                        device="d").wait(10) == "completed"
            assert served.proc is not None
            served.proc.send_signal(signal.SIGINT)
            await served.line(lambda s: "stopping on SIGINT" in s and "1 subscribers" in s
                              and "Ctrl-C again to force" in s, "stopping")
            loop = asyncio.get_running_loop()
            began = loop.time()
            code = await served.stop(signal.SIGINT, timeout=10)
            assert loop.time() - began < 10
            await client.close()
            await deaf.close()
            return code, served

    code, served = run(scenario(), timeout=60)
    assert code == 130, served.lines
    assert "WARNING goldilocks.serve: forced exit on a second SIGINT" in served.lines[-1]
    assert "the last parts are published at the next start" in served.lines[-1]


def _serve_once(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = _argv(tmp_path, *extra)
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_port_in_use_is_one_line_naming_it_status_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for option in ("--listen", "--tcp"):
            extra = ["--tcp", f"127.0.0.1:{port}"] if option == "--tcp" else []
            argv = _argv(tmp_path, *extra)
            if option == "--listen":
                argv[argv.index("127.0.0.1:0")] = f"127.0.0.1:{port}"
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
            assert done.returncode == 1, done.stderr
            assert done.stderr.splitlines() == [
                f"goldilocks serve: error: {option} 127.0.0.1:{port}: address already in use "
                "(another server listens there?); expected a free port, or port 0 for any "
                "free port"], done.stderr
            assert done.stdout == ""  # it never said it listens


@pytest.mark.parametrize("out_dir, words", [
    ("afile", "afile: a file of that name is in the way; expected a directory"),
    ("/proc/nope/out", "/proc/nope/out: cannot create the directory: No such file or "
                       "directory (the nearest existing parent is /proc)"),
])
def test_an_out_dir_it_cannot_create_is_one_line_naming_it_status_2(tmp_path, out_dir, words):
    if out_dir == "afile":
        out_dir = str(tmp_path / "afile")
        Path(out_dir).write_text("in the way\n")
        words = f"{out_dir}: a file of that name is in the way"
    done = _serve_once(tmp_path, "--out-dir", out_dir)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "goldilocks serve: error: argument --out-dir: "), done.stderr
    assert words in lines[0], done.stderr


def test_a_lagging_device_is_said_caught_up_once_it_is_not_behind_and_has_no_late_event(
        caplog):
    """The review on a real server with the watch's time given: lagging at once, caught up
    only after ``recover`` seconds without a late event and with its clock not behind."""
    from operators import goldilocks

    from goldilocks.net.watch import Watch
    from tests.net.netsupport import TOKEN as NET_TOKEN
    from tests.net.netsupport import input_of, start_server, until

    async def scenario() -> list[str]:
        server = await start_server(goldilocks("2s"))
        watch = Watch(server, status_every=None, recover=10.0)
        steady, behind = Feed(), Feed()
        client = await connect(server.tcp_url, token=NET_TOKEN)
        client.publish(steady.publisher(), device="steady")
        client.publish(behind.publisher(), device="behind")
        steady.send(Event.cti(T + 60 * S))
        await until(lambda: server.stats().union.output_cti == T + 58 * S, 10, "output CTI")
        behind.send(Event.point(T, {"i": 0}), Event.cti(T + 5 * S))
        await until(lambda: (input_of(server, "behind") or steady).last_cti == T + 5 * S,
                    10, "behind's CTI")
        with caplog.at_level(logging.INFO, logger="goldilocks.serve"):
            watch.review(0.0)
            behind.send(Event.cti(T + 61 * S))  # its clock catches up: the output's is T+59
            await until(lambda: input_of(server, "behind").last_cti == T + 61 * S, 10)
            watch.review(5.0)   # not behind now, but a late event 5 s ago
            watch.review(10.5)  # none for 10 s
            watch.review(20.0)  # said once
        steady.end()
        behind.end()
        await client.close()
        await server.close()
        return [r.getMessage() for r in caplog.records if r.name == "goldilocks.serve"]

    messages = run(scenario(), timeout=30)
    assert messages == [
        "device 'behind' is lagging: 1 of its events late so far (1 dropped, 0 adjusted); "
        "its last CTI is 53s behind the output CTI",
        "device 'behind' caught up: no late event for 10s (1 late in all)"], messages
