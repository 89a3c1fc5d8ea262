"""The watermark stage's JVM functions: where their jar is, how it is built, whether a
session has it, and how to read the state they keep. No pyspark import.

The jar (``spark_adapter/jars/goldilocks-spark.jar``) ships in the package, built from the
Java sources in ``spark_adapter/java/`` by ``python -m spark_adapter.jvm`` (a JDK 17 or newer
and pyspark's jars; users need neither: the jar is package data). Its entry
``goldilocks/spark/sources.sha256`` is the digest of the sources it was built from, which the
tests compare with the sources in the tree, so a jar older than its sources cannot ship.

A session loads it when it starts, with ``spark.jars`` (the JVM's class path is fixed then)::

    SparkSession.builder.config("spark.jars", spark_adapter.stage_jar()).getOrCreate()
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable

from engine import MIN_TIME
from spark_adapter.session import is_connect

__all__ = ["stage_jar", "sources_digest", "build_stage_jar", "stage_functions",
           "read_jvm_state", "JAR_DIGEST_ENTRY", "JVM_FORMAT", "JVM_API"]

_HERE = Path(__file__).resolve().parent
_JAR = _HERE / "jars" / "goldilocks-spark.jar"
_SOURCES = _HERE / "java"
#: the jar entry that names the sources it was built from
JAR_DIGEST_ENTRY = "goldilocks/spark/sources.sha256"
#: the state files' format (``StageTask.FORMAT``)
JVM_FORMAT = "goldilocks-stage-jvm-2"
#: the functions' version (``Functions.API``); a jar of another version is not used
JVM_API = "goldilocks-stage-functions-3"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # zip entries' time: the same sources give the same jar


def stage_jar() -> str:
    """The path of the stage's jar, for ``spark.jars`` (or ``--jars``)."""
    return str(_JAR)


def sources_digest(root: Path = _SOURCES) -> str:
    """SHA-256 over the Java sources (their paths and bytes, in path order)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.java")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def jar_digest(jar: Path = _JAR) -> str | None:
    """The sources digest recorded in ``jar`` (``None``: no jar, or none recorded)."""
    try:
        with zipfile.ZipFile(jar) as z:
            return z.read(JAR_DIGEST_ENTRY).decode().strip()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def build_stage_jar(out: Path = _JAR, javac: str | None = None) -> Path:
    """Compile ``spark_adapter/java`` for Java 17 against pyspark's jars into ``out``."""
    import pyspark  # the classpath to compile against; only needed to build

    javac = javac or shutil.which("javac")
    if javac is None:
        raise RuntimeError("building the stage's jar needs javac (a JDK 17 or newer)")
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    sources = sorted(str(p) for p in _SOURCES.rglob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp)
        subprocess.run([javac, "--release", "17", "-Xlint:all,-path", "-Werror",
                        "-cp", str(jars / "*"), "-d", str(classes), *sources], check=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:  # a jar is a zip
            entries = [("META-INF/MANIFEST.MF", b"Manifest-Version: 1.0\r\n\r\n")]
            entries += [(p.relative_to(classes).as_posix(), p.read_bytes())
                        for p in sorted(classes.rglob("*.class"))]
            entries.append((JAR_DIGEST_ENTRY, (sources_digest() + "\n").encode()))
            for name, data in entries:
                z.writestr(zipfile.ZipInfo(name, _FIXED_TIME), data)
    return out


def stage_functions(spark: Any) -> tuple[Any, str | None]:
    """``(the JVM class goldilocks.spark.Functions, None)`` when ``spark`` has the stage's
    jar, else ``(None, why not)``."""
    if is_connect(spark):
        return None, "a Spark Connect session (no JVM of ours to call)"
    try:
        jvm = spark._jvm
    except Exception:
        return None, "a session with no JVM handle (no JVM of ours to call)"
    if jvm is None:
        return None, "no JVM behind this session"
    try:
        functions = jvm.goldilocks.spark.Functions
        version = functions.version()
    except Exception:
        return None, _missing_jar(spark)
    if version != JVM_API:
        return None, (f"the session has another version of the stage's jar ({version}, "
                      f"this package needs {JVM_API}): put {stage_jar()} on spark.jars")
    return functions, None


def _missing_jar(spark: Any) -> str:
    """Why a session's JVM lacks the stage's functions, and what to do about it."""
    if not _JAR.is_file():
        return (f"this installation has no stage jar ({_JAR} is missing): reinstall "
                "goldilocks, or build the jar with `python -m spark_adapter.jvm` (a JDK 17)")
    try:
        configured = spark.conf.get("spark.jars", "") or ""
    except Exception:
        configured = ""
    named = [p.strip() for p in configured.split(",") if p.strip()]
    ours = [p for p in named if Path(p.removeprefix("file:")).name == _JAR.name]
    for path in ours:
        local = path.removeprefix("file://").removeprefix("file:")
        if "://" not in local and not Path(local).is_file():
            return (f"spark.jars names {path}, which does not exist (Spark logs an error and "
                    f"starts without it): name the jar that is there, "
                    f".config('spark.jars', {str(_JAR)!r}) (spark_adapter.stage_jar())")
    if ours:
        return ("spark.jars names the stage's jar, but this session's JVM was started before "
                "it did: a running session keeps the class path it started with (getOrCreate() "
                "returned the running one and ignored spark.jars). Stop it (spark.stop()) and "
                "start a new session with .config('spark.jars', spark_adapter.stage_jar())")
    return ("the session was started without the stage's jar: start it with "
            ".config('spark.jars', spark_adapter.stage_jar())")


def _utf(data: bytes, at: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">H", data, at)
    return data[at + 2:at + 2 + n].decode("utf-8"), at + 2 + n


def read_jvm_state(names: list[str], read_bytes: Callable[[str], bytes]) -> dict:
    """The newest ``cum`` file among ``names`` (the listing of the JVM plan's state folder;
    ``read_bytes(name)`` reads one) as ``read_stage_state`` shows the Python plan's state
    (``{}``: none yet); sources by their text."""
    cums = sorted(n for n in names if n.startswith("cum-") and n[4:].isdigit())
    if not cums:
        return {}
    data = read_bytes(cums[-1])
    fmt, at = _utf(data, 0)
    if fmt != JVM_FORMAT:
        raise ValueError(f"{cums[-1]}: format {fmt!r}, expected {JVM_FORMAT!r}")
    _, at = _utf(data, at)  # the options' fingerprint
    _, _, floor, n = struct.unpack_from(">qqqi", data, at)  # the writer's delays, the floor
    at += 28
    sources = {}
    for _ in range(n):
        (size,) = struct.unpack_from(">i", data, at)
        name = data[at + 4:at + 4 + size].decode("utf-8")
        at += 4 + size
        sources[((), name)] = struct.unpack_from(">qq", data, at)
        at += 16
    high = None if floor == MIN_TIME else floor
    return {"batch": int(cums[-1][4:]), "published": high, "groups": {(): high},
            "sources": sources}


def main() -> int:
    """``python -m spark_adapter.jvm``: rebuild the jar from the sources."""
    out = build_stage_jar()
    print(f"{out} ({out.stat().st_size:,} bytes, sources {sources_digest()[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
