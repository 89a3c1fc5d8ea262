"""Every example runs as a script with the project's interpreter and prints what it promises.

Examples that need Spark (``spark_*.py``) are tested with the Spark tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: A line each example must print (its point), by file name; others must just succeed.
KEY_LINES = {
    "merge_devices.py": "thermo-2  point    2024-06-01T12:03:50.000000000Z before CTI "
                        "2024-06-01T12:04:10.000000000Z: dropped",
    "fleet_windows.py": "08:02             21.06     20.66     22.16     21.24 (17)",
    "door_edges.py": "late   door-1 end back: adjusted (end_edge), end moved to "
                     "2024-06-01T12:01:10.000000000Z",
}

SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("spark_"))


def test_the_examples_are_found():
    assert "merge_devices.py" in [p.name for p in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path):
    if script.name == "make_sample_logs.py":
        # it writes beside itself: run a copy, so the repository's sample logs stay untouched
        script = Path(shutil.copy(script, tmp_path / script.name))
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent)}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    key = KEY_LINES.get(script.name)
    if key is not None:
        assert key in result.stdout, result.stdout[-2000:]


def test_merge_devices_is_deterministic_and_accounts_for_everything():
    run = lambda: subprocess.run([sys.executable, str(EXAMPLES / "merge_devices.py")],  # noqa: E731
                                 capture_output=True, text=True, timeout=120, check=True).stdout
    first = run()
    assert first == run()
    assert "  CTI   +inf" in first  # final_cti: the merged stream closes its time
    assert "total: received 40, emitted 39, dropped 1" in first
    assert first.count(": adjusted") == 2 and first.count(": dropped") == 1
