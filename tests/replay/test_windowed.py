"""``goldilocks replay --window``: one row per window, the same bytes on both paths, the rows
those of the engine's window operator over the policy's output, and the command line."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Event
from engine.errors import InputError
from engine.event import CTI
from engine.times import Nanoseconds
from eventlog import read_records, write_log
from goldilocks.cli import main
from goldilocks.replay import replay
from goldilocks.windowed import replay_windows
from operators.windows import WindowSpec, Windows, parse_fold
from tests.reference import REFERENCE_FOLDS, reference_windows

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "examples" / "data" / "fleet.jsonl"
AGGS = [k if f is None else f"{k}:{f}" for k, f in REFERENCE_FOLDS]

_payload = st.one_of(st.none(), st.text(max_size=2),
                     st.fixed_dictionaries({}, optional={
                         "x": st.one_of(st.integers(-5, 5), st.floats(-50, 50, allow_nan=False,
                                                                      allow_infinity=False)),
                         "k": st.sampled_from(["p", "q"])}))
_record = st.one_of(
    st.builds(lambda s, t, d, p: {"source": s, "kind": "insert", "start": t,
                                  **({"end": t + d} if d else {}),
                                  **({"payload": p} if p is not None else {})},
              st.sampled_from(["A", "B", "C"]), st.integers(0, 60), st.integers(0, 20),
              _payload),
    st.builds(lambda s, t: {"source": s, "kind": "cti", "start": t},
              st.sampled_from(["A", "B", "C", None]), st.integers(0, 80)),
    st.builds(lambda s: {"source": s, "kind": "leave"}, st.sampled_from(["A", "B"])),
)


def both_paths(logs, d: Path, kw: dict):
    """``replay_windows`` on columns and element by element: the same rows, late records and
    counts; returns both stats."""
    a = replay_windows(logs, out=d / "col", late=d / "col.late", columnar=True, **kw)
    b = replay_windows(logs, out=d / "el", late=d / "el.late", columnar=False, **kw)
    assert (a.path, b.path) == ("columnar", "element")
    assert (d / "col").read_bytes() == (d / "el").read_bytes()
    assert (d / "col.late").read_bytes() == (d / "el.late").read_bytes()
    for f in ("records", "inserts", "late", "window_late", "windows", "open", "peak_open",
              "final_cti"):
        assert getattr(a, f) == getattr(b, f), f
    return a, b


def _write(path: Path, records) -> None:
    write_log(path, [{k: v for k, v in r.items() if v is not None or k != "source"}
                     for r in records])


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_record, max_size=40), delay=st.integers(0, 30),
       on_late=st.sampled_from(["drop", "adjust"]), size=st.integers(1, 20),
       hops=st.integers(1, 3), keyed=st.booleans(), iso=st.booleans())
def test_columnar_and_element_paths_write_identical_rows(tmp_path_factory, records, delay,
                                                         on_late, size, hops, keyed, iso):
    d = tmp_path_factory.mktemp("win")
    log = d / "log.jsonl"
    _write(log, records)
    hop = max(size // hops, 1)
    kw = dict(window=Nanoseconds(size), hop=Nanoseconds(hop), aggregates=AGGS,
              delay=Nanoseconds(delay), on_late=on_late,
              key="source" if keyed else None, time_format="iso" if iso else "ns")
    a, b = both_paths([log], d, kw)
    assert a.window_late == 0  # windows that follow the policy's CTIs see no late insert
    # the late file is replay's own, and the rows are the reference's windows over the
    # policy's output (TS §6.1)
    plain = io.BytesIO()
    late = io.BytesIO()
    replay([log], delay=Nanoseconds(delay), on_late=on_late, out=plain, late=late,
           time_format="iso" if iso else "ns")
    assert (d / "el.late").read_bytes() == late.getvalue()
    merged = [Event.cti(r["start"]) if r["kind"] == "cti" else
              Event(("interval" if "end" in r else "point"), r["start"],
                    r.get("end", r["start"] + 1), r.get("payload"), r["source"])
              for r in read_records_bytes(plain.getvalue(), d)]
    want, _ = reference_windows(merged, size, hop, REFERENCE_FOLDS, keyed=keyed)
    rows = [orjson.loads(line) for line in (d / "el").read_bytes().splitlines()]
    expect = [{"start": e.payload[0], "end": e.payload[1],
               **({"key": e.payload[2]} if keyed else {}), "count": e.payload[3],
               **{k: v for k, v in e.payload[4].items() if k != "count"}}
              for e in want if e.kind != CTI]
    if iso:
        from engine.times import to_ns
        rows = [{**r, "start": to_ns(r["start"]), "end": to_ns(r["end"])} for r in rows]
    assert rows == expect
    assert a.windows == len(rows)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_record, max_size=40), delay=st.integers(0, 30),
       size=st.integers(1, 20), hops=st.integers(1, 3), iso=st.booleans(),
       files=st.integers(1, 3))
def test_per_key_clocks_write_identical_rows_on_both_paths(tmp_path_factory, records, delay,
                                                           size, hops, iso, files):
    """``--clock key`` on columns (each input's rows through the policy's columnar form, its
    CTIs moving its own clock in the kernel) writes the element path's rows and late records
    byte for byte, over logs split into files merged round-robin."""
    d = tmp_path_factory.mktemp("keywin")
    logs = [d / f"log{i}.jsonl" for i in range(files)]
    for i, log in enumerate(logs):
        _write(log, records[i::files])
    kw = dict(window=Nanoseconds(size), hop=Nanoseconds(max(size // hops, 1)), aggregates=AGGS,
              delay=Nanoseconds(delay),
              key="source", clock="key", time_format="iso" if iso else "ns")
    both_paths(logs, d, kw)


def test_per_key_clocks_run_on_columns_by_default_and_idle_after_on_elements(tmp_path):
    kw = dict(window="1m", aggregates=["mean:celsius"], key="source", clock="key",
              delay="30s")
    assert replay_windows([FLEET], out=tmp_path / "a", **kw).path == "columnar"
    assert replay_windows([FLEET], out=tmp_path / "b", idle_after="10m", **kw).path == \
        "element"
    with pytest.raises(InputError, match="no idle_after; use the element path"):
        replay_windows([FLEET], out=tmp_path / "c", idle_after="10m", columnar=True, **kw)


def read_records_bytes(data: bytes, d: Path):
    path = d / "merged.jsonl"
    path.write_bytes(data)
    return list(read_records([path]))


def test_the_bundled_fleet_by_device_both_ways_and_by_payload_key(tmp_path):
    for key in (None, "source"):
        outs = []
        for columnar in (True, False):
            out = tmp_path / f"{key}{columnar}.jsonl"
            s = replay_windows([FLEET], window="1m", aggregates=["mean:celsius", "max:celsius"],
                               key=key, out=out, columnar=columnar)
            outs.append(out.read_bytes())
        assert outs[0] == outs[1] and s.windows == len(outs[0].splitlines()) > 30
    rows = [orjson.loads(x) for x in outs[0].splitlines()]
    assert {r["key"] for r in rows} == {"thermo-1", "thermo-2", "thermo-3", "door-4"}
    assert all(r["mean_celsius"] is None for r in rows if r["key"] == "door-4")
    ends = [(r["end"], r["key"]) for r in rows]
    assert ends == sorted(ends)  # rows in the order windows close


def test_user_folds_run_the_element_path(tmp_path):
    from operators.windows import fold

    longest = fold("longest", 0, lambda acc, e: max(acc, e.end - e.start), value=lambda e: e)
    s = replay_windows([FLEET], window="10m", aggregates=["count", longest], key="source",
                       out=tmp_path / "w.jsonl")
    assert s.path == "element"
    rows = [orjson.loads(x) for x in (tmp_path / "w.jsonl").read_bytes().splitlines()]
    assert max(r["longest"] for r in rows if r["key"] == "door-4") > 0


def test_a_missing_payload_key_names_file_and_line(tmp_path):
    log = tmp_path / "k.jsonl"
    _write(log, [{"source": "A", "kind": "insert", "start": 1, "payload": {"k": "p"}},
                 {"source": "A", "kind": "insert", "start": 2, "payload": {"k": 3}}])
    for columnar in (True, False):
        with pytest.raises(Exception, match=r"k\.jsonl:2: field 'payload': the window key 'k' "
                                            r"is 3; expected a string"):
            replay_windows([log], window=Nanoseconds(10), key="k", out=tmp_path / "o",
                           columnar=columnar)
        assert not (tmp_path / "o").exists()  # TS §5.5: no partial output


def test_cli_window_rows_and_usage_errors(tmp_path, capsys):
    out = tmp_path / "w.jsonl"
    assert main(["replay", str(FLEET), "--window", "1m", "--agg", "mean:celsius", "--key",
                 "source", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "windows of 1m (columnar path): 120 written" in err
    first = orjson.loads(out.read_bytes().splitlines()[0])
    assert list(first) == ["start", "end", "key", "count", "mean_celsius"]
    for argv, message in [
        (["--window", "1m", "--agg", "median:celsius"], "argument --agg: aggregate"),
        (["--agg", "mean:celsius"], "argument --agg: goes with --window"),
        (["--window", "1m", "--hop", "2m"], "argument --hop: windows: hop"),
        (["--window", "1m", "--plot", "x.png"], "argument --plot: is not available"),
        (["--window", "soon"], "argument --window"),
    ]:
        assert main(["replay", str(FLEET), *argv]) == 2, argv
        assert message in capsys.readouterr().err


def test_cli_window_rows_to_stdout_as_a_subprocess():
    result = subprocess.run([sys.executable, "-m", "goldilocks", "replay", str(FLEET),
                             "--window", "5m", "--agg", "mean:celsius", "--no-summary"],
                            capture_output=True, text=True, check=True, cwd=ROOT)
    rows = [orjson.loads(x) for x in result.stdout.splitlines()]
    assert len(rows) == 7 and all(set(r) == {"start", "end", "count", "mean_celsius"}
                                  for r in rows)


def test_the_window_operator_gives_the_replay_rows(tmp_path):
    """The engine's operator over the policy's output, element by element, gives the rows
    ``replay --window`` writes (the same definition, run two ways)."""
    out = tmp_path / "w.jsonl"
    replay_windows([FLEET], window="1m", aggregates=["mean:celsius"], out=out)
    plain = io.BytesIO()
    replay([FLEET], out=plain)
    w = Windows(WindowSpec(60 * 10**9, 60 * 10**9), (parse_fold("mean:celsius"),))
    rows = []
    for r in read_records_bytes(plain.getvalue(), tmp_path):
        e = (Event.cti(r["start"]) if r["kind"] == "cti"
             else Event("point", r["start"], r["start"] + 1, r.get("payload"), r["source"]))
        for o in w.step(e):
            if o.kind != CTI:
                p = o.payload
                rows.append({"start": p.start, "end": p.end, "count": p.count, **p.values})
    assert rows == [orjson.loads(x) for x in out.read_bytes().splitlines()]


def test_fleet_windows_example_agrees_with_replay_and_keeps_device_time(tmp_path):
    """The example's fleet-wide means are ``replay --window`` over the same device logs
    (the policy's one clock), and its per-device windows close by each device's own clock:
    only thermo-2's shuffled burst is late for them."""
    from examples import fleet_windows as example

    events = example.merged_events()
    fleet, _ = example.fleet_means(events)
    out = tmp_path / "w.jsonl"
    s = replay_windows(example.DEVICES, window="1m", aggregates=["mean:celsius"], delay="5m",
                       out=out)
    rows = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert rows == [{"start": r.start, "end": r.end, "count": r.count, **r.values}
                    for r in fleet[:len(rows)]]
    assert len(fleet) == len(rows) + s.open  # the example's devices close their time at +inf
    devices, stats, late = example.device_means(events)
    assert {r.event.source for r in late} == {"thermo-2"} and len(late) == stats.late > 0
    assert all(r.action == "window_closed" for r in late)
    seen = [(r.key, r.start) for r in devices]
    assert len(seen) == len(set(seen)) == stats.emitted  # each window once


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.one_of(
    st.none(), st.integers(-2**70, 2**70), st.text(max_size=2), st.booleans(),
    st.dictionaries(st.sampled_from(["v", "w"]), st.one_of(
        st.none(), st.booleans(), st.integers(-2**70, 2**70), st.just(-0.0),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=1),
        st.lists(st.integers(), max_size=1)), max_size=2)), max_size=30))
def test_the_columnar_values_are_what_the_element_path_reads(payloads):
    import numpy as np

    from eventlog import Columns
    from goldilocks.windowed import _values
    from operators.windows import number

    n = len(payloads)
    chunk = Columns(np.zeros(n, np.int8), np.zeros(n, np.int32), np.zeros(n, np.int64),
                    np.ones(n, np.int64), np.zeros(n, np.bool_), payloads,
                    np.arange(n), np.zeros(n, np.int32), np.arange(n))
    got = _values([parse_fold("mean:v"), parse_fold("max:v")], chunk)
    for column in got:
        want = [number(p, "v") for p in payloads]
        assert [None if np.isnan(x) else x for x in column.tolist()] == \
               [w if isinstance(w, float) else None for w in want]
        assert [str(x) for x in column.tolist() if x == 0] == ["0.0"] * sum(
            1 for w in want if isinstance(w, float) and w == 0)


def test_per_key_clocks_replay_gives_the_operators_rows_and_late_records(tmp_path):
    """``--clock key``: each device's own CTIs close its windows; the rows and late records
    are those of ``tumbling(..., key="source", clocks=goldilocks)`` over the arrivals (the
    example's per-device windows, before its devices close their time at +infinity)."""
    from examples import fleet_windows as example

    out, late = tmp_path / "w.jsonl", tmp_path / "late.jsonl"
    s = replay_windows(example.DEVICES, window="1m", aggregates=["mean:celsius"],
                       key="source", clock="key", delay="30s", out=out, late=late)
    assert s.path == "columnar" and s.late == 0 and s.window_late > 0
    rows = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    devices, stats, late_records = example.device_means(example.merged_events())
    assert rows == [{"start": r.start, "end": r.end, "key": r.key, "count": r.count,
                     **r.values} for r in devices[:len(rows)]]
    assert len(devices) == len(rows) + s.open
    lines = [orjson.loads(x) for x in late.read_bytes().splitlines()]
    assert len(lines) == s.window_late == len(late_records) == stats.late
    assert {x["action"] for x in lines} == {"window_closed"}


def test_per_key_clocks_usage_errors(capsys):
    for argv, message in [
        (["--window", "1m", "--clock", "key"], "argument --clock: per-key clocks need"),
        (["--window", "1m", "--idle-after", "5m"], "argument --idle-after: goes with"),
        (["--clock", "key"], "argument --clock: goes with --window"),
    ]:
        assert main(["replay", str(FLEET), *argv]) == 2, argv
        assert message in capsys.readouterr().err
    assert main(["replay", str(FLEET), "--window", "1m", "--key", "source", "--clock", "key",
                 "--idle-after", "10m", "--out", "-", "--no-summary"]) == 0
    assert capsys.readouterr().out.count('"key":"thermo-1"') > 30


def test_a_misspelt_field_is_reported_not_silently_null(tmp_path, capsys):
    out = tmp_path / "w.jsonl"
    for clock, key in (("merged", None), ("key", "source")):
        argv = ["replay", str(FLEET), "--window", "1m", "--agg", "mean:celsuis", "--agg",
                "max:celsius", "--clock", clock, "--out", str(out)]
        assert main(argv + (["--key", key] if key else [])) == 0
        err = capsys.readouterr().err
        assert ("warning: no insert has a number in the payload field 'celsuis' (--agg); "
                "payload fields seen: celsius, door, seconds") in err
        assert "'celsius'" not in err
    s = replay_windows([FLEET], window="1m", aggregates=["max:celsius"], columnar=False)
    assert s.missing_fields == () and s.payload_fields == ()


def test_a_window_key_only_some_inputs_carry_says_which_and_how_many(tmp_path, capsys):
    """--key door on the fleet: the thermometers' readings lack 'door'; the refusal names
    the first such record and counts, by input, the inserts that lack it."""
    from goldilocks.cli import main

    assert main(["replay", str(FLEET), "--window", "1m", "--key", "door", "--out",
                 str(tmp_path / "w.jsonl")]) == 1
    err = capsys.readouterr().err
    assert f"{FLEET}:1: field 'payload': the window key 'door' is missing" in err
    assert ("652 of the 690 inserts read so far lack it (by input: thermo-1 239, thermo-2 239, "
            "thermo-3 174)") in err
    assert "key by an input (--key source)" in err


def test_final_cti_writes_the_windows_still_open_at_the_end(tmp_path, capsys):
    from goldilocks.cli import main

    for columnar in (True, False):
        plain, final = tmp_path / f"plain{columnar}", tmp_path / f"final{columnar}"
        a = replay_windows([FLEET], window="1m", aggregates=["mean:celsius"], key="source",
                           out=plain, columnar=columnar)
        b = replay_windows([FLEET], window="1m", aggregates=["mean:celsius"], key="source",
                           out=final, columnar=columnar, final_cti=True)
        assert (a.windows, a.open, b.windows, b.open) == (120, 20, 140, 0)
        assert final.read_bytes().startswith(plain.read_bytes())
    assert (tmp_path / "finalTrue").read_bytes() == (tmp_path / "finalFalse").read_bytes()
    capsys.readouterr()
    assert main(["replay", str(FLEET), "--window", "1m", "--out", str(tmp_path / "c")]) == 0
    assert "still open at the end (--final-cti writes them)" in capsys.readouterr().err
    assert main(["replay", str(FLEET), "--final-cti", "--out", str(tmp_path / "d")]) == 2
    assert "argument --final-cti: goes with --window D" in capsys.readouterr().err
