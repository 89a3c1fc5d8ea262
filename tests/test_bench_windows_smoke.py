"""``benchmarks.bench_windows`` still runs, and its warm-up still finds the element and
columnar paths writing the same rows (a smoke test, not a measurement)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_windows import ROWS, main  # noqa: E402


def test_bench_windows_runs_every_row(tmp_path, capsys):
    main(["--events", "5000", "--repeat", "5", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    for label, _, _ in ROWS:
        assert label in out
    assert "x plain" in out
