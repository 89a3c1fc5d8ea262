"""Edge events in windowed replay (TS §7.7, §7.8): a start edge counts in its windows by its
start, an end edge is passed over; the columnar path hands blocks with edges to the policy's
step and writes the element path's rows and late lines; the rows are the reference windows
over the reference edges' output."""

from __future__ import annotations

import io

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.event import CTI, END, Event
from engine.times import Nanoseconds
from eventlog import write_log
from goldilocks.replay import replay
from goldilocks.windowed import replay_windows
from tests.reference import (REFERENCE_FOLDS, edge_arrivals_strategy, reference_edges,
                             reference_windows)
from tests.replay.test_replay_edges import _record
from tests.replay.test_windowed import AGGS


def _with_x(e: Event) -> Event:
    if e.kind == CTI:
        return e
    return Event(e.kind, e.start, e.end, {"x": e.start % 7}, e.source, e.id)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrivals=edge_arrivals_strategy(), delay=st.integers(0, 15),
       on_late=st.sampled_from(["drop", "adjust"]), size=st.integers(1, 20),
       hops=st.integers(1, 3), keyed=st.booleans())
def test_windows_count_edges_by_their_start_on_both_paths(tmp_path_factory, arrivals, delay,
                                                          on_late, size, hops, keyed):
    arrivals = [_with_x(e) for e in arrivals]
    d = tmp_path_factory.mktemp("winedges")
    log = d / "log.jsonl"
    write_log(log, [_record(e) for e in arrivals])
    hop = max(size // hops, 1)
    kw = dict(window=Nanoseconds(size), hop=Nanoseconds(hop), aggregates=AGGS,
              delay=Nanoseconds(delay), on_late=on_late,
              key="source" if keyed else None)
    a = replay_windows([log], out=d / "col", late=d / "col.late", columnar=True, **kw)
    b = replay_windows([log], out=d / "el", late=d / "el.late", columnar=False, **kw)
    assert (d / "col").read_bytes() == (d / "el").read_bytes()
    assert (d / "col.late").read_bytes() == (d / "el.late").read_bytes()
    for f in ("records", "inserts", "late", "windows", "open", "final_cti"):
        assert getattr(a, f) == getattr(b, f), f
    late = io.BytesIO()
    replay([log], delay=Nanoseconds(delay), on_late=on_late, late=late)
    assert (d / "el.late").read_bytes() == late.getvalue()  # the policy's records, as replay's
    emitted, _ = reference_edges(arrivals, delay, on_late)
    want, _ = reference_windows([e for e in emitted if e.kind != END], size, hop,
                                REFERENCE_FOLDS, keyed=keyed)
    rows = [orjson.loads(line) for line in (d / "el").read_bytes().splitlines()]
    assert rows == [{"start": e.payload[0], "end": e.payload[1],
                     **({"key": e.payload[2]} if keyed else {}), "count": e.payload[3],
                     **{k: v for k, v in e.payload[4].items() if k != "count"}}
                    for e in want if e.kind != CTI]


def test_per_key_clocks_count_a_start_edge_and_pass_over_its_end(tmp_path):
    log = tmp_path / "log.jsonl"
    write_log(log, [{"source": "A", "kind": "start", "start": 1, "id": 1, "payload": {"x": 2}},
                    {"source": "A", "kind": "end", "start": 1, "end": 30, "id": 1},
                    {"source": "A", "kind": "cti", "start": 20}])
    out = tmp_path / "rows.jsonl"
    replay_windows([log], window=Nanoseconds(10), aggregates=["sum:x"], key="source", clock="key",
                   delay=0, out=out)
    assert [orjson.loads(x) for x in out.read_bytes().splitlines()] == [
        {"start": 0, "end": 10, "key": "A", "count": 1, "sum_x": 2.0}]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrivals=edge_arrivals_strategy(), delay=st.integers(0, 15), size=st.integers(1, 20),
       hops=st.integers(1, 3))
def test_per_key_clocks_agree_on_both_paths_with_edges(tmp_path_factory, arrivals, delay,
                                                       size, hops):
    arrivals = [_with_x(e) for e in arrivals]
    d = tmp_path_factory.mktemp("keyedges")
    log = d / "log.jsonl"
    write_log(log, [_record(e) for e in arrivals])
    kw = dict(window=Nanoseconds(size), hop=Nanoseconds(max(size // hops, 1)), aggregates=AGGS,
              delay=Nanoseconds(delay),
              key="source", clock="key")
    a = replay_windows([log], out=d / "col", late=d / "col.late", columnar=True, **kw)
    b = replay_windows([log], out=d / "el", late=d / "el.late", columnar=False, **kw)
    assert (d / "col").read_bytes() == (d / "el").read_bytes()
    assert (d / "col.late").read_bytes() == (d / "el.late").read_bytes()
    for f in ("records", "inserts", "late", "windows", "open"):
        assert getattr(a, f) == getattr(b, f), f
    # every start edge and insert is counted in a window or late for a closed one; no end
    # edge is either
    counted = sum(1 for e in arrivals if e.kind not in (CTI, END))
    late_lines = (d / "el.late").read_bytes().splitlines()
    assert all(b'"kind":"end"' not in x for x in late_lines)
    assert b.inserts + len(late_lines) >= counted
