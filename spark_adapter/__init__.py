"""Goldilocks in Spark: batch replay of recorded logs, a Structured Streaming stage, a source.

The documented surface (``docs/spark.md``)::

    read_event_log(spark, path, ...) -> DataFrame            # batch: the event-log schema
    replay(df, *, delay, policy="goldilocks", on_late="drop", group_col=None) -> (events, late)
    write_replay(df, events_path, late_path, *, format="parquet", **replay's options)
    watermark_stage(df, *, delay, time_col, source_col, kind_col=None, advance=None, ...,
                    idle_after=None)
        -> DataFrame          # any DataFrame, streaming or batch: a better withWatermark
    split_late(staged) -> (events, late)                      # for keep_late=True
    stage_metrics(query.lastProgress, name) -> dict           # cti, rows, late, rejected
    windows(events, *, window, aggregates, hop=None, key=None, ...) -> DataFrame
                        # one row per window closed by the CTI: replay --window's rows
    window_stage(staged, *, window, aggregates, key=None, time_col, ...) -> DataFrame
                        # the same windows on a stream, after watermark_stage
    EVENT_LOG_STAGE           # watermark_stage's options for our own log format
    read_stage_state(state_dir, query_id)                     # the stage's clock, to inspect
    stage_jar()         # the stage's JVM functions, for spark.jars (its JVM plan)
    register(spark)     # the streaming source, short name "goldilocks"
    use_driver_python(spark)  # local sessions: workers run this interpreter (done by the above)
    package_zip()       # the packages as a zip, for a Spark Connect session's addArtifacts
    cti_to_watermark_ms(cti) / watermark_ms_to_cti(ms)        # the exact CTI <-> watermark map

This is the only package that imports ``pyspark``, and it does so lazily: ``import
spark_adapter`` works without pyspark installed; the first use of a name that needs Spark
imports the module that defines it (PEP 562 ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "EVENT_LOG_SCHEMA",
    "ORDER_COLUMNS",
    "read_event_log",
    "replay",
    "write_replay",
    "watermark_stage",
    "split_late",
    "stage_metrics",
    "windows",
    "window_stage",
    "EVENT_LOG_STAGE",
    "read_stage_state",
    "stage_jar",
    "register",
    "GoldilocksDataSource",
    "SOURCE_NAME",
    "cti_to_watermark_ms",
    "watermark_ms_to_cti",
    "use_driver_python",
    "package_zip",
    "WorkerPythonError",
]

# name -> module that defines it; only the module of a name actually used is imported.
_HOME = {
    "EVENT_LOG_SCHEMA": "spark_adapter.schema",
    "ORDER_COLUMNS": "spark_adapter.schema",
    "SOURCE_NAME": "spark_adapter.schema",
    "cti_to_watermark_ms": "spark_adapter.schema",
    "watermark_ms_to_cti": "spark_adapter.schema",
    "read_event_log": "spark_adapter.batch",
    "replay": "spark_adapter.batch",
    "write_replay": "spark_adapter.batch",
    "watermark_stage": "spark_adapter.streaming",
    "split_late": "spark_adapter.streaming",
    "stage_metrics": "spark_adapter.streaming",
    "windows": "spark_adapter.windowing",
    "window_stage": "spark_adapter.windowing",
    "EVENT_LOG_STAGE": "spark_adapter.streaming",
    "read_stage_state": "spark_adapter.stage_state",
    "stage_jar": "spark_adapter.jvm",
    "register": "spark_adapter.source",
    "GoldilocksDataSource": "spark_adapter.source",
    "use_driver_python": "spark_adapter.session",
    "package_zip": "spark_adapter.session",
    "WorkerPythonError": "spark_adapter.session",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'spark_adapter' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
