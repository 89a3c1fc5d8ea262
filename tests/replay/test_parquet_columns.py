"""The Parquet reader's column path (Arrow columns to numpy, canonical lines built with
numpy) gives what the row path gives: the same output and late bytes, statistics and
bad-record reports, on tables hypothesis makes awkward; and the lines it builds are the
record encoder's bytes."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import BadRecordError
from eventlog import insert_line, insert_prefix
from engine.times import MAX_TIME, MIN_TIME
from engine.times import Nanoseconds

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

_names = st.sampled_from(["A", "dev-7", "é", 'q"uote', "x" * 40, None])
_texts = st.sampled_from([None, '{"v":1}', '[1,"x"]', '"s"', "7", "null", "", '{"v": 1}',
                          "{nope", '{"v":1.0}', "x" * 100, '"' + "y" * 120 + '"'])
_times = st.one_of(st.integers(-50, 50), st.integers(MIN_TIME, MAX_TIME),
                   st.sampled_from([MIN_TIME, MAX_TIME, 0, -1, 10**18]), st.none())


@st.composite
def tables(draw):
    n = draw(st.integers(1, 25))
    clean = draw(st.booleans())  # half of the tables: valid rows only, mostly the column path
    kinds = draw(st.lists(st.sampled_from(["insert", "insert", "cti", "join", "leave", "nope"]),
                          min_size=n, max_size=n))
    names = draw(st.lists(_names, min_size=n, max_size=n))
    starts = draw(st.lists(_times, min_size=n, max_size=n))
    ends = draw(st.lists(st.one_of(st.none(), _times), min_size=n, max_size=n))
    texts = draw(st.lists(_texts, min_size=n, max_size=n))
    if clean:
        kinds = [k if k != "nope" else "insert" for k in kinds]
        names = [s if s is not None or k == "cti" else "A" for s, k in zip(names, kinds)]
        starts = [0 if t is None else min(t, MAX_TIME - 1) for t in starts]
        ends = [None if e is None or k != "insert" or e <= t else e
                for e, t, k in zip(ends, starts, kinds)]
        texts = [p if k == "insert" and p in (None, '{"v":1}', '[1,"x"]', '"s"', "7", "null",
                                              '"' + "y" * 120 + '"') else None
                 for p, k in zip(texts, kinds)]
    columns = {
        "source": pa.array(names, draw(st.sampled_from([pa.string(), pa.large_string()]))),
        "kind": pa.array(kinds, pa.string()),
        "start": pa.array(starts, pa.int64()),
    }
    if draw(st.booleans()):
        columns["end"] = pa.array(ends, pa.int64())
    if draw(st.booleans()):
        columns["payload"] = pa.array(texts, draw(st.sampled_from([pa.string(),
                                                                   pa.large_string()])))
    key = draw(st.sampled_from([None, "seq", "arrival"]))
    if key:
        steps = draw(st.lists(st.integers(0 if clean else -1, 3), min_size=n, max_size=n))
        columns[key] = pa.array(np.cumsum(steps).tolist(),
                                draw(st.sampled_from([pa.int64(), pa.int32()])))
    return pa.table(columns)


def _replay(path, tmp, columnar, **kw):
    from goldilocks.replay import replay

    out, late = tmp / "o.jsonl", tmp / "l.jsonl"
    try:
        stats = replay([path], delay=Nanoseconds(3), out=out if columnar else io.BytesIO(),
                       late=late,
                       columnar=columnar, **kw)
    except BadRecordError as err:
        return ("error", str(err))
    return (out.read_bytes() if columnar else None, late.read_bytes(), stats.inputs,
            stats.records, stats.skipped, stats.late)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=tables(), on_late=st.sampled_from(["drop", "adjust"]),
       bad=st.sampled_from(["fail", "skip"]))
def test_column_path_equals_the_row_path(tmp_path_factory, table, on_late, bad):
    from eventlog.fast import SCANNERS

    d = tmp_path_factory.mktemp("pq")
    path = d / "log.parquet"
    pq.write_table(table, path)
    fast = _replay(path, d, True, on_late=on_late, bad_records=bad)
    saved = SCANNERS["parquet"]
    SCANNERS["parquet"] = []  # every batch read as Python values
    try:
        rows = _replay(path, d, True, on_late=on_late, bad_records=bad)
    finally:
        SCANNERS["parquet"] = saved
    assert fast == rows


def test_the_benchmark_shape_takes_the_column_path(tmp_path, monkeypatch):
    from eventlog import read_columns
    from eventlog.arrow import arrow_columns
    from eventlog.fast import SCANNERS
    from goldilocks.columnar import _Prefixes, chunk_lines

    pq.write_table(pa.table({"seq": pa.array([0, 1, 2], pa.int64()),
                             "source": ["A", "B", "A"], "kind": ["insert", "cti", "insert"],
                             "start": [5, 9, 7], "payload": ['{"v":1}', None, None]}),
                   tmp_path / "f.parquet")
    taken = []
    monkeypatch.setitem(SCANNERS, "parquet", [lambda *a: taken.append(1) or arrow_columns(*a)])
    chunks = list(read_columns(tmp_path / "f.parquet"))
    raw = chunk_lines(chunks[0], _Prefixes(["A", "B"]))  # the inserts' lines, with numpy
    assert taken and raw is not None
    assert raw.line(0) == b'{"source":"A","kind":"insert","start":5,"payload":{"v":1}}\n'
    assert list(chunks[0].payload) == [{"v": 1}, None, None]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "dev-7", "é", 'q"uote', "x" * 40]),
                          st.integers(MIN_TIME, MAX_TIME - 2), st.integers(0, 2**40),
                          st.sampled_from([None, 1, {"v": 2}, "s" * 80, [-1, None]])),
                min_size=1, max_size=40))
def test_insert_lines_are_the_encoders_bytes(rows):
    from eventlog.write_columns import insert_lines

    names = sorted({r[0] for r in rows})
    prefixes = [insert_prefix(name) for name in names]
    texts = [b"" if p is None else orjson.dumps(p) for *_, p in rows]
    buffer = np.frombuffer(b"".join(texts) + bytes(256), np.uint8)
    ends = np.cumsum([len(t) for t in texts])
    source = np.array([names.index(r[0]) for r in rows])
    start = np.array([r[1] for r in rows], np.int64)
    has_end = np.array([d > 0 and r[1] + d <= MAX_TIME for r, d in
                        zip(rows, [r[2] for r in rows])])
    end = np.where(has_end, start + np.array([r[2] for r in rows]), start + 1)
    raw = insert_lines(prefixes, source, start, end, has_end, buffer,
                       ends - [len(t) for t in texts], ends, np.arange(len(rows)), len(rows))
    for i, (name, t, _, p) in enumerate(rows):
        want = insert_line(insert_prefix(name), t, int(end[i]) if has_end[i] else None, p)
        assert raw.line(i) == want
        assert raw.start_at[i] - raw.body[i] == len(insert_prefix(name))


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamp_columns_read_as_nanoseconds_on_both_paths(tmp_path, unit, monkeypatch):
    from eventlog.fast import SCANNERS

    t = pa.array([1_700_000_000, 1_700_000_001, 1_700_000_005], pa.timestamp("s", tz="UTC"))
    pq.write_table(pa.table({"arrival": t.cast(pa.timestamp(unit, tz="UTC")),
                             "source": ["A", "A", "B"], "kind": ["insert", "cti", "insert"],
                             "start": t.cast(pa.timestamp(unit, tz="UTC")),
                             "payload": ['{"v":1}', None, "null"]}), tmp_path / "t.parquet")
    fast = _replay(tmp_path / "t.parquet", tmp_path, True)
    monkeypatch.setitem(SCANNERS, "parquet", [])
    assert _replay(tmp_path / "t.parquet", tmp_path, True) == fast
    assert fast[0].startswith(b'{"source":"A","kind":"insert","start":1700000000000000000,')
