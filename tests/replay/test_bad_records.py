"""TS §5.3: a bad record stops the replay with an error naming file and line; skip and
quarantine count it. One test per case, for JSON Lines, CSV and Parquet where it applies."""

from __future__ import annotations

import orjson
import pytest

from engine.errors import BadRecordError
from eventlog import write_log
from goldilocks.replay import replay

GOOD = b'{"source":"A","kind":"insert","start":1}\n'
CTI_LINE = b'{"source":"A","kind":"cti","start":5}\n'

JSONL_CASES = {
    "broken_json": (b'{"source":"A","kind":"insert","start":2\n', "not valid JSON", None),
    "not_an_object": (b'[1, 2]\n', "is not a record", None),
    "missing_field": (b'{"source":"A","kind":"insert"}\n', "missing", "start"),
    "missing_source": (b'{"kind":"insert","start":3}\n', "missing", "source"),
    "unknown_kind": (b'{"source":"A","kind":"update","start":3}\n', "unknown kind", "kind"),
    "unparseable_time": (b'{"source":"A","kind":"insert","start":"yesterday"}\n',
                         "cannot parse", "start"),
    "time_without_offset": (b'{"source":"A","kind":"insert","start":"2026-11-22T08:00:00"}\n',
                            "cannot parse", "start"),
    "offset_of_a_day": (b'{"source":"A","kind":"insert","start":"2026-11-22T08:00:00+24:00"}\n',
                        "cannot parse", "start"),
    "float_time": (b'{"source":"A","kind":"insert","start":1.5}\n', "fraction", "start"),
    "end_before_start": (b'{"source":"A","kind":"insert","start":9,"end":4}\n',
                         "not after start", "end"),
    "cti_with_end": (b'{"source":"A","kind":"cti","start":9,"end":12}\n', "no end", "end"),
    "non_utf8": (b'{"source":"A\xff","kind":"insert","start":3}\n', "not valid UTF-8", None),
}


def _check(err: BadRecordError, path, line: int, text: str, field) -> None:
    message = str(err)
    assert message.startswith(f"{path}:{line}:"), message
    assert text in message
    assert err.path == str(path) and err.line == line
    if field is not None:
        assert err.field == field


@pytest.mark.parametrize("case", sorted(JSONL_CASES))
def test_jsonl_bad_record_names_file_and_line(tmp_path, case):
    bad, text, field = JSONL_CASES[case]
    log = tmp_path / "dev.jsonl"
    log.write_bytes(GOOD + GOOD + bad + CTI_LINE)
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0, out=tmp_path / "o.jsonl")
    _check(info.value, log, 3, text, field)


@pytest.mark.parametrize("case", sorted(JSONL_CASES))
def test_jsonl_bad_record_skip_and_quarantine_are_counted(tmp_path, case):
    bad, _, _ = JSONL_CASES[case]
    log = tmp_path / "dev.jsonl"
    log.write_bytes(GOOD + bad + CTI_LINE)
    stats = replay([log], delay=0, out=tmp_path / "o.jsonl", bad_records="skip")
    assert (stats.skipped, stats.records, stats.files[0].skipped) == (1, 2, 1)
    q = tmp_path / "q.jsonl"
    stats = replay([log], delay=0, out=tmp_path / "o.jsonl", bad_records="quarantine",
                   quarantine=q)
    assert (stats.quarantined, stats.records) == (1, 2)
    entry = orjson.loads(q.read_bytes())
    assert entry["file"] == str(log) and entry["line"] == 2
    assert entry["raw"].encode("utf-8", "backslashreplace").replace(b"\\xff", b"\xff") == bad.rstrip(b"\n")


def test_truncated_last_line(tmp_path):
    log = tmp_path / "cut.jsonl"
    log.write_bytes(GOOD + CTI_LINE + b'{"source":"A","kind":"ins')
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 3, "truncated last line", None)


def test_last_line_without_newline_is_fine(tmp_path):
    log = tmp_path / "ok.jsonl"
    log.write_bytes(GOOD + CTI_LINE.rstrip(b"\n"))
    assert replay([log], delay=0).records == 2


def test_empty_file_is_valid_and_contributes_nothing(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n  \n")
    other = tmp_path / "a.jsonl"
    other.write_bytes(GOOD + CTI_LINE)
    stats = replay([empty, blank, other], delay=0, out=tmp_path / "o.jsonl")
    assert stats.records == 2
    assert [f.records for f in stats.files] == [0, 0, 2]
    assert replay([empty], delay=0).records == 0


def test_order_key_going_backwards_is_a_bad_record(tmp_path):
    log = tmp_path / "o.jsonl"
    log.write_bytes(b'{"seq":5,"source":"A","kind":"insert","start":1}\n'
                    b'{"seq":3,"source":"A","kind":"insert","start":1}\n')
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 2, "arrival order", "seq")


def test_missing_order_key_after_the_first_record(tmp_path):
    log = tmp_path / "o.jsonl"
    log.write_bytes(b'{"arrival":5,"source":"A","kind":"insert","start":1}\n'
                    b'{"source":"A","kind":"insert","start":1}\n')
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 2, "missing", "arrival")


def test_bad_record_deep_in_a_large_file_is_located(tmp_path):
    log = tmp_path / "big.jsonl"
    lines = [b'{"source":"A","kind":"insert","start":%d}\n' % i for i in range(150_000)]
    lines[123_456] = b'{"source":"A","kind":"insert","start":"never"}\n'
    log.write_bytes(b"".join(lines))
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 123_457, "cannot parse", "start")


CSV_HEADER = "source,kind,start,end,payload\n"
CSV_CASES = {
    "broken_payload": ('A,insert,3,,"{oops"\n', "not valid JSON", "payload"),
    "missing_field": ("A,insert,,,\n", "missing", "start"),
    "unknown_kind": ("A,update,3,,\n", "unknown kind", "kind"),
    "unparseable_time": ("A,insert,noon,,\n", "cannot parse", "start"),
    "end_before_start": ("A,insert,9,4,\n", "not after start", "end"),
    "wrong_cell_count": ("A,insert\n", "cells", None),
}


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_csv_bad_record_names_file_and_line(tmp_path, case):
    bad, text, field = CSV_CASES[case]
    log = tmp_path / "dev.csv"
    log.write_text(CSV_HEADER + "A,insert,1,,\n" + bad + "A,cti,5,,\n")
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 3, text, field)
    assert replay([log], delay=0, bad_records="skip").skipped == 1


def test_csv_non_utf8_byte(tmp_path):
    log = tmp_path / "dev.csv"
    log.write_bytes(CSV_HEADER.encode() + b"A,insert,1,,\nA\xfe,insert,2,,\n")
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 3, "not valid UTF-8", None)


def test_csv_missing_header_column(tmp_path):
    log = tmp_path / "dev.csv"
    log.write_text("source,kind\nA,insert\n")
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 1, "header", "start")


def test_csv_empty_file_is_valid(tmp_path):
    log = tmp_path / "e.csv"
    log.write_text("")
    assert replay([log], delay=0).records == 0


PARQUET_CASES = {
    "unknown_kind": ({"source": "A", "kind": "update", "start": 3}, "unknown kind", "kind"),
    "missing_start": ({"source": "A", "kind": "insert"}, "missing", "start"),
    "missing_source": ({"kind": "insert", "start": 3}, "missing", "source"),
    "end_before_start": ({"source": "A", "kind": "insert", "start": 9, "end": 4},
                         "not after start", "end"),
}


@pytest.mark.parametrize("case", sorted(PARQUET_CASES))
def test_parquet_bad_row_names_file_and_row(tmp_path, case):
    bad, text, field = PARQUET_CASES[case]
    log = tmp_path / "dev.parquet"
    write_log(log, [{"source": "A", "kind": "insert", "start": 1}, bad,
                    {"source": "A", "kind": "cti", "start": 5}])
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 2, text, field)
    assert replay([log], delay=0, bad_records="skip").skipped == 1


def test_parquet_broken_payload_json(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    log = tmp_path / "p.parquet"
    pq.write_table(pa.table({"source": ["A", "A"], "kind": ["insert", "insert"],
                             "start": [1, 2], "payload": ['{"v":1}', "{nope"]}), log)
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 2, "not valid JSON", "payload")


def test_not_a_parquet_file(tmp_path):
    log = tmp_path / "p.parquet"
    log.write_bytes(b"hello")
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0)
    _check(info.value, log, 1, "Parquet", None)


def test_messages_show_instants_readably_and_say_an_insert(tmp_path):
    """A message shows the instants of the record as ISO text, not raw nanoseconds, and
    speaks English ('an insert')."""
    log = tmp_path / "iso.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":"2026-11-22T08:00:07Z",'
                    b'"end":"2026-11-22T08:00:06Z"}\n')
    with pytest.raises(BadRecordError) as info:
        replay([log])
    assert str(info.value) == (f"{log}:1: field 'end': interval end 2026-11-22T08:00:06Z is "
                               "not after start 2026-11-22T08:00:07Z; expected end > start")
    log.write_bytes(b'{"kind":"insert","start":5}\n')
    with pytest.raises(BadRecordError, match="field 'source': missing on an insert record"):
        replay([log])
    log.write_bytes(b'{"source":"A","kind":"insert","start":5,"arrival":"2026-11-22T08:00:02Z"}'
                    b'\n{"source":"A","kind":"insert","start":6,'
                    b'"arrival":"2026-11-22T08:00:01Z"}\n')
    with pytest.raises(BadRecordError, match=r"field 'arrival': 2026-11-22T08:00:01Z is before "
                                             r"the previous record's 2026-11-22T08:00:02Z"):
        replay([log])


def test_an_event_constructor_shows_instants_readably():
    from engine import Event
    from engine.errors import InputError

    with pytest.raises(InputError) as info:
        Event.interval("2026-11-22T08:00:07Z", "2026-11-22T08:00:06Z")
    assert "(2026-11-22T08:00:06Z) is not after start '2026-11-22T08:00:07Z' " \
           "(2026-11-22T08:00:07Z)" in str(info.value)
