"""Spark batch replay of one large JSON Lines log: read in spans of bytes, or one task per file.

    python -m benchmarks.bench_spark_lines                  # 2 million events, as recorded
    python -m benchmarks.bench_spark_lines --rows 4000000 --reps 3

The log is ``bench_spark.make_log`` (100 devices, 1 ms apart, clocks jittered by up to 5 s, a
CTI every 10th row, delay 2 s) written as ONE JSON Lines file in the bundled fleet format:
``arrival`` and ``start`` as ISO-8601 strings with milliseconds, a ``{"celsius": …}``
payload on each reading. Each master (``local[1]``, ``local[2]``) runs in its own process,
one after the other, on the same file. In each, both contenders are checked first (their
emitted and late counts equal ``goldilocks.replay``'s of the file; also the warm-up), then
``--reps`` rounds run each once, in turn. A run is ``write_replay(read_event_log(spark,
path, split_bytes=…), …)`` into the ``noop`` sink: the file read and every row decided once
(the default scan plan reads the log twice, its summary pass and its decisions).
Contenders: ``spans`` (``split_bytes=None``: Spark's split size, at least one span per
core) and ``one task`` (``split_bytes=0``). CPU seconds are the process tree's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from engine.times import Nanoseconds
from benchmarks.bench_spark import make_log
from benchmarks.bench_spark_batch import rounds, session

DELAY = Nanoseconds(2 * 10**9)
MASTERS = ("local[1]", "local[2]")
CONTENDERS = {"spans": None, "one task": 0}


def write_fleet(rows: int, path: Path) -> None:
    """``make_log(rows)`` as fleet-format JSON Lines (ISO times, ms; arrival 1 ms apart)."""
    log = make_log(rows)
    iso = np.datetime_as_string(log["start"].astype("datetime64[ns]").astype("datetime64[ms]"),
                                unit="ms", timezone="UTC")
    arrival = log["start"].min() + log["idx"] * 10**6 + 5 * 10**9
    arrived = np.datetime_as_string(arrival.astype("datetime64[ns]").astype("datetime64[ms]"),
                                    unit="ms", timezone="UTC")
    celsius = np.round(20 + (log["idx"] % 97) / 20, 2)  # canonical JSON numbers
    with open(path, "w") as f:
        for a, s, d, c, cti in zip(arrived.tolist(), iso.tolist(), log["source"].tolist(),
                                   celsius.tolist(), log["is_cti"].tolist()):
            if cti:
                f.write(f'{{"arrival":"{a}","source":"d{d}","kind":"cti","start":"{s}"}}\n')
            else:
                f.write(f'{{"arrival":"{a}","source":"d{d}","kind":"insert","start":"{s}",'
                        f'"payload":{{"celsius":{c!r}}}}}\n')


def child(master: str, path: str, reps: int, want: list[int]) -> dict:
    """Every contender in a fresh session of ``master``: wall and CPU seconds."""
    from spark_adapter import read_event_log, replay, write_replay

    spark = session(master, "bench_spark_lines")
    tasks = {}
    for name, split in CONTENDERS.items():
        frame = read_event_log(spark, path, split_bytes=split)
        tasks[name] = frame.rdd.getNumPartitions()
        events, late = replay(frame, delay=DELAY)
        got = [events.count(), late.count()]
        assert got == want, (master, name, got, want)

    def run(split: int | None) -> None:
        write_replay(read_event_log(spark, path, split_bytes=split), "events", "late",
                     format="noop", mode="overwrite", delay=DELAY)

    result = {"master": master, "tasks": tasks,
              **rounds(spark, {name: partial(run, split) for name, split
                               in CONTENDERS.items()}, reps)}
    spark.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # master, in a child process
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--want", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.path, args.reps, json.loads(args.want))))
        return 0

    from goldilocks.replay import replay as engine_replay

    directory = Path(tempfile.mkdtemp(prefix="bench_spark_lines_"))
    results = {}
    try:
        path = directory / "fleet.jsonl"
        write_fleet(args.rows, path)
        size = path.stat().st_size
        began = time.perf_counter()
        stats = engine_replay([str(path)], delay=DELAY, out=None)
        engine_s = time.perf_counter() - began
        want = [stats.emitted + stats.ctis_emitted, stats.late]
        for master in MASTERS:
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_spark_lines", "--child", master,
                 "--path", str(path), "--reps", str(args.reps), "--want", json.dumps(want)],
                check=True, stdout=subprocess.PIPE, text=True)  # Spark's log on stderr
            results[master] = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    n = args.rows
    print(f"Spark replay of one JSON Lines file: {n:,} events, {size / 1e6:.0f} MB, ISO times, "
          f"delay 2 s; {os.cpu_count()} cores; pyspark {results[MASTERS[0]]['spark']}; "
          f"{args.reps} rounds, median (min-max) s; {want[1]:,} late")
    print(f"  engine's own replay of the file (goldilocks.replay, one core): {engine_s:.2f} s")
    for master in MASTERS:
        r = results[master]
        print(f"  {master}: load average {r['load'][0]:.1f} before, {r['load'][1]:.1f} after; "
              f"tasks {r['tasks']}")
    medians: dict[str, dict[str, float]] = {}
    for name in CONTENDERS:
        cells = []
        for master in MASTERS:
            ts = results[master]["times"][name]
            medians.setdefault(name, {})[master] = statistics.median(ts)
            cells.append(f"{statistics.median(ts):7.2f} ({min(ts):.2f}-{max(ts):.2f}) "
                         f"{statistics.median(results[master]['cpu'][name]):6.2f}")
        m1, m2 = medians[name][MASTERS[0]], medians[name][MASTERS[1]]
        print(f"{name:10s} " + " ".join(f"{c:>27s}" for c in cells)
              + f" {n / m2:12,.0f} rows/s local[2] {m1 / m2:6.2f}x local[1]/local[2]")
    ratio = medians["one task"][MASTERS[1]] / medians["spans"][MASTERS[1]]
    print(f"spans vs one task per file at local[2]: {ratio:.2f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
