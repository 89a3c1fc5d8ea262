"""Replay's columnar path runs the robust rules (``--policy quantile``, ``goldilocks(…,
max_ahead=…)``) through their columnar form, and writes the element path's bytes: output,
late file (reasons included) and statistics, wherever the chunks are cut (TS §5.1)."""

from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings, strategies as st

from engine.times import Nanoseconds
from eventlog import write_log
from goldilocks.replay import COLUMNAR, replay
from operators import goldilocks, quantile_policy
from tests.replay.test_replay import _rechunk, _record, both_paths

_records = st.lists(st.one_of(_record, st.builds(lambda s: {"source": s, "kind": "join"},
                                                 st.sampled_from(["A", "B", "C"]))),
                    max_size=40)
_policies = st.one_of(
    st.builds(quantile_policy, st.integers(1, 3), st.integers(0, 20).map(Nanoseconds),
              st.sampled_from(["drop", "adjust"])),
    st.builds(lambda m, d, o: goldilocks(d, o, max_ahead=m), st.integers(0, 20).map(Nanoseconds),
              st.integers(0, 20).map(Nanoseconds), st.sampled_from(["drop", "adjust"])))


def _write(d, records):
    log = d / "log.jsonl"
    write_log(log, [{k: v for k, v in r.items() if v is not None or k != "source"}
                    for r in records])
    return log


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_records, policy=_policies, time_format=st.sampled_from(["ns", "iso"]))
def test_ts_5_1_robust_rules_write_the_same_bytes_on_both_paths(tmp_path_factory, records,
                                                                policy, time_format):
    d = tmp_path_factory.mktemp("robust")
    both_paths(d, _write(d, records), policy=policy, time_format=time_format)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), records=_records, policy=_policies)
def test_ts_5_1_robust_rules_over_any_chunk_split(tmp_path_factory, data, records, policy):
    from eventlog import BadRecords, SourceTable, merge_columns
    from goldilocks.columnar import run_columnar
    from goldilocks.outputs import Output

    d = tmp_path_factory.mktemp("split")
    log = _write(d, records)
    cuts = data.draw(st.lists(st.integers(0, len(records)), max_size=8), label="cuts")
    table = SourceTable()
    col_out, col_late = io.BytesIO(), io.BytesIO()
    chunks = _rechunk(merge_columns([str(log)], table=table, bad=BadRecords()), cuts)
    tally = run_columnar(policy, chunks, table, Output(col_out), Output(col_late), False)
    el_out, el_late = io.BytesIO(), io.BytesIO()
    b = replay([log], policy=policy, out=el_out, late=el_late)
    assert col_out.getvalue() == el_out.getvalue()
    assert col_late.getvalue() == el_late.getvalue()
    assert (tally.late_total, tally.ctis_total, tally.final) == (b.late, b.ctis_emitted,
                                                                 b.final_cti)


def test_a_runaway_log_replays_columnar_and_the_others_lose_nothing(tmp_path):
    """Three devices, and a fourth whose clock runs an hour ahead: under quantile(2) or
    max_ahead the columnar replay drops only what the three alone would lose."""
    from eventlog.format import encode_event
    from tests.operators.test_robust_policies import _devices

    lost = {}
    for runaway in (False, True):
        log = tmp_path / f"devices-{runaway}.jsonl"
        log.write_bytes(b"".join(encode_event(e) for e in _devices(runaway)))
        for name, policy in (("quantile", quantile_policy(2, "2m")),
                             ("guarded", goldilocks("2m", max_ahead="1m")),
                             ("plain", goldilocks("2m"))):
            late = tmp_path / f"late-{runaway}-{name}.jsonl"
            stats = replay([log], policy=policy, late=late)
            assert stats.path == COLUMNAR
            lost[runaway, name] = late.read_bytes().count(b"\n")
    assert lost[True, "quantile"] == lost[False, "quantile"] > 0
    assert lost[True, "guarded"] == lost[False, "guarded"] > 0
    assert lost[True, "plain"] > 10 * lost[False, "plain"]  # plain goldilocks is dragged


def test_the_command_line_takes_quantile_k_and_max_ahead(tmp_path, capsys):
    from eventlog.format import encode_event
    from goldilocks.cli import main
    from tests.operators.test_robust_policies import _devices

    log = tmp_path / "devices.jsonl"
    log.write_bytes(b"".join(encode_event(e) for e in _devices(True)))
    for args, policy in ((["--policy", "quantile:3"], quantile_policy(3, 0)),
                         (["--max-ahead", "1m", "--delay", "2m"],
                          goldilocks("2m", max_ahead="1m"))):
        late = tmp_path / "late.jsonl"
        assert main(["replay", str(log), "--out", str(tmp_path / "o.jsonl"),
                     "--late", str(late), "--no-summary", *args]) == 0
        want = tmp_path / "want.jsonl"
        replay([log], policy=policy, late=want)
        assert late.read_bytes() == want.read_bytes()
    assert b'"reason":' in late.read_bytes()


def test_the_command_line_names_a_bad_quantile_or_max_ahead(tmp_path, capsys):
    from goldilocks.cli import main
    from tests.replay.conftest import SEED_LOG

    log = tmp_path / "l.jsonl"
    log.write_bytes(SEED_LOG)
    for args, flag, says in ((["--policy", "quantile:x"], "--policy", "quantile:K with K"),
                             (["--policy", "quantile:0"], "--policy", "quantile:K with K"),
                             (["--policy", "min:2"], "--policy", "other policies take no"),
                             (["--policy", "quant"], "--policy", "invalid choice: 'quant'"),
                             (["--policy", "min", "--max-ahead", "1m"], "--max-ahead",
                              "goes with the goldilocks policy")):
        assert main(["replay", str(log), "--no-summary", *args]) == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith(f"goldilocks replay: error: argument {flag}: "), line
        assert says in line, line
