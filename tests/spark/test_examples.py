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
    runpy.run_path(str(EXAMPLES / "spark_watermark_stage.py"), run_name="__main__")
    out = capsys.readouterr().out
    marks = re.findall(r"batch (\d+): +(\d+) rows in, Spark watermark (\S+)", out)
    # parts of 8 records; CTIs every 5 s delayed by 3 s: the watermark is the CTI of the
    # batch before, minus 1 ms
    assert [m[2] for m in marks[:5]] == [
        "1970-01-01T00:00:00.000Z", "1970-01-01T00:00:00.000Z", "1970-01-01T00:00:06.999Z",
        "1970-01-01T00:00:16.999Z", "1970-01-01T00:00:26.999Z"]
    closed = re.findall(r"closed (\S+)-(\S+): (\d+) readings", out)
    assert [c[:2] for c in closed] == [("00:00:00", "00:00:10"), ("00:00:10", "00:00:20"),
                                       ("00:00:20", "00:00:30"), ("00:00:30", "00:00:40")]
    assert re.findall(r"late: B at (\d+)s, CTI (\d+)s, dropped", out) == [
        ("1", "7"), ("21", "27"), ("41", "47")]
    assert "a Spark watermark of 55999 ms" in out
