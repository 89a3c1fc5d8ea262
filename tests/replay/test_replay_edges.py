"""Edge events in replay (TS §7 with TS §5.1, §5.7): the columnar path — handing every block
with an edge to the policy's step — and the element path write the reference model's bytes,
whatever the chunks; CSV and Parquet read edges as JSON Lines does; bad edge records are named
by file, line and field."""

from __future__ import annotations

import io

import orjson

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import BadRecordError
from engine.event import END, INTERVAL, START
from engine.times import Nanoseconds
from eventlog import encode_event, encode_late, write_log
from goldilocks.replay import COLUMNAR, ELEMENT, replay
from tests.reference import edge_arrivals_strategy, reference_edges
from tests.replay.test_replay import _rechunk


def _record(e) -> dict:
    r = {"source": e.source, "kind": "insert" if e.kind in ("point", INTERVAL) else e.kind,
         "start": e.start}
    if e.kind in (INTERVAL, END):
        r["end"] = e.end
    if e.kind in (START, END):
        r["id"] = e.id
    if e.payload is not None:
        r["payload"] = e.payload
    return r


def _expected(arrivals, delay, on_late):
    emitted, late = reference_edges(arrivals, delay, on_late, finish=True)
    return (b"".join(map(encode_event, emitted)),
            b"".join(encode_late(r) for r in late))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), arrivals=edge_arrivals_strategy(), delay=st.integers(0, 15),
       on_late=st.sampled_from(["drop", "adjust"]))
def test_both_paths_write_the_reference_bytes_over_any_chunks(tmp_path_factory, data, arrivals,
                                                              delay, on_late):  # TS §7.7
    from eventlog import BadRecords, SourceTable, merge_columns
    from goldilocks.columnar import run_columnar
    from goldilocks.outputs import Output
    from operators.edges import with_edges
    from operators.policies import goldilocks

    d = tmp_path_factory.mktemp("edges")
    log = d / "log.jsonl"
    write_log(log, [_record(e) for e in arrivals])
    want_out, want_late = _expected(arrivals, delay, on_late)
    a = replay([log], delay=Nanoseconds(delay), on_late=on_late, out=d / "col.out",
               late=d / "col.late",
               columnar=True)
    el_out, el_late = io.BytesIO(), io.BytesIO()
    b = replay([log], delay=Nanoseconds(delay), on_late=on_late, out=el_out, late=el_late)
    assert (a.path, b.path) == (COLUMNAR, ELEMENT)
    assert (d / "col.out").read_bytes() == el_out.getvalue() == want_out
    assert (d / "col.late").read_bytes() == el_late.getvalue() == want_late
    assert (a.inputs, a.late, a.adjusted, a.final_cti, a.edges) == \
           (b.inputs, b.late, b.adjusted, b.final_cti, b.edges)
    # cut anywhere: blocks with and without edges side by side, the state carried across
    cuts = data.draw(st.lists(st.integers(0, len(arrivals)), max_size=6), label="cuts")
    table = SourceTable()
    out, late = io.BytesIO(), io.BytesIO()
    tally = run_columnar(with_edges(goldilocks(Nanoseconds(delay), on_late=on_late)),
                         _rechunk(merge_columns([str(log)], table=table, bad=BadRecords()),
                                  cuts), table, Output(out), Output(late), False)
    assert (out.getvalue(), late.getvalue()) == (want_out, want_late)
    assert tally.edges == a.edges


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_read_edges_as_json_lines_does(tmp_path, fmt):
    records = [{"source": "A", "kind": "start", "start": 5, "id": "door", "payload": {"v": 1}},
               {"source": "B", "kind": "insert", "start": 6},
               {"source": "A", "kind": "cti", "start": 30},
               {"source": "A", "kind": "end", "start": 5, "end": 9, "id": "door"},
               {"source": "B", "kind": "end", "start": 1, "end": 40, "id": "x"},
               {"source": "B", "kind": "start", "start": 31, "id": "y"}]
    write_log(tmp_path / "f.jsonl", records)
    write_log(tmp_path / f"f.{fmt}", records)
    a = replay([tmp_path / "f.jsonl"], delay=0, out=tmp_path / "a.out", late=tmp_path / "a.late")
    b = replay([tmp_path / f"f.{fmt}"], delay=0, out=tmp_path / "b.out",
               late=tmp_path / "b.late")
    assert (tmp_path / "a.out").read_bytes() == (tmp_path / "b.out").read_bytes()
    assert (tmp_path / "a.late").read_bytes() == (tmp_path / "b.late").read_bytes()
    assert a.edges == b.edges
    assert (a.edges.moved, a.edges.no_start, a.edges.not_closed) == (1, 1, 1)
    late = (tmp_path / "a.late").read_bytes().decode().splitlines()
    assert late == [
        '{"source":"A","kind":"end","start":5,"end":9,"id":"door","cti":30,'
        '"action":"adjusted","adjusted_end":30,"reason":"end_edge"}',
        '{"source":"B","kind":"end","start":1,"end":40,"id":"x","cti":30,'
        '"action":"unmatched","reason":"no_start"}',
        '{"source":"B","kind":"start","start":31,"id":"y","cti":30,'
        '"action":"unmatched","reason":"not_closed"}']


@pytest.mark.parametrize("line, field, words", [
    ('{"source":"A","kind":"start","start":5,"end":7,"id":1}', "end", "a start edge has no end"),
    ('{"source":"A","kind":"end","start":5,"id":1}', "end", "missing on an end edge"),
    ('{"source":"A","kind":"end","start":5,"end":5,"id":1}', "end", "not after start"),
    ('{"source":"A","kind":"end","start":5,"end":6,"id":true}', "id", "true is a boolean"),
    ('{"source":"A","kind":"start","start":5}', "id", "missing on a start edge"),
    ('{"kind":"start","start":5,"id":2}', "source", "missing on a start record"),
])
def test_bad_edge_records_are_named_by_file_line_and_field(tmp_path, line, field, words):
    log = tmp_path / "bad.jsonl"
    log.write_text('{"source":"A","kind":"insert","start":1}\n' + line + "\n")
    with pytest.raises(BadRecordError) as err:
        replay([log], delay=0)
    assert (err.value.line, err.value.field) == (2, field)
    assert f"bad.jsonl:2: field '{field}'" in str(err.value) and words in str(err.value)


def test_the_summary_counts_the_edges(tmp_path, capsys):  # TS §7.5
    from goldilocks.cli import main

    log = tmp_path / "doors.jsonl"
    write_log(log, [{"source": "A", "kind": "start", "start": 5, "id": "front"},
                    {"source": "A", "kind": "end", "start": 2, "end": 3, "id": "back"},
                    {"source": "A", "kind": "start", "start": 6, "id": "side"},
                    {"source": "A", "kind": "end", "start": 5, "end": 9, "id": "front"}])
    assert main(["replay", str(log), "--delay", "0ns", "--late", str(tmp_path / "late")]) == 0
    err = capsys.readouterr().err
    assert "edges: 2 opened, 1 closed, 1 ends without a start, 1 never closed" in err
    assert [orjson.loads(x)["reason"] for x in (tmp_path / "late").read_bytes().splitlines()] \
        == ["no_start", "not_closed"]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrivals=edge_arrivals_strategy(), delay=st.integers(0, 15),
       on_late=st.sampled_from(["drop", "adjust"]), k=st.integers(1, 3),
       rule=st.sampled_from(["quantile", "max_ahead"]))
def test_robust_rules_decide_edges_on_their_columnar_path(tmp_path_factory, arrivals, delay,
                                                         on_late, k, rule):  # TS §7.7, §5.1
    """Replay wraps every policy in with_edges: a robust rule keeps its columnar form
    (``run_source_columns``) through the wrapper, writes the element path's bytes over a log
    with edges, and every late line — a rule's or an edge's — names its reason last."""
    from operators import goldilocks, quantile_policy

    policy = (quantile_policy(k, Nanoseconds(delay), on_late) if rule == "quantile"
              else goldilocks(Nanoseconds(delay), on_late, max_ahead=Nanoseconds(k)))
    d = tmp_path_factory.mktemp("robust_edges")
    log = d / "log.jsonl"
    write_log(log, [_record(e) for e in arrivals])
    a = replay([log], policy=policy, out=d / "col.out", late=d / "col.late", columnar=True)
    el_out, el_late = io.BytesIO(), io.BytesIO()
    b = replay([log], policy=policy, out=el_out, late=el_late)
    assert (a.path, b.path) == (COLUMNAR, ELEMENT)
    assert (d / "col.out").read_bytes() == el_out.getvalue()
    assert (d / "col.late").read_bytes() == el_late.getvalue()
    assert (a.inputs, a.late, a.adjusted, a.final_cti, a.edges) == \
           (b.inputs, b.late, b.adjusted, b.final_cti, b.edges)
    for line in el_late.getvalue().splitlines():
        keys = list(orjson.loads(line))
        assert "reason" not in keys[:-1]  # one field, last when there is one
        if orjson.loads(line)["kind"] in (START, END):
            assert keys[-1] == "reason"
