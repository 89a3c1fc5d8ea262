"""``benchmarks.bench_spark_jvm`` still imports, finds ``javac`` as the shell would, says why
it skips without one, and its Java sources still compile against pyspark's jars into a jar
that holds the two functions (no Spark session: the part itself is run by hand)."""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_spark_jvm import (JAVA_SOURCES, build_jar, find_javac,  # noqa: E402
                                        pyspark_jars)


def test_javac_is_found_on_path_or_not_at_all(tmp_path, monkeypatch):
    assert find_javac() == shutil.which("javac")
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no javac on it
    assert find_javac() is None


def test_without_javac_the_part_is_skipped_with_its_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert build_jar(tmp_path / "out") is None
    out = capsys.readouterr().out
    assert "stage-jvm: skipped: no javac on PATH" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_the_sources_compile_against_pyspark_into_a_jar(tmp_path):
    pytest.importorskip("pyspark")
    assert any(pyspark_jars().glob("spark-sql_*.jar"))
    jar = build_jar(tmp_path)
    assert jar is not None
    with zipfile.ZipFile(jar) as packed:
        names = set(packed.namelist())
    for source in JAVA_SOURCES.glob("*.java"):
        assert f"goldilocks/jvm/{source.stem}.class" in names
    assert {"goldilocks/jvm/LateFlag.class", "goldilocks/jvm/LateRows.class"} <= names
