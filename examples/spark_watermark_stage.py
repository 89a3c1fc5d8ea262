"""A live pipeline: the rolling file sink writes parts, Spark streams them through the
watermarking stage, and event-time windows downstream close as the CTI advances.

    python examples/spark_watermark_stage.py

Devices publish 1-second readings; each part is one micro-batch (``maxFilesPerTrigger=1``).
The stage drops late readings (they go to a second sink), carries the CTI on every row, and
Spark's watermark follows it, so the 10-second windows are emitted (append mode) exactly when
the CTI passes their end. The printout shows, per micro-batch, the watermark Spark reports —
the CTI of the batch before, minus one millisecond — and the windows it closed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

S = 10**9


def _readings():
    """Two devices; B's clock lags A's by 4 s and some of B's readings come very late."""
    from engine.event import Event

    for t in range(0, 60, 5):  # a burst of readings every 5 s, then a CTI from each device
        yield Event.point(t * S, payload={"v": t}, source="A")
        yield Event.point((t - 4) * S, payload={"v": t}, source="B")
        if t % 20 == 15:
            yield Event.point((t - 14) * S, payload={"v": -1}, source="B")  # very late
        yield Event.cti(t * S, source="A")
        yield Event.cti((t - 4) * S, source="B")


def main(spark=None, workdir=None) -> dict:
    """Run the pipeline over availableNow triggers; return what the tests check."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from eventlog import RollingFileSink
    from engine.sources import from_iterable
    from spark_adapter import cti_to_watermark_ms, register, split_late, watermark_stage

    own = spark is None and SparkSession.getActiveSession() is None
    if spark is None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (SparkSession.builder.master("local[2]").appName("spark_watermark_stage")
                 .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
                 .getOrCreate())
    tmp = tempfile.TemporaryDirectory() if workdir is None else None
    work = Path(workdir or tmp.name)
    try:
        register(spark)
        sink = RollingFileSink(work / "parts", max_events=8)  # the engine writes the parts
        from_iterable(list(_readings())).subscribe(sink)

        stream = (spark.readStream.format("goldilocks").option("maxFilesPerTrigger", 1)
                  .load(str(work / "parts")))
        staged = watermark_stage(stream, delay="3s", on_late="drop")
        events, late = split_late(staged)
        windows = (events.where(F.col("kind") == "insert")
                   .groupBy(F.window("event_time", "10 seconds"))
                   .agg(F.count("*").alias("readings"), F.max("cti").alias("cti_seen")))

        def write_both(batch, batch_id):  # not needed for windows; shows a second sink
            batch.write.mode("append").parquet(str(work / "late"))

        late_query = (late.writeStream.foreachBatch(write_both)
                      .option("checkpointLocation", str(work / "ck-late"))
                      .trigger(availableNow=True).start())
        query = (windows.writeStream.format("memory").queryName("closed_windows")
                 .outputMode("append").option("checkpointLocation", str(work / "ck-windows"))
                 .trigger(availableNow=True).start())
        for q in (query, late_query):
            if not q.awaitTermination(300):
                raise TimeoutError(f"query {q.name} did not finish in 300 s")

        marks = [(p["batchId"], p["eventTime"].get("watermark"), p["numInputRows"])
                 for p in query.recentProgress]
        for batch_id, mark, rows in marks:
            print(f"batch {batch_id}: {rows:3d} rows in, Spark watermark {mark}")
        closed = spark.table("closed_windows").orderBy("window").collect()
        for w in closed:
            print(f"closed {w['window']['start']:%H:%M:%S}-{w['window']['end']:%H:%M:%S}: "
                  f"{w['readings']} readings")
        late_rows = (spark.read.parquet(str(work / "late")).orderBy("order_key").collect()
                     if (work / "late").exists() else [])
        for r in late_rows:
            print(f"late: {r['source']} at {r['start'] / S:.0f}s, CTI {r['cti'] / S:.0f}s, "
                  f"{r['action']}")
        print(f"one CTI of 56 s corresponds to a Spark watermark of "
              f"{cti_to_watermark_ms(56 * S)} ms")
        return {"marks": marks, "closed": closed, "late": late_rows, "parts": sink.published}
    finally:
        if tmp is not None:
            tmp.cleanup()
        if own:
            spark.stop()


if __name__ == "__main__":
    main()
