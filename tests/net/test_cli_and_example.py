"""``goldilocks serve`` as a real process (registered as the entry point will register it),
and the three-device example."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import sys
from pathlib import Path

from goldilocks.cli import build_parser, register_command
from engine.event import Event
from engine.sources import from_iterable
from engine.times import MAX_TIME
from goldilocks.net import ConnectionLost, connect
from goldilocks.net.cli import SERVE

from engine.sinks import CallbackSubscriber
from tests.net.netsupport import run, until

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "cli-token-91b2"


def test_serve_is_a_registered_subcommand():
    register_command(SERVE)
    parser = build_parser()
    args = parser.parse_args(["serve", "--listen", "127.0.0.1:0", "--token-file", "t"])
    assert args.command == "serve" and args.delay is None and args.out_dir is None


def test_serve_runs_until_interrupted_and_publishes_its_files(tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"# devices\n{TOKEN}\n")
    out = tmp_path / "out"
    code = ("import sys; from goldilocks.cli import main, register_command; "
            "from goldilocks.net.cli import SERVE; register_command(SERVE); "
            "sys.exit(main(sys.argv[1:]))")
    argv = [sys.executable, "-c", code, "serve", "--listen", "127.0.0.1:0", "--tcp",
            "127.0.0.1:0", "--token-file", str(tokens), "--delay", "1s", "--out-dir",
            str(out)]

    async def scenario():
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            urls = [(await asyncio.wait_for(proc.stdout.readline(), 20)).decode().split()[-1]
                    for _ in range(2)]
            assert urls[0].startswith("ws://127.0.0.1:") and urls[1].startswith("tcp://")
            watcher = await connect(urls[0], token=TOKEN)
            seen: list = []
            watcher.output().subscribe(CallbackSubscriber(seen.append))
            # frames on one connection are handled in order: once the probe is merged and
            # seen, the subscription is in place
            probe = watcher.publish(from_iterable([Event.point(1)]), device="probe")
            await until(lambda: len(seen) == 1, timeout=20, what="probe seen")
            assert await probe.wait(10) == "completed"
            for url, name in zip(urls, ["ws-dev", "tcp-dev"]):
                client = await connect(url, token=TOKEN)
                base = 10**18 if name == "ws-dev" else 2 * 10**18
                events = [Event.point(base + i) for i in range(50)] + [Event.cti(base + 60)]
                if name == "tcp-dev":  # a door opened and closed: edges, decided by serve
                    events[10:10] = [Event.start_edge(base + 10, "door"),
                                     Event.end_edge(base + 10, base + 20, "door")]
                assert await client.publish(from_iterable(events), device=name).wait(10) \
                    == "completed"
                await client.close()
            # stop once the server has merged everything (what is in flight at the signal
            # is refused: shutting down removes every input)
            await until(lambda: sum(not e.is_cti for e in seen) == 103, timeout=20)
            proc.send_signal(signal.SIGINT)
            stdout, stderr = await asyncio.wait_for(proc.communicate(), 20)
            await watcher.close()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return proc.returncode, stderr.decode()

    code_, stderr = run(scenario(), timeout=40)
    assert code_ == 0, stderr
    assert "105 events received, 0 refused; 103 emitted" in stderr
    assert "edges: 1 opened, 1 closed (0 moved), 0 unmatched" in stderr
    assert TOKEN not in stderr
    parts = sorted(p.name for p in out.iterdir())
    assert parts == ["events-000000.jsonl"]
    lines = (out / "events-000000.jsonl").read_text().splitlines()
    assert len(lines) == 103 + 3  # the inserts, two delayed CTIs and the final one
    assert sum('"kind":"start"' in line or '"kind":"end"' in line for line in lines) == 2
    assert '"source":"probe"' in lines[0] and '"seq":0' in lines[0]


def _example():
    path = ROOT / "examples" / "net_demo.py"
    spec = importlib.util.spec_from_file_location("net_demo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_three_device_example_runs(tmp_path, capsys):
    demo = _example()
    result = run(demo.demo(str(tmp_path), count=12, quiet=True), timeout=40)
    stats = result["stats"]
    inputs = {s.name: s for s in stats.union.inputs}
    assert inputs["thermo-1"].state == inputs["thermo-2"].state == "completed"
    assert inputs["door-4"].state == "failed"
    assert isinstance(inputs["door-4"].error, ConnectionLost)
    assert inputs["thermo-1"].received == inputs["thermo-2"].received == 12
    merged = result["merged"]
    assert merged[-1].is_cti and merged[-1].start == MAX_TIME
    # every event that arrived is merged or recorded late
    union = stats.union
    assert union.received == union.emitted + union.dropped
    assert sum(not e.is_cti for e in merged) == union.emitted
    assert (tmp_path / "events-000000.jsonl").exists()
    assert "door-4 dropped off" in capsys.readouterr().out


def _serve_argv(*args: str) -> list[str]:
    code = ("import sys; from goldilocks.cli import main, register_command; "
            "from goldilocks.net.cli import SERVE; register_command(SERVE); "
            "sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-c", code, "serve", *args]


def test_serve_without_the_net_extra_says_what_to_install_in_one_line(tmp_path):
    """Before: a 24-line traceback from deep inside the server's start."""
    import subprocess

    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{TOKEN}\n")
    hide = "import sys; sys.modules['websockets'] = None; "  # as if it were not installed
    argv = _serve_argv("--listen", "127.0.0.1:0", "--token-file", str(tokens))
    argv[2] = hide + argv[2]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "goldilocks serve: error: needs websockets, which is not installed: "
        "pip install 'goldilocks[net]'"]
    assert done.stdout == ""


def test_serve_stops_on_sigterm_within_its_bound_with_status_0(tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{TOKEN}\n")
    argv = _serve_argv("--listen", "127.0.0.1:0", "--token-file", str(tokens),
                       "--shutdown-timeout", "2s")

    async def scenario():
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            url = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().split()[-1]
            client = await connect(url, token=TOKEN)
            publication = client.publish(from_iterable([Event.point(1)]), device="d")
            assert await publication.wait(10) == "completed"
            loop = asyncio.get_running_loop()
            began = loop.time()
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), 20)
            took = loop.time() - began
            await client.close()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return proc.returncode, stderr.decode(), took

    code, stderr, took = run(scenario(), timeout=40)
    assert code == 0, stderr
    assert took < 2 + 3 + 2  # the bound, and the interpreter's own exit
    assert "1 events received, 0 refused" in stderr


def test_serve_usage_errors_exit_2_naming_the_argument(tmp_path, capsys):
    from goldilocks.cli import main

    register_command(SERVE)
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{TOKEN}\n")
    base = ["serve", "--listen", "127.0.0.1:0", "--token-file", str(tokens)]
    for extra, words in ((["--idle-timeout", "abc"], "argument --idle-timeout: 'abc'"),
                         (["--setup-timeout", "0s"], "argument --setup-timeout: '0s'"),
                         (["--tcp", "nowhere"], "argument --tcp:"),
                         (["--policy", "nope"], "argument --policy:"),
                         (["--status-every", "60"], "argument --status-every: '60'"),
                         (["--status-every", "-1s"], "argument --status-every:")):
        assert main(base + extra) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.splitlines()) == 1, err
    for extra, words in ((["--log-level", "loud"], "argument --log-level: invalid choice"),
                         (["--log-format", "xml"], "argument --log-format: invalid choice")):
        assert main(base + extra) == 2  # argparse's own: the usage, then the error
        err = capsys.readouterr().err
        assert words in err.splitlines()[-1], err
    assert main(["serve", "--listen", "127.0.0.1:0", "--token-file",
                 str(tmp_path / "missing.txt")]) == 1  # an input it cannot read


def test_a_restarted_server_goes_on_with_the_parts_numbers_and_seq(tmp_path):
    """Before, a restart (without a checkpoint) numbered its parts after the last one but
    began seq at 0 again, so the parts read together interleaved the two runs."""
    from operators import goldilocks

    from tests.net.netsupport import TOKEN as NET_TOKEN
    from tests.net.netsupport import start_server

    async def once(first: int) -> None:
        server = await start_server(goldilocks("1s"), out_dir=str(tmp_path), final_cti=False)
        client = await connect(server.tcp_url, token=NET_TOKEN)
        events = [Event.point(10**18 + first + i, {"i": first + i}) for i in range(5)]
        assert await client.publish(from_iterable(events), device="d").wait(10) \
            == "completed"
        await client.close()
        assert await server.close()

    run(once(0))
    run(once(5))
    lines = [line for part in sorted(tmp_path.glob("events-*.jsonl"))
             for line in part.read_text().splitlines()]
    assert len(lines) == 10
    assert [f'"seq":{n},' in line and f'"i":{n}' in line for n, line in enumerate(lines)] \
        == [True] * 10
