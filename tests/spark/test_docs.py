"""Every Python snippet of docs/spark.md runs, as a reader would run it, so the page cannot rot.

Each snippet gets a fresh session of the shared Spark (``spark.newSession()``: nothing
registered in it, as in a new ``pyspark`` shell) named ``spark``, and the directories the page
assumes: ``readings/`` (JSON Lines readings), ``logs/`` (the bundled device logs) and
``parts/`` (rolling-sink parts). The page
names directories relative, ending in ``/``; the test roots each of them in a temporary
directory — Spark resolves a relative path against the JVM's working directory, not the
test's — and checks afterwards that every directory a snippet names exists (it read or wrote
it). ``readings/`` holds the example's device readings (``examples/spark_watermark_stage.py``).
"""

from __future__ import annotations

import contextlib
import re
import runpy
import shutil
from pathlib import Path

import pytest

from engine.event import Event
from eventlog import RollingFileSink
from engine.sources import from_iterable

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "spark.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
_DIRECTORY = re.compile(r"\"((?:[\w-]+/)+)\"")  # a quoted relative path ending in "/"
S = 10**9


def _readings():
    """Two devices, B's clock 4 s behind A's, a CTI from each every 5 s, some of B's late."""
    for t in range(0, 60, 5):
        yield Event.point(t * S, payload={"v": t}, source="A")
        yield Event.point((t - 4) * S, payload={"v": t}, source="B")
        if t % 20 == 15:
            yield Event.point((t - 14) * S, payload={"v": -1}, source="B")
        yield Event.cti(t * S, source="A")
        yield Event.cti((t - 4) * S, source="B")


def _prepare(work: Path) -> None:
    shutil.copytree(ROOT / "examples" / "data" / "devices", work / "logs")
    example = runpy.run_path(str(ROOT / "examples" / "spark_watermark_stage.py"))
    example["write_files"](work / "readings")  # a user's readings, two of them late
    sink = RollingFileSink(work / "parts", max_events=16)
    from_iterable(list(_readings())).subscribe(sink)
    assert sink.error is None and len(sink.published) > 2


def test_the_page_has_snippets():
    assert len(SNIPPETS) >= 3


@contextlib.contextmanager
def _fresh_session(spark):
    """A new session of the shared Spark, active while the block runs, as a new shell's is.

    Active matters: Spark checks a data source name being registered against the *active*
    session's sources, so registering in an inactive session that the active one already
    has raises DATA_SOURCE_ALREADY_EXISTS. PySpark has no public setter (``createDataFrame``
    makes its session active as a side effect); this does what it does.
    """
    from pyspark.sql import SparkSession

    jvm_class = SparkSession._get_j_spark_session_class(spark._jvm)
    session = spark.newSession()
    jvm_class.setActiveSession(session._jsparkSession)
    SparkSession._activeSession = session
    try:
        yield session
    finally:
        for query in session.streams.active:  # a failed snippet leaves nothing running
            query.stop()
        jvm_class.setActiveSession(spark._jsparkSession)
        SparkSession._activeSession = spark


@pytest.mark.parametrize("index", range(len(SNIPPETS)), ids=lambda i: f"snippet{i + 1}")
def test_snippet_runs_in_a_fresh_session(spark, tmp_path, index):
    _prepare(tmp_path)
    code = SNIPPETS[index]
    named = sorted(set(_DIRECTORY.findall(code)))
    rooted = _DIRECTORY.sub(lambda m: repr(str(tmp_path / m.group(1))), code)
    with _fresh_session(spark) as session:
        exec(compile(rooted, f"docs/spark.md, python snippet {index + 1}", "exec"),
             {"spark": session})
    missing = [d for d in named if not (tmp_path / d).is_dir()]
    assert not missing, f"snippet {index + 1} names {missing} but left no such directory"
