"""A Spark user's stream through the watermarking stage: device readings as JSON Lines files,
a 10-second window count downstream that closes as the CTI advances, late readings kept
with their reason.

    python examples/spark_watermark_stage.py

Two thermometers write ``{"device_id", "ts", "temperature"}`` readings, one file per
micro-batch (``maxFilesPerTrigger=1``); B's clock runs 3 s behind A's, and twice B sends a
reading 14 s old. ``watermark_stage`` makes each device's readings its CTIs, 3 s behind
them (``delay``, as ``withWatermark``'s: a reading promises nothing more than 3 s older from
its device), merges them with the Goldilocks policy, writes the late readings under
``<state_dir>/late`` and gives Spark a watermark that follows the CTI. The printout shows, per micro-batch, the watermark Spark
reports (the CTI after the micro-batch before, minus one millisecond) and the stage's
metrics, then the windows Spark closed and the late readings.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
BATCHES = 6


def readings(batch: int) -> list[dict]:
    """One micro-batch of readings: A at 10k..10k+9 s, B 3 s behind, and in micro-batches 2
    and 4 one reading of B's that is 14 s old."""
    rows = []
    for i in range(10):
        for device, seconds in (("A", 10 * batch + i), ("B", 10 * batch + i - 3)):
            if seconds >= 0:
                rows.append((device, seconds, 20.0 + (seconds % 7) / 2))
    if batch in (2, 4):
        rows.append(("B", 10 * batch - 14, -1.0))
    return [{"device_id": d, "ts": (T0 + timedelta(seconds=s)).isoformat(), "temperature": t}
            for d, s, t in rows]


def write_files(directory: Path) -> None:
    directory.mkdir(parents=True)
    for k in range(BATCHES):
        path = directory / f"readings-{k:03d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in readings(k)))
        os.utime(path, (1_700_000_000 + k,) * 2)  # the file source takes files by mtime


def main(spark=None, workdir=None) -> dict:
    """Run the pipeline over an availableNow trigger; return what the tests check."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_adapter import stage_jar, stage_metrics, watermark_stage

    own = spark is None and SparkSession.getActiveSession() is None
    if spark is None:
        spark = (SparkSession.builder.master("local[2]").appName("spark_watermark_stage")
                 .config("spark.jars", stage_jar())  # the stage's JVM plan
                 .config("spark.ui.enabled", "false").getOrCreate())
    tmp = tempfile.TemporaryDirectory() if workdir is None else None
    work = Path(workdir or tmp.name)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        write_files(work / "readings")
        spark.conf.set("spark.sql.shuffle.partitions", "2")  # one clock: few state partitions
        stream = (spark.readStream.schema("device_id string, ts timestamp, temperature double")
                  .option("maxFilesPerTrigger", 1).json(str(work / "readings")))
        staged = watermark_stage(stream, delay="3 seconds", time_col="ts",
                                 source_col="device_id", state_dir=str(work / "state"),
                                 name="thermometers")
        windows = (staged.groupBy(F.window("ts", "10 seconds"))
                   .agg(F.count("*").alias("readings"),
                        F.round(F.avg("temperature"), 2).alias("mean")))
        query = (windows.writeStream.format("memory").queryName("closed_windows")
                 .outputMode("append").option("checkpointLocation", str(work / "checkpoint"))
                 .trigger(availableNow=True).start())
        if not query.awaitTermination(300):
            raise TimeoutError("the query did not finish in 300 s")

        marks = []
        for p in query.recentProgress:
            seen = stage_metrics(p, "thermometers")  # the same on classic and Spark Connect
            marks.append((p["batchId"], p["eventTime"].get("watermark"), p.numInputRows))
            cti = (None if not seen or seen["cti"] is None  # epoch milliseconds, UTC
                   else datetime.fromtimestamp(seen["cti"] / 1000, timezone.utc))
            metrics = (f"; CTI at its end {cti:%Y-%m-%d %H:%M:%S}, {seen['rows']} rows out, "
                       f"{seen['late']} late" if cti else "")
            print(f"batch {p['batchId']}: {p.numInputRows:3d} readings in, Spark watermark "
                  f"{marks[-1][1]}{metrics}")
        closed = spark.table("closed_windows").orderBy("window").collect()
        for w in closed:
            print(f"closed {w['window']['start']:%H:%M:%S}-{w['window']['end']:%H:%M:%S}: "
                  f"{w['readings']} readings, mean {w['mean']}")
        late = (spark.read.parquet(str(work / "state" / "late")).orderBy("ts")
                .select("device_id", "ts", "cti", "late_action", "late_reason").collect())
        for r in late:
            print(f"late: {r['device_id']} at {r['ts']:%H:%M:%S}, CTI {r['cti']:%H:%M:%S}, "
                  f"{r['late_action']}: {r['late_reason']}")
        return {"marks": marks, "closed": closed, "late": late}
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)  # the session as it was
        if tmp is not None:
            tmp.cleanup()
        if own:
            spark.stop()


if __name__ == "__main__":
    main()
