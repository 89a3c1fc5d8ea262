"""One large JSON Lines or CSV log read by several tasks (``read_event_log(split_bytes=…)``):
spans of bytes cut at line starts, each parsed by the engine's reader from its own first
line. The rows, the replay and the errors are those of a whole-file read (TS §5.1-§5.3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import BadRecordError, InputError
from eventlog import read_records
from spark_support import canonical_events, canonical_late, engine_replay_bytes

pytestmark = pytest.mark.spark

ORDER = ["order_key", "file_index", "line"]
FLEET = Path(__file__).resolve().parents[2] / "examples" / "data" / "fleet.jsonl"


def _read(spark, path, split_bytes, **options):
    from spark_adapter import read_event_log

    frame = read_event_log(spark, path, split_bytes=split_bytes, **options)
    return frame, [tuple(r) for r in frame.orderBy(*ORDER).collect()]


def _same_as_whole(spark, path, split_bytes, tasks=None):
    """The spans' rows equal the whole file's (every column, the line numbers too); the
    read ran ``tasks`` tasks."""
    frame, rows = _read(spark, path, split_bytes)
    _, whole = _read(spark, path, 0)
    assert rows == whole
    if tasks is not None:
        assert frame.rdd.getNumPartitions() == tasks
    return frame, rows


def _line(i: int, arrival: int, kind: str = "insert", start: int | None = None) -> str:
    start = arrival - 3 if start is None else start
    source = '' if kind == "cti" else '"source":"A",'
    return f'{{"arrival":{arrival},{source}"kind":"{kind}","start":{start}}}'


def _split_at(path: Path, line: int) -> int:
    """A ``split_bytes`` for which a span of ``path`` begins at ``line``."""
    from eventlog.spans import split_spans

    for size in range(path.stat().st_size // 2, 8, -1):
        if any(s.first_line == line for s in split_spans(str(path), size)):
            return size
    raise AssertionError(f"no split of {path} begins at line {line}")


def _cut_at(path: Path, at: int) -> int:
    """A ``split_bytes`` for which ``path`` would be cut at byte ``at`` (before spans are
    joined across quoted cells)."""
    from eventlog.spans import _cuts

    size = path.stat().st_size
    with open(path, "rb") as f:
        header = len(f.readline())
        for span in range(size // 2, 8, -1):
            if at in _cuts(f, size, -(-size // span), header):
                return span
    raise AssertionError(f"no split of {path} cuts at byte {at}")


def _jsonl(path: Path, lines: list[str], newline: str = "\n", last: bool = True) -> Path:
    path.write_text(newline.join(lines) + (newline if last else ""), newline="")
    return path


def test_the_bundled_fleet_log_in_spans_replays_as_the_engine_does(spark, tmp_path):
    """The fleet log (ISO times, late readings) cut into about 6 spans: the same rows as one
    task, and the replay's events and late rows byte for byte the engine's."""
    from spark_adapter import replay

    size = FLEET.stat().st_size
    frame, _ = _same_as_whole(spark, FLEET, size // 6 + 1)
    assert frame.rdd.getNumPartitions() >= 5
    events, late = replay(frame, delay="2m", on_late="adjust")
    got = (canonical_events(events.orderBy(*ORDER).collect()),
           canonical_late(late.orderBy(*ORDER).collect()))
    assert got == engine_replay_bytes([FLEET], tmp_path, delay="2m", on_late="adjust")
    assert got[1]  # the log has late readings


def test_a_bad_line_in_the_third_span_is_named_as_the_engine_names_it(spark, tmp_path):
    lines = [_line(i, 100_000 + 10 * i) for i in range(1, 301)]  # all of one length
    lines[180] = lines[180].replace(f'"start":{100_000 + 1807}', '"start":"soon"')
    path = _jsonl(tmp_path / "log.jsonl", lines)
    with pytest.raises(BadRecordError) as engine_error:
        list(read_records([path]))
    message = str(engine_error.value)
    assert message.startswith(f"{path}:181: field 'start'")
    from spark_adapter.files import list_logs
    from spark_adapter.source import plan_splits

    spans = [p.span for p in plan_splits(list_logs(str(path)), path.stat().st_size // 4 + 1)]
    assert len(spans) == 4 and spans[2].first_line < 181 < spans[3].first_line
    with pytest.raises(Exception) as spark_error:
        _read(spark, path, path.stat().st_size // 4 + 1)
    assert message in str(spark_error.value)


def test_quarantine_in_spans_keeps_each_bad_record_once(spark, tmp_path):
    """Under ``quarantine`` each span writes its own file, named by its first line; together
    they hold the bad records a whole-file read skips, and the good rows are the same."""
    import json

    lines = [_line(i, 100_000 + 10 * i) for i in range(1, 301)]
    for i in (20, 180, 260):
        lines[i] = lines[i].replace('"kind":"insert"', '"kind":"insrt"')
    path = _jsonl(tmp_path / "log.jsonl", lines)
    spans = tmp_path / "spans"
    _, got = _read(spark, path, path.stat().st_size // 4 + 1, bad_records="quarantine",
                   quarantine=spans)
    _, whole = _read(spark, path, 0, bad_records="skip")
    assert got == whole and len(got) == 297
    names = sorted(p.name for p in spans.iterdir())
    assert len(names) == 4 and names[0] == "000000-log.jsonl-1.bad.jsonl"
    kept = [json.loads(x) for name in names for x in (spans / name).read_text().splitlines()]
    assert sorted(r["line"] for r in kept) == [21, 181, 261]


def test_crlf_blank_lines_and_no_final_newline(spark, tmp_path):
    """CRLF line ends, a run of blank lines that fills whole spans (spans with no record),
    and a last line without its newline: the same rows and line numbers as one task."""
    lines = [_line(i, 10 * i, "cti" if i % 7 == 0 else "insert") for i in range(1, 120)]
    lines[60:60] = [""] * 150
    path = _jsonl(tmp_path / "crlf.jsonl", lines, "\r\n", last=False)
    _, rows = _same_as_whole(spark, path, 300)
    assert rows[-1][-1] == len(lines)  # the last line's number


def test_files_of_one_line_and_one_byte_spans(spark, tmp_path):
    one = _jsonl(tmp_path / "one.jsonl", [_line(1, 10)])
    bare = _jsonl(tmp_path / "bare.jsonl", [_line(1, 20, "cti")], last=False)
    for path in (one, bare):
        _same_as_whole(spark, path, 1, tasks=1)
    from spark_adapter import read_event_log

    both = read_event_log(spark, [one, bare], split_bytes=1)
    assert [tuple(r)[-3:] for r in both.orderBy(*ORDER).collect()] == [(10, 0, 1), (20, 1, 1)]


def test_a_csv_log_in_spans_reads_the_header_in_each(spark, tmp_path):
    """CSV with a header and CRLF; a quoted payload that holds a newline straddles a cut:
    the spans either side are joined (the count of quotes before the cut is odd)."""
    rows = ["arrival,source,kind,start,payload"]
    for i in range(1, 200):
        payload = '"{""v"":1}"' if i != 100 else '"{""note"":""two"",\n""x"":1}"'
        rows.append(f"{10 * i},A,{'cti' if i % 9 == 0 else 'insert'},{10 * i - 5},"
                    f"{payload if i % 9 else ''}")
    path = tmp_path / "log.csv"
    path.write_bytes("\r\n".join(rows).encode() + b"\r\n")
    frame, got = _same_as_whole(spark, path, 200)
    assert frame.rdd.getNumPartitions() > 10
    assert len(got) == 199 and got[-1][-1] == 201  # the quoted newline is a line
    split = _cut_at(path, path.read_bytes().index(b'""x""'))  # inside the quoted cell
    frame, _ = _same_as_whole(spark, path, split)
    assert frame.rdd.getNumPartitions() >= 2


def test_a_csv_quote_the_count_misses_is_refused_naming_the_line(spark, tmp_path):
    """A quote inside an unquoted cell (not RFC 4180) hides a quoted newline from the quote
    count: the span that ends inside that record refuses the read, naming its line."""
    rows = ["arrival,source,kind,start,payload", '10,A"x,insert,5,']
    rows += [f"{10 * i},A,insert,{10 * i - 5}," for i in range(2, 40)]
    rows += ['400,A,insert,395,"{""note"":""two"",', '""x"":1}"']
    rows += [f"{10 * i},A,insert,{10 * i - 5}," for i in range(41, 80)]
    path = tmp_path / "odd.csv"
    path.write_text("\n".join(rows) + "\n")
    cut = path.read_bytes().index(b'""x"":1}"')
    with pytest.raises(Exception, match=rf"{path}:41: a quoted cell goes on past byte {cut}"):
        _read(spark, path, _split_at(path, 42), bad_records="skip")


def test_a_record_out_of_order_across_a_cut_is_the_engines_error(spark, tmp_path):
    """The first record of a span is before the last key of the span before it: the span
    reads it as good (it starts from the smallest key), the span before checks it."""
    lines = [_line(i, 1000 + 10 * i) for i in range(1, 101)]  # all of one length
    lines[50] = _line(51, 1005)  # before line 50's arrival 1500
    path = _jsonl(tmp_path / "log.jsonl", lines)
    cut = _split_at(path, 51)
    with pytest.raises(BadRecordError) as engine_error:
        list(read_records([path]))
    assert str(engine_error.value).startswith(f"{path}:51:")
    with pytest.raises(Exception) as spark_error:
        _read(spark, path, cut)
    assert str(engine_error.value) in str(spark_error.value)
    with pytest.raises(Exception, match="cannot leave it out"):
        _read(spark, path, cut, bad_records="skip")
    assert len(_read(spark, path, 0, bad_records="skip")[1]) == 99


def test_a_log_ordered_by_position_is_read_whole(spark, tmp_path):
    """Without arrival or seq the order key is the record's position, which a span cannot
    know without the record counts of the spans before it: one task for the file."""
    lines = [f'{{"source":"A","kind":"insert","start":{i}}}' for i in range(1, 200)]
    path = _jsonl(tmp_path / "pos.jsonl", lines)
    _same_as_whole(spark, path, 100, tasks=1)


def test_split_bytes_is_checked(spark, tmp_path):
    from spark_adapter import read_event_log

    path = _jsonl(tmp_path / "a.jsonl", [_line(1, 10)])
    with pytest.raises(InputError, match="split_bytes=-1"):
        read_event_log(spark, path, split_bytes=-1)


def test_the_source_read_directly_takes_split_bytes(spark, tmp_path):
    """``spark.read.format("goldilocks")`` plans the spans itself from ``split_bytes``
    (default: a task per file)."""
    lines = [_line(i, 10 * i) for i in range(1, 200)]
    path = _jsonl(tmp_path / "log.jsonl", lines)
    _, whole = _read(spark, path, 0)
    direct = spark.read.format("goldilocks").option("split_bytes", "500").load(str(path))
    assert direct.rdd.getNumPartitions() > 5
    assert [tuple(r) for r in direct.orderBy(*ORDER).collect()] == whole
    assert spark.read.format("goldilocks").load(str(path)).rdd.getNumPartitions() == 1
