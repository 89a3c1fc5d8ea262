"""Generate the bundled sample logs in examples/data/ (deterministic: fixed seed).

A small fleet, 40 minutes from 2026-11-22T08:00:00Z, recorded as it arrived:

- ``thermo-1``: a thermometer with a good clock, a reading every ~10 s, a CTI every 30 s;
- ``thermo-2``: its clock runs 90 s behind; it loses its uplink from minute 20 to 28 and then
  sends the buffered readings in one burst — the older ones arrive after the merged CTI
  has passed them (late);
- ``thermo-3``: its clock runs 2 minutes ahead (it drags the goldilocks CTI forward);
  it leaves the fleet at minute 35;
- ``door-4``: joins late (minute 12) and reports door-open intervals ``[start, end)``.

Files: ``fleet.jsonl`` (everything, ordered by ``arrival``) and ``devices/<name>.jsonl`` (the
same records, one file per device; ``goldilocks replay examples/data/devices/*.jsonl`` merges
them by ``arrival`` into the same order). Times are ISO-8601 strings, as a device would write.

Run: ``python examples/make_sample_logs.py`` (rewrites the files).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from eventlog import write_log
from engine.times import NS_PER_S, format_ns, to_ns

__all__ = ["make_records", "main"]

SEED = 20261122
T0 = to_ns("2026-11-22T08:00:00Z")
MINUTE = 60 * NS_PER_S


def _iso(ns: int) -> str:
    text = format_ns(ns)  # ...T08:00:01.500000000Z -> millisecond precision is plenty here
    return text[:23] + "Z"


def make_records(seed: int = SEED) -> list[dict]:
    rng = random.Random(seed)
    records: list[tuple[int, int, dict]] = []  # (arrival ns, tie, record)
    tie = 0

    def send(arrival: int, rec: dict) -> None:
        nonlocal tie
        records.append((arrival, tie, rec))
        tie += 1

    devices = {
        "thermo-1": dict(skew=0, joins=0, leaves=None, period=10),
        "thermo-2": dict(skew=-90 * NS_PER_S, joins=0, leaves=None, period=10),
        "thermo-3": dict(skew=120 * NS_PER_S, joins=0, leaves=35 * MINUTE, period=12),
        "door-4": dict(skew=-20 * NS_PER_S, joins=12 * MINUTE, leaves=None, period=45),
    }
    end = 40 * MINUTE
    for name, d in devices.items():
        t = d["joins"] + rng.randrange(0, 5 * NS_PER_S)
        stop = d["leaves"] if d["leaves"] is not None else end
        last_cti = t
        base = 20.0 + rng.random() * 2
        while t < stop:
            local = T0 + t + d["skew"]
            latency = rng.randrange(50, 600) * 1_000_000
            arrival = T0 + t + latency
            if name == "thermo-2" and 20 * MINUTE <= t < 28 * MINUTE:
                arrival = T0 + 28 * MINUTE + rng.randrange(0, 3000) * 1_000_000  # the burst
            if name == "door-4":
                open_for = rng.randrange(5, 40) * NS_PER_S
                rec = {"source": name, "kind": "insert", "start": _iso(local),
                       "end": _iso(local + open_for),
                       "payload": {"door": "open", "seconds": open_for // NS_PER_S}}
            else:
                base += rng.uniform(-0.15, 0.15)
                rec = {"source": name, "kind": "insert", "start": _iso(local),
                       "payload": {"celsius": round(base, 2)}}
            send(arrival, rec)
            if t - last_cti >= 30 * NS_PER_S:
                send(arrival + 1_000_000, {"source": name, "kind": "cti", "start": _iso(local)})
                last_cti = t
            t += d["period"] * NS_PER_S + rng.randrange(-1500, 1500) * 1_000_000
        if d["leaves"] is not None:
            send(T0 + stop + 1_000_000, {"source": name, "kind": "leave"})
    records.sort(key=lambda r: (r[0], r[1]))
    out = []
    previous = -1
    for arrival, _, rec in records:
        ms = max(arrival // 1_000_000, previous + 1)  # unique, increasing millisecond stamps
        previous = ms
        out.append({"arrival": _iso(ms * 1_000_000), **rec})
    return out


def main() -> None:
    here = Path(__file__).resolve().parent / "data"
    (here / "devices").mkdir(parents=True, exist_ok=True)
    records = make_records()
    # identical arrival stamps would be ordered by file on the per-device merge: keep them unique
    seen = set()
    for r in records:
        assert r["arrival"] not in seen, r
        seen.add(r["arrival"])
    write_log(here / "fleet.jsonl", records)
    by_device: dict[str, list] = {}
    for r in records:
        by_device.setdefault(r["source"], []).append(r)
    for name, recs in sorted(by_device.items()):
        write_log(here / "devices" / f"{name}.jsonl", recs)
    print(f"{len(records)} records, {len(by_device)} devices -> {os.path.relpath(here)}")


if __name__ == "__main__":
    main()
