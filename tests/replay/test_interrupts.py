"""Stopping a replay from outside: Ctrl-C (SIGINT) and SIGTERM (``kill``, ``timeout``,
``docker stop``, systemd) end the command with one line saying so — how to resume when it
checkpoints — and leave no temporary behind; temporaries a SIGKILL left are removed at the
next start; a checkpoint that cannot be written is found before the work, not after.

Real processes and real signals, sent once the replay is writing (a condition, not a sleep).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_replay import make_log
from goldilocks.cli import main
from tests.waiting import wait_until

SCRIPT = Path(sys.executable).with_name("goldilocks")


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A log that takes a couple of seconds to replay."""
    log = tmp_path_factory.mktemp("big") / "big.jsonl"
    make_log(log, 500_000)
    return log


def _temporaries(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith((".tmp", ".partial")))


def _interruptible() -> None:
    """In the child: Ctrl-C's default back, as a shell gives a command it runs in the
    foreground (a suite started in the background, ``cmd &``, hands its children SIGINT
    ignored, and Python then installs no KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stopped(command: list[str], folder: Path, sig: int, writing: Path | None = None):
    """Run ``command``, send ``sig`` once its output's temporary holds a megabyte (it is in
    the middle of the work), and return the finished process and its stderr."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, cwd=folder, preexec_fn=_interruptible)

    def busy() -> bool:
        names = [n for n in os.listdir(folder) if n.endswith((".tmp", ".partial"))
                 and n.startswith(".out.jsonl")]
        return proc.poll() is not None or any(
            os.path.getsize(folder / n) > 1 << 20 for n in names if (folder / n).exists())
    try:
        wait_until(busy, 60, "the replay wrote nothing")
        assert proc.poll() is None, "the replay ended before it could be stopped"
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, err


@pytest.mark.parametrize("sig, status, word", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated")])
def test_a_stopped_replay_says_so_in_one_line_and_leaves_no_temporary(big, tmp_path, sig,
                                                                     status, word):
    command = [str(SCRIPT), "replay", str(big), "--delay", "2s", "--out", "out.jsonl",
               "--late", "late.jsonl", "--no-summary"]
    proc, err = _stopped(command, tmp_path, sig)
    assert proc.returncode == status, err
    assert err.strip() == f"goldilocks replay: {word}", err  # no traceback
    assert os.listdir(tmp_path) == []  # no output, no temporary (SIGTERM left 16 MB)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_checkpointed_replay_says_how_to_resume_and_resumes(big, tmp_path, sig):
    command = [str(SCRIPT), "replay", str(big), "--delay", "2s", "--out", "out.jsonl",
               "--checkpoint", "c.ckpt", "--checkpoint-every", "50000", "--no-summary"]
    proc, err = _stopped(command, tmp_path, sig)
    assert proc.returncode in (130, 143), err
    assert err.strip().endswith("; run the same command to resume from c.ckpt"), err
    assert "Traceback" not in err
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reference = tmp_path / "ref"
    reference.mkdir()
    assert main(["replay", str(big), "--delay", "2s", "--out", str(reference / "out.jsonl"),
                 "--no-summary"]) == 0
    assert (tmp_path / "out.jsonl").read_bytes() == (reference / "out.jsonl").read_bytes()
    assert _temporaries(tmp_path) == []


def test_temporaries_a_killed_replay_left_are_removed_at_the_next_start(big, tmp_path):
    command = [str(SCRIPT), "replay", str(big), "--delay", "2s", "--out", "out.jsonl",
               "--no-summary"]
    proc, _ = _stopped(command, tmp_path, signal.SIGKILL)  # nothing can clean up
    assert proc.returncode == -signal.SIGKILL
    left = _temporaries(tmp_path)
    assert len(left) == 1 and left[0].startswith(f".out.jsonl.{proc.pid}-"), left
    older = tmp_path / ".out.jsonl.0badcafe.tmp"  # an older run's name, without its process
    older.write_bytes(b"x")
    theirs = tmp_path / f".out.jsonl.{os.getpid()}-00000000.tmp"  # a process that still runs
    theirs.write_bytes(b"x")
    small = tmp_path / "small.jsonl"
    small.write_bytes(b'{"source":"A","kind":"insert","start":5}\n')
    assert main(["replay", str(small), "--out", str(tmp_path / "out.jsonl"),
                 "--no-summary"]) == 0
    assert _temporaries(tmp_path) == [theirs.name]


def test_a_checkpoint_that_cannot_be_written_is_refused_before_the_work(tmp_path, capsys):
    if os.geteuid() == 0:
        target = Path("/proc/self/nope.ckpt")  # root writes anywhere else
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        target = ro / "c.ckpt"
    log = tmp_path / "small.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":5}\n')
    out = tmp_path / "o.jsonl"
    assert main(["replay", str(log), "--checkpoint", str(target), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"argument --checkpoint: cannot write {target}" in err
    assert not out.exists() and _temporaries(tmp_path) == []  # no .o.jsonl.partial


def test_dev_null_takes_several_outputs(tmp_path):
    log = tmp_path / "small.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":5}\n{"source":"A","kind":"cti",'
                    b'"start":9}\n')
    assert main(["replay", str(log), "--out", "/dev/null", "--late", "/dev/null",
                 "--no-summary"]) == 0
