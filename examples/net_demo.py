"""A server and three simulated devices over WebSocket, with skewed clocks; one drops off.

    .venv/bin/python examples/net_demo.py [--out-dir DIR]

- ``thermo-1``: its clock is right;
- ``thermo-2``: its clock runs 3 s ahead, so it drags the merged CTI forward (the known
  weakness of max-based policies: the others' stragglers become late);
- ``door-4``: its clock is 4 s behind, and its connection is cut mid-stream, as a device
  losing power would: its input leaves the union with the reason, and the union carries on.

A watcher subscribes to the merged output over the network and prints it; at the end, a
per-device summary. Everything stays on 127.0.0.1 and ephemeral ports.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.event import Event  # noqa: E402
from engine.sinks import iterate  # noqa: E402
from engine.times import MAX_TIME, NS_PER_S, format_ns  # noqa: E402
from operators import goldilocks  # noqa: E402
from goldilocks.net import Server, connect  # noqa: E402

__all__ = ["main"]

TOKEN = "demo-token-not-for-production"
T0 = 1_795_334_400 * NS_PER_S  # a morning in November 2026
DEVICES = {"thermo-1": 0, "thermo-2": 3 * NS_PER_S, "door-4": -4 * NS_PER_S}


async def readings(name: str, skew: int, count: int, step: asyncio.Event | None = None):
    """One reading per simulated second, stamped by the device's own (skewed) clock, and a
    CTI every third reading; a reading lags its CTI-free peers by up to a second."""
    for k in range(count):
        now = T0 + k * NS_PER_S + skew
        yield Event.point(now - (k % 2) * NS_PER_S // 2, {"device": name, "k": k})
        if k % 3 == 2:
            yield Event.cti(now - NS_PER_S)
        await asyncio.sleep(0.002)  # a device produces at its own pace
        if step is not None and k == count // 2:
            step.set()


def _time(t: int) -> str:
    return "+inf" if t == MAX_TIME else format_ns(t)[11:23]


async def demo(out_dir: str | None = None, count: int = 30, quiet: bool = False) -> dict:
    server = await Server(goldilocks("2s"), tokens=[TOKEN], out_dir=out_dir,
                          idle_timeout=5.0).start(ws=("127.0.0.1", 0))
    print(f"server listening on {server.ws_url}")
    watcher = await connect(server.ws_url, token=TOKEN)
    merged: list[Event] = []

    async def watch() -> None:
        async for event in iterate(watcher.output(prefetch=256), prefetch=256):
            merged.append(event)
            if not quiet:
                what = "CTI   " if event.is_cti else f"{event.source:9s}"
                print(f"  merged: {what} {_time(event.start)}")

    watching = asyncio.create_task(watch())
    while not any(c.streams for c in server.stats().connections):
        await asyncio.sleep(0.005)  # until the watcher's subscription is in place

    halfway = asyncio.Event()
    clients = {name: await connect(server.ws_url, token=TOKEN) for name in DEVICES}
    publications = {
        name: clients[name].publish(
            readings(name, skew, count, halfway if name == "door-4" else None), device=name,
            batch=16)
        for name, skew in DEVICES.items()}
    await halfway.wait()
    clients["door-4"].abort()  # the door sensor loses power mid-stream
    print("door-4 dropped off")
    for name in ("thermo-1", "thermo-2"):
        await publications[name].wait(30)
        await clients[name].close()
    await server.close()
    await asyncio.wait_for(watching, 10)
    await watcher.close()

    stats = server.stats()
    print(f"\n{'input':9s} {'state':10s} {'received':>8s} {'emitted':>8s} {'late':>5s}  reason")
    for s in stats.union.inputs:
        reason = "" if s.error is None else str(s.error)[:60]
        print(f"{s.name:9s} {s.state:10s} {s.received:8d} {s.emitted:8d} {s.dropped:5d}  "
              f"{reason}")
    print(f"merged: {sum(not e.is_cti for e in merged)} events, "
          f"{sum(e.is_cti for e in merged)} CTIs (the last at {_time(merged[-1].start)}); "
          f"{stats.union.late.records} late; {stats.events_received} received over the "
          f"network, {stats.events_refused} refused")
    if out_dir is not None:
        parts = sorted(p.name for p in Path(out_dir).glob("*-*.jsonl"))
        print(f"event-log parts: {parts}")
    return {"stats": stats, "merged": merged}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="three devices and a server over WebSocket")
    parser.add_argument("--out-dir", default=None, help="also write event-log parts here")
    parser.add_argument("--count", type=int, default=30, help="readings per device")
    parser.add_argument("--quiet", action="store_true", help="do not print each event")
    args = parser.parse_args(argv)
    asyncio.run(demo(args.out_dir, args.count, args.quiet))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
