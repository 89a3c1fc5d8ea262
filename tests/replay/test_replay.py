"""Replay: the worked example (design.md §4.2), byte-identical output (TS §5.1), merge order
(TS §5.2), both paths agree (hypothesis), every format gives the same output, pacing in
virtual time."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.times import Nanoseconds
from eventlog import read_records, write_log
from goldilocks.replay import COLUMNAR, ELEMENT, VirtualClock, replay

M = 60 * 10**9


def test_seed_example_exact_output(seed_log, tmp_path):
    out, late = tmp_path / "out.jsonl", tmp_path / "late.jsonl"
    stats = replay([seed_log], delay="5m", out=out, late=late)
    assert out.read_bytes() == (
        b'{"source":"A","kind":"insert","start":300000000000}\n'
        b'{"source":"B","kind":"insert","start":0}\n'
        b'{"kind":"cti","start":0}\n'
        b'{"source":"A","kind":"insert","start":420000000000}\n'
        b'{"kind":"cti","start":180000000000}\n')
    assert late.read_bytes() == (b'{"source":"B","kind":"insert","start":60000000000,'
                                 b'"cti":180000000000,"action":"dropped"}\n')
    assert stats.path == COLUMNAR
    assert (stats.records, stats.emitted, stats.late, stats.final_cti) == (7, 3, 1, 3 * M)
    b = {s.name: s for s in stats.inputs}["B"]
    assert (b.received, b.emitted, b.late, b.final_cti) == (3, 1, 1, 0)


def test_ts_5_1_same_log_twice_gives_identical_bytes(tmp_path):
    log = tmp_path / "fleet.jsonl"
    from examples.make_sample_logs import make_records

    write_log(log, make_records())
    outs = []
    for i in range(2):
        out, late = tmp_path / f"out{i}.jsonl", tmp_path / f"late{i}.jsonl"
        replay([log], delay="5m", out=out, late=late)
        outs.append((out.read_bytes(), late.read_bytes()))
    assert outs[0] == outs[1]
    assert outs[0][1].count(b"\n") > 0  # the sample has a late burst


def test_output_is_a_replayable_event_log(seed_log, tmp_path):
    out = tmp_path / "out.jsonl"
    replay([seed_log], delay="5m", out=out)
    again = tmp_path / "again.jsonl"
    stats = replay([out], delay=0, out=again)
    assert again.read_bytes() == out.read_bytes()  # delay 0 on already-ordered output
    assert stats.late == 0


def test_ts_5_2_per_device_files_merge_like_the_combined_file(tmp_path):
    from examples.make_sample_logs import make_records

    records = make_records()
    write_log(tmp_path / "all.jsonl", records)
    names = sorted({r["source"] for r in records})
    for name in names:
        write_log(tmp_path / f"{name}.jsonl", [r for r in records if r["source"] == name])
    a = replay([tmp_path / "all.jsonl"], delay="5m", out=tmp_path / "a.out")
    b = replay([tmp_path / f"{n}.jsonl" for n in reversed(names)], delay="5m",
               out=tmp_path / "b.out")
    assert (tmp_path / "a.out").read_bytes() == (tmp_path / "b.out").read_bytes()
    assert a.inputs == b.inputs and (a.late, a.final_cti) == (b.late, b.final_cti)


def test_ts_5_2_ties_broken_by_file_order_then_line(tmp_path):
    write_log(tmp_path / "x.jsonl", [{"seq": 1, "source": "X", "kind": "insert", "start": 1},
                                     {"seq": 1, "source": "X", "kind": "insert", "start": 2}])
    write_log(tmp_path / "y.jsonl", [{"seq": 0, "source": "Y", "kind": "insert", "start": 3},
                                     {"seq": 1, "source": "Y", "kind": "insert", "start": 4}])
    order = [(r["source"], r["start"]) for r in
             read_records([tmp_path / "y.jsonl", tmp_path / "x.jsonl"])]
    assert order == [("Y", 3), ("Y", 4), ("X", 1), ("X", 2)]
    order = [(r["source"], r["start"]) for r in
             read_records([tmp_path / "x.jsonl", tmp_path / "y.jsonl"])]
    assert order == [("Y", 3), ("X", 1), ("X", 2), ("Y", 4)]


def test_mixing_order_keys_across_files_is_an_error(tmp_path):
    write_log(tmp_path / "a.jsonl", [{"seq": 0, "source": "A", "kind": "insert", "start": 1}])
    write_log(tmp_path / "b.jsonl", [{"arrival": 5, "source": "B", "kind": "insert", "start": 1}])
    with pytest.raises(InputError, match="same order key"):
        replay([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], delay=0)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_give_the_jsonl_output(tmp_path, fmt):
    from examples.make_sample_logs import make_records

    records = make_records()
    write_log(tmp_path / "f.jsonl", records)
    write_log(tmp_path / f"f.{fmt}", records)
    a = replay([tmp_path / "f.jsonl"], delay="2m", on_late="adjust", out=tmp_path / "a.out",
               late=tmp_path / "a.late")
    b = replay([tmp_path / f"f.{fmt}"], delay="2m", on_late="adjust", out=tmp_path / "b.out",
               late=tmp_path / "b.late")
    assert (tmp_path / "a.out").read_bytes() == (tmp_path / "b.out").read_bytes()
    assert (tmp_path / "a.late").read_bytes() == (tmp_path / "b.late").read_bytes()
    assert a.inputs == b.inputs and a.late > 0


# -- the two paths agree (hypothesis differential) --------------------------------------

_record = st.one_of(
    st.builds(lambda s, t, d, p: {"source": s, "kind": "insert", "start": t,
                                  **({"end": t + d} if d else {}),
                                  **({"payload": p} if p is not None else {})},
              st.sampled_from(["A", "B", "C"]), st.integers(0, 60), st.integers(0, 20),
              st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=3),
                        st.dictionaries(st.sampled_from("xy"), st.integers(0, 3), max_size=2))),
    st.builds(lambda s, t: {"source": s, "kind": "cti", "start": t},
              st.sampled_from(["A", "B", "C", None]), st.integers(0, 80)),
    st.builds(lambda s: {"source": s, "kind": "leave"}, st.sampled_from(["A", "B"])),
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_record, max_size=40), delay=st.integers(0, 30),
       on_late=st.sampled_from(["drop", "adjust"]), policy=st.sampled_from(["goldilocks", "max"]))
def test_columnar_and_element_paths_write_identical_bytes(tmp_path_factory, records, delay,
                                                          on_late, policy):
    d = tmp_path_factory.mktemp("diff")
    log = d / "log.jsonl"
    write_log(log, [{k: v for k, v in r.items() if v is not None or k != "source"}
                    for r in records])
    a = both_paths(d, log, delay=Nanoseconds(delay) if policy == "goldilocks" else 0, policy=policy,
                   on_late=on_late)
    # the per-input rows add up to the totals: every record (leaves too) is in one row, and
    # every output CTI is counted on the input whose record caused it
    rows = a.inputs
    assert sum(r.records for r in rows) == a.records == len(records)
    assert sum(r.ctis_out for r in rows) == a.ctis_emitted
    assert (sum(r.emitted for r in rows), sum(r.late for r in rows),
            sum(r.adjusted for r in rows)) == (a.emitted, a.late, a.adjusted)
    outs = [r.last_cti_out for r in rows if r.last_cti_out is not None]
    assert (max(outs) if outs else None) == a.final_cti


def both_paths(d, log, **kw):
    """Replay ``log`` on the columnar path (to files in ``d``) and on the element path (to
    file objects); check the same bytes, statistics and plot; the columnar run's stats."""
    a = replay([log], out=d / "col.out", late=d / "col.late", columnar=True, plot=True, **kw)
    el_out, el_late = io.BytesIO(), io.BytesIO()
    b = replay([log], out=el_out, late=el_late, plot=True, **kw)
    assert (a.path, b.path) == (COLUMNAR, ELEMENT)
    assert (d / "col.out").read_bytes() == el_out.getvalue()
    assert (d / "col.late").read_bytes() == el_late.getvalue()
    assert a.inputs == b.inputs
    assert (a.emitted, a.ctis_emitted, a.late, a.adjusted, a.final_cti) == \
           (b.emitted, b.ctis_emitted, b.late, b.adjusted, b.final_cti)
    assert a.plot.late.tolist() == b.plot.late.tolist()
    assert a.plot.cti_rows.tolist() == b.plot.cti_rows.tolist()
    assert a.plot.cti_values.tolist() == b.plot.cti_values.tolist()
    return a


def _rechunk(chunks, cuts):
    """The merged chunks cut again at the global row numbers ``cuts``."""
    import numpy as np

    from eventlog import Columns

    rows = [c for c in chunks if len(c)]
    if not rows:
        return
    whole = Columns.concat(rows)
    n = len(whole)
    bounds = [0, *sorted(c for c in cuts if c <= n), n]
    for lo, hi in zip(bounds, bounds[1:]):
        yield whole.take(np.arange(lo, hi))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), records=st.lists(_record, max_size=40), delay=st.integers(0, 30),
       on_late=st.sampled_from(["drop", "adjust"]))
def test_columnar_path_over_any_chunk_split_writes_the_element_bytes(tmp_path_factory, data,
                                                                     records, delay, on_late):
    # TS §5.1: the columnar path carries the policy state across chunks; where the chunks
    # are cut (hypothesis chooses, empty chunks included) changes no byte and no count
    from eventlog import BadRecords, SourceTable, merge_columns
    from goldilocks.columnar import run_columnar
    from goldilocks.outputs import Output
    from goldilocks.replay import PlotData, _inputs

    d = tmp_path_factory.mktemp("split")
    log = d / "log.jsonl"
    write_log(log, [{k: v for k, v in r.items() if v is not None or k != "source"}
                    for r in records])
    cuts = data.draw(st.lists(st.integers(0, len(records)), max_size=8), label="cuts")
    policy = __import__("operators.policies", fromlist=["goldilocks"]).goldilocks(
        Nanoseconds(delay), on_late=on_late)
    table = SourceTable()
    col_out, col_late = io.BytesIO(), io.BytesIO()
    chunks = _rechunk(merge_columns([str(log)], table=table, bad=BadRecords()), cuts)
    tally = run_columnar(policy, chunks, table, Output(col_out), Output(col_late), True)
    stats, plot = _inputs(tally), PlotData(tuple(tally.names), *tally.plot)
    totals = {"emitted": tally.emitted_total, "ctis": tally.ctis_total,
              "late": tally.late_total, "adjusted": tally.adjusted_total, "final": tally.final}
    el_out, el_late = io.BytesIO(), io.BytesIO()
    b = replay([log], policy=policy, out=el_out, late=el_late, plot=True)
    assert b.path == ELEMENT
    assert col_out.getvalue() == el_out.getvalue()
    assert col_late.getvalue() == el_late.getvalue()
    assert stats == b.inputs
    assert (totals["emitted"], totals["ctis"], totals["late"], totals["adjusted"],
            totals["final"]) == (b.emitted, b.ctis_emitted, b.late, b.adjusted, b.final_cti)
    assert plot.late.tolist() == b.plot.late.tolist()
    assert plot.cti_rows.tolist() == b.plot.cti_rows.tolist()


def test_columnar_path_keeps_no_whole_log_state(tmp_path, monkeypatch):
    # bounded memory: a log of many chunks is decided chunk by chunk — the kernel never sees
    # more rows than one chunk holds
    import eventlog.jsonl as reader
    from operators.policies import goldilocks

    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    write_log(tmp_path / "big.jsonl", [
        {"source": "A", "kind": "cti" if i % 10 == 9 else "insert", "start": i}
        for i in range(5000)])
    policy = goldilocks(Nanoseconds(3))
    seen: list[int] = []

    class Recording(type(policy)):
        __slots__ = ()

        def run_columns(self, is_cti, start, end, state=None):
            seen.append(len(is_cti))
            return super().run_columns(is_cti, start, end, state)

    rec = Recording(policy.name, policy.delay, policy.on_late)
    whole = io.BytesIO()
    replay([tmp_path / "big.jsonl"], policy=policy, out=whole)  # element path, for the bytes
    stats = replay([tmp_path / "big.jsonl"], policy=rec, out=tmp_path / "o.jsonl")
    assert stats.path == COLUMNAR and stats.records == 5000
    assert len(seen) > 10 and max(seen) < 500
    assert (tmp_path / "o.jsonl").read_bytes() == whole.getvalue()


def test_min_policy_runs_the_element_path_and_uses_leave(tmp_path):
    records = [{"source": "A", "kind": "join"}, {"source": "B", "kind": "join"},
               {"source": "A", "kind": "cti", "start": 10}]
    write_log(tmp_path / "stay.jsonl", records)
    write_log(tmp_path / "l.jsonl", records + [{"source": "B", "kind": "leave"}])
    out = tmp_path / "o.jsonl"
    stats = replay([tmp_path / "stay.jsonl"], policy="min", out=out)
    assert out.read_bytes() == b""  # B joined and holds time back
    stats = replay([tmp_path / "l.jsonl"], policy="min", out=out)
    assert stats.path == ELEMENT
    assert out.read_bytes() == b'{"kind":"cti","start":10}\n'  # B's leave releases A's CTI
    with pytest.raises(InputError, match="no columnar form"):
        replay([tmp_path / "l.jsonl"], policy="min", out=out, columnar=True)


# -- pacing through an injected clock ----------------------------------------------------

def test_speed_paces_by_arrival_in_virtual_time(tmp_path):
    s = 10**9
    write_log(tmp_path / "p.jsonl", [
        {"arrival": 100 * s, "source": "A", "kind": "insert", "start": 1},
        {"arrival": 101 * s, "source": "A", "kind": "insert", "start": 2},
        {"arrival": 104 * s, "source": "A", "kind": "cti", "start": 3},
    ])
    clock = VirtualClock(start=50.0)
    stats = replay([tmp_path / "p.jsonl"], delay=0, speed=2, clock=clock, out=io.BytesIO())
    assert clock.sleeps == pytest.approx([0.5, 1.5])
    assert clock.now == pytest.approx(52.0)
    assert stats.path == ELEMENT
    fast = VirtualClock()
    replay([tmp_path / "p.jsonl"], delay=0, speed="max", clock=fast, out=None)
    assert fast.sleeps == []


def test_speed_needs_arrival_times(seed_log):
    with pytest.raises(InputError, match="arrival"):
        replay([seed_log], delay="5m", speed=1, clock=VirtualClock(), out=io.BytesIO())


def test_bad_speed_is_refused(seed_log):
    with pytest.raises(InputError, match="speed"):
        replay([seed_log], delay="5m", speed="fast")


# -- the columnar writer's vectorised lines ---------------------------------------------

_times = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-20, 20),
                   st.sampled_from([10**k for k in range(19)] + [-(10**k) for k in range(19)]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "dev-7", "é", "x" * 40]),
                          _times.filter(lambda t: t < 2**63 - 1),
                          st.booleans(), st.sampled_from([None, 1, {"v": 2}, "s" * 300])),
                min_size=1, max_size=30),
       st.lists(st.tuples(_times, st.booleans()), min_size=1, max_size=30), st.data())
def test_late_lines_of_the_columnar_writer_are_late_line_bytes(rows, lates, data):
    import numpy as np

    from eventlog import SourceTable, insert_line, insert_prefix, late_line
    from eventlog.write_columns import late_text
    from tests.replay.conftest import scan_block

    lines = [insert_line(insert_prefix(src), t, t + 1 if interval and t < 2**62 else None, p)
             for src, t, interval, p in rows]
    found = scan_block(b"".join(lines), None, SourceTable(), -(2**63))
    assert found is not None
    raw = found[8]
    picks = sorted(data.draw(st.sets(st.integers(0, len(rows) - 1), min_size=1)))
    lates = (lates * len(picks))[:len(picks)]
    cti = np.array(sorted(c for c, _ in lates), np.int64)  # CTIs in force never go back
    adjusted = np.array([a for _, a in lates], np.bool_)
    got = late_text(raw, np.array(picks), cti, adjusted).tobytes()
    want = b"".join(late_line(lines[i], c, "adjusted" if a else "dropped", c if a else None)
                    for i, c, a in zip(picks, cti.tolist(), adjusted.tolist()))
    assert got == want
    # with reasons (a code per row into a table whose None writes no field)
    reasons = (None, "quantile", "max_ahead", 'odd "reason" é')
    code = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(picks),
                                       max_size=len(picks))), np.int64)
    got = late_text(raw, np.array(picks), cti, adjusted, reason=code, reasons=reasons).tobytes()
    want = b"".join(late_line(lines[i], c, "adjusted" if a else "dropped", c if a else None,
                              reasons[r])
                    for i, c, a, r in zip(picks, cti.tolist(), adjusted.tolist(), code.tolist()))
    assert got == want


def test_reading_ahead_keeps_the_order_and_raises_where_the_reader_did():
    from goldilocks.ahead import ahead as _ahead

    def chunks():
        yield from range(5)
        raise ValueError("bad record at line 6")

    got = []
    with pytest.raises(ValueError, match="line 6"):
        for c in _ahead(chunks(), depth=2):
            got.append(c)
    assert got == [0, 1, 2, 3, 4]


def test_closing_the_read_ahead_stops_and_closes_the_reader():
    import threading

    from goldilocks.ahead import ahead as _ahead

    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()

    ahead = _ahead(endless(), depth=1)
    assert next(ahead) == 0
    ahead.close()  # returns once the reading thread has finished
    assert closed.is_set()
    assert not any(t.name == "goldilocks-replay-read" for t in threading.enumerate())
