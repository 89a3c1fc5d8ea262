"""Spark batch replay on one and two cores: the scan plan, the SQL plans, the engine. By hand::

    python -m benchmarks.bench_spark_batch                  # 10 million events, as recorded
    python -m benchmarks.bench_spark_batch --rows 2000000 --reps 3

The log is ``bench_spark.make_log`` (100 devices, 1 ms apart, clocks jittered by up to 5 s, a
CTI every 10th row, delay 2 s): a few per cent arrive late. It is written once, shifted to
2026, as ``--files`` Parquet files of consecutive arrival ranges (as a Spark job or a rolling
sink writes a log), row groups of 128k rows. A session's core count is fixed when it starts, so each master
(``local[1]``, ``local[2]``) runs in its own process, one after the other, on the same files.

In each process, every contender is checked first (its emitted and late counts equal the
kernel's; this is also its warm-up), then ``--reps`` rounds run each contender once, in turn
(so a change of machine load falls on all of them alike). A Spark run is ``replay`` of the
Parquet files (read, not cached) with both outputs written to the ``noop`` sink by
``write_replay`` (every row decided once); the engine's run is ``goldilocks.replay`` of the
same files (columnar path, one core whatever the master). CPU seconds are the process tree's
(the JVM, its Python workers, and this driver process).
Printed: median, min and max wall seconds, median CPU seconds, rows/s, the load average before and after, and the
ratios the plan is judged by: each contender's local[1] median over its local[2] median, and
the scan plan's local[2] median against the single global window's.
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
from pathlib import Path
from functools import partial
from typing import Callable

import numpy as np

from engine.times import Nanoseconds
from benchmarks.bench_spark import S, make_log, process_cpu, write_parquet

DELAY = Nanoseconds(2 * S)
EPOCH = 1_795_305_600 * S  # 2026-11-22T00:00:00Z
MASTERS = ("local[1]", "local[2]")
SPARK_PLANS = ("scan", "ranges", "bucketed", "global")
ENGINE = "engine columnar replay"


def write_files(rows: int, files: int, directory: Path) -> list[Path]:
    """The log as ``files`` Parquet files of consecutive arrival ranges."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    whole = directory / "whole.parquet"
    write_parquet(make_log(rows), whole)
    table = pq.read_table(whole)
    whole.unlink()
    # times of today (a constant shift changes no decision): the engine's reader refuses small
    # integers that look like seconds
    start = table.column("start")
    table = table.set_column(table.schema.get_field_index("start"), "start",
                             pc.add(start, pa.scalar(EPOCH, pa.int64())))
    paths = []
    cuts = np.linspace(0, rows, files + 1).astype(int)
    for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        path = directory / f"part-{i:03d}.parquet"
        pq.write_table(table.slice(lo, hi - lo), path, row_group_size=128 * 1024)
        paths.append(path)
    return paths


def kernel_counts(rows: int) -> tuple[int, int]:
    """(emitted rows, late rows) by the engine's kernel: what every contender must give."""
    from engine.policy import CTI_EMIT, DROP_LATE, EMIT, EMIT_ADJUSTED
    from operators.columnar import goldilocks_columns

    log = make_log(rows)
    action = goldilocks_columns(log["is_cti"], log["start"], log["start"] + 1, DELAY, "drop")[0]
    emitted = np.isin(action, (EMIT, EMIT_ADJUSTED, CTI_EMIT))
    late = np.isin(action, (DROP_LATE, EMIT_ADJUSTED))
    return int(np.count_nonzero(emitted)), int(np.count_nonzero(late))


def session(master: str, name: str):  # type: ignore[no-untyped-def]
    """A fresh local session of ``master`` for a benchmark's child process."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName(name)
             .config("spark.driver.memory", "6g").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "8").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def rounds(spark, contenders: dict[str, Callable[[], object]], reps: int) -> dict:  # type: ignore[no-untyped-def]
    """``reps`` rounds of every contender in turn: wall and CPU seconds of each run (the
    JVM's process tree and this process), and the load average before and after."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    jvm = spark.sparkContext._gateway.proc.pid
    load_before = os.getloadavg()[0]
    for _ in range(reps):
        for name, run in contenders.items():
            began, cpu_began = time.perf_counter(), process_cpu(jvm) + time.process_time()
            run()
            times[name].append(time.perf_counter() - began)
            cpu[name].append(process_cpu(jvm) + time.process_time() - cpu_began)
    return {"times": times, "cpu": cpu, "load": [load_before, os.getloadavg()[0]],
            "spark": spark.version}


def child(master: str, paths: list[str], rows: int, reps: int, plans: list[str]) -> dict:
    """Run every contender in a fresh session of ``master``; return their wall times."""
    from pyspark.sql import functions as F

    from goldilocks.replay import replay as engine_replay
    from spark_adapter import replay, write_replay

    spark = session(master, "bench_spark_batch")
    want = kernel_counts(rows)

    def frame():
        return (spark.read.parquet(*paths).withColumn("order_key", F.col("seq"))
                .withColumn("file_index", F.lit(0)).withColumn("line", F.col("seq") + 1))

    def spark_run(plan: str) -> Callable[[bool], object]:
        def run(check: bool) -> object:
            if check:
                events, late = replay(frame(), delay=DELAY, strategy=plan)
                return events.count(), late.count()
            # both outputs, every row decided once, computed and not collected
            write_replay(frame(), "events", "late", format="noop", mode="overwrite",
                         delay=DELAY, strategy=plan)
            return None
        return run

    def engine_run(check: bool) -> object:
        stats = engine_replay(paths, delay=DELAY, out=None)
        return stats.emitted + stats.ctis_emitted, stats.late

    contenders: dict[str, Callable[[bool], object]] = {p: spark_run(p) for p in plans}
    contenders[ENGINE] = engine_run
    for name, run in contenders.items():
        got = run(True)
        assert got == want, (master, name, got, want)
    result = {"master": master, **rounds(spark, {name: partial(run, False) for name, run
                                                 in contenders.items()}, reps)}
    spark.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--plans", default=",".join(SPARK_PLANS))
    parser.add_argument("--child", help=argparse.SUPPRESS)  # master, in a child process
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    plans = [p for p in args.plans.split(",") if p]
    if args.child:
        print(json.dumps(child(args.child, json.loads(args.paths), args.rows, args.reps, plans)))
        return 0

    directory = Path(tempfile.mkdtemp(prefix="bench_spark_batch_"))
    results = {}
    try:
        paths = [str(p) for p in write_files(args.rows, args.files, directory)]
        for master in MASTERS:
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_spark_batch", "--child", master,
                 "--paths", json.dumps(paths), "--rows", str(args.rows), "--reps",
                 str(args.reps), "--plans", ",".join(plans)],
                check=True, stdout=subprocess.PIPE, text=True)  # Spark's log on stderr
            results[master] = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    n = args.rows
    print(f"Spark batch replay, {n:,} events in {args.files} Parquet files, delay 2 s; "
          f"{os.cpu_count()} cores; pyspark {results[MASTERS[0]]['spark']}; "
          f"{args.reps} rounds, median (min-max) s")
    for master in MASTERS:
        load = results[master]["load"]
        print(f"  {master}: load average {load[0]:.1f} before, {load[1]:.1f} after")
    print(f"{'contender':26s} " + " ".join(f"{m + ' s':>20s} {'CPU s':>6s}" for m in MASTERS)
          + f" {'rows/s local[2]':>16s} {'local[2] speed-up':>18s}")
    medians: dict[str, dict[str, float]] = {}
    for name in [*plans, ENGINE]:
        cells = []
        for master in MASTERS:
            ts = results[master]["times"][name]
            medians.setdefault(name, {})[master] = statistics.median(ts)
            cells.append(f"{statistics.median(ts):7.2f} ({min(ts):.2f}-{max(ts):.2f}) "
                         f"{statistics.median(results[master]['cpu'][name]):6.2f}")
        m1, m2 = medians[name][MASTERS[0]], medians[name][MASTERS[1]]
        print(f"{name:26s} " + " ".join(f"{c:>27s}" for c in cells)
              + f" {n / m2:16,.0f} {m1 / m2:17.2f}x")
    if "scan" in medians and "global" in medians:
        ratio = medians["global"][MASTERS[1]] / medians["scan"][MASTERS[1]]
        print(f"scan vs single global window at local[2]: {ratio:.2f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
