"""Windowed replay throughput next to plain replay, in one run: ``replay --window``.

    python -m benchmarks.bench_windows            # 2 million events
    python -m benchmarks.bench_windows --quick    # 300 thousand events

The log is ``bench_replay``'s (8 devices, a CTI every 10th record, payload ``{"v": int}``,
some skew). Rows, end to end (parse, merge, policy, windows, write): plain replay (the
events out), and windowed replays of the same log — tumbling 1 s windows with
``mean:v``, unkeyed and keyed by device, hopping 10 s windows every 1 s keyed by device with
``count``/``mean``/``max``, on the columnar path; the first windowed row also on the element
path; and per-device clocks (``--clock key``) on both paths. One warm-up round (which checks that both paths write the same rows), then
``--repeat`` (>= 5) rounds, every row once per round in turn; the table gives events/s for
the median, best and worst run, by CPU time, and each row's median per-round ratio to plain
replay (below 1: slower than plain replay).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_replay import cpu_seconds, load, make_log
from goldilocks.replay import replay
from goldilocks.windowed import replay_windows

__all__ = ["ROWS", "main"]

#: label, windowed-replay options (``None``: plain replay), columnar
ROWS: list[tuple[str, dict[str, Any] | None, bool]] = [
    ("plain replay, columnar path", None, True),
    ("window 1s, mean:v, columnar", dict(window="1s", aggregates=["mean:v"]), True),
    ("window 1s, mean:v, by device, columnar",
     dict(window="1s", aggregates=["mean:v"], key="source"), True),
    ("hop 10s/1s, 3 aggs, by device, columnar",
     dict(window="10s", hop="1s", aggregates=["count", "mean:v", "max:v"], key="source"), True),
    ("window 1s, mean:v, element path", dict(window="1s", aggregates=["mean:v"]), False),
    ("window 1s, mean:v, device clocks, columnar",
     dict(window="1s", aggregates=["mean:v"], key="source", clock="key"), True),
    ("window 1s, mean:v, device clocks, element",
     dict(window="1s", aggregates=["mean:v"], key="source", clock="key"), False),
]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300k events instead of 2M")
    ap.add_argument("--events", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    n = args.events or (300_000 if args.quick else 2_000_000)
    repeat = max(5, args.repeat)
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-windows-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"log-{n}.jsonl"
    if not log.exists():
        make_log(log, n)
    out = work / "out.jsonl"
    print(f"{n:,} events; {repeat} rounds after a warm-up, each running every row once\n",
          flush=True)
    wall: list[list[float]] = [[] for _ in ROWS]
    cpu: list[list[float]] = [[] for _ in ROWS]
    written: dict[str, bytes] = {}
    for round_ in range(repeat + 1):
        print(f"  round {round_}: {load()}", flush=True)
        for i, (label, options, columnar) in enumerate(ROWS):
            before, began = cpu_seconds(), time.perf_counter()
            if options is None:
                replay([log], delay="5s", out=out, columnar=columnar)
            else:
                replay_windows([log], delay="5s", out=out, columnar=columnar, **options)
            took, used = time.perf_counter() - began, cpu_seconds() - before
            if round_:
                wall[i].append(took)
                cpu[i].append(used)
            elif options is not None:  # the warm-up: the same rows on both paths
                key = repr(sorted(options.items()))
                seen = written.setdefault(key, out.read_bytes())
                assert seen == out.read_bytes(), label
    med = statistics.median
    print(f"\n{'end to end':<42} {'median ev/s':>12} {'best ev/s':>12} {'worst ev/s':>12} "
          f"{'CPU ev/s':>12} {'x plain':>8}")
    for i, (label, _, _) in enumerate(ROWS):
        t, c = wall[i], cpu[i]
        ratio = med([p / x for p, x in zip(wall[0], t)])
        print(f"{label:<42} {n / med(t):>12,.0f} {n / min(t):>12,.0f} {n / max(t):>12,.0f} "
              f"{n / med(c):>12,.0f} {ratio:>8.2f}")
    print(f"\n{load()}")


if __name__ == "__main__":
    main()
