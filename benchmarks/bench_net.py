"""Events per second over loopback: devices → network → server's union → output.

Run by hand::

    .venv/bin/python benchmarks/bench_net.py            # full table
    .venv/bin/python benchmarks/bench_net.py --quick    # fewer events, 3 repetitions

The server (a ``Union`` under ``max_policy``, its output counted by the server's fan-out) runs
in this process; the devices run in a second process, so the client's encoding does not share
the server's interpreter. One repetition: the device process publishes ``events`` in all
(split over 1 or 16 devices, each its own connection) while the server times from "go" to
the last event leaving the union into the server's output fan-out (its consumer, which
counts them). The devices' events are built before "go". Warm-up, then ``--reps`` (>= 5)
repetitions: median, min, max, and the server process's CPU time per event (median). The
machine's load average is printed before the table and after each row: on a shared machine
the rates mean little without it. Also a codec micro-benchmark (JSON rows as sent, against a
columnar binary layout) behind the choice of encoding (docs/protocol.md, "Encoding").

``--part durable`` (also part of the full run): what durability costs. The batched workload
(16 devices, 1024 events a frame) against a server writing no files, one writing its parts to
``--out-dir``, and one doing so with ``--checkpoint`` every second (each checkpoint: the
union's cut, an ``fsync`` of the parts and of the checkpoint, the parts published, the
devices told), in one process, in turn: ``--rounds`` rounds of one repetition each after a
warm-up; the ratios of each round and the median of the ratios. The devices' outboxes are sized to hold a
whole repetition, so that they measure the server's cost, not the outbox's bound.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import multiprocessing as mp
import os
import platform
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson  # noqa: E402

from engine.event import POINT, Event  # noqa: E402

__all__ = ["main"]

TOKEN = "bench-token"
#: Seconds one repetition may take before the run is declared stalled (it never should).
STALL = 60.0


def _cpu() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load() -> str:
    """The load average over 1, 5 and 15 minutes."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "-"


# ------------------------------------------------------------------------------ device side
def _devices(url: str, devices: int, per_device: int, batch: int, reps: int, pipe,
             outbox: int = 65_536) -> None:
    from engine.sources import from_iterable
    from goldilocks.net.client import connect

    async def run() -> None:
        loop = asyncio.get_running_loop()
        clients = [await connect(url, token=TOKEN) for _ in range(devices)]
        base = 1_795_334_400 * 10**9  # today's instants (times like epoch seconds are refused)
        for rep in range(reps):
            # The test data is made before "go": building Event objects is the device's
            # business, not the network's, and it is not what this benchmark times.
            data = [[Event(POINT, base + i, base + i + 1, i) for i in range(per_device)]
                    for _ in clients]
            pipe.send("ready")
            await loop.run_in_executor(None, pipe.recv)  # go (the loop keeps turning)
            pubs = []
            for d, client in enumerate(clients):
                pubs.append(client.publish(from_iterable(data[d]), device=f"dev-{d}-{rep}",
                                           batch=batch, outbox=max(outbox, batch)))
            for pub in pubs:
                await pub.wait()
            base += per_device
        for client in clients:
            await client.close()

    asyncio.run(run())


# ------------------------------------------------------------------------------ server side
async def _measure(transport: str, devices: int, events: int, batch: int, reps: int,
                   warmup: int, **options: object) -> tuple[list[float], list[float]]:
    """Events per second of each repetition after the warm-up, and the server's CPU time
    per event (ns) in each. ``options``: the server's (``out_dir``, ``checkpoint``…)."""
    from operators import max_policy
    from goldilocks.net.server import Server

    server = await Server(max_policy(), tokens=[TOKEN], final_cti=False, idle_timeout=60,
                          **options).start(ws=("127.0.0.1", 0),  # type: ignore[arg-type]
                                           tcp=("127.0.0.1", 0))
    url = server.ws_url if transport == "ws" else server.tcp_url
    per_device = events // devices
    total_reps = warmup + reps
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_devices, args=(url, devices, per_device, batch, total_reps,
                                               theirs, per_device), daemon=True)
    child.start()
    loop = asyncio.get_running_loop()
    rates: list[float] = []
    cpu: list[float] = []
    try:
        for rep in range(total_reps):
            await loop.run_in_executor(None, ours.recv)  # ready
            target = server.stats().output_events + per_device * devices
            start = time.perf_counter()
            cpu_start = time.process_time()
            ours.send("go")
            while server.output.events < target:
                await asyncio.sleep(0.0005)
                if time.perf_counter() - start > STALL:
                    stats = server.stats()
                    raise RuntimeError(
                        f"{transport}, {devices} device(s), batch {batch}: repetition {rep} "
                        f"stalled after {STALL} s at {stats.output_events} of {target} "
                        f"events out (received {stats.events_received}, refused "
                        f"{stats.events_refused}, union buffered {stats.union.buffered})")
            seconds = time.perf_counter() - start
            if rep >= warmup:
                rates.append(per_device * devices / seconds)
                cpu.append((time.process_time() - cpu_start) / (per_device * devices) * 1e9)
    except BaseException:
        child.kill()  # a stalled or failed run: the devices wait for nothing more
        raise
    finally:
        await loop.run_in_executor(None, child.join, 30)
        await server.close()
    return rates, cpu


# ------------------------------------------------------------------------------ codec
def _codec(n: int = 1000, reps: int = 200) -> list[tuple[str, float, float]]:
    """ns per event to decode one frame of ``n`` events: JSON rows (what we send, with the
    checks the server makes) against a columnar binary layout (two int64 arrays and the
    payloads as one JSON array), which checks nothing."""
    from goldilocks.net.protocol import decode_events, decode_frame, encode_next

    events = [Event(POINT, 1_700_000_000_000_000_000 + i, 1_700_000_000_000_000_001 + i,
                    {"v": i * 0.5}, None) for i in range(n)]
    json_frame = encode_next(1, events)

    def json_decode():
        frame = decode_frame(json_frame)
        return decode_events(frame.events, "d", stream=1)

    starts = array.array("q", [e.start for e in events])
    ends = array.array("q", [e.end for e in events])
    binary_frame = struct.pack("<I", n) + starts.tobytes() + ends.tobytes() + orjson.dumps(
        [e.payload for e in events])

    def binary_decode():
        (count,) = struct.unpack_from("<I", binary_frame)
        s = array.array("q")
        s.frombytes(binary_frame[4:4 + 8 * count])
        e = array.array("q")
        e.frombytes(binary_frame[4 + 8 * count:4 + 16 * count])
        payloads = orjson.loads(binary_frame[4 + 16 * count:])
        return [Event(POINT, a, b, p, "d") for a, b, p in zip(s.tolist(), e.tolist(), payloads)]

    out = []
    for name, fn, size in (("json rows", json_decode, len(json_frame)),
                           ("binary columns", binary_decode, len(binary_frame))):
        fn()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(reps // 5):
                fn()
            times.append((time.perf_counter() - t) / (reps // 5) / n * 1e9)
        out.append((name, statistics.median(times), size / n))
    return out


def _durable(transport: str, events: int, rounds: int) -> list[tuple[float, float, float]]:
    """``rounds`` rounds of (no files, ``--out-dir`` without a checkpoint, ``--out-dir`` with
    a checkpoint every second): one repetition each after a warm-up, in a fresh temporary
    directory each."""
    import tempfile

    out = []
    for _ in range(rounds):
        rates = []
        for files, checkpoint in ((False, False), (True, False), (True, True)):
            with tempfile.TemporaryDirectory(prefix="bench-net-") as tmp:
                options: dict[str, object] = {}
                if files:
                    options["out_dir"] = os.path.join(tmp, "out")
                if checkpoint:
                    options.update(checkpoint=os.path.join(tmp, "serve.ckpt"),
                                   checkpoint_every=1.0)
                got, _ = asyncio.run(_measure(transport, 16, events, 1024, 1, 1, **options))
                rates.append(got[0])
        out.append((rates[0], rates[1], rates[2]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="fewer events (a smoke run)")
    parser.add_argument("--transport", choices=("ws", "tcp", "both"), default="both")
    parser.add_argument("--part", choices=("all", "rates", "durable"), default="all",
                        help="the rates table, the cost of durability, or both")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of the durability comparison (>= 5)")
    args = parser.parse_args(argv)
    if args.rounds < 5 and not args.quick:
        parser.error("--rounds must be >= 5 (use --quick for a smoke run)")
    if args.reps < 5 and not args.quick:
        parser.error("--reps must be >= 5 (use --quick for a smoke run)")
    scale = 10 if args.quick else 1
    transports = ("ws", "tcp") if args.transport == "both" else (args.transport,)
    print(f"machine: {_cpu()}, {os.cpu_count()} cores, "
          f"{platform.python_implementation()} {platform.python_version()}; "
          f"load average (1, 5, 15 min) {_load()}")
    if args.part in ("all", "rates"):
        print("codec, one frame of 1000 point events with a small payload:")
        for name, ns, size in _codec():
            print(f"  {name:15s} {ns:8.0f} ns/event decoded  {size:6.1f} bytes/event")
        print()
        print(f"{'transport':9s} {'devices':>7s} {'per frame':>9s} {'events':>8s} "
              f"{'median ev/s':>12s} {'min':>10s} {'max':>10s} {'server ns/ev':>12s}  "
              "load after")
        for transport in transports:
            for devices in (1, 16):
                for batch, events in ((1, 32_000), (1024, 320_000)):
                    events //= scale
                    rates, cpu = asyncio.run(_measure(transport, devices, events, batch,
                                                      args.reps, args.warmup))
                    print(f"{transport:9s} {devices:7d} {batch:9d} {events:8d} "
                          f"{statistics.median(rates):12,.0f} {min(rates):10,.0f} "
                          f"{max(rates):10,.0f} {statistics.median(cpu):12,.0f}  {_load()}",
                          flush=True)
    if args.part in ("all", "durable"):
        rounds = 2 if args.quick else args.rounds
        events = 320_000 // scale
        print()
        print(f"durability: 16 devices, 1024 events a frame, {events} events; no files, "
              f"--out-dir, and --out-dir with --checkpoint-every 1s; {rounds} rounds")
        print(f"{'transport':9s} {'no files':>10s} {'files':>10s} {'checkpoint':>10s} "
              f"{'ckpt/files':>10s} {'ckpt/none':>9s}  (medians; ratios: the median of each "
              "round's)  load after")
        for transport in transports:
            rows = _durable(transport, events, rounds)
            print(f"{transport:9s} {statistics.median(r[0] for r in rows):10,.0f} "
                  f"{statistics.median(r[1] for r in rows):10,.0f} "
                  f"{statistics.median(r[2] for r in rows):10,.0f} "
                  f"{statistics.median(r[2] / r[1] for r in rows):9.2f}x "
                  f"{statistics.median(r[2] / r[0] for r in rows):8.2f}x  "
                  f"rounds (ckpt/files): {', '.join(f'{r[2] / r[1]:.2f}' for r in rows)}  "
                  f"{_load()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
