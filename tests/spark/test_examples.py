"""The Spark examples run as scripts (``__main__``) in the shared session, and say what they
should: the replay agrees with the engine, windows close as the CTI advances."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_spark_replay_example(spark, capsys):
    runpy.run_path(str(EXAMPLES / "spark_replay.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert re.search(r"fleet clock: \d+ rows out \(\d+ CTIs\), \d+ late; .* same as goldilocks.replay",
                     out)
    assert re.search(r"site doors\s*: \d+ CTIs, final .*, 0 late", out)  # its own clock
    assert re.search(r"site climate\s*: \d+ CTIs, final .*, [1-9]\d* late", out)
    assert spark.sparkContext._jsc is not None  # the shared session was used, not stopped


def test_watermark_stage_example_closes_windows_as_the_cti_advances(spark, capsys):
    """A user's readings: Spark's watermark is the CTI after the micro-batch before (A's
    newest reading less the 3 s delay) minus 1 ms; every window the final CTI (56 s) passed
    is closed whole; B's two old readings are on the late side with their reason."""
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    runpy.run_path(str(EXAMPLES / "spark_watermark_stage.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert spark.conf.get("spark.sql.shuffle.partitions") == partitions  # left as it was
    marks = re.findall(r"batch (\d+): +(\d+) readings in, Spark watermark ([^\s;]+)", out)
    assert [m[2] for m in marks[:6]] == ["1970-01-01T00:00:00.000Z"] + [
        f"2026-01-01T00:00:{10 * k + 5:02d}.999Z" for k in range(5)]
    assert [int(m[1]) for m in marks[:6]] == [17, 20, 21, 20, 21, 20]
    closed = re.findall(r"closed (\S+)-(\S+): (\d+) readings", out)
    assert closed == [(f"00:00:{s:02d}", f"00:00:{s + 10:02d}", "20") for s in range(0, 50, 10)]
    assert re.findall(r"late: (\w) at (\S+), CTI (\S+), dropped: starts before its source's CTI",
                      out) == [("B", "00:00:06", "00:00:13"), ("B", "00:00:26", "00:00:33")]
    assert re.search(r"batch 2: .*CTI at its end 2026-01-01 00:00:26, 20 rows out, 1 late", out)
