"""``goldilocks serve`` as a real process for the crash tests: started on fixed ports of
127.0.0.1 (so that devices find it again after a restart), killed with a real ``SIGKILL``
or stopped with ``SIGTERM``; and the files it leaves, read back."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "crash-token-4c1d"
_CODE = ("import sys; from goldilocks.cli import main, register_command; "
         "from goldilocks.net.cli import SERVE; register_command(SERVE); "
         "sys.exit(main(sys.argv[1:]))")


def free_port() -> int:
    """A port of 127.0.0.1 free now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    """One server's life over several processes: the same arguments, ports and files."""

    def __init__(self, tmp: Path, *extra: str, delay: str = "1m") -> None:
        self.tmp = tmp
        self.tokens = tmp / "tokens.txt"
        self.tokens.write_text(TOKEN + "\n")
        self.out = tmp / "out"
        self.ckpt = tmp / "serve.ckpt"
        self.ws_port, self.tcp_port = free_port(), free_port()
        self.args = ["serve", "--listen", f"127.0.0.1:{self.ws_port}", "--tcp",
                     f"127.0.0.1:{self.tcp_port}", "--token-file", str(self.tokens),
                     "--delay", delay, "--out-dir", str(self.out), "--checkpoint",
                     str(self.ckpt), *extra]
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr: list[str] = []
        self._err: asyncio.Task[bytes] | None = None
        self.starts = 0

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}"

    @property
    def tcp_url(self) -> str:
        return f"tcp://127.0.0.1:{self.tcp_port}"

    async def start(self, failpoint: str | None = None) -> None:
        """Start a process and wait until it listens on both ports."""
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("GOLDILOCKS_FAILPOINT", None)
        if failpoint is not None:
            env["GOLDILOCKS_FAILPOINT"] = failpoint
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CODE, *self.args, cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        self.starts += 1
        # stderr read as it comes: the server logs every connection at INFO, and a pipe
        # nobody reads would stop it once the pipe's buffer is full
        self._err = asyncio.create_task(self.proc.stderr.read())
        for _ in range(2):
            line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
            if not line:
                err = await asyncio.wait_for(self._err, 30)
                raise AssertionError(f"serve did not start: {err.decode()}")
            assert line.decode().startswith("listening on"), line

    async def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        await self.died()

    async def died(self, timeout: float = 30) -> int:
        """Wait for the process to end (by itself: a failpoint); its status."""
        assert self.proc is not None and self._err is not None
        await asyncio.wait_for(self.proc.wait(), timeout)
        self.stderr.append((await asyncio.wait_for(self._err, timeout)).decode())
        return self.proc.returncode  # type: ignore[return-value]

    async def stop(self, timeout: float = 30) -> int:
        """SIGTERM: the orderly stop; its exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return await self.died(timeout)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


def read_parts(out: Path, prefix: str = "events") -> list[dict[str, Any]]:
    """Every record of the published parts ``<prefix>-NNNNNN.jsonl``, in part order."""
    records = []
    for part in sorted(out.glob(f"{prefix}-*.jsonl")):
        for line in part.read_bytes().splitlines():
            records.append(json.loads(line))
    return records


def check_exactly_once(out: Path, sent: dict[str, int]) -> dict[str, int]:
    """Every event each device sent (``payload`` ``{"d": device, "i": number}``, numbers
    ``0 .. sent[device] - 1``) is in the published parts exactly once — as an event, or as a
    late record — in the device's order among the events, and no ``seq`` repeats. Returns
    the counts seen (events, late, parts, CTIs)."""
    events = read_parts(out, "events")
    late = read_parts(out, "late")
    assert not list(out.glob(".*.tmp")), sorted(p.name for p in out.glob(".*.tmp"))
    for records, what in ((events, "events"), (late, "late")):
        seqs = [r["seq"] for r in records]
        assert seqs == sorted(set(seqs)), f"{what}: seq repeated or out of order"
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True, \
            f"{what}: a seq is missing"
    seen: dict[tuple[str, int], int] = {}
    order: dict[str, list[int]] = {d: [] for d in sent}
    for r in events + late:
        payload = r.get("payload")
        if not isinstance(payload, dict) or "d" not in payload:
            continue  # a CTI
        key = (payload["d"], payload["i"])
        seen[key] = seen.get(key, 0) + 1
    for r in events:
        payload = r.get("payload")
        if isinstance(payload, dict) and "d" in payload:
            order[payload["d"]].append(payload["i"])
    twice = sorted(k for k, n in seen.items() if n > 1)
    assert not twice, f"{len(twice)} events twice, e.g. {twice[:5]}"
    missing = [(d, i) for d, n in sent.items() for i in range(n) if (d, i) not in seen]
    assert not missing, f"{len(missing)} events missing, e.g. {missing[:5]}"
    assert len(seen) == sum(sent.values())
    for device, numbers in order.items():
        assert numbers == sorted(numbers), f"{device}: out of its order"
    return {"events": len(events), "late": len(late),
            "parts": len(list(out.glob("events-*.jsonl"))),
            "ctis": sum(1 for r in events if r.get("kind") == "cti")}
