"""The commands and Python of README.md and docs/replay.md run as written, from the root of a
checkout: the reader copies them, so they are run here the same way (in a folder that holds
the checkout's ``examples/``, so that what they write does not land in the checkout)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _blocks(page: str, lang: str) -> list[str]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _commands(page: str) -> list[str]:
    """The shell commands of a page: ``$ `` lines of console blocks (with their ``\\``
    continuations), and the ``goldilocks`` part of README's install-and-run line."""
    found = []
    for block in _blocks(page, "console"):
        for command in re.findall(r"^\$ (.*?)(?<!\\)$", block, flags=re.M | re.S):
            found.append(" ".join(command.replace("\\\n", " ").split()))
    for block in _blocks(page, "bash"):
        for line in block.splitlines():
            if ".venv/bin/goldilocks " in line:  # the install before it is this very venv
                found.append("goldilocks " + line.split(".venv/bin/goldilocks ", 1)[1])
    return found


@pytest.fixture
def root(tmp_path):
    """A folder standing for the checkout's root: its examples, and room for outputs."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("page", ["README.md", "docs/replay.md"])
def test_the_commands_run_as_written(page, root):
    commands = _commands(page)
    assert commands, f"{page}: no command found"
    for command in commands:
        done = _run(command, root)
        assert done.returncode == 0, (command, done.stderr)
        assert "Traceback" not in done.stderr
    if page == "README.md":  # the first command's promise: merged, late, a summary
        assert (root / "merged.jsonl").stat().st_size > 0
        assert len((root / "late.jsonl").read_bytes().splitlines()) == 38
    else:
        assert (root / "fleet.png").stat().st_size > 0


def test_the_python_of_replay_md_runs_as_written(root, monkeypatch):
    (code,) = _blocks("docs/replay.md", "python")
    monkeypatch.chdir(root)
    namespace: dict = {}
    exec(compile(code, "docs/replay.md", "exec"), namespace)
    stats = namespace["stats"]
    assert stats.late == 38 and (root / "out.jsonl").exists() and (root / "late.jsonl").exists()
