"""Spark throughput: batch replay strategies next to the engine's columnar replay, and the
streaming stage. Run by hand (not a test)::

    python -m benchmarks.bench_spark                 # 10 million events, as recorded
    python -m benchmarks.bench_spark --rows 1000000 --reps 5 --spark-reps 5

One process, one local[2] session, the same log for every contender: a Parquet file of
``--rows`` events (100 devices, 1 ms apart, clocks jittered by up to 5 s, a CTI every 10th
row, delay 2 s), so a few per cent arrive late. Spark reads it once into a cached frame;
each timed Spark run is ``replay`` plus writing both outputs to the ``noop`` sink (so every
row is computed). The engine's run is ``goldilocks.replay`` of the same file (columnar path:
Parquet read included), and its numpy kernel alone over in-memory columns. Every contender's
emitted and late counts are checked against the kernel's before any number is printed.

Streaming: ``--stream-rows`` events as JSON Lines parts of 100 000 read by the
``"goldilocks"`` source (two parts per micro-batch) through ``watermark_stage`` to ``noop``,
``trigger(availableNow=True)``; rows/s over the whole query (parsing included).

Method: one warm-up run each (not timed), then ``--reps`` timed runs (``--spark-reps`` for the
10-million-row Spark runs, which take tens of seconds each), median/min/max and the ratio
against the bucketed replay.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

MS = 10**6
S = 10**9


def make_log(rows: int, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    idx = np.arange(rows, dtype=np.int64)
    is_cti = idx % 10 == 0
    start = idx * MS - rng.integers(0, 5 * S, rows, dtype=np.int64)
    return {"idx": idx, "is_cti": is_cti, "start": start,
            "source": (idx % 100).astype(np.int32)}


def write_parquet(log: dict, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = np.array([f"d{i}" for i in range(100)], dtype=object)
    table = pa.table({
        "seq": pa.array(log["idx"]),
        "source": pa.array(names[log["source"]], pa.string()),
        "kind": pa.array(np.where(log["is_cti"], "cti", "insert"), pa.string()),
        "start": pa.array(log["start"]),
        "end": pa.nulls(len(log["idx"]), pa.int64()),
        "payload": pa.nulls(len(log["idx"]), pa.string()),
    })
    pq.write_table(table, path, row_group_size=1 << 20)


def timed(fn: Callable[[], object], reps: int) -> tuple[list[float], object]:
    result = fn()  # warm-up
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - began)
    return times, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=5, help="timed runs of the fast contenders")
    parser.add_argument("--spark-reps", type=int, default=3, help="timed Spark batch runs")
    parser.add_argument("--stream-rows", type=int, default=1_000_000)
    parser.add_argument("--skip-global", action="store_true",
                        help="leave out the single-window strategy (slow at 10M rows)")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from eventlog import EventLogWriter
    from engine.event import Event
    from engine.policy import CTI_EMIT, DROP_LATE, EMIT, EMIT_ADJUSTED
    from goldilocks.replay import replay as engine_replay
    from operators.columnar import goldilocks_columns
    from spark_adapter import register, replay, watermark_stage

    spark = (SparkSession.builder.master("local[2]").appName("bench_spark")
             .config("spark.driver.memory", "8g").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "8").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    tmp = Path(tempfile.mkdtemp(prefix="bench_spark_"))
    n = args.rows
    log = make_log(n)
    path = tmp / "log.parquet"
    write_parquet(log, path)
    delay = 2 * S

    # reference counts: the kernel
    end = log["start"] + 1
    action = goldilocks_columns(log["is_cti"], log["start"], end, delay, "drop")[0]
    want = (int(np.count_nonzero((action == EMIT) | (action == EMIT_ADJUSTED) | (action == CTI_EMIT))),
            int(np.count_nonzero(action == DROP_LATE)))

    frame = (spark.read.parquet(str(path))
             .withColumn("order_key", F.col("seq")).withColumn("file_index", F.lit(0))
             .withColumn("line", F.col("seq") + 1).cache())
    frame.count()

    results: dict[str, tuple[list[float], int]] = {}

    def spark_run(strategy: str) -> Callable[[], None]:
        def run() -> None:
            events, late = replay(frame, delay=delay, strategy=strategy)
            for part in (events, late):  # every row computed, nothing collected
                part.write.format("noop").mode("overwrite").save()
        return run

    def spark_counts(strategy: str) -> tuple[int, int]:
        events, late = replay(frame, delay=delay, strategy=strategy)
        return events.count(), late.count()

    contenders: list[tuple[str, Callable[[], object], int, Callable[[], tuple[int, int]] | None]] = [
        ("engine kernel (numpy, in memory)",
         lambda: goldilocks_columns(log["is_cti"], log["start"], end, delay, "drop"), args.reps,
         None),
        ("goldilocks.replay (columnar, Parquet)",
         lambda: engine_replay([path], delay=delay, out=None), args.reps, None),
        ("spark bucketed two-pass", spark_run("bucketed"), args.spark_reps,
         lambda: spark_counts("bucketed")),
    ]
    if not args.skip_global:
        contenders.append(("spark single global window", spark_run("global"), args.spark_reps,
                           lambda: spark_counts("global")))

    for name, fn, reps, check in contenders:
        if check is not None:
            got = check()
            assert got == want, (name, got, want)
        times, result = timed(fn, reps)
        if name.startswith("goldilocks.replay"):
            got = (result.emitted + result.ctis_emitted, result.late)  # type: ignore[attr-defined]
            assert got == want, (name, got, want)
        results[name] = (times, reps)
        print(f"  {name}: {statistics.median(times):.2f} s median", flush=True)

    # streaming stage
    m = args.stream_rows
    slog = make_log(m, seed=11)
    parts = tmp / "parts"
    parts.mkdir()
    per_part = 100_000
    names = [f"d{i}" for i in range(100)]
    for p in range(0, m, per_part):
        with EventLogWriter(parts / f"events-{p // per_part:06d}.jsonl", seq=True,
                            first_seq=p) as w:
            for i in range(p, min(m, p + per_part)):
                t = int(slog["start"][i])
                w.write(Event.cti(t, source=names[i % 100]) if slog["is_cti"][i]
                        else Event.point(t, source=names[i % 100]))

    def stream_run() -> int:
        ck = tempfile.mkdtemp(dir=tmp)
        stream = (spark.readStream.format("goldilocks").option("maxFilesPerTrigger", 2)
                  .load(str(parts)))
        query = (watermark_stage(stream, delay=delay).writeStream.format("noop")
                 .option("checkpointLocation", ck).trigger(availableNow=True).start())
        query.awaitTermination()
        return sum(p["numInputRows"] for p in query.recentProgress)

    times, rows_in = timed(stream_run, max(1, args.spark_reps))
    assert rows_in == m, (rows_in, m)
    results["spark watermark_stage (stream, JSONL parts)"] = (times, max(1, args.spark_reps))

    base = statistics.median(results["spark bucketed two-pass"][0])
    print(f"\nGoldilocks replay, {n:,} events (stream: {m:,}); local[2], "
          f"{os.cpu_count()} cores; pyspark {spark.version}")
    print(f"{'contender':46s} {'reps':>4s} {'median s':>9s} {'min s':>7s} {'max s':>7s} "
          f"{'rows/s (median)':>16s} {'vs bucketed':>11s}")
    for name, (times, reps) in results.items():
        rows = m if name.startswith("spark watermark_stage") else n
        med = statistics.median(times)
        ratio = f"{base / med:.2f}x" if not name.startswith("spark watermark_stage") else "-"
        print(f"{name:46s} {reps:4d} {med:9.2f} {min(times):7.2f} {max(times):7.2f} "
              f"{rows / med:16,.0f} {ratio:>11s}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
