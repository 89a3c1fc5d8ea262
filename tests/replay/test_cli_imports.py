"""``goldilocks replay`` imports what a replay needs and nothing else: not the network code
(the ``serve`` command is registered beside it) and not pandas (which pyarrow imports on the
first ``pa.array`` or ``pa.scalar``). Each import costs the command line its fixed start-up
time, paid on every run (docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: modules a replay of a JSON Lines or CSV log must not import
HEAVY = ("pandas", "goldilocks.net.server", "goldilocks.net.client", "websockets")

_PROBE = """
import json, sys
from goldilocks.cli import main
try:
    main(sys.argv[1:])
except SystemExit as stop:
    assert not stop.code, stop.code
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
                        ("pandas", "websockets", "goldilocks"))))
"""


def _imported(tmp_path: Path, log: Path) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "replay", str(log), "--delay", "5s",
         "--out", str(tmp_path / "out.jsonl"), "--late", str(tmp_path / "late.jsonl")],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_replay_of_a_jsonl_log_imports_no_network_code_nor_pandas(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(
        json.dumps({"source": f"dev-{i % 2}", "kind": "cti" if i % 5 == 4 else "insert",
                    "start": 1_795_334_400_000_000_000 + i * 10**9 - (i % 3) * 4 * 10**9,
                    **({"payload": {"v": i}} if i % 5 != 4 else {})}) + "\n"
        for i in range(40)))
    found = _imported(tmp_path, log)
    assert "goldilocks.replay" in found  # the probe saw the replay's imports
    assert (tmp_path / "late.jsonl").read_bytes()  # late lines were written, too
    assert not found & set(HEAVY), found & set(HEAVY)


def test_replay_of_a_csv_log_imports_no_pandas(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("source,kind,start,payload\n" + "".join(
        f"dev-{i % 2},{'cti' if i % 5 == 4 else 'insert'},"
        f"{1_795_334_400_000_000_000 + i * 10**9 - (i % 3) * 4 * 10**9},\n"
        for i in range(40)))
    found = _imported(tmp_path, log)
    assert "goldilocks.replay" in found
    assert not found & set(HEAVY), found & set(HEAVY)
