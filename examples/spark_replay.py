"""Replay the bundled device logs in Spark, one clock per site, and compare with the engine.

    python examples/spark_replay.py            # uses (or starts) a local SparkSession

Reads ``examples/data/devices/*.jsonl`` (one file per device, merged by their ``arrival``
times), replays them under Goldilocks with a 2-minute delay, prints the emitted CTIs and the
late events per site, and checks the single-clock result against ``goldilocks.replay``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

DEVICES = Path(__file__).resolve().parent / "data" / "devices"
ORDER = ["order_key", "file_index", "line"]


def main(spark=None) -> dict:
    """Run the example; return counts (the tests check them). Uses the active session."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from goldilocks.replay import replay as engine_replay
    from engine.times import format_ns
    from spark_adapter import read_event_log, replay

    own = spark is None and SparkSession.getActiveSession() is None
    if spark is None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (SparkSession.builder.master("local[2]").appName("spark_replay")
                 .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
                 .getOrCreate())
    try:
        paths = sorted(DEVICES.glob("*.jsonl"))
        log = read_event_log(spark, paths).cache()

        # One clock for the whole fleet: must equal the engine's replay of the same files.
        events, late = replay(log, delay="2m", on_late="adjust")
        with tempfile.TemporaryDirectory() as tmp:
            stats = engine_replay(paths, delay="2m", on_late="adjust",
                                  out=Path(tmp) / "out.jsonl", late=Path(tmp) / "late.jsonl")
        n_events, n_late = events.count(), late.count()
        assert (n_events - stats.ctis_emitted, n_late) == (stats.emitted, stats.late), \
            (n_events, n_late, stats)
        print(f"fleet clock: {n_events} rows out ({stats.ctis_emitted} CTIs), {n_late} late; "
              f"final CTI {format_ns(stats.final_cti)} — same as goldilocks.replay")

        # One clock per site, computed in parallel: doors and thermometers keep their own time.
        sited = log.withColumn("site", F.when(F.col("source").startswith("door"), "doors")
                               .otherwise("climate"))
        events, late = replay(sited, delay="2m", on_late="adjust", group_col="site")
        per_site = {r["site"]: (r["ctis"], r["final"]) for r in events.groupBy("site").agg(
            F.sum(F.when(F.col("kind") == "cti", 1).otherwise(0)).alias("ctis"),
            F.max("cti").alias("final")).collect()}
        late_per_site = dict(late.groupBy("site").count().collect())
        for site in sorted(per_site):
            ctis, final = per_site[site]
            print(f"site {site:8s}: {ctis} CTIs, final {format_ns(final)}, "
                  f"{late_per_site.get(site, 0)} late")
        late.orderBy(*ORDER).select("source", "start", "cti", "action").show(5, truncate=False)
        log.unpersist()
        return {"events": n_events, "late": n_late, "engine": stats,
                "sites": per_site, "late_per_site": late_per_site}
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    main()
