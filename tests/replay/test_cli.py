"""The command line, run in-process on real files: output, late file, summary, exit status."""

from __future__ import annotations

import argparse

import pytest

from engine.cli import Command, build_parser, main, register_command

FLEET = "examples/data/fleet.jsonl"


def test_help_lists_replay(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "replay" in capsys.readouterr().out


def test_replay_to_files_with_summary(tmp_path, capsys):
    out, late = tmp_path / "out.jsonl", tmp_path / "late.jsonl"
    assert main(["replay", FLEET, "--delay", "5m", "--out", str(out), "--late", str(late)]) == 0
    err = capsys.readouterr().err
    for word in ("thermo-1", "thermo-2", "door-4", "received", "emitted", "late", "final CTI",
                 "total"):
        assert word in err
    assert out.read_bytes().count(b"\n") > 600
    assert late.read_bytes().count(b'"action":"dropped"') == 38


def test_replay_to_stdout_is_the_event_log(tmp_path, capsys):
    assert main(["replay", FLEET, "--no-summary"]) == 0
    stdout = capsys.readouterr().out
    out = tmp_path / "out.jsonl"
    main(["replay", FLEET, "--out", str(out), "--no-summary"])
    assert stdout.encode() == out.read_bytes()  # element path (stdout) == columnar path (file)


def test_bad_record_exits_non_zero_with_one_line(tmp_path, capsys):
    log = tmp_path / "bad.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":1}\n{"source":"A","kind":"x"}\n')
    assert main(["replay", str(log), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"{log}:2:" in err and "unknown kind" in err


def test_bad_records_quarantine(tmp_path, capsys):
    log = tmp_path / "bad.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":1}\n{"source":"A","kind":"x"}\n')
    q = tmp_path / "q.jsonl"
    assert main(["replay", str(log), "--out", str(tmp_path / "o"), "--bad-records",
                 "quarantine", str(q)]) == 0
    assert "1 bad records quarantined" in capsys.readouterr().err
    assert b'"line":2' in q.read_bytes()


def test_missing_file_and_bad_options(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["replay", FLEET, "--policy", "nope"]) == 1
    assert "unknown policy" in capsys.readouterr().err
    assert main(["replay", FLEET, "--policy", "max", "--delay", "5m"]) == 1
    assert main(["replay", FLEET, "--bad-records", "quarantine"]) == 1


def test_plot_is_written(tmp_path, capsys):
    png = tmp_path / "fleet.png"
    assert main(["replay", FLEET, "--out", str(tmp_path / "o"), "--plot", str(png),
                 "--no-summary"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_other_modules_can_register_a_subcommand(capsys):
    def configure(p: argparse.ArgumentParser) -> None:
        p.add_argument("--n", type=int, default=1)

    def run(args: argparse.Namespace) -> int:
        print("hello" * args.n)
        return 3

    register_command(Command("hello-test", "say hello", configure, run))
    assert "hello-test" in build_parser().format_help()
    assert main(["hello-test", "--n", "2"]) == 3
    assert capsys.readouterr().out == "hellohello\n"
