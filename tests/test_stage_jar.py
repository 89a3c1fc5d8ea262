"""The stage's jar ships built from the Java sources beside it: its recorded digest is the
sources' digest, it holds a class for every source, its classes are for Java 17 (the release
the build pins, docs/spark.md), and (with a JDK) the sources still compile, warnings as
errors, into a jar with the same classes for the same release."""

from __future__ import annotations

import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from spark_adapter import jvm

#: the class-file version of Java 17 (``javac --release 17``): Spark 4's floor, so the jar
#: runs on every JVM Spark runs on, whatever JDK built it
JAVA_17 = 61


def _class_versions(jar: Path) -> dict[str, int]:
    """Each class of ``jar`` and its class-file major version."""
    with zipfile.ZipFile(jar) as z:
        found = {}
        for name in z.namelist():
            if name.endswith(".class"):
                magic, _, major = struct.unpack(">IHH", z.read(name)[:8])
                assert magic == 0xCAFEBABE, name
                found[name] = major
    return found


def test_the_jar_is_built_from_the_sources_in_the_tree():
    jar = Path(jvm.stage_jar())
    assert jar.is_file(), "run python -m spark_adapter.jvm to build the stage's jar"
    assert jvm.jar_digest(jar) == jvm.sources_digest(), (
        "the Java sources changed since the jar was built: run python -m spark_adapter.jvm")
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    for source in (Path(jvm.__file__).parent / "java").rglob("*.java"):
        assert f"goldilocks/spark/{source.stem}.class" in names


def test_the_jar_is_built_for_java_17():
    versions = _class_versions(Path(jvm.stage_jar()))
    assert versions and set(versions.values()) == {JAVA_17}, versions


def test_the_digest_changes_with_any_source(tmp_path):
    root = tmp_path / "java"
    shutil.copytree(Path(jvm.__file__).parent / "java", root)
    before = jvm.sources_digest(root)
    assert before == jvm.sources_digest()
    source = next(root.rglob("StageTask.java"))
    source.write_text(source.read_text() + "\n")
    assert jvm.sources_digest(root) != before


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_the_sources_compile_into_the_same_classes(tmp_path):
    pytest.importorskip("pyspark")
    built = jvm.build_stage_jar(tmp_path / "stage.jar")
    with zipfile.ZipFile(built) as a, zipfile.ZipFile(jvm.stage_jar()) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
        assert a.read(jvm.JAR_DIGEST_ENTRY) == b.read(jvm.JAR_DIGEST_ENTRY)
    assert set(_class_versions(built).values()) == {JAVA_17}  # --release 17, on any JDK


def test_the_format_and_the_functions_the_python_side_expects_are_the_jars():
    java = Path(jvm.__file__).parent / "java"
    source = next(java.rglob("StageTask.java")).read_text()
    assert f'static final String FORMAT = "{jvm.JVM_FORMAT}";' in source
    source = next(java.rglob("Functions.java")).read_text()
    assert f'static final String API = "{jvm.JVM_API}";' in source
