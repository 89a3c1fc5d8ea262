"""Outputs never destroy an input and never show half a result (TS §5.5): the command line,
in-process (``goldilocks.cli.main``) and as the installed ``goldilocks`` script, on real files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from goldilocks.cli import main
from engine.errors import UsageError
from goldilocks.replay import replay

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "examples" / "data" / "fleet.jsonl"
SCRIPT = Path(sys.executable).with_name("goldilocks")


def _one_error_line(err: str, option: str, path: object) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"goldilocks replay: error: argument {option}: "), line
    assert str(path) in line and "Traceback" not in err
    return line


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "fleet.jsonl"
    path.write_bytes(FLEET.read_bytes())
    return path


def _same_file_spellings(log: Path) -> dict[str, Path]:
    d = log.parent
    (d / "sub").mkdir()
    os.symlink(log, d / "link.jsonl")
    os.link(log, d / "hard.jsonl")
    return {"same path": log, "relative": Path(os.path.relpath(log)),
            "dotted": d / "sub" / ".." / log.name, "symlink": d / "link.jsonl",
            "hard link": d / "hard.jsonl"}


@pytest.mark.parametrize("option", ["--out", "--late", "--quarantine"])
@pytest.mark.parametrize("spelling", ["same path", "relative", "dotted", "symlink", "hard link"])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(log, option, spelling,
                                                                  capsys):
    before = log.read_bytes()
    target = _same_file_spellings(log)[spelling]
    assert main(["replay", str(log), option, str(target), "--no-summary"]) == 2
    line = _one_error_line(capsys.readouterr().err, option, target)
    assert "input log" in line and "destroy" in line
    assert log.read_bytes() == before
    assert sorted(p.name for p in log.parent.iterdir()) == sorted(
        ["fleet.jsonl", "sub", "link.jsonl", "hard.jsonl"])  # nothing created


def test_the_installed_script_refuses_to_overwrite_its_input(log):
    # the data loss as a user met it: `goldilocks replay f.jsonl --out f.jsonl`
    assert SCRIPT.exists(), f"{SCRIPT}: the goldilocks script is installed with the package"
    before = log.read_bytes()
    done = subprocess.run([str(SCRIPT), "replay", log.name, "--out", log.name],
                          cwd=log.parent, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done
    _one_error_line(done.stderr, "--out", log.name)
    assert done.stdout == ""
    assert log.read_bytes() == before


def test_an_input_among_several_is_protected_too(log, tmp_path, capsys):
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"source":"Z","kind":"insert","start":1}\n')
    assert main(["replay", str(other), str(log), "--late", str(log)]) == 2
    _one_error_line(capsys.readouterr().err, "--late", log)
    assert log.read_bytes() == FLEET.read_bytes()


@pytest.mark.parametrize("first, second", [("--out", "--late"), ("--late", "--quarantine"),
                                           ("--out", "--plot")])
def test_two_outputs_naming_one_file_are_refused(log, tmp_path, first, second, capsys):
    target = tmp_path / "o.png"
    argv = ["replay", str(log), first, str(target), second, str(target)]
    if "--quarantine" in argv:
        argv += ["--bad-records", "quarantine"]
    assert main(argv) == 2
    line = _one_error_line(capsys.readouterr().err, second, target)
    assert f"also given as {first}" in line
    assert not target.exists()


def test_the_python_api_refuses_the_same(log):
    with pytest.raises(UsageError) as info:
        replay([log], out=log)
    assert info.value.option == "out" and str(log) in str(info.value)
    with pytest.raises(UsageError) as info:
        replay([log], out=log.parent / "x.jsonl", late=log.parent / "x.jsonl")
    assert info.value.option == "late"
    assert log.read_bytes() == FLEET.read_bytes()


def test_a_failed_replay_leaves_no_output_and_no_temporary(tmp_path, capsys):
    # a bad record mid-file with --bad-records fail: the outputs written so far are removed,
    # and an output that existed before keeps its old content
    lines = FLEET.read_bytes().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join(lines[:400]) + b'{"source":"A","kind":"insert"}\n'
                    + b"".join(lines[400:]))
    out, late = tmp_path / "out.jsonl", tmp_path / "late.jsonl"
    late.write_bytes(b"yesterday's late records\n")
    assert main(["replay", str(bad), "--out", str(out), "--late", str(late),
                 "--bad-records", "fail"]) == 1
    assert f"{bad}:401:" in capsys.readouterr().err
    assert not out.exists()
    assert late.read_bytes() == b"yesterday's late records\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "late.jsonl"]


def test_a_failed_element_replay_leaves_no_output_either(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(FLEET.read_bytes() + b'{"source":"A","kind":"x"}\n')
    with pytest.raises(Exception, match="unknown kind"):
        replay([bad], out=tmp_path / "out.jsonl", policy="min", columnar=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_outputs_appear_whole_and_replace_the_old_file(log, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"old\n")
    os.chmod(out, 0o640)
    assert main(["replay", str(log), "--out", str(out), "--no-summary"]) == 0
    assert out.read_bytes().startswith(b'{"source":')
    assert stat.S_IMODE(out.stat().st_mode) == 0o640  # the replaced file's mode is kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.jsonl", "out.jsonl"]


def test_a_symlinked_output_is_followed_and_the_link_kept(log, tmp_path):
    real = tmp_path / "real.jsonl"
    real.write_bytes(b"")
    link = tmp_path / "link-out.jsonl"
    os.symlink(real, link)
    assert main(["replay", str(log), "--out", str(link), "--no-summary"]) == 0
    assert link.is_symlink() and real.read_bytes().count(b"\n") > 600


def test_an_output_that_is_not_a_regular_file_is_written_in_place(log):
    # /dev/null cannot be replaced by a rename (and must not be); it takes several outputs
    assert main(["replay", str(log), "--out", os.devnull, "--late", os.devnull,
                 "--no-summary"]) == 0
    assert main(["replay", str(log), "--out", os.devnull, "--no-summary"]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def _unwritable(tmp_path: Path) -> dict[str, Path]:
    regular = tmp_path / "regular-file"
    regular.write_bytes(b"")
    (tmp_path / "a-directory").mkdir()
    return {"missing directory": tmp_path / "missing" / "x.png",
            "under a regular file": regular / "x.png",
            "a directory": tmp_path / "a-directory"}


@pytest.mark.parametrize("option", ["--out", "--late", "--quarantine", "--plot"])
@pytest.mark.parametrize("case", ["missing directory", "under a regular file", "a directory"])
def test_an_unwritable_output_is_refused_before_the_replay_starts(tmp_path, option, case,
                                                                  capsys):
    # the log has a bad record: exit 2 (not 1) shows the output was checked first
    log = tmp_path / "bad.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":1}\n{"source":"A","kind":"x"}\n')
    target = _unwritable(tmp_path)[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["replay", str(log), option, str(target), "--no-summary"]
    if option != "--out":
        argv += ["--out", str(tmp_path / "out.jsonl")]
    assert main(argv) == 2
    _one_error_line(capsys.readouterr().err, option, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_plot_suffix_matplotlib_cannot_write_is_refused_with_the_ones_it_can(log, tmp_path,
                                                                             capsys):
    out = tmp_path / "out.jsonl"
    for name in ("x.txt", "noext"):
        assert main(["replay", str(log), "--out", str(out), "--plot",
                     str(tmp_path / name)]) == 2
        line = _one_error_line(capsys.readouterr().err, "--plot", tmp_path / name)
        assert "matplotlib cannot write" in line and ".png" in line and ".svg" in line
    assert not out.exists()


def test_a_plot_in_another_format_is_written(log, tmp_path):
    svg = tmp_path / "fleet.svg"
    assert main(["replay", str(log), "--out", str(tmp_path / "o"), "--plot", str(svg),
                 "--no-summary"]) == 0
    assert b"<svg" in svg.read_bytes()[:400]


def test_plot_without_matplotlib_is_refused_before_the_replay(log, tmp_path):
    # a real process in which matplotlib cannot be imported (a sitecustomize blocks it)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['matplotlib'] = None\n")
    out = tmp_path / "out.jsonl"
    done = subprocess.run([str(SCRIPT), "replay", str(log), "--out", str(out), "--plot",
                           str(tmp_path / "p.png")], capture_output=True, text=True,
                          timeout=60,
                          env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"})
    assert done.returncode == 2, done
    line = _one_error_line(done.stderr, "--plot", "")
    assert "pip install 'goldilocks[plot]'" in line
    assert not out.exists() and not (tmp_path / "p.png").exists()  # the replay never ran
