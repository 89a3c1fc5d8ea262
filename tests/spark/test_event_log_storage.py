"""``read_event_log`` on what Spark itself writes and where it lives: compressed files,
``partitionBy`` folders, ``file://`` URIs and globs — every record, as the engine reads the
same records, or a refusal that names what it cannot read.

The logs are written by the shared local session (``DataFrame.write``), as a Spark job
would leave them, and read back through ``read_event_log``; the engine's reader of the same
records (uncompressed, one file) is the reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import InputError
from eventlog import write_log

pytestmark = pytest.mark.spark

T0 = 1_767_225_600 * 10**9
N = 600


def _records() -> list[dict]:
    return [{"source": f"dev-{i % 3}", "kind": "insert", "start": T0 + i * 10**9,
             "payload": f'{{"celsius": {i % 40}}}'} for i in range(N)]


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory):
    """Spark's own output of the same records: JSON and CSV in each codec Spark has,
    ``partitionBy("source")`` JSON (gzip too), CSV and Parquet, and CSV with Spark's
    default (backslash) escapes."""
    from pyspark.sql import functions as F

    root = tmp_path_factory.mktemp("written")
    # payload: JSON text in CSV and Parquet, a JSON object in JSON (a struct column)
    text = spark.createDataFrame([tuple(r.values()) for r in _records()],
                                 "source string, kind string, start long, payload string"
                                 ).coalesce(1)
    nested = text.withColumn("payload", F.from_json("payload", "celsius int"))
    for codec in ("gzip", "bzip2", "deflate", "lz4", "snappy"):
        nested.write.option("compression", codec).json(str(root / f"json-{codec}"))
        (text.write.option("compression", codec).option("header", True)
         .option("escape", '"').csv(str(root / f"csv-{codec}")))
    nested.write.partitionBy("source").json(str(root / "parted-json"))
    (nested.write.partitionBy("source").option("compression", "gzip")
     .json(str(root / "parted-json-gz")))
    (text.write.partitionBy("source").option("header", True).option("escape", '"')
     .csv(str(root / "parted-csv")))
    text.write.partitionBy("source").parquet(str(root / "parted-parquet"))
    text.write.option("header", True).csv(str(root / "csv-spark-escapes"))
    nested.write.parquet(str(root / "struct-payload"))
    return root


def _records_of(frame) -> list[tuple]:
    return sorted((r["source"], r["kind"], r["start"], r["payload"])
                  for r in frame.select("source", "kind", "start", "payload").collect())


WANT = sorted((r["source"], r["kind"], r["start"], r["payload"].replace(": ", ":"))
              for r in _records())


def test_every_codec_spark_writes_is_read_whole(spark, written):
    """gzip, bzip2, deflate, lz4, snappy (Hadoop's framing), in JSON and in CSV: every
    record of each, in one read of all of them (a task per compressed file)."""
    from spark_adapter import read_event_log

    folders = sorted(p for p in written.iterdir() if p.name.startswith(("json-", "csv-"))
                     and p.name != "csv-spark-escapes")
    assert len(folders) == 10
    frame = read_event_log(spark, [str(p) for p in folders])
    got = _records_of(frame)
    assert got == sorted(WANT * 10)
    names = {r["file_index"] for r in frame.select("file_index").distinct().collect()}
    assert names == set(range(10))


def test_partition_folders_give_back_the_column_spark_took_out(spark, written):
    """``partitionBy("source")``: the files lack ``source``; the folder ``source=dev-1``
    gives it back to each record — JSON, gzipped JSON, CSV and Parquet alike."""
    from spark_adapter import read_event_log

    for name in ("parted-json", "parted-json-gz", "parted-csv", "parted-parquet"):
        assert _records_of(read_event_log(spark, str(written / name))) == WANT, name


def test_a_directory_of_mixed_logs_is_read_whole_or_refused_by_name(spark, tmp_path):
    """The trial's directory: a log, the same gzipped, and a partition folder — every record
    (not the first file's only); a file or folder it cannot read is refused by name, an
    empty directory (or one of Spark's markers only) is refused naming the forms it reads."""
    import gzip
    import shutil

    from spark_adapter import read_event_log

    records = _records()
    partition = tmp_path / "mixed" / "source=dev-9"
    partition.mkdir(parents=True)
    write_log(tmp_path / "mixed" / "a.jsonl", records[:307])
    write_log(tmp_path / "b.jsonl", records[307:500])
    with open(tmp_path / "b.jsonl", "rb") as f, gzip.open(tmp_path / "mixed" / "b.jsonl.gz",
                                                          "wb") as g:
        shutil.copyfileobj(f, g)
    write_log(partition / "part-0.json", [{k: v for k, v in r.items() if k != "source"}
                                          for r in records[500:]])
    (tmp_path / "mixed" / "_SUCCESS").write_text("")
    (tmp_path / "mixed" / ".part-0.json.crc").write_text("")
    frame = read_event_log(spark, tmp_path / "mixed")
    assert frame.count() == N
    assert frame.where("source = 'dev-9'").count() == N - 500

    (tmp_path / "mixed" / "notes.txt").write_text("not a log\n")
    with pytest.raises(InputError, match=r"mixed/notes.txt: not an event-log file; "
                                         r"read_event_log reads event-log files \(.jsonl"):
        read_event_log(spark, tmp_path / "mixed")
    (tmp_path / "mixed" / "notes.txt").unlink()
    (tmp_path / "mixed" / "old").mkdir()
    with pytest.raises(InputError, match=r"mixed/old: a folder that is not a partition folder"):
        read_event_log(spark, tmp_path / "mixed")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    with pytest.raises(InputError, match=r"empty: a directory with no event log in it; "
                                         r"read_event_log reads event-log files"):
        read_event_log(spark, tmp_path / "empty")


def test_file_uris_and_globs_name_the_same_logs(spark, written, tmp_path):
    """``file://`` URIs and globs (``*``, ``{a,b}``) list through the file system as a path
    does; errors name the file as it was given (a URI stays a URI)."""
    from spark_adapter import read_event_log

    uri = f"file://{written}/json-gzip"
    assert _records_of(read_event_log(spark, uri)) == WANT
    glob = f"{written}/parted-json/source=dev-*/*.json"
    assert _records_of(read_event_log(spark, glob)) == WANT
    both = read_event_log(spark, f"file://{written}/{{json-lz4,csv-snappy}}/part-*")
    assert _records_of(both) == sorted(WANT * 2)
    with pytest.raises(InputError, match="the glob matches no file"):
        read_event_log(spark, f"{written}/nothing-*")
    bad = tmp_path / "bad.jsonl"
    write_log(bad, [{"source": "A", "kind": "insert", "start": 1}])
    bad.write_text(bad.read_text() + '{"source": "A", "kind": "insert", "start": "x"}\n')
    with pytest.raises(Exception, match=f"file://{bad}:2: field 'start'"):
        read_event_log(spark, f"file://{bad}").collect()


def test_what_spark_writes_that_needs_another_option_says_which(spark, written):
    """Spark's CSV with its default backslash escapes, and Parquet with a struct payload:
    errors that say how to write them."""
    from spark_adapter import read_event_log

    with pytest.raises(Exception, match=r"Spark writes CSV with backslash escapes unless told, "
                                        r"so write it with .option\('escape', '\"'\)"):
        read_event_log(spark, str(written / "csv-spark-escapes")).collect()
    with pytest.raises(Exception, match=r"the payload column is struct<celsius: int32>; "
                                        r"expected JSON text .*F.to_json\('payload'\)"):
        read_event_log(spark, str(written / "struct-payload")).collect()


def test_the_source_is_registered_once_per_session(spark, tmp_path, monkeypatch):
    """Reading logs again registers nothing again (Spark warns at every registration)."""
    from pyspark.sql.datasource import DataSourceRegistration

    from spark_adapter import read_event_log, register

    calls = []
    real = DataSourceRegistration.register
    monkeypatch.setattr(DataSourceRegistration, "register",
                        lambda self, source: calls.append(source) or real(self, source))
    write_log(tmp_path / "a.jsonl", _records()[:3])
    register(spark)
    for _ in range(3):
        assert read_event_log(spark, tmp_path / "a.jsonl").count() == 3
    register(spark)
    assert calls == []  # the session had it from the start (conftest)
