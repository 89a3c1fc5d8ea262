"""``benchmarks.bench_checkpoint`` still runs, and its warm-up still finds every row writing
the bytes of the plain replay (a smoke test, not a measurement)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_checkpoint import ROWS, WINDOW_ROWS, main  # noqa: E402


def test_bench_checkpoint_runs_every_row(tmp_path, capsys):
    main(["--events", "25000", "--repeat", "1", "--inputs", "20", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    for label, _, _ in ROWS:
        assert label in out
    for label, _ in WINDOW_ROWS:
        assert label in out
    assert "union with 20 inputs" in out
