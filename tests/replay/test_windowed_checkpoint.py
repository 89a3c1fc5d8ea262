"""A windowed replay with a checkpoint (TS §8.3): the windows' state — open windows and
their accumulators, the clock or every input's clock and policy state — is in the checkpoint,
so a replay resumed from any checkpoint, in this process or a fresh one, or killed at any
moment and run again, writes the rows and late file of one uninterrupted run, on the element
and the columnar path, with per-key clocks too."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from goldilocks.cli import main
from goldilocks.resume import partial_path
from goldilocks.windowed import KIND, replay_windows
from operators.checkpoint import CheckpointError, unpack
from tests.replay.test_checkpoint import _edge_log, make_logs
from tests.waiting import wait_until

SCRIPT = Path(sys.executable).with_name("goldilocks")
AGGS = ["count", "mean:v", "min:v", "max:v", "sum:v", "count:v"]

CASES = {
    "columnar": dict(window="100ms", delay="50ms"),
    "element": dict(window="100ms", delay="50ms", columnar=False),
    "hopping-keyed-columnar": dict(window="100ms", hop="25ms", key="source", delay="50ms",
                                   on_late="adjust", time_format="iso"),
    "hopping-keyed-element": dict(window="100ms", hop="25ms", key="source", delay="50ms",
                                  on_late="adjust", time_format="iso", columnar=False),
    "per-key-columnar": dict(window="100ms", key="source", clock="key", delay="50ms"),
    "per-key-element": dict(window="100ms", key="source", clock="key", delay="50ms",
                            columnar=False),
    "per-key-idle": dict(window="100ms", key="source", clock="key", delay="50ms",
                         idle_after="300ms"),
}


def _same_stats(a, b) -> bool:
    return dataclasses.replace(a, seconds=0) == dataclasses.replace(b, seconds=0)


def _outputs(folder: Path) -> dict[str, Path]:
    return {"out": folder / "rows.jsonl", "late": folder / "late.jsonl"}


def _reference(tmp_path: Path, logs, options):
    ref = tmp_path / "ref"
    ref.mkdir()
    return ref, replay_windows(logs, aggregates=AGGS, **options, **_outputs(ref))


@pytest.mark.parametrize("case", list(CASES))
def test_resuming_from_every_checkpoint_gives_the_uninterrupted_rows(tmp_path, case):
    options = CASES[case]
    logs = make_logs(tmp_path)
    ref, whole = _reference(tmp_path, logs, options)
    assert whole.windows > 10 and whole.open and (whole.late or whole.window_late)
    run = tmp_path / "run"
    run.mkdir()
    out = _outputs(run)
    ckpt = run / "w.ckpt"
    taken: list[bytes] = []
    first = replay_windows(logs, aggregates=AGGS, **options, **out, checkpoint=ckpt,
                           checkpoint_every=97, on_checkpoint=taken.append)
    assert _same_stats(first, whole) and not ckpt.exists()
    for target in out.values():
        assert target.read_bytes() == (ref / target.name).read_bytes()
    assert len(taken) == whole.records // 97 + 1
    # windows are open at the cuts: their accumulators travel in the checkpoint
    assert all(unpack(d, KIND)["counts"]["windows"]["counts"][0] for d in taken[5:-5])
    for data in taken[:-1]:
        ckpt.write_bytes(data)
        for target in out.values():  # further than the checkpoint, and torn at the end
            Path(partial_path(str(target))).write_bytes(
                (ref / target.name).read_bytes() + b'{"torn')
            target.unlink()
        again = replay_windows(logs, aggregates=AGGS, **options, **out, checkpoint=ckpt,
                               checkpoint_every=97)
        assert _same_stats(again, whole)
        for target in out.values():
            assert target.read_bytes() == (ref / target.name).read_bytes()
        assert not ckpt.exists()


def test_both_paths_write_the_windows_in_one_format(tmp_path):
    """The columnar kernel's state is written in Windows.snapshot's format: at the same cut
    the two paths' checkpoints hold the same windows (the path is an option of the run, so
    a checkpoint resumes on the path that wrote it)."""
    logs = make_logs(tmp_path)
    windows = {}
    for columnar in (True, False):
        taken: list[bytes] = []
        folder = tmp_path / str(columnar)
        folder.mkdir()
        replay_windows(logs, aggregates=AGGS, window="100ms", hop="50ms", key="source",
                       delay="50ms", columnar=columnar, checkpoint=folder / "c.ckpt",
                       checkpoint_every=101, on_checkpoint=taken.append,
                       **_outputs(folder))
        windows[columnar] = [unpack(d, KIND)["counts"]["windows"] for d in taken[:-1]]
    assert windows[True] == windows[False] and len(windows[True]) > 10


def test_a_windowed_replay_with_edges_resumes(tmp_path):  # TS §7.8, §8.3
    logs = _edge_log(tmp_path)
    for columnar in (True, False):
        options = dict(window="200ms", delay="1s", columnar=columnar)
        folder = tmp_path / f"c{columnar}"
        folder.mkdir()
        ref, whole = _reference(folder, logs, options)
        out = _outputs(folder)
        taken: list[bytes] = []
        replay_windows(logs, **options, **out, aggregates=AGGS, checkpoint=folder / "c",
                       checkpoint_every=61, on_checkpoint=taken.append)
        assert any(unpack(d, KIND)["state"]["open"] for d in taken[:-1])  # open edges
        for data in taken[:-1]:
            (folder / "c").write_bytes(data)
            for target in out.values():
                Path(partial_path(str(target))).write_bytes((ref / target.name).read_bytes())
                target.unlink()
            assert _same_stats(replay_windows(logs, **options, **out, aggregates=AGGS,
                                              checkpoint=folder / "c", checkpoint_every=61),
                               whole)
            for target in out.values():
                assert target.read_bytes() == (ref / target.name).read_bytes()


def test_a_checkpoint_of_other_windows_or_of_a_plain_replay_is_refused(tmp_path):
    logs = make_logs(tmp_path, n=300)
    ckpt = tmp_path / "c.ckpt"
    taken: list[bytes] = []

    def stop(data: bytes) -> None:
        taken.append(data)
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        replay_windows(logs, window="100ms", aggregates=AGGS, out=tmp_path / "o.jsonl",
                       checkpoint=ckpt, checkpoint_every=100, on_checkpoint=stop)
    for change, message in ((dict(window="200ms"), "the options differ"),
                            (dict(window="100ms", columnar=False), "the options differ"),
                            (dict(window="100ms", key="source", clock="key"),
                             "the options differ")):
        with pytest.raises(CheckpointError, match=message):
            replay_windows(logs, aggregates=AGGS, out=tmp_path / "o.jsonl", checkpoint=ckpt,
                           checkpoint_every=100, **change)
        assert ckpt.read_bytes() == taken[0]
    from goldilocks.replay import replay
    with pytest.raises(CheckpointError, match="a checkpoint of a 'window replay', not of a "
                                              "'replay'"):
        replay(logs, out=tmp_path / "o.jsonl", checkpoint=ckpt)


def _command(logs, run: Path, *extra: str, every: int = 50) -> list[str]:
    return [str(SCRIPT), "replay", *map(str, logs), "--window", "100ms", "--delay", "50ms",
            "--agg", "mean:v", "--agg", "max:v", "--key", "source", *extra,
            "--out", str(run / "rows.jsonl"), "--late", str(run / "late.jsonl"),
            "--checkpoint", str(run / "c.ckpt"), "--checkpoint-every", str(every),
            "--no-summary"]


def _same(run: Path, ref: Path) -> bool:
    return all((run / n).read_bytes() == (ref / n).read_bytes()
               for n in ("rows.jsonl", "late.jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("--clock", "key")], ids=["merged", "per-key"])
def test_resumed_in_a_fresh_process_from_checkpoints_taken_here(tmp_path, extra):
    logs = make_logs(tmp_path, n=2000)
    ref = tmp_path / "ref"
    ref.mkdir()
    assert main(_command(logs, ref, *extra)[1:]) == 0
    rows = [orjson.loads(line) for line in (ref / "rows.jsonl").read_bytes().splitlines()]
    assert len(rows) > 50 and all("mean_v" in r for r in rows)
    run = tmp_path / "run"
    run.mkdir()
    taken: list[bytes] = []
    # the checkpoints the command writes, taken here to be resumed by another process
    replay_windows(logs, window="100ms", delay="50ms", aggregates=["mean:v", "max:v"],
                   key="source", clock="key" if extra else "merged", **_outputs(run),
                   checkpoint=run / "c.ckpt", checkpoint_every=50,
                   on_checkpoint=taken.append)
    assert _same(run, ref)
    for data in taken[:-1][::17]:  # a fresh process resumes from each of these
        (run / "c.ckpt").write_bytes(data)
        for name in ("rows.jsonl", "late.jsonl"):
            Path(partial_path(str(run / name))).write_bytes((ref / name).read_bytes())
            (run / name).unlink()
        done = subprocess.run(_command(logs, run, *extra), capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert _same(run, ref) and not (run / "c.ckpt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("--clock", "key")], ids=["merged", "per-key"])
def test_killed_at_any_moment_the_same_command_ends_with_the_same_rows(tmp_path, extra):
    from benchmarks.bench_replay import make_log

    log = tmp_path / "log.jsonl"
    make_log(log, 300_000)
    ref = tmp_path / "ref"
    ref.mkdir()
    assert main(_command([log], ref, *extra, every=10_000)[1:]) == 0
    run = tmp_path / "run"
    run.mkdir()
    command = _command([log], run, *extra, every=10_000)
    partial = Path(partial_path(str(run / "rows.jsonl")))
    size = (ref / "rows.jsonl").stat().st_size
    killed = 0
    for fraction in (0.2, 0.6):  # killed once the rows have reached this fraction
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: (partial.exists() and partial.stat().st_size > size * fraction)
                       or proc.poll() is not None, 60, "the replay wrote nothing")
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            killed += proc.wait() == -signal.SIGKILL
        done = subprocess.run(command, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert _same(run, ref), fraction
        assert not (run / "c.ckpt").exists() and not partial.exists()
        for name in ("rows.jsonl", "late.jsonl"):
            (run / name).unlink()
    assert killed  # at least one run was cut off before its end


def test_a_complete_checkpoint_left_behind_is_finished(tmp_path):
    """Killed after the complete checkpoint, before the outputs were renamed: the same
    command renames them and reports the run's numbers, reading nothing again."""
    logs = make_logs(tmp_path, n=300)
    options = dict(window="100ms", delay="50ms", key="source")
    ref, whole = _reference(tmp_path, logs, options)  # with AGGS
    options["aggregates"] = AGGS
    out, ckpt = _outputs(tmp_path), tmp_path / "c.ckpt"
    taken: list[bytes] = []
    replay_windows(logs, **options, **out, checkpoint=ckpt, checkpoint_every=100,
                   on_checkpoint=taken.append)
    assert unpack(taken[-1], KIND)["complete"]
    ckpt.write_bytes(taken[-1])
    for target in out.values():
        target.rename(partial_path(str(target)))
    again = replay_windows(logs, **options, **out, checkpoint=ckpt, checkpoint_every=100)
    assert _same_stats(again, whole) and not ckpt.exists()
    for target in out.values():
        assert target.read_bytes() == (ref / target.name).read_bytes()
