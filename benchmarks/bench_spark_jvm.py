"""The watermarking stage's late decision made in the JVM, against Spark's own
``withWatermark`` on the stage part's input::

    python -m benchmarks.bench_spark --part stage-jvm --stage-rounds 4

The Java sources in ``benchmarks/jvm/`` are compiled at run time (``javac --release 17``
against pyspark's own jars, into a temporary directory) and packed as a jar that the session
loads through ``spark.jars``; without ``javac`` the part prints why it is skipped. Two scalar
JVM functions, registered nondeterministic (they keep state):

- ``gl_late_flag(device_id, unix_micros(ts), state_dir, delay_us)``: 0 on time, 1 older than
  the device's floor (its newest reading of earlier micro-batches), 2 older than the newest
  reading of any device less the delay, 3 bad; per task, the floors at the batch's start come
  from side files under ``state_dir`` (the batch id from the task's local property
  ``streaming.sql.batchId``) and the task's maxima are written back at task success;
- ``gl_late_rows(struct(*), code, dir)``: keeps a late row whole as a JSON line, written by
  the task at its success; placed on the right of ``code = 0 OR …`` so that Spark calls it
  for late rows only.

Contenders, each a whole ``trigger(availableNow=True)`` query into the ``noop`` sink in the
same process and rounds as ``--part stage``: native + window; the JVM decision + window; the
same with late rows written; native + per-device average and the JVM decision (with and
without late rows written) + per-device average, their ratios taken against it; and
``watermark_stage`` + window for scale. Before timing, the JVM decision's late count (an
``observe`` over its code) and the number of late rows written are checked against the stage
part's numpy model of the documented semantics.

This is a measurement of a design, not the product's stage: it publishes native's
max-event-time watermark, not the CTI, has the goldilocks policy alone (a CTI after every reading), and its late
rows wait unbounded in memory until the task ends (docs/performance.md, "A JVM-side
decision, measured").
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import zipfile
from pathlib import Path

from benchmarks.bench_spark import (STAGE_DELAY, StageBench, stage_average,
                                    stage_window)

#: the Java sources of the late decision
JAVA_SOURCES = Path(__file__).with_name("jvm")
#: their package, as the JVM names it (``spark._jvm.goldilocks.jvm``)
JAVA_PACKAGE = "goldilocks.jvm"


def find_javac() -> str | None:
    """The ``javac`` on PATH, or None: the part needs a JDK (17 or newer), not only a JRE."""
    return shutil.which("javac")


def pyspark_jars() -> Path:
    """The jars pyspark runs with: the classpath the sources compile against."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def build_jar(directory: Path) -> Path | None:
    """Compiles ``benchmarks/jvm/*.java`` for Java 17 against pyspark's jars and packs the
    classes as ``directory/goldilocks-late-decision.jar``; None, with the reason printed,
    when there is no ``javac``."""
    javac = find_javac()
    if javac is None:
        print("stage-jvm: skipped: no javac on PATH (the JVM-side decision is compiled at run "
              "time; install a JDK 17 or newer, e.g. Debian's openjdk-17-jdk-headless)",
              flush=True)
        return None
    classes = directory / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    sources = sorted(str(p) for p in JAVA_SOURCES.glob("*.java"))
    subprocess.run([javac, "--release", "17", "-cp", str(pyspark_jars() / "*"),
                    "-d", str(classes), *sources], check=True)
    jar = directory / "goldilocks-late-decision.jar"
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:  # a jar is a zip of classes
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    return jar


def bench_stage_jvm(spark: object, args: argparse.Namespace) -> None:
    """The JVM-side decision before a window count against native (module doc). The session
    must have been started with ``build_jar``'s jar on ``spark.jars``."""
    from pyspark.sql import functions as F

    from spark_adapter import watermark_stage

    functions = spark._jvm.goldilocks.jvm
    spark._jsparkSession.udf().register("gl_late_flag", functions.LateFlag.nondeterministic())
    spark._jsparkSession.udf().register("gl_late_rows", functions.LateRows.nondeterministic())
    bench = StageBench(spark, args)

    def flagged(work: Path):
        return bench.read().withColumn("_gl", F.expr(
            f"gl_late_flag(device_id, unix_micros(ts), '{work / 'state'}', {bench.DELAY_US}L)"))

    def decided(work: Path):  # on-time rows, native's watermark
        return flagged(work).where("_gl = 0").drop("_gl").withWatermark("ts", STAGE_DELAY)

    def kept(work: Path):  # the same, late rows written whole by the deciding task
        return flagged(work).where(
            f"_gl = 0 OR gl_late_rows(struct(device_id, ts, temperature), _gl, "
            f"'{work / 'late'}')").drop("_gl").withWatermark("ts", STAGE_DELAY)

    def stage(work: Path):
        return watermark_stage(bench.read(), delay=STAGE_DELAY, time_col="ts",
                               source_col="device_id", state_dir=str(work / "state"))

    contenders = {
        bench.NATIVE: lambda work: bench.native(),
        "JVM decision + window": lambda work: stage_window(decided(work)),
        "JVM decision, late rows written + window": lambda work: stage_window(kept(work)),
        "native + per-device average": lambda work: bench.native(stage_average),
        "JVM decision + per-device average": lambda work: stage_average(decided(work)),
        "JVM decision, late rows written + average": lambda work: stage_average(kept(work)),
        "watermark_stage + window": lambda work: stage_window(stage(work)),
    }
    baseline = {name: "native + per-device average" for name in contenders
                if name.endswith("average") and not name.startswith("native")}

    # checked before timing: the late count and the late rows written are the model's
    def counted(work: Path):
        return flagged(work).observe(
            "gl", F.sum(F.when(F.col("_gl") != 0, 1).otherwise(0)).alias("late"))

    _, _, query = bench.run(counted)
    late = sum(p["observedMetrics"]["gl"]["late"] for p in query.recentProgress
               if "gl" in p.get("observedMetrics", {}))
    assert late == bench.want_late, (late, bench.want_late)
    written: list[int] = []
    bench.run(contenders["JVM decision, late rows written + window"],
              keep=lambda work: written.append(sum(
                  len(part.read_text().splitlines()) for part in (work / "late").rglob("part-*"))))
    assert written == [bench.want_late], (written, bench.want_late)
    print(f"JVM decision: {late:,} late, {written[0]:,} late rows written; "
          f"the model: {bench.want_late:,}", flush=True)

    bench.compare("Late decision in the JVM", contenders, baseline)
    bench.close()
