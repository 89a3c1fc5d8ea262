"""One local SparkSession for every Spark test (a session costs ~6 s to start).

``local[2]``, four shuffle partitions, no UI, UTC session time zone, the stage's jar (its JVM
plan), and the Python workers
run this interpreter (so they import ``engine``, ``operators`` and ``spark_adapter`` from the
same environment). Without pyspark installed the whole folder is skipped at collection.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("pyspark") is None:  # pragma: no cover - depends on the extra
    collect_ignore_glob = ["test_*.py"]

sys.path.insert(0, str(Path(__file__).parent))  # spark_support, shared by the test modules


@pytest.fixture(scope="session")
def spark():
    """The shared ``local[2]`` session; stopped when the test session ends."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_adapter import stage_jar

    session = (
        SparkSession.builder.master("local[2]")
        .appName("goldilocks-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "600s")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
        .config("spark.python.worker.reuse", "true")
        .config("spark.jars", stage_jar())  # the watermark stage's JVM plan
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from spark_adapter import register

    register(session)  # the "goldilocks" source, for spark.read[Stream].format("goldilocks")
    yield session
    session.stop()
