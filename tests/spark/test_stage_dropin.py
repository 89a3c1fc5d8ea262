"""The stage as a drop-in for ``withWatermark``: what users put after a watermark gets native's
rows, on a real local session.

One stream of readings, one file per micro-batch: devices whose clocks agree and report in
order (A, B), one whose readings come with ±2 s of jitter (C), one 1 s behind with ±1.5 s
of jitter that stops early (D), a few readings far too old (late for everyone), and a
reading D sends again, 7 s later, with the same id. Each downstream operator runs twice on
it: after ``withWatermark("ts", "5 seconds")`` and after ``watermark_stage(delay="5
seconds")`` where the ``withWatermark`` call was — and gives the same rows: the default
keeps what native keeps (a device's own jitter within the delay included), Spark's
watermark follows the same newest reading less the delay, and the time column carries the
delay that operators keeping state "within the watermark" read (the row times avoid whole
milliseconds at the CTI, where Spark's ``<=`` and the CTI's ``<`` differ by one row).
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone

import pytest

from test_stage import TIMEOUT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "device_id string, ts timestamp, temperature double, id bigint"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
BATCHES = 6
DUPLICATE = 9_999  # the id D sends twice


def _iso(seconds: float) -> str:
    return (T0 + timedelta(milliseconds=round(seconds * 1000))).isoformat().replace(
        "+00:00", "Z")


def _readings() -> list[list[dict]]:
    rng = random.Random(7)
    batches, next_id = [], 0

    def reading(device: str, seconds: float, temperature: float | None = None) -> dict:
        nonlocal next_id
        next_id += 1
        return {"device_id": device, "ts": _iso(seconds), "id": next_id,
                "temperature": temperature if temperature is not None
                else round(rng.uniform(15, 25), 1)}

    for k in range(BATCHES):
        rows = []
        for i in range(10):
            t = 10 * k + i
            rows.append(reading("A", t + 0.101))
            rows.append(reading("B", t + 0.503))
            rows.append(reading("C", t + 0.257 + rng.choice([-2, -1.5, -1, 0, 1, 1.5, 2])))
            if k < 4:
                rows.append(reading("D", t - 1 + 0.733 + rng.choice([-1.5, -1, 0, 1, 1.5])))
        if k in (2, 4):
            rows.append(reading("B", 10 * k - 20.411, -1.0))  # far too old: late for both
        if k == 1:
            rows.append({**reading("D", 15.377), "id": DUPLICATE})
        if k == 2:
            rows.append({**reading("D", 22.377), "id": DUPLICATE})  # sent again, 7 s on
        rng.shuffle(rows)
        batches.append(rows)
    return batches


def _alerts() -> list[list[dict]]:
    """Another stream, with its own watermark: one alert per device per micro-batch."""
    return [[{"device_id": d, "alert_ts": _iso(10 * k + 5.049), "level": k}
             for d in "ABCD"] for k in range(BATCHES)]


def _write(directory, batches) -> None:
    directory.mkdir(parents=True)
    for k, rows in enumerate(batches):
        path = directory / f"part-{k:03d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (1_700_000_000 + k,) * 2)


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    root = tmp_path_factory.mktemp("dropin")
    _write(root / "readings", _readings())
    _write(root / "alerts", _alerts())
    return root


def _watermarked(spark, root, how: str, **options):
    """The readings with a watermark: Spark's own, or the stage's (its JVM plan by default,
    the session has the jar; ``jvm=False``: a Python plan)."""
    from spark_adapter import watermark_stage

    stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .json(str(root / "readings")))
    if how == "native":
        return stream.withWatermark("ts", "5 seconds")
    return watermark_stage(stream, delay="5 seconds", time_col="ts", source_col="device_id",
                           state_dir=str(root / f"state-{how}"), **options)


def _run(spark, root, name: str, frame, mode: str = "append") -> list[tuple]:
    query = (frame.writeStream.format("memory").queryName(name).outputMode(mode)
             .option("checkpointLocation", str(root / "ck" / name))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT), f"{name} did not finish"
    assert query.exception() is None
    return sorted(tuple(r) for r in spark.table(name).collect())


def _both(spark, streams, name: str, downstream, mode: str = "append", **options):
    got = {how: _run(spark, streams, f"{name}_{how}", downstream(
        _watermarked(spark, streams, how, **options)), mode) for how in ("native", "stage")}
    assert got["native"], "the comparison needs rows"
    return got["native"], got["stage"]


def test_window_counts_and_means_in_append_and_update_mode(spark, streams):
    """Windows in append mode: the same windows closed, each with the same count and mean;
    in update mode, the same updates. C's jitter is kept, as native keeps it."""
    from pyspark.sql import functions as F

    def per_window(frame):
        return (frame.groupBy(F.window("ts", "10 seconds"), "device_id")
                .agg(F.count("*").alias("n"), F.round(F.avg("temperature"), 6).alias("mean")))

    native, stage = _both(spark, streams, "dropin_append", per_window)
    assert stage == native
    assert {r[1] for r in native} == set("ABCD")
    assert min(r[2] for r in native if r[1] == "C") < 10  # jitter kept: natively too
    native, stage = _both(spark, streams, "dropin_update", per_window, mode="update")
    assert stage == native


def test_duplicates_within_the_watermark_are_dropped_as_natively(spark, streams):
    """``dropDuplicatesWithinWatermark``: D's reading sent again 7 s later comes out once,
    as native's — Spark keeps a key's state for the delay the time column carries. The
    Python plan marks the column alike."""
    def deduplicated(frame):
        return frame.dropDuplicatesWithinWatermark(["id"]).select("id", "device_id", "ts")

    native, stage = _both(spark, streams, "dropin_dedup", deduplicated)
    assert stage == native
    assert [r[0] for r in native].count(DUPLICATE) == 1
    python = _run(spark, streams, "dropin_dedup_python",
                  deduplicated(_watermarked(spark, streams, "python", jvm=False)))
    assert python == native


def test_a_stream_stream_join_against_a_stream_with_its_own_watermark(spark, streams):
    """An inner join on the device, within 3 s of an alert of another stream that has its own
    ``withWatermark``: the same pairs."""
    from pyspark.sql import functions as F

    def joined(frame):
        alerts = (spark.readStream.schema("device_id string, alert_ts timestamp, level long")
                  .option("maxFilesPerTrigger", 1).json(str(streams / "alerts"))
                  .withColumnRenamed("device_id", "alert_device")
                  .withWatermark("alert_ts", "5 seconds"))
        cond = ((F.col("device_id") == F.col("alert_device"))
                & (F.col("ts") >= F.col("alert_ts") - F.expr("interval 3 seconds"))
                & (F.col("ts") <= F.col("alert_ts") + F.expr("interval 3 seconds")))
        return frame.join(alerts, cond).select("id", "device_id", "ts", "level")

    native, stage = _both(spark, streams, "dropin_join", joined)
    assert stage == native


def test_apply_in_pandas_with_state_and_its_event_time_timeouts(spark, streams):
    """``applyInPandasWithState`` counting each device's readings and saying goodbye when
    the watermark passes its timeout (D stops): the same counts and the same goodbyes."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count(key, frames, state):
        import pandas as pd

        if state.hasTimedOut:
            (n,) = state.get
            state.remove()
            yield pd.DataFrame({"device_id": [key[0]], "n": [n], "gone": [True]})
            return
        n = state.get[0] if state.exists else 0
        newest = None
        for frame in frames:
            n += len(frame)
            t = frame["ts"].max()
            newest = t if newest is None or t > newest else newest
        state.update((n,))
        state.setTimeoutTimestamp(int(newest.timestamp() * 1000) + 8_000)
        yield pd.DataFrame({"device_id": [key[0]], "n": [n], "gone": [False]})

    def counted(frame):
        return frame.groupBy("device_id").applyInPandasWithState(
            count, "device_id string, n long, gone boolean", "n long", "append",
            GroupStateTimeout.EventTimeTimeout)

    native, stage = _both(spark, streams, "dropin_pandas", counted)
    assert stage == native
    assert ("D", max(r[1] for r in native if r[0] == "D"), True) in native


def test_late_rows_kept_in_the_output_cannot_be_aggregated_as_data(spark, streams):
    """``keep_late=True`` keeps late rows beside the data for a writer that parts them
    (``split_late``); their time column is not an event-time column, so a windowed
    aggregation over them is refused (Spark: no watermark) instead of counting them."""
    from pyspark.sql import functions as F
    from pyspark.errors import AnalysisException

    staged = _watermarked(spark, streams, "keep", keep_late=True)
    windows = staged.groupBy(F.window("ts", "10 seconds")).count()
    with pytest.raises(AnalysisException, match="(?i)watermark"):
        (windows.writeStream.format("memory").queryName("dropin_keep_late")
         .outputMode("append").option("checkpointLocation", str(streams / "ck" / "keep"))
         .start())
    assert "spark.watermarkDelayMs" not in staged.schema["ts"].metadata


def test_an_integer_time_column_needs_its_unit_when_the_plan_is_built(spark):
    """Epoch milliseconds without ``time_unit``: refused at once, naming the column and the
    units — not a query whose every row is rejected."""
    from engine.errors import InputError
    from spark_adapter import watermark_stage

    frame = spark.createDataFrame([("A", 1_767_225_600_123)], "device_id string, ts_ms bigint")
    with pytest.raises(InputError, match=r"time_col 'ts_ms' is bigint.*time_unit='s', 'ms'"):
        watermark_stage(frame, delay="5 seconds", time_col="ts_ms", source_col="device_id",
                        keep_late=True)
    from pyspark.sql import functions as F

    staged = watermark_stage(frame, delay="5 seconds", time_col="ts_ms", time_unit="ms",
                             source_col="device_id", keep_late=True)
    assert staged.select(F.unix_millis("event_time")).first()[0] == 1_767_225_600_123


def test_delay_reads_as_withwatermarks_and_the_one_duration_rule(spark, streams, tmp_path):
    """``delay=5`` is 5 seconds, as a Spark user means it (the engine's one rule for a bare
    number), and the time column carries it as ``withWatermark`` would; ``"5"`` has no unit
    and is refused, naming the forms."""
    from engine.errors import InputError
    from spark_adapter import watermark_stage

    stream = spark.readStream.schema(SCHEMA).json(str(streams / "readings"))
    native = stream.withWatermark("ts", "5 seconds").schema["ts"].metadata
    for delay, ms in ((5, 5000), (2.5, 2500), ("5 seconds", 5000),
                      ("interval 5 minutes", 300_000)):
        staged = watermark_stage(stream, delay=delay, time_col="ts", source_col="device_id",
                                 state_dir=str(tmp_path / "state"))
        assert staged.schema["ts"].metadata == {"spark.watermarkDelayMs": ms}, delay
    assert native == {"spark.watermarkDelayMs": 5000}
    with pytest.raises(InputError, match=r"delay: '5' has no unit; expected a duration with "
                                         r"its unit, e.g. '5s'"):
        watermark_stage(stream, delay="5", time_col="ts", source_col="device_id",
                        state_dir=str(tmp_path / "state"))
