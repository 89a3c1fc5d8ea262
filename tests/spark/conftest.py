"""One local SparkSession for every Spark test (a session costs ~6 s to start), and one Spark
Connect server in the same JVM for the tests that run on a Connect session.

``local[2]``, four shuffle partitions, no UI, UTC session time zone, the stage's jar (its JVM
plan), and the Python workers
run this interpreter (so they import ``engine``, ``operators`` and ``spark_adapter`` from the
same environment). Without pyspark installed the whole folder is skipped at collection.

The Connect server is Spark's own plugin (``SparkConnectPlugin``) in that JVM, on a free
loopback port with a token: no second JVM to start, and no clash with another Spark on the
machine's default port. ``connect`` is a Connect client session of it. PySpark decides
whether ``pyspark.sql.functions``, ``Observation`` and UDFs build classic or Connect objects
from one process-wide switch (``SPARK_CONNECT_MODE_ENABLED``, what ``remote(...)`` sets);
``connect`` sets it for the test that asks for it and clears it after, so classic tests
never see it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from pathlib import Path

import pytest

if importlib.util.find_spec("pyspark") is None:  # pragma: no cover - depends on the extra
    collect_ignore_glob = ["test_*.py"]

sys.path.insert(0, str(Path(__file__).parent))  # spark_support, shared by the test modules

#: the Connect server's token (a Connect server without one takes any client on the port)
_TOKEN = str(uuid.uuid4())


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
        # a Spark Connect server in this JVM, for the `connect` fixture
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.connect.grpc.binding.port", "0")  # a free port: no clash
        .config("spark.connect.authenticate.token", _TOKEN)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from spark_adapter import register

    register(session)  # the "goldilocks" source, for spark.read[Stream].format("goldilocks")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_url(spark):
    """The address of the Spark Connect server in the shared session's JVM."""
    service = getattr(spark._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
    port = getattr(service, "MODULE$").localPort()
    assert port > 0, "the Spark Connect server did not start"
    # "localhost": pyspark then uses gRPC's local credentials for the token (any other host
    # name asks for TLS)
    return f"sc://localhost:{port}/;token={_TOKEN}"


@pytest.fixture(scope="session")
def connect_session(connect_url):
    """A Spark Connect session of that server; its server-side session is released when the
    test session ends (the server stops with the JVM)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from spark_adapter import register
    from spark_support import connect_mode

    session = ConnectSession.builder.remote(connect_url).create()
    with connect_mode():
        register(session)
    yield session
    with connect_mode():
        session.stop()


@pytest.fixture
def connect(connect_session):
    """The shared Spark Connect session, with PySpark in Connect mode for this test."""
    from spark_support import connect_mode

    with connect_mode():
        yield connect_session
