"""``benchmarks.bench_robust`` still runs, its warm-up still finds both paths writing the
same bytes, and its log has the runaway device it is about (a smoke test, not a
measurement)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_robust import main  # noqa: E402


def test_bench_robust_runs_every_row(tmp_path, capsys):
    rows = main(["--events", "3000", "--repeat", "1", "--dir", str(tmp_path)])
    assert len(rows) == 8 and all(rate > 0 for _, rate, _ in rows)
    log = next(tmp_path.glob("runaway-*.jsonl")).read_bytes()
    assert log.count(b'"source":"runaway"') > 3000 // 20
    late = (tmp_path / "columnar.late").read_bytes()  # the last rule's late file
    assert late and b'"reason":' in late
