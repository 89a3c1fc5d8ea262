"""Logs that are not plain local paths (``eventlog.LogFile``): opened by whoever listed them,
compressed, or in a folder that names a field its records leave out. The engine's readers
read the same records from them as from the plain file, by every path (the fast scanners
and the per-record path), with the same errors naming the file and line."""

from __future__ import annotations

import csv
import gzip
import io

import orjson
import pytest

from engine.errors import BadRecordError
from eventlog import LogFile, SourceTable, read_columns, read_records, write_log

T0 = 1_767_225_600 * 10**9


def _records(n: int = 50) -> list[dict]:
    return [{"source": f"dev-{i % 3}", "kind": "insert", "start": T0 + i * 10**9,
             "payload": {"celsius": i}} for i in range(n)]


def _read(log) -> list[tuple]:
    table = SourceTable()
    out = []
    for chunk in read_columns(log, table=table):
        names = [table.name(c) for c in chunk.source.tolist()]
        out += list(zip(names, chunk.kind.tolist(), chunk.start.tolist(), chunk.line.tolist()))
    return out


def _opener(data: bytes, compressed: bool = False):
    def opened():
        raw = io.BytesIO(gzip.compress(data) if compressed else data)
        return gzip.GzipFile(fileobj=raw) if compressed else raw
    return opened


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_log_file_reads_as_the_plain_file(tmp_path, fmt):
    plain = tmp_path / f"log.{'parquet' if fmt == 'parquet' else fmt}"
    write_log(plain, _records())
    data = plain.read_bytes()
    want = _read(plain)
    assert len(want) == 50
    log = LogFile("s3://bucket/log", fmt, _opener(data), lambda: len(data))
    assert _read(log) == want
    if fmt != "parquet":  # a compressed file: read from its start, whole
        log = LogFile("s3://bucket/log.gz", fmt, _opener(data, True), lambda: 0,
                      seekable=False)
        assert _read(log) == want


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_folder_gives_back_the_field_its_files_leave_out(tmp_path, fmt):
    """Spark's ``partitionBy("source")`` leaves ``source`` out of the files; the folder
    ``source=dev-7`` gives it back to every record that lacks it — the fast scanners' blocks
    and the per-record path's alike (a bad record among them sends its block there)."""
    records = [{k: v for k, v in r.items() if k != "source"} for r in _records()]
    records[20] = {**records[20], "source": "own"}  # a record's own value stands
    if fmt == "jsonl":
        lines = [orjson.dumps(r) for r in records]
        data = b"\n".join(lines) + b"\n"
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["source", "kind", "start", "payload"])
        for r in records:
            writer.writerow([r.get("source", ""), r["kind"], r["start"],
                             orjson.dumps(r["payload"]).decode()])
        data = buffer.getvalue().encode()
    log = LogFile("/data/source=dev-7/part-0", fmt, _opener(data), lambda: len(data),
                  fields=(("source", "dev-7"),))
    got = _read(log)
    assert [name for name, *_ in got] == ["own" if i == 20 else "dev-7" for i in range(50)]
    bad = data.replace(b"%d" % (T0 + 30 * 10**9), b'"soon"' if fmt == "jsonl" else b"soon", 1)
    log = LogFile("/data/source=dev-7/part-0", fmt, _opener(bad), lambda: len(bad),
                  fields=(("source", "dev-7"),))
    with pytest.raises(BadRecordError, match=r"^/data/source=dev-7/part-0:3[12]: field 'start'"):
        _read(log)


def test_without_the_folder_such_a_record_is_refused_as_before(tmp_path):
    path = tmp_path / "part-0.jsonl"
    write_log(path, [{"kind": "insert", "start": T0}])
    with pytest.raises(BadRecordError, match="field 'source': missing on an insert record"):
        list(read_records([path]))
