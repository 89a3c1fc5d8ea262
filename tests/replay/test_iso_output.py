"""Output files with RFC 3339 times (``--time-format iso``, TS §5.6): the same bytes on the
columnar and the element path, and they replay back to the same events as the canonical,
integer form."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goldilocks.cli import main
from eventlog import iso_time, read_records
from goldilocks.replay import COLUMNAR, ELEMENT, replay
from engine.times import MAX_TIME, MIN_TIME, Nanoseconds, format_rfc3339, to_ns

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "examples" / "data" / "fleet.jsonl"


def _events(path: Path, time_unit: str | None = None) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("file", "line")}
            for r in read_records([path], time_unit=time_unit)]


def test_fleet_in_iso_times_round_trips(tmp_path, capsys):
    ns_out, ns_late = tmp_path / "ns.jsonl", tmp_path / "ns-late.jsonl"
    iso_out, iso_late = tmp_path / "iso.jsonl", tmp_path / "iso-late.jsonl"
    base = ["replay", str(FLEET), "--on-late", "adjust", "--delay", "2m", "--no-summary"]
    assert main([*base, "--out", str(ns_out), "--late", str(ns_late)]) == 0
    assert main([*base, "--out", str(iso_out), "--late", str(iso_late),
                 "--time-format", "iso"]) == 0
    first = orjson.loads(iso_out.read_bytes().split(b"\n", 1)[0])
    assert first["start"] == "2026-11-22T08:02:01.128Z"
    late = orjson.loads(iso_late.read_bytes().split(b"\n", 1)[0])
    assert isinstance(late["cti"], str) and late["cti"].endswith("Z")
    # the element path (stdout) writes the same bytes as the columnar path (a file)
    assert main([*base, "--out", "-", "--time-format", "iso"]) == 0
    assert capsys.readouterr().out.encode() == iso_out.read_bytes()
    # the ISO files are event logs of the same events
    assert _events(iso_out) == _events(ns_out)
    assert _events(iso_late) == _events(ns_late)
    again = tmp_path / "again.jsonl"
    replay([iso_out], delay=0, out=again)
    assert again.read_bytes() == ns_out.read_bytes()


def test_iso_time_text():
    assert iso_time(0) == b'"1970-01-01T00:00:00Z"'
    assert iso_time(1_500_000_000) == b'"1970-01-01T00:00:01.500Z"'
    assert iso_time(250_000) == b'"1970-01-01T00:00:00.000250Z"'
    assert iso_time(-1) == b'"1969-12-31T23:59:59.999999999Z"'
    assert iso_time(MAX_TIME) == b'"2262-04-11T23:47:16.854775807Z"'
    assert iso_time(MIN_TIME) == b'"1677-09-21T00:12:43.145224192Z"'
    for t in (MIN_TIME, MAX_TIME, -1, 0, 1_795_334_400_123_456_789):
        assert to_ns(format_rfc3339(t)) == t


_bases = st.sampled_from([MIN_TIME, MIN_TIME + 1, -86_400 * 10**9 - 1, -1, 0,
                          1_795_334_400 * 10**9, MAX_TIME - 10**16])
_grains = st.sampled_from([1, 1_000, 10**6, 10**9])
_record = st.one_of(
    st.builds(lambda s, t, d, p: {"source": s, "kind": "insert", "start": t,
                                  **({"end": t + d} if d else {}),
                                  **({"payload": p} if p is not None else {})},
              st.sampled_from(["A", "B", "dev-é"]), st.integers(0, 60), st.integers(0, 20),
              st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=3),
                        st.dictionaries(st.sampled_from("xy"), st.integers(0, 3), max_size=2),
                        st.text(min_size=70, max_size=80))),
    st.builds(lambda s, t: {"source": s, "kind": "cti", "start": t},
              st.sampled_from(["A", "B", "dev-é", None]), st.integers(0, 80)),
    st.builds(lambda s: {"source": s, "kind": "leave"}, st.sampled_from(["A", "B"])),
)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_record, max_size=40), base=_bases, grain=_grains,
       delay=st.integers(0, 30), on_late=st.sampled_from(["drop", "adjust"]),
       files=st.sampled_from([1, 2]))
def test_iso_bytes_are_the_same_on_both_paths_and_read_back_to_the_events(
        tmp_path_factory, records, base, grain, delay, on_late, files):
    d = tmp_path_factory.mktemp("iso")
    for r in records:  # small offsets in grains of 1 ns .. 1 s from a base, in int64
        for k in ("start", "end"):
            if k in r:
                r[k] = base + r[k] * grain
    logs = [d / f"log{i}.jsonl" for i in range(files)]
    lines: list[list[bytes]] = [[] for _ in logs]
    for n, r in enumerate(records):  # two files: the merge re-encodes the lines
        i = n % files
        lines[i].append(orjson.dumps({"seq": n, **r} if files > 1 else r) + b"\n")
    for path, chunk in zip(logs, lines):
        path.write_bytes(b"".join(chunk))
    kw = dict(delay=Nanoseconds(delay * grain), on_late=on_late, time_unit="ns")
    a = replay(logs, out=d / "col.jsonl", late=d / "col-late.jsonl", time_format="iso", **kw)
    el_out, el_late = io.BytesIO(), io.BytesIO()
    b = replay(logs, out=el_out, late=el_late, time_format="iso", **kw)
    assert (a.path, b.path) == (COLUMNAR, ELEMENT)
    assert (d / "col.jsonl").read_bytes() == el_out.getvalue()
    assert (d / "col-late.jsonl").read_bytes() == el_late.getvalue()
    assert a.inputs == b.inputs
    replay(logs, out=d / "ns.jsonl", late=d / "ns-late.jsonl", **kw)
    assert _events(d / "col.jsonl") == _events(d / "ns.jsonl", "ns")
    assert _events(d / "col-late.jsonl") == _events(d / "ns-late.jsonl", "ns")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(MIN_TIME, MAX_TIME),
                          st.builds(lambda d, g: d * g, st.integers(-10**9, 10**9),
                                    st.sampled_from([1_000, 10**6, 10**9, 86_400 * 10**9]))
                          .filter(lambda t: MIN_TIME <= t <= MAX_TIME)),
                max_size=60))
def test_the_vectorised_iso_writer_is_the_encoders_text(values):
    # the columnar path's RFC 3339 text (numpy, many rows at a time) is iso_time's, byte for
    # byte, over the whole int64 range; runs of equal values and days included
    import numpy as np

    from eventlog.write_columns import iso_times

    values = sorted(values)[: len(values) // 2] + values[len(values) // 2:]
    strings = [s.encode() for s in iso_times(np.array(values, np.int64)).to_pylist()]
    text, lens = b"".join(strings), np.array([len(s) for s in strings])
    assert text == b"".join(iso_time(t) for t in values)
    assert lens.tolist() == [len(iso_time(t)) for t in values]


def test_parquet_with_long_payloads_and_inserts_without_one_in_iso_times(tmp_path):
    # the inserts' lines are built from the batch's payload texts: an insert without a
    # payload between long ones must not break the ranges the texts are gathered by
    import pyarrow as pa
    import pyarrow.parquet as pq

    log = tmp_path / "p.parquet"
    long = '"' + "y" * 200 + '"'
    pq.write_table(pa.table({"source": ["A", "A", "A", "A"], "kind": ["insert"] * 4,
                             "start": [1, 2, 3, 4], "payload": [None, long, None, long]}), log)
    columnar, element = io.BytesIO(), io.BytesIO()
    replay([log], delay=0, out=tmp_path / "c.jsonl", time_format="iso", time_unit="ns")
    replay([log], delay=0, out=element, time_format="iso", time_unit="ns")
    assert (tmp_path / "c.jsonl").read_bytes() == element.getvalue()
    assert element.getvalue().count(b"y" * 200) == 2
