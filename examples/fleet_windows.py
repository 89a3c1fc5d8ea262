"""One-minute mean temperatures of a fleet, per device and fleet-wide, final when the CTI says.

The bundled device logs (``examples/data/devices/*.jsonl``: thermo-2's clock runs 90 s
behind, thermo-3's 2 minutes ahead, door-4 joins late, and an uplink outage ends in a burst
of buffered readings) are merged in recorded arrival order, then windowed two ways:

- **per device**, each device's windows closed by that device's own clock: its own CTIs run
  through its own copy of ``goldilocks("30s")`` (TS §6.3). thermo-3's minute closes when
  *thermo-3* says so, however far the others lag. After thermo-2's outage its buffered
  readings and CTIs arrive shuffled in one burst, so some readings come after thermo-2's own
  CTI has closed their minute: they are late for a closed window (TS §6.2), and counted.
- **fleet-wide**, every reading in one window per minute, closed by the merged stream's one
  clock: ``cti_sync("5m")``, the Goldilocks policy over all devices, as ``goldilocks replay
  --delay 5m`` runs it. The burst after the outage is late for it (dropped by the policy).

Each device ends with a CTI at +infinity (it closes its time), so every window is emitted.

Run: ``python examples/fleet_windows.py``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import Event, collect, format_ns, from_iterable, pipe  # noqa: E402
from eventlog import read_records  # noqa: E402
from operators import cti_sync, goldilocks, tumbling  # noqa: E402

DEVICES = sorted((Path(__file__).resolve().parent / "data" / "devices").glob("*.jsonl"))


def merged_events() -> list[Event]:
    """The device logs merged by recorded arrival (TS §5.2), each device closing its time."""
    events = []
    for r in read_records(DEVICES):
        if r["kind"] == "cti":
            events.append(Event.cti(r["start"], source=r["source"]))
        elif r["kind"] == "insert":
            end = r["end"] if r["end"] is not None else r["start"] + 1
            events.append(Event("interval" if r["end"] is not None else "point", r["start"],
                                end, r["payload"], r["source"]))
    for name in sorted({e.source for e in events}):
        events.append(Event.cti_infinity(source=name))
    return events


def device_means(events: list[Event]):
    """Per device, by its own clock: ``(results, stats, late records)``."""
    per_device = tumbling("1m", "mean:celsius", key="source", clocks=goldilocks("30s"))
    results = [e.payload for e in collect(pipe(from_iterable(events), per_device))]
    return results, per_device.stats(), per_device.late.drain()


def fleet_means(events: list[Event]):
    """Fleet-wide, by the merged stream's one clock: ``(results, policy's late records)``."""
    sync = cti_sync("5m")
    fleet = tumbling("1m", "mean:celsius")
    out = collect(pipe(from_iterable(events), sync, fleet))
    return [e.payload for e in out if not e.is_cti], sync.late.drain()


def main() -> None:
    events = merged_events()
    devices, stats, device_late = device_means(events)
    fleet, fleet_late = fleet_means(events)
    names = sorted({r.key for r in devices if r.values["mean_celsius"] is not None})
    means = {(r.key, r.start): r.values["mean_celsius"] for r in devices}
    minutes = sorted({r.start for r in fleet} | {start for _, start in means})
    by_minute = {r.start: r for r in fleet}
    print(f"{len(events)} events from {len(DEVICES)} device logs; one-minute mean °C")
    print(f"{'minute (UTC)':<13}" + "".join(f"{n:>10}" for n in names) + "     fleet (n)")
    for start in minutes:
        cells = "".join(f"{means[(n, start)]:>10.2f}" if means.get((n, start)) is not None
                        else f"{'—':>10}" for n in names)
        f = by_minute.get(start)
        fleet_cell = f"{f.values['mean_celsius']:>10.2f} ({f.count})" if f else f"{'—':>10}"
        print(f"{format_ns(start)[11:16]:<13}{cells}{fleet_cell}")
    print(f"per device: {stats.emitted} windows, at most {stats.peak_open} open, "
          f"{stats.late} readings late for a closed window (thermo-2's burst), "
          f"{stats.keys} device clocks")
    print(f"fleet-wide: {len(fleet)} windows, {len(fleet_late)} readings late for the fleet's "
          "clock (dropped by the policy)")


if __name__ == "__main__":
    main()
