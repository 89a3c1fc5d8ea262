"""Which Python Spark runs for us, and what to do when it cannot import Goldilocks.

PySpark starts its Python workers (the data source's planning process and readers, the
watermark stage's per-group function) with ``SparkContext.pythonExec``: read once, when the
context is created, from ``PYSPARK_PYTHON`` — else ``python3``, whatever that is on the PATH —
and stamped on each Python function when it is shipped to the JVM. A bare
``SparkSession.builder.getOrCreate()`` in a virtual environment therefore starts workers that
cannot import this package, and the first read fails deep in a Spark trace with
``ModuleNotFoundError``. Because the interpreter is taken at shipping time, it can still be
chosen for a session that already exists: ``use_driver_python`` does so before we ship
anything (``register``, ``read_event_log``, ``watermark_stage``).

A Spark Connect session has no JVM in this process: the server starts the workers, with the
interpreter the server was given (``PYSPARK_PYTHON`` when it started, or per session the SQL
conf ``spark.sql.execution.pyspark.python``), and the package reaches them installed there or
shipped with ``spark.addArtifacts`` (``docs/spark.md``). Nothing here touches
``sparkContext`` (or any JVM handle) for such a session: ``is_connect`` tells the kinds apart,
``default_parallelism`` asks the session's configuration and plan instead.

This module imports nothing of pyspark; it works on the session object it is given.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from engine.errors import GoldilocksError

__all__ = ["use_driver_python", "WorkerPythonError", "worker_python_error", "is_connect",
           "default_parallelism", "plan_text", "package_zip", "PACKAGES"]

#: the packages a Spark worker imports for Goldilocks (the command line's too: small)
PACKAGES = ("engine", "operators", "eventlog", "goldilocks", "spark_adapter")

#: What ``SparkContext`` falls back to when ``PYSPARK_PYTHON`` is not set (pyspark/core/context.py).
_PYSPARK_DEFAULT = "python3"
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_SPLITS = re.compile(r"\bRange \(0, 1, step=1, splits=(\d+)\)")


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process). Reads the
    object's class, not PySpark's process-wide Connect switch: a process may hold both kinds."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def plan_text(df: Any) -> str:
    """``df``'s plans as ``explain(extended=True)`` prints them (parsed, analyzed, optimized,
    physical): an analysis request, no job, on either kind of session. Driver."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(extended=True)
    return out.getvalue()


def default_parallelism(spark: Any) -> int:
    """The number of tasks Spark runs at once for ``spark`` (its default parallelism), read
    without a JVM handle on a Connect session: ``spark.default.parallelism`` when set, else
    the split count Spark gives a one-row ``range`` (what ``sparkContext.defaultParallelism``
    returns: the cores of a local master, the executors' cores on a cluster), else
    ``spark.sql.shuffle.partitions``. At least 1. Driver."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    for key in ("spark.default.parallelism", "spark.sql.leafNodeDefaultParallelism"):
        value = spark.conf.get(key, None)
        if value and str(value).strip().isdigit():
            return max(1, int(value))
    found = _SPLITS.search(plan_text(spark.range(1)))
    if found:
        return max(1, int(found.group(1)))
    return max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "200")))


class WorkerPythonError(GoldilocksError, ModuleNotFoundError):
    """Spark's Python workers run an interpreter that cannot import Goldilocks (or one of its
    dependencies); the message names the interpreter and how to choose another."""


def use_driver_python(spark: Any) -> str | None:
    """Let ``spark``'s Python workers run an interpreter that has Goldilocks; return the one
    they will run (``None`` if unknown). Runs on the driver; idempotent.

    - The user chose one: it is kept. ``PYSPARK_PYTHON`` is the usual way, read when the
      context starts (or set later: applied here). ``spark.pyspark.python`` is honoured by
      PySpark only when ``spark-submit`` starts the driver, not in a session built from
      Python, so it is applied here too.
    - A local master (``local[...]``): the workers run on this machine, so they run the
      driver's own interpreter, ``sys.executable`` — which imports this package.
    - Otherwise (a cluster): left alone; the executors' Python is the cluster's to set
      (``spark.executorEnv.PYSPARK_PYTHON``), and ``read_event_log`` says so if it fails.
    """
    if is_connect(spark):  # the server starts the workers; nothing to set here
        return None
    sc = spark.sparkContext
    if sc.pythonExec != _PYSPARK_DEFAULT:  # chosen when the context started, or by hand
        return sc.pythonExec
    chosen = os.environ.get("PYSPARK_PYTHON") or sc.getConf().get("spark.pyspark.python")
    if chosen:
        sc.pythonExec = chosen
    elif str(sc.master).startswith("local"):
        sc.pythonExec = sys.executable
    return sc.pythonExec


def worker_python_error(error: BaseException, spark: Any) -> WorkerPythonError | None:
    """The error to raise instead of ``error`` — a Spark failure whose Python worker could
    not import a module — or ``None`` when ``error`` is something else."""
    found = _MISSING.search(str(error))
    if found is None:
        return None
    module = found.group(1)
    if is_connect(spark):
        return WorkerPythonError(
            f"the Spark Connect server's Python workers cannot import {module!r}: Goldilocks "
            f"(or a package it needs) is not installed for their interpreter. Install "
            f"goldilocks[spark] where the server runs its workers, or choose an interpreter "
            f"that has it (spark.conf.set('spark.sql.execution.pyspark.python', path)), or "
            f"ship the package with the session: spark.addArtifacts("
            f"spark_adapter.package_zip(), pyfile=True) (its compiled dependencies — numpy, "
            f"pyarrow, orjson, pendulum — must still be installed there); docs/spark.md")
    try:
        python = spark.sparkContext.pythonExec
    except Exception:
        python = "the workers' interpreter"
    return WorkerPythonError(
        f"Spark's Python workers run {python!r}, which cannot import {module!r}: Goldilocks "
        f"(or a package it needs) is not installed for that interpreter. Run the workers "
        f"with an interpreter that has it — this driver's is {sys.executable!r}: set "
        f"PYSPARK_PYTHON={sys.executable} before the session starts, or "
        f"spark.pyspark.python; on a cluster, spark.executorEnv.PYSPARK_PYTHON (and install "
        f"goldilocks on the executors)")


def package_zip(path: str | os.PathLike | None = None) -> str:
    """A zip of Goldilocks' own Python packages (``PACKAGES``, sources only), for a Spark
    Connect session's workers: ``spark.addArtifacts(package_zip(), pyfile=True)`` puts it on
    their ``sys.path`` for that session. Its dependencies with compiled parts (numpy,
    pyarrow, orjson, pendulum, sortedcontainers) cannot travel in a zip: the workers'
    interpreter must have them. Written to ``path`` (default: a file in the temporary
    directory named by the packages' content, so a second call reuses it); returns the path.
    Driver."""
    entries: list[tuple[str, Path]] = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(f"package_zip: cannot find the package {name!r}")
        root = Path(next(iter(spec.submodule_search_locations)))
        for file in sorted(root.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                entries.append((f"{name}/{file.relative_to(root).as_posix()}", file))
    if path is None:
        import hashlib

        digest = hashlib.sha256()
        for arcname, file in entries:
            digest.update(arcname.encode() + b"\0" + file.read_bytes() + b"\0")
        path = Path(tempfile.gettempdir()) / f"goldilocks-{digest.hexdigest()[:16]}.zip"
        if path.is_file():
            return str(path)
    out = Path(path)
    partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, file in entries:
            z.writestr(zipfile.ZipInfo(arcname, (1980, 1, 1, 0, 0, 0)), file.read_bytes())
    os.replace(partial, out)  # whole or absent, for a concurrent caller
    return str(out)
