"""Spark throughput: batch replay strategies next to the engine's columnar replay, and the
watermarking stage next to Spark's own ``withWatermark``. Run by hand (not a test)::

    python -m benchmarks.bench_spark                      # every part, as recorded
    python -m benchmarks.bench_spark --part stage         # the stage only (a few minutes)
    python -m benchmarks.bench_spark --part replay --rows 1000000 --reps 5 --spark-reps 5
    python -m benchmarks.bench_spark --part windows --window-rows 1000000 --window-rounds 3
    python -m benchmarks.bench_spark --part cores --rows 10000000 --spark-reps 1

One process, one local[2] session; but ``--part cores``, batch replay's plans at local[1] and
local[2] next to the engine's columnar replay, which is ``bench_spark_batch`` (each master in
a process of its own, since a session's core count is fixed when it starts).

Replay: the same log for every contender: a Parquet file of ``--rows`` events (100 devices,
1 ms apart, clocks jittered by up to 5 s, a CTI every 10th row, delay 2 s), so a few per cent
arrive late. Spark reads it once into a cached frame; each timed Spark run is ``replay`` plus
writing both outputs to the ``noop`` sink (so every row is computed). The engine's run is
``goldilocks.replay`` of the same file (columnar path: Parquet read included), and its numpy
kernel alone over in-memory columns. Every contender's emitted and late counts are checked
against the kernel's before any number is printed. One warm-up run each (not timed), then
``--reps`` timed runs (``--spark-reps`` for the Spark runs), median/min/max and the ratio
against the bucketed replay.

Stage: a Spark user's readings ``{device_id, ts, temperature}`` (``--stage-rows``, 100
devices, 1 ms apart with up to 2 s of jitter, 1 % of them a minute old) as JSON Lines files
read by ``spark.readStream.json`` (``--stage-files`` files, two per micro-batch), each
contender a whole ``trigger(availableNow=True)`` query into the ``noop`` sink, fresh
checkpoint and state each run, ``spark.sql.shuffle.partitions=2`` (one clock):

- ``native``: ``withWatermark("ts", "5 seconds").groupBy(window("ts", "1 minute")).count()``
- ``stage + window``: ``watermark_stage(delay="5 seconds", …)`` then the same window count;
  the session has the stage's jar, so this is its JVM plan (the decisions in JVM functions)
- ``stage, Python plan + window``: the same with ``jvm=False`` (a ``mapInArrow`` over the
  input's partitions: what runs without the jar)
- ``stage alone``: the stage's output, every row computed
- ``stage, one task per clock + window``: ``advance={"every": "1 second"}``, the sequential
  plan (the fallback for arrival columns, count- or time-based generation, other policies)
- ``mapInArrow identity + withWatermark + window``: whole rows through a Python function that
  returns them unchanged, then native's watermark and window: what any stage that ships every
  column through Python pays before it decides anything
- ``native + window mean`` and ``stage + window mean``: a 1-minute mean of every device's
  ``temperature`` (native's reader can prune ``device_id`` only); the stage's ratio is taken
  against this native run
- ``native + per-device average``, ``stage + per-device average`` and the same with the
  Python plan: a downstream
  (``groupBy(window, device_id).avg(temperature)``) that reads every column, so that native's
  JSON reader cannot prune ``device_id`` and ``temperature`` as it does for the count; the
  stage's ratio is taken against this native run
- ``native, device parsed + window``: native's count after ``where(device_id IS NOT NULL)``
  (no row of the input has a null device), so its reader parses ``device_id`` as every stage
  that judges a row by its device must: the ceiling of such a stage on this input; the table
  ends with the stage's ratio against it
- ``read only``: the JSON parse, for scale
- ``native on Connect + window`` and ``stage on Connect + window``: native's query and the
  stage's (``jvm=None``: its Python plan, since a Connect client has no JVM to hand the
  JVM functions to) built by a Spark Connect client of the server in the same JVM, on the
  same executors; the stage's ratio is taken against native on Connect, and the table ends
  with it against the classic session's Python plan and native on Connect against classic

One warm-up round, then ``--stage-rounds`` rounds, each running every contender (or those
named by ``--stage-contender``, with the native runs they are compared with) once in a
rotated order. The ratio to ``native`` is taken within each round, by wall and by CPU time;
the table shows their medians and the best-to-best ratio, wall seconds and the CPU seconds
of the whole process tree (JVM and Python workers: less sensitive than wall time to other
jobs on the machine). Before timing, the late count of the stage's plans, classic and
Connect (their observed metrics), is checked against a numpy model of the documented
semantics.

Windows: ``bench_spark_batch.write_files``'s log (``--window-rows`` events, 100 devices, a CTI
every 10th row, delay 2 s, null payloads, so the windows count) as 8 Parquet files, read,
not cached, by every contender: Spark's batch ``replay`` (the default plan) with both outputs
to the ``noop`` sink; the same followed by ``spark_adapter.windows`` over its events (1 s
tumbling windows by device; 10 s windows every 1 s by device) into the ``noop`` sink; and the
engine's ``goldilocks.replay`` and ``replay_windows`` of the same files (columnar path, one
core, output discarded). Each contender runs once first (the warm-up, and the check that
Spark's window rows are as many as the engine's), then ``--window-rounds`` rounds run each
once, in turn. Printed: median (min-max) wall seconds, events/s, and each windowed row's
median per-round ratio to its plain replay (Spark's to Spark's, the engine's to the
engine's).
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

from engine.times import Nanoseconds

MS = 10**6
S = 10**9
#: The log's first instant, 2026-11-22: a log of today's times, which the engine's readers
#: take as nanoseconds (small integers that look like epoch milliseconds are refused, TS §5.4).
T0 = 1_795_334_400 * S


def make_log(rows: int, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    idx = np.arange(rows, dtype=np.int64)
    is_cti = idx % 10 == 0
    start = T0 + idx * MS - rng.integers(0, 5 * S, rows, dtype=np.int64)
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


_TOKEN = os.urandom(16).hex()  # the Connect server's token, for this run only


def session() -> object:
    """The one local[2] session of a run, with the stage's jar on ``spark.jars`` and a Spark
    Connect server in the same JVM (a free loopback port) for the Connect contenders."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_adapter import stage_jar

    spark = (SparkSession.builder.config("spark.jars", stage_jar())
             .master("local[2]").appName("bench_spark")
             .config("spark.driver.memory", "8g").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
             .config("spark.connect.grpc.binding.address", "127.0.0.1")
             .config("spark.connect.grpc.binding.port", "0")
             .config("spark.connect.authenticate.token", _TOKEN)
             .config("spark.sql.shuffle.partitions", "8").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def connect_session(spark: object) -> object:
    """A Spark Connect client of the server in ``spark``'s JVM: the same executors, reached
    as a Connect user reaches them."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    service = getattr(spark._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
    port = getattr(service, "MODULE$").localPort()
    return ConnectSession.builder.remote(f"sc://localhost:{port}/;token={_TOKEN}").create()


def on_connect(build: Callable[[], object]) -> object:
    """``build()`` with PySpark's functions making Spark Connect objects (its switch is
    process-wide: ``SPARK_CONNECT_MODE_ENABLED``, what ``remote(...)`` sets)."""
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    try:
        return build()
    finally:
        del os.environ["SPARK_CONNECT_MODE_ENABLED"]


def bench_replay(spark: object, args: argparse.Namespace) -> None:
    """Batch replay: the engine, its kernel, and Spark's two strategies (module docstring)."""
    from pyspark.sql import functions as F

    from engine.policy import CTI_EMIT, DROP_LATE, EMIT, EMIT_ADJUSTED
    from goldilocks.replay import replay as engine_replay
    from operators.columnar import goldilocks_columns
    from spark_adapter import register, replay

    register(spark)
    tmp = Path(tempfile.mkdtemp(prefix="bench_spark_"))
    n = args.rows
    log = make_log(n)
    path = tmp / "log.parquet"
    write_parquet(log, path)
    delay = Nanoseconds(2 * S)

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

    base = statistics.median(results["spark bucketed two-pass"][0])
    print(f"\nGoldilocks replay, {n:,} events; local[2], "
          f"{os.cpu_count()} cores; pyspark {spark.version}")
    print(f"{'contender':46s} {'reps':>4s} {'median s':>9s} {'min s':>7s} {'max s':>7s} "
          f"{'rows/s (median)':>16s} {'vs bucketed':>11s}")
    for name, (times, reps) in results.items():
        med = statistics.median(times)
        print(f"{name:46s} {reps:4d} {med:9.2f} {min(times):7.2f} {max(times):7.2f} "
              f"{n / med:16,.0f} {base / med:10.2f}x")


# -- the watermarking stage against withWatermark ---------------------------------------------

STAGE_DELAY = "5 seconds"
STAGE_WINDOW = "1 minute"
_DEVICES = 100
_EPOCH_2026_US = 1_767_225_600_000_000


def make_readings(rows: int, seed: int = 3) -> dict[str, np.ndarray]:
    """Readings in arrival order: 1 ms apart, up to 2 s of jitter, 1 % a minute old."""
    rng = np.random.default_rng(seed)
    i = np.arange(rows, dtype=np.int64)
    ts = _EPOCH_2026_US + i * 1000 - rng.integers(0, 2_000_000, rows)
    old = rng.random(rows) < 0.01
    ts[old] -= 60_000_000
    return {"device": (i % _DEVICES).astype(np.int32), "ts": ts,
            "temperature": rng.uniform(-10, 40, rows).round(3)}


def write_readings_json(readings: dict, directory: Path, files: int) -> list[slice]:
    """JSON Lines files in arrival order, modification times in that order (the file source
    takes them by it); returns each file's rows."""
    directory.mkdir(parents=True)
    names = np.array([f"dev-{k:03d}" for k in range(_DEVICES)], dtype=object)
    n = len(readings["ts"])
    bounds = np.linspace(0, n, files + 1).astype(int)
    pieces = []
    for f in range(files):
        part = slice(bounds[f], bounds[f + 1])
        iso = np.datetime_as_string(readings["ts"][part].astype("datetime64[us]"), unit="us")
        path = directory / f"readings-{f:04d}.json"
        with open(path, "w") as out:
            out.writelines(f'{{"device_id":"{d}","ts":"{t}Z","temperature":{c}}}\n'
                           for d, t, c in zip(names[readings["device"][part]], iso,
                                              readings["temperature"][part]))
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))
        pieces.append(part)
    return pieces


def stage_late_model(readings: dict, batches: list[np.ndarray], delay_us: int) -> int:
    """How many readings the stage sends to the late side, by the documented semantics:
    each micro-batch judged against the state at its start — a reading is late if it is
    older than its device's newest earlier reading less the delay (the device's CTI: the
    default, advance_time with every_events=1 and the delay) or than the newest earlier
    reading of any device less the delay (the merged CTI)."""
    floor = np.iinfo(np.int64).min
    last = np.full(_DEVICES, floor, np.int64)
    late = 0
    for rows in batches:
        ts, dev = readings["ts"][rows], readings["device"][rows]
        high = last.max() - delay_us if last.max() > floor else last.max()
        own = np.where(last[dev] > floor, last[dev] - delay_us, floor)
        bad = (ts < own) | (ts < high)
        late += int(np.count_nonzero(bad))
        accepted = ~(ts < own)
        np.maximum.at(last, dev[accepted], ts[accepted])
    return late


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, reaped children included) of ``pid``'s process tree."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    own: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        own[int(entry)] = sum(int(x) for x in fields[11:15])
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += own.get(p, 0)
        todo += children.get(p, [])
    return total / tick


def _identity(batches):
    """``mapInArrow`` doing nothing: the cost of shipping whole rows through Python."""
    yield from batches


def stage_window(frame):
    """The downstream of the stage's rows: a 1-minute window count (reads ``ts`` alone)."""
    from pyspark.sql import functions as F

    return frame.groupBy(F.window("ts", STAGE_WINDOW)).count()


def stage_mean(frame):
    """A 1-minute window mean of every device's readings (reads ``ts`` and ``temperature``)."""
    from pyspark.sql import functions as F

    return frame.groupBy(F.window("ts", STAGE_WINDOW)).agg(F.avg("temperature"))


def stage_average(frame):
    """A downstream that reads every column, so nothing is left for the reader to prune."""
    from pyspark.sql import functions as F

    return frame.groupBy(F.window("ts", STAGE_WINDOW), "device_id").agg(F.avg("temperature"))


class StageBench:
    """The stage part's input, its late-count model, one timed query and the rounds with
    their table, so that every contender sees the same rows and the same meter."""

    NATIVE = "native withWatermark + window"
    DELAY_US = 5_000_000
    PER_BATCH = 2

    def __init__(self, spark: object, args: argparse.Namespace) -> None:
        spark.conf.set("spark.sql.shuffle.partitions", "2")  # one clock: few state partitions
        self.spark = spark
        self.rounds = args.stage_rounds
        self.tmp = Path(tempfile.mkdtemp(prefix="bench_stage_"))
        self.n, self.files = args.stage_rows, args.stage_files
        self.readings = make_readings(self.n)
        pieces = write_readings_json(self.readings, self.tmp / "in", self.files)
        self.batches = [np.arange(pieces[f].start,
                                  pieces[min(f + self.PER_BATCH, self.files) - 1].stop)
                        for f in range(0, self.files, self.PER_BATCH)]
        self.want_late = stage_late_model(self.readings, self.batches, self.DELAY_US)
        assert self.want_late > 0
        self.schema = "device_id string, ts timestamp, temperature double"
        self.jvm = spark.sparkContext._gateway.proc.pid

    def read(self, spark=None):
        return ((spark or self.spark).readStream.schema(self.schema)
                .option("maxFilesPerTrigger", self.PER_BATCH).json(str(self.tmp / "in")))

    def native(self, downstream=stage_window, spark=None):
        return downstream(self.read(spark).withWatermark("ts", STAGE_DELAY))

    def run(self, build, keep: Callable[[Path], None] | None = None
            ) -> tuple[float, float, object]:
        """One contender's whole query into the ``noop`` sink, with a fresh checkpoint and
        state directory (given to ``build``); wall and CPU seconds, and the query. ``keep``
        looks at the directory before it is removed."""
        import shutil

        work = Path(tempfile.mkdtemp(dir=self.tmp))
        frame = build(work)
        cpu = process_cpu(self.jvm)
        began = time.perf_counter()
        query = (frame.writeStream.format("noop").outputMode("append")
                 .option("checkpointLocation", str(work / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        wall = time.perf_counter() - began
        cpu = process_cpu(self.jvm) - cpu
        # the property: a Connect client's progress has p["numInputRows"] None
        rows = sum(p.numInputRows for p in query.recentProgress)
        assert rows == self.n, (rows, self.n)
        if keep is not None:
            keep(work)
        shutil.rmtree(work)
        return wall, cpu, query

    def compare(self, title: str, contenders: dict, baseline: dict[str, str],
                also: tuple[tuple[str, str], ...] = ()) -> None:
        """One warm-up round, then the rounds, each running every contender once in a
        rotated order; prints the table of medians and of ratios taken within each round
        against ``NATIVE`` or the contender's ``baseline``, then a row for each
        ``(contender, another baseline)`` of ``also`` whose two are both run."""
        names = list(contenders)
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for r in range(self.rounds + 1):  # round 0 warms up
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                wall, cpu, _ = self.run(contenders[name])
                if r:
                    results[name].append((wall, cpu))
                print(f"  round {r} {name}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        load = os.getloadavg()
        print(f"\n{title}, {self.n:,} readings ({self.files} JSON Lines files, "
              f"{self.PER_BATCH} per micro-batch, {self.want_late:,} late); local[2], "
              f"{os.cpu_count()} cores; pyspark {self.spark.version}; "
              f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        print("ratios: against native + window, or the native run named for the contender "
              "(the same downstream); wall and CPU, medians of the per-round ratios, and "
              "best/best")
        rows = [(name, baseline.get(name, self.NATIVE), name) for name in names]
        rows += [(name, base, f"{name}, against {base}") for name, base in also
                 if name in results and base in results]
        width = max(len(label) for _, _, label in rows)
        print(f"{'contender':{width}s} {'rounds':>6s} {'median s':>9s} {'best s':>7s} "
              f"{'CPU s':>6s} {'rows/s (median)':>16s} {'vs native: median':>18s} "
              f"{'CPU':>6s} {'best':>6s}")
        for name, base, label in rows:
            native = results[base]
            walls = [w for w, _ in results[name]]
            cpus = [c for _, c in results[name]]
            ratios = [nw / w for (nw, _), w in zip(native, walls)]
            cpu_ratios = [nc / c for (_, nc), c in zip(native, cpus)]
            med = statistics.median(walls)
            print(f"{label:{width}s} {len(walls):6d} {med:9.2f} {min(walls):7.2f} "
                  f"{statistics.median(cpus):6.2f} {self.n / med:16,.0f} "
                  f"{statistics.median(ratios):17.2f}x {statistics.median(cpu_ratios):5.2f}x "
                  f"{min(w for w, _ in native) / min(walls):5.2f}x")

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.tmp)


def bench_stage(spark: object, args: argparse.Namespace) -> None:
    """The stage before a window aggregation against Spark's own watermark (module doc)."""
    connect = connect_session(spark)  # stopped below, or its client's threads keep us alive
    connect.conf.set("spark.sql.shuffle.partitions", "2")  # as StageBench sets the classic's
    try:
        _bench_stage(spark, connect, args)
    finally:
        connect.stop()


def _bench_stage(spark: object, connect: object, args: argparse.Namespace) -> None:
    """``bench_stage`` with its Spark Connect client."""
    from pyspark.sql import functions as F

    from spark_adapter import stage_metrics, watermark_stage

    def stage(work: Path, spark=None, **options):
        return watermark_stage(bench.read(spark), delay=STAGE_DELAY, time_col="ts",
                               source_col="device_id", state_dir=str(work / "state"), **options)

    contenders = {
        StageBench.NATIVE: lambda work: bench.native(),
        "stage + window": lambda work: stage_window(stage(work, jvm=True)),
        "stage, Python plan + window": lambda work: stage_window(stage(work, jvm=False)),
        "stage alone": lambda work: stage(work, jvm=True),
        "stage, one task per clock + window":
            lambda work: stage_window(stage(work, advance={"every": "1 second"})),
        "mapInArrow identity + withWatermark + window":
            lambda work: stage_window(bench.read().mapInArrow(_identity, bench.schema)
                                      .withWatermark("ts", STAGE_DELAY)),
        "native + window mean": lambda work: bench.native(stage_mean),
        "stage + window mean": lambda work: stage_mean(stage(work, jvm=True)),
        "native + per-device average": lambda work: bench.native(stage_average),
        "stage + per-device average": lambda work: stage_average(stage(work, jvm=True)),
        "stage, Python plan + per-device average":
            lambda work: stage_average(stage(work, jvm=False)),
        "native, device parsed + window": lambda work: stage_window(
            bench.read().where(F.col("device_id").isNotNull()).withWatermark("ts", STAGE_DELAY)),
        "read only": lambda work: bench.read(),
        # Spark Connect: the same server and executors, the query built by a Connect client
        "native on Connect + window": lambda work: on_connect(
            lambda: bench.native(spark=connect)),
        "stage on Connect + window": lambda work: on_connect(
            lambda: stage_window(stage(work, connect))),
    }
    #: the contender each one's ratio is taken against (default: native + window)
    baseline = {"stage + window mean": "native + window mean",
                "stage + per-device average": "native + per-device average",
                "stage, Python plan + per-device average": "native + per-device average",
                "stage on Connect + window": "native on Connect + window"}
    if args.skip_sequential:
        del contenders["stage, one task per clock + window"]
    if args.stage_contender:
        unknown = sorted(set(args.stage_contender) - set(contenders))
        if unknown:
            raise SystemExit(f"--stage-contender: no contender {unknown}; the contenders: "
                             + "; ".join(contenders))
        chosen = set(args.stage_contender) | {StageBench.NATIVE}
        chosen |= {baseline[name] for name in chosen if name in baseline}  # their natives
        contenders = {name: build for name, build in contenders.items() if name in chosen}
    bench = StageBench(spark, args)  # the input, once the contenders are known

    # checked before timing: every plan's late count is the documented semantics' count
    for label, build in (("jvm", lambda work: stage(work, jvm=True)),
                         ("python", lambda work: stage(work, jvm=False)),
                         ("connect", lambda work: on_connect(lambda: stage(work, connect)))):
        _, _, query = bench.run(build)
        late = sum(m["late"] for m in map(stage_metrics, query.recentProgress) if m)
        assert late == bench.want_late, (label, late, bench.want_late)

    bench.compare("Watermarking stage", contenders, baseline,
                  also=(("stage + window", "native, device parsed + window"),
                        ("stage on Connect + window", "stage, Python plan + window"),
                        ("native on Connect + window", StageBench.NATIVE)))
    bench.close()


#: label, windows options (``bench_windows``)
WINDOWS = [("1s by device", dict(window="1s", key="source")),
           ("10s every 1s by device", dict(window="10s", hop="1s", key="source"))]


def bench_windows(spark: object, args: argparse.Namespace) -> None:
    """Windowed batch replay in Spark and in the engine, next to plain replay (module
    docstring)."""
    import shutil

    from pyspark.sql import functions as F

    from benchmarks.bench_spark_batch import DELAY, write_files
    from goldilocks.replay import replay as engine_replay
    from goldilocks.windowed import replay_windows
    from spark_adapter import replay, windows

    directory = Path(tempfile.mkdtemp(prefix="bench_spark_windows_"))
    n, files = args.window_rows, 8
    paths = [str(p) for p in write_files(n, files, directory)]

    def frame():
        return (spark.read.parquet(*paths).withColumn("order_key", F.col("seq"))
                .withColumn("file_index", F.lit(0)).withColumn("line", F.col("seq") + 1))

    def spark_plain(check: bool) -> object:
        events, late = replay(frame(), delay=DELAY)
        if not check:
            for part in (events, late):
                part.write.format("noop").mode("overwrite").save()
        return None

    def spark_windows(options: dict) -> Callable[[bool], object]:
        def run(check: bool) -> object:
            events, _ = replay(frame(), delay=DELAY)
            rows = windows(events, aggregates=["count"], **options)
            if check:
                return rows.count()
            rows.write.format("noop").mode("overwrite").save()
            return None
        return run

    def engine_plain(check: bool) -> object:
        engine_replay(paths, delay=DELAY, out=None)
        return None

    def engine_windows(options: dict) -> Callable[[bool], object]:
        def run(check: bool) -> object:
            return replay_windows(paths, delay=DELAY, aggregates=["count"], out=None,
                                  **options).windows
        return run

    contenders: dict[str, Callable[[bool], object]] = {"Spark replay": spark_plain}
    for label, options in WINDOWS:
        contenders[f"Spark replay + windows {label}"] = spark_windows(options)
    contenders["engine replay"] = engine_plain
    for label, options in WINDOWS:
        contenders[f"engine replay --window {label}"] = engine_windows(options)
    try:
        for label, _ in WINDOWS:  # the check, and the warm-up of the windowed contenders
            spark_count = contenders[f"Spark replay + windows {label}"](True)
            engine_count = contenders[f"engine replay --window {label}"](True)
            assert spark_count == engine_count and engine_count, (label, spark_count,
                                                                   engine_count)
        spark_plain(True)
        engine_plain(True)
        times: dict[str, list[float]] = {name: [] for name in contenders}
        before = os.getloadavg()
        for r in range(args.window_rounds):
            for name, run in contenders.items():
                began = time.perf_counter()
                run(False)
                times[name].append(time.perf_counter() - began)
                print(f"  round {r + 1} {name}: {times[name][-1]:.2f} s", flush=True)
        after = os.getloadavg()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"\nWindowed replay, {n:,} events in {files} Parquet files, delay 2 s; "
          f"{args.window_rounds} rounds after a warm-up; local[2], {os.cpu_count()} cores; "
          f"pyspark {spark.version}; load average {before[0]:.1f} before, "
          f"{after[0]:.1f} after")
    print(f"{'contender':44s} {'median s (min-max)':>22s} {'events/s':>12s} {'x plain':>8s}")
    med = statistics.median
    for name, ts in times.items():
        plain = times["Spark replay" if name.startswith("Spark") else "engine replay"]
        ratio = med([p / t for p, t in zip(plain, ts)])
        print(f"{name:44s} {med(ts):8.2f} ({min(ts):.2f}-{max(ts):.2f}) {n / med(ts):12,.0f} "
              f"{ratio:8.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("all", "replay", "stage", "windows", "cores"),
                        default="all")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=5, help="timed runs of the fast contenders")
    parser.add_argument("--spark-reps", type=int, default=3, help="timed Spark batch runs")
    parser.add_argument("--skip-global", action="store_true",
                        help="leave out the single-window strategy (slow at 10M rows)")
    parser.add_argument("--stage-rows", type=int, default=2_000_000)
    parser.add_argument("--stage-files", type=int, default=8)
    parser.add_argument("--stage-rounds", type=int, default=5)
    parser.add_argument("--skip-sequential", action="store_true",
                        help="leave out the stage's one-task-per-clock plan")
    parser.add_argument("--stage-contender", action="append", metavar="NAME",
                        help="run only this stage contender (and the native runs it is "
                             "compared with); repeatable")
    parser.add_argument("--window-rows", type=int, default=1_000_000)
    parser.add_argument("--window-rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.part == "cores":  # a process per master: no session here
        from benchmarks import bench_spark_batch

        return bench_spark_batch.main(["--rows", str(args.rows),
                                       "--reps", str(args.spark_reps)])
    spark = session()
    try:
        if args.part in ("all", "replay"):
            bench_replay(spark, args)
        if args.part in ("all", "stage"):
            bench_stage(spark, args)
        if args.part in ("all", "windows"):
            bench_windows(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
