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

This module imports nothing of pyspark; it works on the session object it is given.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from engine.errors import GoldilocksError

__all__ = ["use_driver_python", "WorkerPythonError", "worker_python_error"]

#: What ``SparkContext`` falls back to when ``PYSPARK_PYTHON`` is not set (pyspark/core/context.py).
_PYSPARK_DEFAULT = "python3"
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


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
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: the server starts the workers; nothing to set here
        return None
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
    try:
        python = spark.sparkContext.pythonExec
    except Exception:
        python = "the workers' interpreter"
    module = found.group(1)
    return WorkerPythonError(
        f"Spark's Python workers run {python!r}, which cannot import {module!r}: Goldilocks "
        f"(or a package it needs) is not installed for that interpreter. Run the workers "
        f"with an interpreter that has it — this driver's is {sys.executable!r}: set "
        f"PYSPARK_PYTHON={sys.executable} before the session starts, or "
        f"spark.pyspark.python; on a cluster, spark.executorEnv.PYSPARK_PYTHON (and install "
        f"goldilocks on the executors)")
