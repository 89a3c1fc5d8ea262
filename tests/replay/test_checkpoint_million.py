"""A 1M-event replay checkpointed at every 10,000th record (TS §8.3).

- every one of the 100 checkpoints, restored in this process, continues to exactly the next
  checkpoint of the uninterrupted run (same bytes: position, state, counts, output lengths)
  and writes the same bytes up to it — so, by induction, each continues to the same end;
- a sample of them, each restored in a fresh process (the command line), continues to the
  end: output byte-identical to one uninterrupted run;
- the command killed (SIGKILL) at three moments and run again: the same bytes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_replay import make_log
from goldilocks.replay import replay
from goldilocks.resume import partial_path
from operators.checkpoint import unpack
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

SCRIPT = Path(sys.executable).with_name("goldilocks")
EVERY = 10_000


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def million(tmp_path_factory):
    folder = tmp_path_factory.mktemp("million")
    log = folder / "log.jsonl"
    make_log(log, 1_000_000)
    ref = folder / "ref"
    ref.mkdir()
    whole = replay([log], delay="2s", out=ref / "out.jsonl", late=ref / "late.jsonl")
    return folder, log, ref, whole


def _command(log: Path, run: Path) -> list[str]:
    return [str(SCRIPT), "replay", str(log), "--delay", "2s", "--out", str(run / "out.jsonl"),
            "--late", str(run / "late.jsonl"), "--checkpoint", str(run / "c.ckpt"),
            "--checkpoint-every", str(EVERY), "--no-summary"]


def _same(run: Path, ref: Path) -> bool:
    return all((run / n).read_bytes() == (ref / n).read_bytes()
               for n in ("out.jsonl", "late.jsonl"))


def test_every_checkpoint_of_a_million_records_continues_exactly(million):
    folder, log, ref, whole = million
    run = folder / "run"
    run.mkdir()
    out, late, ckpt = run / "out.jsonl", run / "late.jsonl", run / "c.ckpt"
    taken: list[bytes] = []
    assert replay([log], delay="2s", out=out, late=late, checkpoint=ckpt,
                  checkpoint_every=EVERY, on_checkpoint=taken.append) == whole
    assert _same(run, ref)
    assert len(taken) == 101  # 100 on the way, and the complete one
    assert [unpack(d, "replay")["position"] for d in taken[:-1]] == list(
        range(EVERY, 1_000_001, EVERY))

    # in this process, every checkpoint continues to the next: the partial outputs start as
    # the whole outputs with a torn line after them; each resumed run cuts them back to its
    # checkpoint and is stopped at its first checkpoint, leaving them for the next
    for name in ("out.jsonl", "late.jsonl"):
        Path(partial_path(str(run / name))).write_bytes((ref / name).read_bytes() + b'{"to')
    for k, data in enumerate(taken[:-2]):
        ckpt.write_bytes(data)
        got: list[bytes] = []

        def stop(data: bytes) -> None:
            got.append(data)
            raise Stop()
        with pytest.raises(Stop):
            replay([log], delay="2s", out=out, late=late, checkpoint=ckpt,
                   checkpoint_every=EVERY, on_checkpoint=stop)
        assert got == [taken[k + 1]], k
        for name in ("out.jsonl", "late.jsonl"):
            n = unpack(got[0], "replay")["lengths"][name.split(".")[0]]
            with open(partial_path(str(run / name)), "rb") as f:
                assert f.read(n) == (ref / name).read_bytes()[:n], (k, name)

    # in fresh processes, a sample continues to the end
    for k in (0, 1, 37, 63, 98):
        ckpt.write_bytes(taken[k])
        for name in ("out.jsonl", "late.jsonl"):
            shutil.copyfile(ref / name, partial_path(str(run / name)))
            with open(partial_path(str(run / name)), "ab") as f:
                f.write(b"junk after the checkpoint")
        done = subprocess.run(_command(log, run), capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert _same(run, ref), k
        assert not ckpt.exists()


def test_killed_at_any_moment_the_same_command_ends_with_the_same_bytes(million):
    folder, log, ref, whole = million
    run = folder / "killed"
    run.mkdir()
    ckpt = run / "c.ckpt"
    partial = Path(partial_path(str(run / "out.jsonl")))
    for fraction in (0.0, 0.3, 0.8):
        # killed once the partial output has reached this fraction of the whole
        size = int((ref / "out.jsonl").stat().st_size * fraction)
        proc = subprocess.Popen(_command(log, run), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: (partial.exists() and partial.stat().st_size > size)
                       or proc.poll() is not None, 60, "the replay wrote nothing")
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        done = subprocess.run(_command(log, run), capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert _same(run, ref), fraction
        assert not ckpt.exists() and not partial.exists()
        for name in ("out.jsonl", "late.jsonl"):
            (run / name).unlink()
