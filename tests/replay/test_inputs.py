"""What replay reads: directories of parts, standard input, compressed logs, a format named
for a name that does not say it, a field mapping for logs written by other tools, a CSV with a
byte-order mark, float epoch times in the unit given — and one line, never a traceback, for
what it cannot read."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from engine.errors import InputError
from goldilocks.cli import main
from goldilocks.replay import replay

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "examples" / "data" / "fleet.jsonl"
DEVICES = ROOT / "examples" / "data" / "devices"


def _replayed(paths, **options) -> bytes:
    out = io.BytesIO()
    replay(paths, out=out, **options)
    return out.getvalue()


# -- one line, not a traceback -------------------------------------------------------------------

def _one_line_error(args, capsys) -> str:
    assert main(["replay", *args]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000 anyway")
def test_an_unreadable_log_is_one_line(tmp_path, capsys):
    for name in ("secret.jsonl", "secret.csv"):
        log = tmp_path / name
        log.write_bytes(FLEET.read_bytes())
        log.chmod(0)
        err = _one_line_error([str(log), "--out", str(tmp_path / "o.jsonl")], capsys)
        assert err == f"goldilocks replay: error: {log}: cannot read it: Permission denied"
    assert not (tmp_path / "o.jsonl").exists()


def test_an_unreadable_log_is_one_line_for_root_too():
    """The same run as an unprivileged user (root reads a file of mode 000): the command line
    in a child process, under setpriv, as the report ran it."""
    import shutil
    import tempfile

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop to another user")
    folder = Path(tempfile.mkdtemp(prefix="unreadable-"))  # where another user may look
    try:
        folder.chmod(0o755)
        log = folder / "secret.jsonl"
        log.write_bytes(FLEET.read_bytes())
        log.chmod(0)
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               sys.executable, "-m", "goldilocks", "replay", str(log),
                               "--no-summary"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=folder)
    finally:
        shutil.rmtree(folder)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (f"goldilocks replay: error: {log}: cannot read it: "
                                   "Permission denied")


def test_a_directory_is_read_as_its_parts_and_an_empty_one_is_one_line(tmp_path, capsys):
    """Spark writes its outputs as directories named like files (events.jsonl/): read as
    their parts, in the order of their names, Spark's markers and hidden files left out."""
    parts = tmp_path / "fleet.jsonl"
    parts.mkdir()
    lines = FLEET.read_bytes().splitlines(keepends=True)
    for i in range(3):  # the fleet log cut in three parts, in arrival order
        (parts / f"part-{i:05d}.jsonl").write_bytes(b"".join(lines[i::3]))
    (parts / "_SUCCESS").write_bytes(b"")
    (parts / ".part-00000.jsonl.crc").write_bytes(b"\x00")
    assert _replayed([parts]) == _replayed([FLEET])
    stats = replay([parts])
    assert [os.path.basename(f.path) for f in stats.files] == [
        "part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    empty = tmp_path / "d.csv"
    empty.mkdir()
    err = _one_line_error([str(empty)], capsys)
    assert err.startswith(f"goldilocks replay: error: {empty}: is a directory with no "
                          "event-log file in it")
    bare = tmp_path / "logsdir"
    bare.mkdir()
    assert "is a directory with no event-log file in it" in _one_line_error([str(bare)], capsys)


def test_a_string_is_one_path():
    # replay("fleet.jsonl") read the characters of the string as paths ('f: no such file')
    assert _replayed(str(FLEET)) == _replayed([FLEET]) == _replayed(FLEET)


# -- inputs ------------------------------------------------------------------------------------

def test_standard_input_compressed_logs_and_a_named_format(tmp_path, capsys):
    whole = _replayed([FLEET])
    for suffix, opener in ((".gz", gzip.open), (".xz", __import__("lzma").open),
                           (".bz2", __import__("bz2").open)):
        packed = tmp_path / f"fleet.jsonl{suffix}"
        with opener(packed, "wb") as f:
            f.write(FLEET.read_bytes())
        assert _replayed([packed]) == whole, suffix
    log = tmp_path / "fleet.log"
    log.write_bytes(FLEET.read_bytes())
    with pytest.raises(InputError, match=r"unknown event-log extension '\.log'.*--format"):
        replay([log])
    assert _replayed([log], format="jsonl") == whole
    # the command line: - is standard input (JSON Lines unless --format says otherwise)
    out = tmp_path / "out.jsonl"
    done = subprocess.run([sys.executable, "-m", "goldilocks", "replay", "-", "--out",
                           str(out), "--no-summary"], input=FLEET.read_bytes(),
                          capture_output=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    replay([FLEET], out=tmp_path / "ref.jsonl")
    assert out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    csv = tmp_path / "fleet.csv"
    replay([FLEET], out=io.BytesIO())
    from eventlog import write_log
    from eventlog import read_records
    write_log(csv, [{k: v for k, v in r.items() if k not in ("file", "line")}
                    for r in read_records([FLEET])])
    done = subprocess.run([sys.executable, "-m", "goldilocks", "replay", "-", "--format", "csv",
                           "--no-summary"], input=csv.read_bytes(), capture_output=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == _replayed([csv])


def test_a_logging_json_log_replays_through_a_field_mapping(tmp_path, capsys):
    """A log written by a ``logging`` JSON formatter (``created`` is time.time(): float
    seconds; ``name``, ``levelname``, ``message``) replays without rewriting it."""
    import logging

    log = tmp_path / "app.log"
    handler = logging.FileHandler(log)

    class Json(logging.Formatter):
        def format(self, record):
            return orjson.dumps({"created": record.created, "name": record.name,
                                 "levelname": record.levelname,
                                 "message": record.getMessage()}).decode()

    handler.setFormatter(Json())
    for name in ("thermo-1", "thermo-2"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.info("21.5")
    handler.close()
    records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    out = tmp_path / "out.jsonl"
    args = ["replay", str(log), "--format", "jsonl", "--field", "start=created", "--field",
            "source=name", "--field", "payload=message", "--time-unit", "s", "--out", str(out)]
    assert main(args) == 0
    got = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    inserts = [e for e in got if e["kind"] == "insert"]
    assert [(e["source"], e["payload"]) for e in inserts] == [("thermo-1", "21.5"),
                                                                ("thermo-2", "21.5")]
    from decimal import Decimal
    assert [e["start"] for e in inserts] == [
        int(Decimal(repr(r["created"])) * 10**9) for r in records]
    # without the mapping: the first missing field, named as the log names it
    capsys.readouterr()
    assert main(["replay", str(log), "--format", "jsonl", "--no-summary"]) == 1
    assert "field 'kind': missing" in capsys.readouterr().err
    assert main(["replay", str(log), "--format", "jsonl", "--field", "start=created",
                 "--field", "source=name", "--no-summary"]) == 1
    err = capsys.readouterr().err
    assert "field 'created': " in err and "looks like seconds since the epoch" in err
    assert "--time-unit s" in err
    assert main(["replay", str(log), "--field", "time=created"]) == 2
    assert "argument --field: 'time=created'; expected FIELD=NAME" in capsys.readouterr().err


def test_a_csv_with_a_byte_order_mark(tmp_path):
    """Excel's "CSV UTF-8" and pandas' utf-8-sig start with a byte-order mark."""
    text = ("source,kind,start,payload\nA,insert,2026-11-22T08:00:00Z,1\n"
            "A,cti,2026-11-22T08:00:01Z,\n")
    plain, marked = tmp_path / "plain.csv", tmp_path / "bom.csv"
    plain.write_text(text, encoding="utf-8")
    marked.write_text(text, encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    assert _replayed([marked], delay=0) == _replayed([plain], delay=0) != b""


@pytest.mark.parametrize("columnar", [True, False])
def test_float_epoch_times_are_read_in_the_unit_given(tmp_path, columnar):
    """time.time() floats with --time-unit s, a pandas float column with --time-unit ms:
    rounded to the nanosecond of the number as written; without a unit, refused naming it."""
    log = tmp_path / "f.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":1795334400.123}\n'
                    b'{"source":"A","kind":"insert","start":1795334400.0}\n'
                    b'{"source":"A","kind":"cti","start":1795334401}\n')
    out = tmp_path / "o.jsonl" if columnar else io.BytesIO()
    replay([log], delay=0, time_unit="s", out=out)
    data = out.read_bytes() if columnar else out.getvalue()
    starts = [orjson.loads(line)["start"] for line in data.splitlines()]
    assert starts == [1_795_334_400_123_000_000, 1_795_334_400_000_000_000,
                      1_795_334_401_000_000_000]
    with pytest.raises(InputError) as info:
        replay([log], time_unit=None)
    message = str(info.value)
    assert message.startswith(f"{log}:1: field 'start': 1795334400.123 is a number with a "
                              "fraction")
    assert "looks like seconds since the epoch (2026-11-22T08:00:00.123Z): --time-unit s" in message
    csv = tmp_path / "f.csv"
    csv.write_text("source,kind,start,end\nA,insert,2026-11-22T08:00:00Z,1795334460000.0\n")
    with pytest.raises(InputError, match=r"field 'end': 1795334460000.0 is a number with a "
                                         r"fraction.*milliseconds since the epoch"):
        replay([csv], time_unit=None)
    with pytest.raises(InputError, match="1795334460000.0.*is a number with a fraction"):
        replay([csv], time_unit="ns")
    got = [orjson.loads(line) for line in _replayed([csv], time_unit="ms").splitlines()]
    assert (got[0]["start"], got[0]["end"]) == (1_795_334_400_000_000_000,
                                                1_795_334_460_000_000_000)
