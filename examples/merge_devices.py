"""Merge three devices whose clocks disagree into one stream with one clock.

- thermo-1 runs 40 s slow, thermo-2 is right, door-3 runs 90 s fast;
- door-3 joins late, thermo-1 leaves early, thermo-2 sends a late burst at the end.

Each device is an asyncio producer feeding the union through an emitter: ``await send``
waits for credit, so a slow consumer slows the devices. Arrivals are scheduled on a virtual
timeline (one step per tick, devices in a fixed order), so the output is the same every run.

Run: ``python examples/merge_devices.py``
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import MAX_TIME, Event, format_ns, iterate, to_ns  # noqa: E402
from operators import Union, goldilocks  # noqa: E402

BASE = to_ns("2024-06-01T12:00:00Z")
SECOND = 10**9
SEED = 7

# name: (clock offset s, first tick, last tick)
DEVICES = {
    "thermo-1": (-40, 0, 9),
    "thermo-2": (0, 0, 15),
    "door-3": (90, 5, 15),
}


def script() -> list[tuple[int, str, Event | str]]:
    """(tick, device, event | "leave") in arrival order; every device reports every 20 s."""
    rng = random.Random(SEED)
    plan = []
    for tick in range(16):
        for name, (offset, first, last) in DEVICES.items():
            if first <= tick <= last:
                now = BASE + (tick * 20 + offset) * SECOND
                reading = round(rng.uniform(18, 24), 1) if name != "door-3" else "open"
                plan.append((tick, name, Event.point(now, payload=reading)))
                if tick % 3 == 2:
                    plan.append((tick, name, Event.cti(now)))
            if tick == last:
                if name == "thermo-2":  # a late burst: buffered readings from a minute ago
                    for back in (70, 65, 60):
                        t = BASE + (tick * 20 - back) * SECOND
                        late = Event.point(t, payload="backlog") if back == 70 else \
                            Event.interval(t, t + 30 * SECOND, payload="backlog")
                        plan.append((tick, name, late))
                plan.append((tick, name, "leave"))
    return plan


async def main() -> None:
    union = Union(goldilocks("2m", on_late="adjust"), prefetch=8, max_buffered=16, final_cti=True)
    merged: list[Event] = []

    async def consume() -> None:
        async for event in iterate(union, prefetch=4):
            merged.append(event)

    consumer = asyncio.create_task(consume())
    emitters = {}
    for _tick, name, item in script():
        if name not in emitters:
            emitters[name] = union.open_input(name)  # joins now, whatever the others do
        if item == "leave":
            emitters[name].complete()
        else:
            await emitters[name].send(item)  # waits for credit: backpressure from the consumer
    union.close()
    await asyncio.wait_for(consumer, 10)

    print("merged output (goldilocks, delay 2m, late intervals adjusted):")
    for e in merged:
        if e.kind == "cti":
            print(f"  CTI   {format_ns(e.start) if e.start < MAX_TIME else '+inf'}")
        else:
            print(f"  {e.kind:<8} {format_ns(e.start)}  {e.source:<9} {e.payload}"
                  + (f"  until {format_ns(e.end)}" if e.kind == "interval" else ""))
    stats = union.stats()
    print("\nper input:")
    print(f"  {'input':<9} {'state':<10} {'recv':>4} {'ctis':>4} {'emit':>4} {'drop':>4} "
          f"{'adj':>3} {'lag':>6}  last CTI")  # recv: inserts; emit includes adjusted
    for s in stats.inputs:
        # lag: the output CTI minus the input's last CTI (after the final CTI at +inf, the
        # output CTI before it: the lag the input ended with)
        lag = "-" if s.lag is None else f"{s.lag // SECOND}s"
        last = "-" if s.last_cti is None else format_ns(s.last_cti)
        print(f"  {s.name:<9} {s.state:<10} {s.received:>4} {s.ctis:>4} {s.emitted:>4} "
              f"{s.dropped:>4} {s.adjusted:>3} {lag:>6}  {last}")
    print(f"  total: received {stats.received}, emitted {stats.emitted}, dropped "
          f"{stats.dropped}, CTIs out {stats.ctis}, peak buffered {stats.peak_buffered}/"
          f"{stats.max_buffered}")
    print("\nlate records:")
    for r in union.late.drain():
        print(f"  {r.input:<9} {r.event.kind:<8} {format_ns(r.event.start)} before CTI "
              f"{format_ns(r.cti)}: {r.action}")


if __name__ == "__main__":
    asyncio.run(main())
