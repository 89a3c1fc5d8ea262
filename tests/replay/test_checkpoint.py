"""Resumable replays (TS §8.3, docs/checkpoint.md): a replay resumed from any checkpoint —
its partial outputs longer than the checkpoint says, with junk after — ends with the bytes
and counts of one uninterrupted run; a failed or killed run resumes; a bad or foreign
checkpoint is refused and nothing is touched."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from goldilocks.cli import main
from goldilocks.replay import replay
from goldilocks.resume import partial_path
from operators.checkpoint import CheckpointError, unpack

T0 = 1_795_334_400_000_000_000


def make_logs(folder: Path, files: int = 3, n: int = 700, seed: int = 3) -> list[Path]:
    """Per-device logs with ``arrival`` keys, CTIs, intervals, payloads, some late."""
    rng = np.random.default_rng(seed)
    paths = []
    for f in range(files):
        lines = []
        arrival = T0 + f
        for i in range(n):
            arrival += int(rng.integers(1, 5_000_000))
            t = arrival - int(rng.integers(0, 3_000_000_000))
            dev = f"dev-{f}-{i % 2}"
            r = rng.random()
            if r < 0.1:
                lines.append(b'{"arrival":%d,"source":"%s","kind":"cti","start":%d}'
                             % (arrival, dev.encode(), t))
            elif r < 0.2:
                lines.append(b'{"arrival":%d,"source":"%s","kind":"insert","start":%d,'
                             b'"end":%d,"payload":{"v":%d}}'
                             % (arrival, dev.encode(), t, t + 2_000_000_000, i))
            else:
                lines.append(b'{"arrival":%d,"source":"%s","kind":"insert","start":%d,'
                             b'"payload":{"v":%d,"s":"x%d"}}'
                             % (arrival, dev.encode(), t, i, i % 7))
        path = folder / f"log{f}.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        paths.append(path)
    return paths


CASES = [dict(policy="goldilocks", delay="1s"),                      # the columnar path
         dict(policy="goldilocks", delay="1s", on_late="adjust", time_format="iso"),
         dict(policy="min"),                                         # the element path
         dict(policy="quantile", delay="1s", merge="time")]


def _outputs(folder: Path) -> dict[str, Path]:
    return {"out": folder / "out.jsonl", "late": folder / "late.jsonl"}


@pytest.mark.parametrize("options", CASES, ids=lambda o: "-".join(map(str, o.values())))
def test_resuming_from_every_checkpoint_gives_the_uninterrupted_bytes(tmp_path, options):
    logs = make_logs(tmp_path)
    ref = tmp_path / "ref"
    ref.mkdir()
    whole = replay(logs, **options, **_outputs(ref))
    run = tmp_path / "run"
    run.mkdir()
    out = _outputs(run)
    ckpt = run / "replay.ckpt"
    taken: list[bytes] = []
    first = replay(logs, **options, **out, checkpoint=ckpt, checkpoint_every=97,
                   on_checkpoint=taken.append)
    assert first == whole and not ckpt.exists()  # removed once complete
    for name in out:
        assert out[name].read_bytes() == (ref / out[name].name).read_bytes()
    assert len(taken) == sum(1 for _ in range(97, whole.records + 1, 97)) + 1  # + complete
    assert unpack(taken[-1], "replay")["complete"] and not unpack(taken[0], "replay")["complete"]
    for data in taken[:-1]:
        ckpt.write_bytes(data)
        for name, target in out.items():  # further than the checkpoint, and torn at the end
            Path(partial_path(str(target))).write_bytes(
                (ref / target.name).read_bytes() + b'{"torn')
            target.unlink()
        again = replay(logs, **options, **out, checkpoint=ckpt, checkpoint_every=97)
        assert again == whole
        for name in out:
            assert out[name].read_bytes() == (ref / out[name].name).read_bytes()
        assert not ckpt.exists() and not Path(partial_path(str(out["out"]))).exists()


class Crash(Exception):
    pass


def test_a_run_that_fails_keeps_its_partial_outputs_and_the_same_command_resumes(tmp_path):
    logs = make_logs(tmp_path)
    whole = replay(logs, delay="1s", out=tmp_path / "ref.jsonl")
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "c.ckpt"
    seen: list[bytes] = []

    def crash(data: bytes) -> None:
        seen.append(data)
        if len(seen) == 4:
            raise Crash()
    with pytest.raises(Crash):
        replay(logs, delay="1s", out=out, checkpoint=ckpt, checkpoint_every=50,
               on_checkpoint=crash)
    assert not out.exists() and ckpt.read_bytes() == seen[-1]
    assert Path(partial_path(str(out))).stat().st_size >= 1
    assert replay(logs, delay="1s", out=out, checkpoint=ckpt, checkpoint_every=50) == whole
    assert out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()


def test_a_complete_checkpoint_left_behind_is_finished(tmp_path):
    logs = make_logs(tmp_path, files=1)
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "c.ckpt"
    taken: list[bytes] = []
    whole = replay(logs, delay="1s", out=out, checkpoint=ckpt, on_checkpoint=taken.append)
    done = out.read_bytes()
    # killed after the complete checkpoint, before the rename
    ckpt.write_bytes(taken[-1])
    out.rename(partial_path(str(out)))
    assert replay(logs, delay="1s", out=out, checkpoint=ckpt) == whole
    assert out.read_bytes() == done and not ckpt.exists()
    # killed after the rename, before the checkpoint was removed
    ckpt.write_bytes(taken[-1])
    assert replay(logs, delay="1s", out=out, checkpoint=ckpt) == whole
    assert out.read_bytes() == done and not ckpt.exists()


def _interrupted(tmp_path):
    logs = make_logs(tmp_path)
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "c.ckpt"
    seen: list[bytes] = []

    def crash(data: bytes) -> None:
        seen.append(data)
        raise Crash()
    with pytest.raises(Crash):
        replay(logs, delay="1s", out=out, checkpoint=ckpt, checkpoint_every=300,
               on_checkpoint=crash)
    return logs, out, ckpt


@pytest.mark.parametrize("change, message", [
    (lambda logs, out, ckpt: ckpt.write_bytes(ckpt.read_bytes()[:-9]), "truncated"),
    (lambda logs, out, ckpt: ckpt.write_bytes(b"\0" * 30), "not a Goldilocks checkpoint"),
    (lambda logs, out, ckpt: ckpt.write_bytes(ckpt.read_bytes()[:30] + b"X"
                                              + ckpt.read_bytes()[31:]), "corrupted"),
    (lambda logs, out, ckpt: logs[1].write_bytes(logs[1].read_bytes() + b"\n"),
     "another replay: the logs"),
    (lambda logs, out, ckpt: Path(partial_path(str(out))).unlink(), "is missing"),
])
def test_a_bad_or_foreign_checkpoint_is_refused_and_nothing_is_touched(tmp_path, change,
                                                                       message):
    logs, out, ckpt = _interrupted(tmp_path)
    change(logs, out, ckpt)
    partial = Path(partial_path(str(out)))
    before = (ckpt.read_bytes(), partial.read_bytes() if partial.exists() else None)
    with pytest.raises(CheckpointError, match=message):
        replay(logs, delay="1s", out=out, checkpoint=ckpt, checkpoint_every=300)
    assert (ckpt.read_bytes(), partial.read_bytes() if partial.exists() else None) == before


def test_other_options_are_another_replay(tmp_path):
    logs, out, ckpt = _interrupted(tmp_path)
    with pytest.raises(CheckpointError, match=r"taken under the policy goldilocks\(delay='1s'"
                                              r".*restored with goldilocks\(delay='2s'"):
        replay(logs, delay="2s", out=out, checkpoint=ckpt)
    with pytest.raises(CheckpointError, match="the options differ"):
        replay(logs, delay="1s", out=out, checkpoint=ckpt, time_format="iso")
    with pytest.raises(CheckpointError, match="the outputs differ"):
        replay(logs, delay="1s", out=out, late=tmp_path / "late.jsonl", checkpoint=ckpt)


def test_the_command_line(tmp_path, capsys):
    logs = [str(p) for p in make_logs(tmp_path)]
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "c.ckpt"
    assert main(["replay", *logs, "--delay", "1s", "--out", str(out), "--checkpoint",
                 str(ckpt), "--checkpoint-every", "100", "--no-summary"]) == 0
    ref = tmp_path / "ref.jsonl"
    assert main(["replay", *logs, "--delay", "1s", "--out", str(ref), "--no-summary"]) == 0
    assert out.read_bytes() == ref.read_bytes() and not ckpt.exists()
    for argv, flag in ((["--checkpoint", str(ckpt)], "--out"),
                       (["--checkpoint-every", "5"], "--checkpoint-every"),
                       (["--checkpoint", str(ckpt), "--window", "1m"], "--out"),
                       (["--checkpoint", logs[0], "--out", str(out)], "--checkpoint")):
        capsys.readouterr()
        assert main(["replay", *logs, *argv, "--no-summary"]) == 2, argv
        assert f"argument {flag}" in capsys.readouterr().err
    assert main(["replay", *logs, "--checkpoint-every", "0"]) == 2
    ckpt.write_bytes(b"GLDLCKPT")
    assert main(["replay", *logs, "--out", str(out), "--checkpoint", str(ckpt),
                 "--no-summary"]) == 1
    assert "truncated: 8 bytes, shorter than the 24-byte header" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "ref.jsonl", ignore_errors=True)


def _edge_log(folder: Path, n: int = 600, seed: int = 5) -> list[Path]:
    """A log of door sensors' start and end edges (some late, some never closed, some
    unmatched) between points and CTIs, so that edges are open across checkpoints."""
    rng = np.random.default_rng(seed)
    lines, t, opened = [], T0, {}
    for i in range(n):
        t += int(rng.integers(1, 5_000_000))
        dev = f"door-{i % 3}"
        s = t - int(rng.integers(0, 3_000_000_000))
        r = rng.random()
        if r < 0.1:
            lines.append(b'{"source":"%s","kind":"cti","start":%d}' % (dev.encode(), s))
        elif r < 0.35:
            ident = int(rng.integers(0, 6))
            opened[(dev, ident)] = s
            lines.append(b'{"source":"%s","kind":"start","start":%d,"id":%d}'
                         % (dev.encode(), s, ident))
        elif r < 0.55:
            ident = int(rng.integers(0, 6))
            begin = opened.pop((dev, ident), s - 1_000_000)
            lines.append(b'{"source":"%s","kind":"end","start":%d,"end":%d,"id":%d}'
                         % (dev.encode(), begin, max(s, begin + 1), ident))
        else:
            lines.append(b'{"source":"%s","kind":"insert","start":%d}' % (dev.encode(), s))
    path = folder / "doors.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return [path]


@pytest.mark.parametrize("options", [dict(policy="goldilocks", delay="1s"),
                                     dict(policy="quantile", delay="1s", on_late="adjust")],
                         ids=["goldilocks", "quantile"])
def test_a_replay_with_edges_resumes_from_every_checkpoint(tmp_path, options):  # TS §7, §8.3
    """Replay decides edges under with_edges: its state (the open edges, their counts) is
    in the checkpoint, so a resumed run closes, moves and reports edges opened before it."""
    logs = _edge_log(tmp_path)
    ref = tmp_path / "ref"
    ref.mkdir()
    whole = replay(logs, **options, **_outputs(ref))
    assert whole.edges.closed and whole.edges.not_closed and whole.edges.no_start
    run = tmp_path / "run"
    run.mkdir()
    out = _outputs(run)
    ckpt = run / "replay.ckpt"
    taken: list[bytes] = []
    assert replay(logs, **options, **out, checkpoint=ckpt, checkpoint_every=89,
                  on_checkpoint=taken.append) == whole
    assert any(unpack(d, "replay")["state"]["open"] for d in taken[:-1])
    for data in taken:
        ckpt.write_bytes(data)
        for target in out.values():
            Path(partial_path(str(target))).write_bytes((ref / target.name).read_bytes())
            target.unlink(missing_ok=True)
        assert replay(logs, **options, **out, checkpoint=ckpt, checkpoint_every=89) == whole
        for target in out.values():
            assert target.read_bytes() == (ref / target.name).read_bytes()
