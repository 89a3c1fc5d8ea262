"""The benchmark harness still runs and every implementation still agrees on the workload.

A smoke test, not a measurement: tiny N, one round, no timing assertions. The harness itself
fails loudly (``CountMismatch``) when an implementation's counts differ from the reference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

pytest.importorskip("reactivex")
pytest.importorskip("pyarrow")

from benchmarks.__main__ import main  # noqa: E402
from benchmarks.harness import ALL_NAMES, NAMES, CountMismatch, Impl, check, run  # noqa: E402
from benchmarks.workload import LATE_BY, SKEW, T0, Counts, Workload  # noqa: E402

N = 4_000


@pytest.fixture(scope="module")
def rows():
    return run(N, rounds=1, warmup=0, memory_events=N, rss=False, short_run=0)


def test_every_implementation_ran_and_agreed(rows):
    reference = Workload(N).reference_counts()
    assert [row.name for row in rows] == list(ALL_NAMES)
    assert set(NAMES) <= set(ALL_NAMES)
    for row in rows:
        assert len(row.rates) == 1 and row.rates[0] > 0, row.name
    deterministic = {"plain_loop", "step_loop", "rxpy", "asyncio_queues", "thread_queues", "numpy",
                     "union_inline", "union_feed", "union_batches", "cti_sync", "columnar", "replay_jsonl",
                     "replay_parquet"}
    for row in rows:
        if row.name in deterministic:
            assert row.counts == reference, row.name
    # the workload exercises every path: CTIs emitted and suppressed, inserts late
    assert reference.ctis > 0 and reference.late > 0 and reference.inserts > 0


def test_the_reference_counts_are_the_workload_definition():
    w = Workload(N)
    assert w.inserts == N - N // 100  # every 100th record of each input is a CTI
    m = np.arange(N)
    on_time = T0 + m // 4 + (m % 4) * SKEW
    early = on_time - w.columns.start
    assert set(early.tolist()) == {0, LATE_BY}
    assert not early[w.columns.is_cti].any()  # CTIs are never drawn late
    assert 0 < np.count_nonzero(early) < 0.03 * w.inserts  # about 1% of inserts
    per_input = w.per_input
    assert [len(x) for x in per_input] == [N // 4] * 4
    assert [e.source for e in w.merged[:8]] == ["in0", "in1", "in2", "in3"] * 2


def test_json_has_every_name(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = main(["-n", str(N), "--memory-events", str(N), "--no-rss", "--json", str(out),
                 "--warmup", "0", "--min-time", "0"])
    assert code == 0
    data = json.loads(out.read_text())
    assert [obj["name"] for obj in data] == list(NAMES)
    for obj in data:
        assert {"name", "events_per_s", "ratio_plain", "ratio_rxpy", "peak_rss_mib"} <= set(obj)
        assert obj["events_per_s"] > 0
    by = {obj["name"]: obj for obj in data}
    assert by["plain_loop"]["ratio_plain"] == 1.0 and by["rxpy"]["ratio_rxpy"] == 1.0
    assert "plain_loop" in capsys.readouterr().out


def test_a_disagreeing_implementation_fails_loudly():
    impl = Impl("wrong", lambda w: (Counts(0, 0, 0), 0), "ours", True, ())
    with pytest.raises(CountMismatch, match="wrong"):
        check(impl, Counts(1, 2, 3), 4, Counts(1, 2, 4), 4)
    concurrent = impl._replace(deterministic=False)
    check(concurrent, Counts(1, 2, 3), 4, Counts(0, 0, 0), 4)  # accounting holds
    with pytest.raises(CountMismatch, match="emitted"):
        check(concurrent, Counts(1, 2, 2), 4, Counts(0, 0, 0), 4)


def test_the_per_event_ladder_runs_and_its_last_rung_counts_as_union_inline():
    """``bench_perevent``: every rung runs over the workload (each checks every event went
    through), and the last rung hands on as many inserts as the real ``union_inline``
    (``ladder`` raises if not)."""
    from benchmarks.bench_perevent import STEPS, ladder

    results = ladder(N, rounds=1, warmup=0)
    assert [name for name, _ in results][:len(STEPS)] == [name for name, _, _ in STEPS]
    assert len(results) == len(STEPS) + 2 and all(ns > 0 for _, ns in results)


def test_replay_benchmark_runs_the_users_logs(tmp_path, capsys):
    """bench_replay's rows for the logs users have: every spaced log writes the bytes of its
    compact twin (the warm-up round checks it), and the summary prints each ratio."""
    from benchmarks.bench_replay import VARIANTS
    from benchmarks.bench_replay import main as bench_replay

    users = [str(i) for i, v in enumerate(VARIANTS) if v[1].startswith("user-")]
    bench_replay(["--events", "3000", "--repeat", "5", "--dir", str(tmp_path), "--only",
                  *users])
    out = capsys.readouterr().out
    assert out.count("x orjson loop") == len(users) // 2
    assert out.count("spaced/compact rate") == len(users) // 4
