"""The command line, run in-process on real files: output, late file, summary, exit status."""

from __future__ import annotations

import argparse

import pytest

from pathlib import Path

from goldilocks.cli import Command, build_parser, main, register_command
from tests.replay.conftest import SEED_LOG

ROOT = Path(__file__).resolve().parents[2]
FLEET = str(ROOT / "examples" / "data" / "fleet.jsonl")


def test_help_lists_replay(capsys):
    assert main(["--help"]) == 0  # main returns the status; it does not raise SystemExit
    assert "replay" in capsys.readouterr().out


def test_replay_to_files_with_summary(tmp_path, capsys):
    out, late = tmp_path / "out.jsonl", tmp_path / "late.jsonl"
    assert main(["replay", FLEET, "--delay", "5m", "--out", str(out), "--late", str(late)]) == 0
    err = capsys.readouterr().err
    for word in ("thermo-1", "thermo-2", "door-4", "records", "emitted", "late",
                 "last CTI in", "last CTI out", "total"):
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
                 "quarantine", "--quarantine", str(q)]) == 0
    assert "1 bad records quarantined" in capsys.readouterr().err
    assert b'"line":2' in q.read_bytes()


def test_missing_file_is_an_input_error(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    assert main(["replay", str(tmp_path / "nope.jsonl"), "--out", str(out)]) == 1
    assert "no such file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no output, no temporary


@pytest.mark.parametrize("args, option, says", [
    (["--delay", "abc"], "--delay", "cannot parse 'abc' as a duration"),
    (["--delay", "5 minutes later"], "--delay", "cannot parse '5 minutes later'"),
    (["--delay=-5m"], "--delay", "'-5m' must not be negative"),
    (["--delay", "-5m"], "--delay", "'-5m' must not be negative"),
    (["--delay", "300"], "--delay", "'300' has no unit; expected a duration with its unit, "
                                    "e.g. '300s', '5m', 'PT5M' or '300ns'"),
    (["--delay", "1.5"], "--delay", "'1.5' has no unit"),
    (["--window", "60", "--agg", "count"], "--window", "'60' has no unit"),
    (["--max-ahead", "-1s"], "--max-ahead", "'-1s' must not be negative"),
    (["--delay", "1 month"], "--delay", "years or months"),
    (["--policy", "nope"], "--policy", "invalid choice: 'nope' (choose from 'goldilocks', "
                                       "'max', 'min', 'quantile')"),
    (["--policy", "max", "--delay", "5m"], "--delay", "max policy: delay='5m'; expected 0"),
    (["--policy", "min", "--delay", "1s"], "--delay", "min policy: delay='1s'; expected 0"),
    (["--bad-records", "skp"], "--bad-records", "invalid choice: 'skp'"),
    (["--bad-records", "quarantine"], "--bad-records", "quarantine needs a file"),
    (["--bad-records", "skip", "--quarantine", "q.jsonl"], "--quarantine",
     "is for --bad-records quarantine, but --bad-records is skip"),
    (["--speed", "fast"], "--speed", "expected 'max' or a positive factor"),
    (["--speed", "0"], "--speed", "expected 'max' or a positive factor"),
    (["--speed", "nan"], "--speed", "expected 'max' or a positive factor"),
    (["--on-late", "keep"], "--on-late", "invalid choice: 'keep'"),
    (["--time-unit", "sec"], "--time-unit", "invalid choice: 'sec'"),
    (["--time-format", "rfc"], "--time-format", "invalid choice: 'rfc'"),
])
def test_usage_errors_exit_2_in_argparse_style(tmp_path, args, option, says, capsys):
    out = tmp_path / "out.jsonl"
    assert main(["replay", FLEET, "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"goldilocks replay: error: argument {option}: "), err
    assert says in line, line
    assert "Traceback" not in err and not out.exists()


def _replayed(tmp_path, name: str, *args: str) -> bytes:
    out = tmp_path / name
    assert main(["replay", FLEET, "--out", str(out), "--no-summary", *args]) == 0
    return out.read_bytes()


def test_delay_zero_units_and_words(tmp_path):
    # replay.md: a duration with its unit (nanoseconds too); '5 minutes' (Spark's words) is 5m
    five = _replayed(tmp_path, "a", "--delay", "5m")
    assert _replayed(tmp_path, "b", "--delay", "300000000000ns") == five
    assert _replayed(tmp_path, "b2", "--delay", "300s") == five
    assert _replayed(tmp_path, "b3", "--delay", "PT5M") == five
    assert _replayed(tmp_path, "c", "--delay", "5 minutes") == five
    assert _replayed(tmp_path, "d", "--delay", "interval 5 minutes") == five
    zero = _replayed(tmp_path, "e", "--delay", "0")
    assert zero == _replayed(tmp_path, "f", "--delay", "0s") != five
    # and the min policy's own error asks for 0, which it now accepts
    assert _replayed(tmp_path, "g", "--policy", "min", "--delay", "0") == \
        _replayed(tmp_path, "h", "--policy", "min")


def _bad_log(tmp_path):
    log = tmp_path / "bad.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":1}\n{"source":"A","kind":"x"}\n'
                    b'{"source":"A","kind":"insert","start":2}\n')
    return log


def test_bad_records_skip_does_not_swallow_the_log(tmp_path, capsys):
    log = _bad_log(tmp_path)
    out = tmp_path / "out.jsonl"
    assert main(["replay", "--bad-records", "skip", str(log), "--out", str(out)]) == 0
    assert "1 bad records skipped" in capsys.readouterr().err
    assert out.read_bytes().count(b'"kind":"insert"') == 2


@pytest.mark.parametrize("spelling", [
    ["--quarantine", "{q}"],
    ["--bad-records", "quarantine", "--quarantine", "{q}"],
    ["--bad-records", "quarantine", "{q}"],  # the spelling from before --quarantine
    ["--bad-records=quarantine", "{q}"],
])
def test_quarantine_spellings(tmp_path, spelling, capsys):
    log = _bad_log(tmp_path)
    q = tmp_path / "q.jsonl"
    argv = ["replay", *[a.format(q=q) for a in spelling], str(log), "--out",
            str(tmp_path / "out.jsonl")]
    assert main(argv) == 0
    assert "1 bad records quarantined" in capsys.readouterr().err
    assert b'"line":2' in q.read_bytes()


def test_the_old_spelling_does_not_take_a_file_when_quarantine_is_given(tmp_path, capsys):
    # with --quarantine given, the word after 'quarantine' is a log, as the new syntax reads
    log = _bad_log(tmp_path)
    q = tmp_path / "q.jsonl"
    assert main(["replay", "--quarantine", str(q), "--bad-records", "quarantine", str(log),
                 "--out", str(tmp_path / "o")]) == 0
    assert b'"line":2' in q.read_bytes()


def test_version(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"goldilocks {version('goldilocks')}\n"


def test_version_of_a_checkout_that_is_not_installed():
    import tomllib

    from goldilocks.cli import distribution_version

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    text = distribution_version("goldilocks-not-installed-anywhere")
    assert text.startswith(f"{pyproject} (not installed: ")


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


def _summary(err: str) -> tuple[list[str], dict[str, list[str]]]:
    """The summary table printed by rich: its header and its rows by input name."""
    header: list[str] = []
    rows: dict[str, list[str]] = {}
    for line in err.splitlines():
        if line.startswith("┃"):
            header = [c.strip() for c in line.strip("┃").split("┃")]
        elif line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows[cells[0]] = cells
    return header, rows


# the worked example (design.md §4.2), then a join, a CTI of the merged stream and a leave
SUMMARY_LOG = SEED_LOG + (b'{"source":"C","kind":"join"}\n'
                          b'{"kind":"cti","start":500250000000}\n'
                          b'{"source":"B","kind":"leave"}\n')


@pytest.mark.parametrize("out", ["file", "-"])  # the columnar and the element path
def test_summary_rows_add_up_and_times_share_one_precision(tmp_path, out, capsys):
    log = tmp_path / "log.jsonl"
    log.write_bytes(SUMMARY_LOG)
    target = str(tmp_path / "out.jsonl") if out == "file" else "-"
    assert main(["replay", str(log), "--out", target]) == 0
    header, rows = _summary(capsys.readouterr().err)
    assert header == ["input", "records", "CTIs", "late", "adjusted", "emitted", "CTIs out",
                      "last CTI in", "last CTI out"]
    total = rows.pop("total")
    assert set(rows) == {"(merged)", "A", "B", "C"}
    for col in range(1, 7):  # every count column: the rows add up to the total
        assert sum(int(r[col]) for r in rows.values()) == int(total[col]), header[col]
    assert total[1] == "10"  # every record, B's leave and C's join included
    assert (rows["B"][1], rows["C"][1]) == ("4", "1")
    # an input's last CTI and the output's are separate columns; the total row shows the
    # output's final CTI, which is the latest CTI out of any row
    assert rows["A"][7] == "1970-01-01T00:08:00.000Z"  # A's last CTI in
    assert rows["A"][8] == "1970-01-01T00:03:00.000Z"  # the output CTI A's record caused
    assert rows["(merged)"][8] == total[8] == "1970-01-01T00:03:20.250Z"
    assert rows["C"][7] == rows["C"][8] == "—" and total[7] == ""
    # one precision: every time in the table has the fraction digits the finest one needs
    times = [c for r in [*rows.values(), total] for c in r[7:] if c not in ("", "—")]
    assert times and all(len(t) == len("1970-01-01T00:00:00.000Z") for t in times)


def test_the_summary_lists_every_log_an_empty_one_too_and_where_late_events_went(
        tmp_path, capsys):
    """event-log.md: an empty file is listed in the summary with zero counts, so it is
    visible; and when --late is absent the summary says the late events were only counted."""
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    out = tmp_path / "out.jsonl"
    assert main(["replay", str(empty), FLEET, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"2 logs: {empty} (0 records, empty), {FLEET} (921 records)" in err
    assert "the 38 late inserts were counted, not kept: --late FILE keeps them" in err
    late = tmp_path / "late.jsonl"
    assert main(["replay", FLEET, "--out", str(out), "--late", str(late)]) == 0
    err = capsys.readouterr().err
    assert f"the 38 late inserts are in {late}" in err
    # no line is padded to the terminal's (or the table's) width, in a file either
    first = err.splitlines()[0]
    assert first == "replay: goldilocks, delay 5m, on late drop (columnar path)"
    assert not any(line != line.rstrip() for line in err.splitlines()
                   if not line.startswith(("│", "┃", "┏", "┡", "├", "└")))


def test_logs_may_follow_options(tmp_path):
    """replay.md: '--bad-records skip f.jsonl replays f.jsonl' — a log after an option was
    refused by the top-level parser ('unrecognized arguments: messy.jsonl')."""
    messy = tmp_path / "messy.jsonl"
    messy.write_bytes(b'{"source":"B","kind":"insert","start":"2026-11-22T08:00:00Z",'
                      b'"arrival":"2026-11-22T08:00:00Z"}\n'
                      b'{"source":"B","kind":"nope","arrival":"2026-11-22T08:00:01Z"}\n')
    fleet_first = tmp_path / "a.jsonl"
    assert main(["replay", FLEET, "--bad-records", "skip", str(messy), "--delay", "2m",
                 "--out", str(fleet_first), "--no-summary"]) == 0
    options_first = tmp_path / "b.jsonl"
    assert main(["replay", "--bad-records", "skip", "--delay", "2m", FLEET, str(messy),
                 "--out", str(options_first), "--no-summary"]) == 0
    assert fleet_first.read_bytes() == options_first.read_bytes()
    assert b'"source":"B"' in fleet_first.read_bytes()


def test_window_messages_show_durations_as_given(tmp_path, capsys):
    assert main(["replay", FLEET, "--window", "1m", "--hop", "2m", "--out",
                 str(tmp_path / "w")]) == 2
    assert ("argument --hop: windows: hop 2m is longer than the size 1m; expected hop <= size"
            in capsys.readouterr().err)
