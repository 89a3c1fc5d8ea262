"""The vectorised JSON Lines scanner agrees with the record parsers on every block it accepts,
its canonical lines are the encoder's bytes, and it accepts the flat shape it is for."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import insert_line, insert_prefix
from eventlog import BadRecords, SourceTable
from eventlog.columns import PAD
from eventlog.jsonl import object_columns as _jsonl_chunk
from eventlog.records import Block, FileState as _FileState
from eventlog.scan import flat_columns
from tests.replay.conftest import scan_block
from engine.times import MAX_TIME, MIN_TIME

ints = st.one_of(st.integers(-5, 30), st.integers(MIN_TIME, MAX_TIME),
                 st.sampled_from([MIN_TIME, MAX_TIME, 0, -1, 10**18, 2**63, -(2**63) - 1]))
names = st.one_of(st.sampled_from(["A", "B", "dev-1", "", "eightchr", "ninechars", "é",
                                   "a\"b", "a\\b", "a,b", "x" * 40, "\u2028"]),
                  st.text(max_size=12))
payloads = st.one_of(st.none(), st.integers(-3, 3), st.integers(2**62, 2**64 + 5),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4),
                     st.booleans(),
                     st.dictionaries(st.sampled_from(["v", "w", "é"]), st.integers(0, 9),
                                     max_size=2),
                     st.lists(st.integers(0, 3), max_size=2))


@st.composite
def records(draw, mode, clean):
    if clean:  # valid records, in the canonical key order: mostly flat
        kind = draw(st.sampled_from(["insert", "insert", "insert", "cti", "join", "leave"]))
        rec: dict = {} if mode == "position" else {mode: draw(st.integers(0, 3))}
        if kind != "cti" or draw(st.integers(0, 4)):
            rec["source"] = draw(st.sampled_from(["A", "dev-1", "eightchr", "ninechars", "é",
                                                  "x" * 40]))
        rec["kind"] = kind
        if kind in ("insert", "cti"):
            rec["start"] = draw(st.integers(MIN_TIME, MAX_TIME - 2**41))
        if kind == "insert" and draw(st.booleans()):
            rec["end"] = rec["start"] + draw(st.integers(1, 2**40))
        if kind == "insert" and draw(st.booleans()):
            rec["payload"] = draw(payloads)
        return rec
    kind = draw(st.sampled_from(["insert", "insert", "cti", "join", "leave", "other"]))
    rec: dict = {}
    if mode != "position":
        rec[mode] = draw(st.integers(0, 3))  # keys made non-decreasing below
    if kind != "cti" or draw(st.booleans()):
        rec["source"] = draw(names)
    rec["kind"] = kind
    if kind in ("insert", "cti") or draw(st.integers(0, 9)) == 0:
        rec["start"] = draw(ints)
    if kind != "cti" and draw(st.booleans()) or draw(st.integers(0, 19)) == 0:
        rec["end"] = draw(ints)
    if kind != "cti" and draw(st.booleans()) or draw(st.integers(0, 19)) == 0:
        rec["payload"] = draw(payloads)
    return rec


def encode(rec: dict, draw, clean: bool) -> bytes:
    items = list(rec.items())
    if not clean and draw(st.integers(0, 9)) == 0:
        items = draw(st.permutations(items))
    try:
        line = orjson.dumps(dict(items))
    except TypeError:  # an int beyond 64 bits: write it as text
        line = ("{" + ",".join(f"{orjson.dumps(k).decode()}:{v}" if isinstance(v, int)
                               else f"{orjson.dumps(k).decode()}:{orjson.dumps(v).decode()}"
                               for k, v in items) + "}").encode()
    if clean:
        return line
    edit = draw(st.integers(0, 14))
    if edit == 0 and line:  # a byte changed
        i = draw(st.integers(0, len(line) - 1))
        line = line[:i] + bytes([draw(st.sampled_from(b' {}",:0-9\\\x00\x80nul'))]) + line[i + 1:]
    elif edit == 1:
        line = line.replace(b":", b": ", 1)
    elif edit == 2:
        line = b""  # a blank line
    elif edit == 3:
        line = line.replace(b'"start":', b'"start":-0', 1)
    return line


@st.composite
def blocks(draw):
    mode = draw(st.sampled_from(["position", "seq", "arrival"]))
    clean = draw(st.booleans())
    recs = draw(st.lists(records(mode, clean), min_size=1, max_size=12))
    key = 0
    for r in recs:
        if mode in r:
            key += r[mode]
            r[mode] = key if clean or draw(st.integers(0, 19)) else key - 5
    return b"".join(encode(r, draw, clean) + b"\n" for r in recs)


def parse_exactly(raw: bytes):
    # integer times taken as nanoseconds (--time-unit ns): these tests are about parsing;
    # the refusal of integers implausible as nanoseconds is tested in test_time_units.py
    table = SourceTable()
    st_ = _FileState("f.jsonl", 0, table, BadRecords("skip"), 1)
    cols = _jsonl_chunk(raw[:-1].split(b"\n"), 1, st_, False)
    return cols, table, st_


@settings(max_examples=1500, deadline=None)
@given(blocks())
def test_scanner_equals_the_record_parsers_when_it_accepts(raw):
    table = SourceTable()
    found = scan_block(raw, None, table, -(2**63))
    try:
        cols, exact_table, st_ = parse_exactly(raw)
    except OverflowError:  # a point at MAX_TIME: the record parsers' business, not the scanner's
        assert found is None
        return
    if found is None:
        return
    mode, kind, source, start, end, has_end, key, payload, lines = found
    # a block the scanner accepts is all good records: none skipped, one row per line
    assert not st_.bad.skipped and len(cols) == raw.count(b"\n")
    assert mode == st_.mode
    assert table.names == exact_table.names
    assert kind.tolist() == cols.kind.tolist()
    assert source.tolist() == cols.source.tolist()
    assert start.tolist() == cols.start.tolist()
    assert end.tolist() == cols.end.tolist()
    assert has_end.tolist() == cols.has_end.tolist()
    assert payload == cols.payload
    if key is not None:
        assert key.tolist() == cols.key.tolist()
    if lines is None:  # read by msgspec (eventlog.keyed), which proves no line canonical
        state = _FileState("f.jsonl", 0, SourceTable(), BadRecords(), 1)
        assert flat_columns(Block("jsonl", bytearray(raw + bytes(PAD)), len(raw), 1,
                                  state)) is None
        return
    for i in np.flatnonzero(kind == 0).tolist():  # the canonical bytes of each insert
        pre = insert_prefix(table.names[source[i]])
        expected = insert_line(pre, int(start[i]), int(end[i]) if has_end[i] else None,
                               payload[i])
        assert lines.line(i) == expected
        assert lines.start_at[i] - lines.body[i] == len(pre)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "dev-7", "ninechars", "é"]),
                          st.sampled_from(["insert", "cti"]), st.integers(MIN_TIME, MAX_TIME - 1),
                          st.integers(1, 2**40), st.booleans(),
                          st.sampled_from([None, 1, {"v": 2}, [1, "x"], "s", True])),
                min_size=1, max_size=30),
       st.sampled_from(["position", "seq", "arrival"]))
def test_scanner_accepts_the_flat_shape(rows, mode):
    # canonical records with an order key in front: the shape it exists for
    lines = []
    for n, (src, kind, t, d, interval, p) in enumerate(rows):
        rec: dict = {} if mode == "position" else {mode: n}
        rec.update(source=src, kind=kind, start=t)
        if kind == "insert" and interval:
            rec["end"] = min(t + d, MAX_TIME)
        if kind == "insert" and p is not None:
            rec["payload"] = p
        lines.append(orjson.dumps(rec) + b"\n")
    raw = b"".join(lines)
    found = scan_block(raw, None, SourceTable(), -(2**63))
    assert found is not None
    assert found[0] == mode and found[1].tolist() == [0 if r[1] == "insert" else 1 for r in rows]


def test_scanner_refuses_what_is_not_certainly_flat():
    good = b'{"source":"A","kind":"insert","start":5}\n'
    assert scan_block(good, None, SourceTable(), -(2**63)) is not None
    for bad in (b'{"source":"A","kind":"insert","start":05}\n',      # not a JSON number
                b'{"source":"A","kind":"insert","start":-0}\n',      # not canonical
                b'{"source":"A","kind":"insert","start":5,"payload":null}\n',  # omitted
                b'{"source":"A","kind":"insert","start":5}\n\n',     # a blank line
                b'{"source":"A","kind":"cti","start":5,"end":6}\n',  # a bad record
                b'{"source":"A","kind":"insert","start":5,"end":5}\n',
                b'{"source":"A","kind":"insert","start":9223372036854775808}\n',
                b'{"source":"A","kind":"insert","start":5,"payload":NaN}\n',
                b'{"source":"A","kind":"insert","start":5,"payload":{"v":1,"v":2}}\n',
                b'{"source":"\xff","kind":"insert","start":5}\n',
                b'{"seq":2,"source":"A","kind":"insert","start":5}\n'
                b'{"seq":1,"source":"A","kind":"insert","start":5}\n'):  # TS §5.2
        # the flat scanner refuses the line, or the rules refuse the record (other scanners
        # may read what is not flat: test_keyed_logs.py holds them to the object path)
        state = _FileState("f.jsonl", 0, SourceTable(), BadRecords(), 1)
        flat = flat_columns(Block("jsonl", bytearray(bad + bytes(PAD)), len(bad), 1, state))
        assert flat is None or scan_block(bad, None, SourceTable(), -(2**63)) is None, bad


def test_whitespace_between_tokens_is_the_compacted_scan_not_the_flat_scanners():
    """The flat scanner proper refuses a space or a CR; the fast path reads such lines
    after compacting them (``eventlog.compact``), to what the compact line gives."""
    State = _FileState
    good = b'{"source":"A","kind":"insert","start":5}\n'
    for spaced in (b'{"source":"A","kind":"insert", "start":5}\n',
                   b'{"source":"A","kind":"insert","start":5}\r\n',
                   b'{"source": "A", "kind": "insert", "start": 5}\n'):
        state = State("f.jsonl", 0, SourceTable(), BadRecords(), 1)
        assert flat_columns(Block("jsonl", bytearray(spaced + bytes(PAD)), len(spaced), 1,
                                  state)) is None, spaced
        found = scan_block(spaced, None, SourceTable(), -(2**63))
        expected = scan_block(good, None, SourceTable(), -(2**63))
        assert found is not None and expected is not None
        assert [np.asarray(x).tolist() if isinstance(x, np.ndarray) else x
                for x in found[:-2]] == [np.asarray(x).tolist() if isinstance(x, np.ndarray)
                                         else x for x in expected[:-2]]
        assert found[-1].line(0) == expected[-1].line(0)


def test_scanner_refuses_a_name_or_number_that_runs_past_its_line():
    for bad in (b'{"source":"A\n","kind":"insert","start":5}\n',
                b'{"source":"A","kind":"insert","start":5\n}\n',
                b'{"seq":1\n,"source":"A","kind":"insert","start":5}\n'):
        assert scan_block(bad, None, SourceTable(), -(2**63)) is None, bad


# integers at the word boundaries of the digit reader (8, 16 and 19 digits) and the int64 ends
edge_ints = st.one_of(st.sampled_from([10**k + d for k in range(20) for d in (-1, 0)]),
                      st.sampled_from([-(10**k) - d for k in range(19) for d in (-1, 0)]),
                      st.integers(MIN_TIME, MAX_TIME - 2**41))
edge_names = st.sampled_from(["", "A", "seven77", "eightchr", "ninechars", "x" * 16, "y" * 17,
                              "z" * 32, "w" * 33, "é", "éé", "日本語"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(edge_names, st.sampled_from(["insert", "cti", "join", "leave"]),
                          edge_ints, st.integers(1, 2**40), st.booleans(),
                          st.sampled_from([None, 0, -7, {"v": 12345678}, [10**18], "ab"])),
                min_size=1, max_size=20),
       st.sampled_from(["position", "seq", "arrival"]), edge_ints)
def test_scanner_reads_edge_numbers_and_names_as_the_record_parsers(rows, mode, first_key):
    lines = []
    for n, (src, kind, t, d, interval, p) in enumerate(rows):
        rec: dict = {} if mode == "position" else {mode: first_key + n}
        rec.update(source=src, kind=kind)
        if kind in ("insert", "cti"):
            rec["start"] = t
        if kind == "insert" and interval:
            rec["end"] = min(t + d, MAX_TIME)
        if kind == "insert" and p is not None:
            rec["payload"] = p
        lines.append(orjson.dumps(rec) + b"\n")
    raw = b"".join(lines)
    table = SourceTable()
    found = scan_block(raw, None, table, -(2**63))
    try:
        cols, exact_table, st_ = parse_exactly(raw)
    except OverflowError:
        assert found is None
        return
    if st_.bad.skipped:  # an interval ending at its start, a key beyond int64...
        assert found is None
        return
    assert found is not None
    mode_, kind, source, start, end, has_end, key, payload, _ = found
    assert table.names == exact_table.names
    assert (kind.tolist(), source.tolist(), start.tolist(), end.tolist(), has_end.tolist()) == \
           (cols.kind.tolist(), cols.source.tolist(), cols.start.tolist(), cols.end.tolist(),
            cols.has_end.tolist())
    assert payload == cols.payload
    if key is not None:
        assert key.tolist() == cols.key.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["A", "B", "dev-1", "ninechars", "é"]),
                                   st.booleans()), min_size=1, max_size=6),
                min_size=1, max_size=6))
def test_names_get_the_record_parsers_codes_across_blocks(blocks_):
    # blocks scanned one after another share the table (and its cache of known names) with
    # blocks the record parsers read (flag False: with an id, which no fast scanner reads)
    table, exact = SourceTable(), SourceTable()
    st_scan = _FileState("f.jsonl", 0, table, BadRecords())
    st_exact = _FileState("f.jsonl", 0, exact, BadRecords())
    for block in blocks_:
        raw = b"".join((b'{"source":"%s","kind":"insert","start":5}\n' if flat else
                        b'{"source":"%s","kind":"insert","start":5,"id":"x"}\n') % name.encode()
                       for name, flat in block)
        want = _jsonl_chunk(raw[:-1].split(b"\n"), 1, st_exact, False)
        found = scan_block(raw, None, table, -(2**63))
        if found is None:
            got = _jsonl_chunk(raw[:-1].split(b"\n"), 1, st_scan, False).source
        else:
            assert all(flat for _, flat in block)
            got = found[2]
        assert got.tolist() == want.source.tolist()
        assert table.names == exact.names


# payload texts: canonical, valid but not canonical, and not JSON at all; long enough to
# cross word boundaries and the width beyond which repeats are not looked for
payload_texts = st.sampled_from([
    b'{"v":1}', b'{"v":12}', b'{"v":123456789}', b'{"v":1234567890123}', b'[1,2,3]', b'"ab"',
    b'{"name":"sensor-0001","reading":21,"ok":true}', b'{"k":"' + b"x" * 70 + b'"}',
    b'7', b'-7', b'true', b'{"v":1.5}',
    b'{"v":1.0}', b'{"v":01}', b'{"v":1,"v":2}', b'{"v":-0}', b'1e3', b'{"v" :1}',
    b'{"v":1', b'[1,2', b'nul', b'{"k":"' + b"x" * 70 + b'"', b'{"v":"\xe2\x82"}'])


def _canonical(text: bytes) -> bool:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return value is not None and orjson.dumps(value) == text


@settings(max_examples=150, deadline=None)
@given(st.lists(payload_texts, min_size=1, max_size=4), st.data())
def test_many_repeated_payloads_are_checked_as_one_round_trip_would(texts, data):
    # >= 256 payloads: the scanner checks each distinct payload once; the block must still be
    # refused whenever any payload in it is not canonical JSON, wherever it is
    n = data.draw(st.integers(256, 700), label="rows")
    picks = data.draw(st.lists(st.integers(0, len(texts) - 1), min_size=n, max_size=n),
                      label="picks")
    raw = b"".join(b'{"seq":%d,"source":"A","kind":"insert","start":5,"payload":%b}\n'
                   % (i, texts[j]) for i, j in enumerate(picks))
    found = scan_block(raw, None, SourceTable(), -(2**63))
    used = {texts[j] for j in picks}
    # whitespace between tokens ({"v" :1}) is compacted away first (eventlog.compact)
    if all(_canonical(t.replace(b" ", b"")) for t in used):
        assert found is not None
        assert found[7] == [orjson.loads(texts[j]) for j in picks]
    else:  # the flat scanner refuses the block; msgspec's (eventlog.keyed) may read it,
        # re-encoding valid JSON as the object path does
        state = _FileState("f.jsonl", 0, SourceTable(), BadRecords(), 1)
        compact = raw.replace(b" ", b"")
        assert flat_columns(Block("jsonl", bytearray(compact + bytes(PAD)), len(compact), 1,
                                  state)) is None
        if found is not None:
            assert found[8] is None
            assert found[7] == [orjson.loads(texts[j]) for j in picks]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=70), min_size=1, max_size=12), st.data())
def test_firsts_cover_every_payload(texts, data):
    from eventlog.scan import _firsts

    picks = data.draw(st.lists(st.integers(0, len(texts) - 1), min_size=256, max_size=600))
    buf = bytearray()
    p0, p1 = [], []
    for j in picks:
        p0.append(len(buf))
        buf += texts[j]
        p1.append(len(buf))
        buf += b"}"
    a = np.frombuffer(bytes(buf) + bytes(256), np.uint8)
    firsts = _firsts(a, np.array(p0), np.array(p1))
    checked = {bytes(buf[p0[j]:p1[j]]) for j in firsts.tolist()}
    assert {texts[j] for j in picks} <= checked


@settings(max_examples=300, deadline=None)
@given(blocks(), st.binary(max_size=300))
def test_scanning_in_place_ignores_the_bytes_after_the_block(raw, after):
    # the reader scans its buffer in place; what follows the block there (the start of the
    # next line, then zeros) must change nothing
    from eventlog.columns import PAD

    copied = scan_block(raw, None, SourceTable(), -(2**63))
    buf = bytearray(raw + after + bytes(PAD))
    in_place = scan_block(buf, None, SourceTable(), -(2**63), len(raw))
    if copied is None:
        assert in_place is None
        return
    assert in_place is not None
    for x, y in zip(copied[1:7], in_place[1:7]):
        assert (x is None and y is None) or x.tolist() == y.tolist()
    assert copied[0] == in_place[0] and copied[7] == in_place[7]
    lines_a, lines_b = copied[8], in_place[8]
    if lines_a is None or lines_b is None:  # msgspec's read (eventlog.keyed): no lines
        assert lines_a is None and lines_b is None
        return
    assert [lines_a.line(i) for i in range(len(copied[1]))] == \
           [lines_b.line(i) for i in range(len(copied[1]))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "dev-1", "é"]), st.integers(0, 10**12),
                          st.sampled_from(["flat", "spaced", "blank"])), max_size=30),
       st.sampled_from([7, 40, 128, 4096]), st.booleans())
def test_reading_in_blocks_of_any_size_gives_the_same_records(rows, chunk, newline_at_end):
    # blocks shorter than a line, lines split across blocks, flat and other blocks mixed: the
    # records and their line numbers do not depend on where the reader's blocks end
    import tempfile

    import eventlog.jsonl as reader
    from eventlog import read_records

    lines = []
    for i, (src, t, shape) in enumerate(rows):
        rec = orjson.dumps({"seq": i, "source": src, "kind": "insert", "start": t})
        lines.append(b"" if shape == "blank" else
                     rec.replace(b",", b", ") if shape == "spaced" else rec)
    data = b"\n".join(lines) + (b"\n" if newline_at_end else b"")
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/log.jsonl"
        with open(path, "wb") as f:
            f.write(data)
        want = list(read_records([path], time_unit="ns"))
        saved = reader.CHUNK_BYTES
        reader.CHUNK_BYTES = chunk
        try:
            got = list(read_records([path], time_unit="ns"))
        finally:
            reader.CHUNK_BYTES = saved
    assert got == want
    assert [r["line"] for r in got] == [i + 1 for i, (_, _, s) in enumerate(rows) if s != "blank"]


@pytest.mark.parametrize("distinct", [True, False])
@pytest.mark.parametrize("bad_at", [None, 0, 1023, 1024, 4999])
def test_canonical_check_of_many_payloads_sees_every_one(distinct, bad_at):
    # 5000 payloads: the first 1024 decide whether repeats are looked for; either way a
    # single payload that is not canonical, anywhere, is found
    from eventlog.scan import canonical_json

    texts = [b'{"v":%d}' % (i if distinct else i % 7) for i in range(5000)]
    if bad_at is not None:
        texts[bad_at] = b'{"v":01}'
    buf = b"".join(texts)
    ends = np.cumsum([len(t) for t in texts])
    a = np.frombuffer(buf + bytes(256), np.uint8)
    assert canonical_json(a, ends - [len(t) for t in texts], ends) == (bad_at is None)


def test_payloads_that_are_pieces_of_one_value_are_not_taken(tmp_path):
    # joined into one array the pieces decode and re-encode to the same bytes, yet no line
    # is JSON: each payload must be a value of its own, so the object path names line 1
    from engine.errors import BadRecordError
    from eventlog.scan import canonical_json
    from goldilocks.replay import replay

    texts = [b"[1", b"2]", b"3,4"]
    buf = b"".join(texts)
    ends = np.cumsum([len(t) for t in texts])
    a = np.frombuffer(buf + bytes(256), np.uint8)
    assert not canonical_json(a, ends - [len(t) for t in texts], ends)
    log = tmp_path / "pieces.jsonl"
    log.write_bytes(b"".join(b'{"source":"a","kind":"insert","start":%d,"payload":%b}\n' % (i, t)
                             for i, t in enumerate(texts)))
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=0, out=tmp_path / "out.jsonl")
    assert str(info.value).startswith(f"{log}:1:") and "not valid JSON" in str(info.value)
