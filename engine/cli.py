"""The ``goldilocks`` command line: ``goldilocks replay LOG... [options]``, ``goldilocks --help``.

Subcommands are registered, not hard-wired: a module defines a ``Command`` (name, help, a
function that adds its arguments, a function that runs it and returns the exit status) and
either calls ``register_command(cmd)`` or declares it in the ``goldilocks.commands``
entry-point group (``demo = "examples.demo:COMMAND"``), which ``build_parser`` loads — so
``demo`` and ``serve`` live in their own modules and ``engine`` imports none of them.

Exit status: 0 on success, 1 on an input error (a bad record, a missing file; one line on
stderr naming the file and line), 2 on a usage error (argparse).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Callable, Sequence

from engine.errors import GoldilocksError

__all__ = ["Command", "register_command", "commands", "build_parser", "main"]

_GROUP = "goldilocks.commands"


@dataclass(frozen=True)
class Command:
    """A subcommand: ``configure(parser)`` adds its arguments, ``run(args) -> exit status``."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


_COMMANDS: dict[str, Command] = {}


def register_command(command: Command) -> Command:
    """Add a subcommand (a later registration under the same name replaces the earlier)."""
    if command is None:
        raise TypeError("register_command(None); expected a Command")
    _COMMANDS[command.name] = command
    return command


def commands() -> dict[str, Command]:
    """The registered subcommands, built-in and from the entry-point group, by name."""
    found = dict(_COMMANDS)
    for ep in entry_points(group=_GROUP):
        if ep.name not in found:
            cmd = ep.load()
            if isinstance(cmd, Command):
                found[ep.name] = cmd
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="goldilocks",
        description="Merge event streams whose clocks disagree onto one monotone clock (CTIs), "
                    "and say which events were late.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in sorted(commands().items()):
        p = sub.add_parser(name, help=cmd.help, description=cmd.description or cmd.help,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``goldilocks`` script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except GoldilocksError as err:
        message = " ".join(str(err).split())  # one line
        print(f"goldilocks {args.command}: error: {message}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `goldilocks replay … | head`
        return 0


# -- replay ----------------------------------------------------------------------------

_REPLAY_HELP = """\
Replay recorded event logs (JSON Lines, CSV, Parquet; see docs/event-log.md) through a CTI
policy, in recorded arrival order. Output events and CTIs go to --out (stdout by default) as a
canonical event log; a per-input summary goes to stderr.

example:
  goldilocks replay examples/data/fleet.jsonl
  goldilocks replay examples/data/devices/*.jsonl --delay 2m --late late.jsonl --plot fleet.png
"""


def _configure_replay(p: argparse.ArgumentParser) -> None:
    p.add_argument("logs", nargs="+", metavar="LOG", help="event-log files, merged by arrival")
    p.add_argument("--delay", default=None,
                   help="CTI delay, e.g. 5m, 90s, PT5M (default: 5m for goldilocks, 0 otherwise)")
    p.add_argument("--policy", default="goldilocks",
                   help="goldilocks | min | max (any installed policy; default goldilocks)")
    p.add_argument("--on-late", choices=("drop", "adjust"), default="drop",
                   help="what happens to late inserts (default drop)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="output event log (default: stdout; '-' is stdout too)")
    p.add_argument("--late", default=None, metavar="FILE", help="late records (JSON Lines)")
    p.add_argument("--speed", default="max", metavar="max|FACTOR",
                   help="max (default) or a factor pacing by recorded arrival times (1 = real time)")
    p.add_argument("--bad-records", nargs="+", default=["fail"], metavar="MODE",
                   help="fail (default) | skip | quarantine FILE")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="draw event time against arrival, the CTI and late events")
    p.add_argument("--no-summary", action="store_true", help="do not print the summary table")


def _run_replay(args: argparse.Namespace) -> int:
    from engine.errors import InputError
    from engine.replay import replay

    mode, *rest = args.bad_records
    quarantine = None
    if mode == "quarantine":
        if len(rest) != 1:
            raise InputError("--bad-records quarantine needs exactly one FILE")
        quarantine = rest[0]
    elif mode in ("fail", "skip"):
        if rest:
            raise InputError(f"--bad-records {mode} takes no file (got {' '.join(rest)})")
    else:
        raise InputError(f"--bad-records {mode!r}; expected fail, skip or quarantine FILE")
    out = sys.stdout.buffer if args.out in (None, "-") else args.out
    stats = replay(args.logs, delay=args.delay, policy=args.policy, on_late=args.on_late,
                   out=out, late=args.late, speed=args.speed, bad_records=mode,
                   quarantine=quarantine, progress=True, plot=args.plot is not None)
    if args.plot:
        from engine.plot import plot_replay

        plot_replay(stats, args.plot)
    if not args.no_summary:
        print_summary(stats)
    return 0


def print_summary(stats, file=None) -> None:
    """The per-input summary table (rich) on stderr."""
    from rich.console import Console
    from rich.table import Table

    from engine.times import format_duration_ns, format_ns

    def when(t: int | None) -> str:
        if t is None:
            return "—"
        text = format_ns(t)
        return text[:-1].rstrip("0").rstrip(".") + "Z" if "." in text else text

    table = Table(title=f"replay: {stats.policy}, delay {format_duration_ns(stats.delay)}, "
                        f"on late {stats.on_late} ({stats.path} path)",
                  title_justify="left")
    for col in ("input", "received", "CTIs", "emitted", "late", "adjusted", "final CTI"):
        table.add_column(col, justify="left" if col in ("input", "final CTI") else "right")
    for s in stats.inputs:
        table.add_row("(merged)" if s.name is None else s.name, str(s.received), str(s.ctis), str(s.emitted),
                      str(s.late), str(s.adjusted), when(s.final_cti))
    table.add_section()
    table.add_row("total", str(stats.records), str(stats.ctis_emitted), str(stats.emitted), str(stats.late),
                  str(stats.adjusted), when(stats.final_cti), style="bold")
    console = Console(file=file or sys.stderr, width=100)
    console.print(table)
    extra = []
    if stats.skipped:
        extra.append(f"{stats.skipped} bad records skipped")
    if stats.quarantined:
        extra.append(f"{stats.quarantined} bad records quarantined")
    per_file = [f"{f.path}: {f.skipped}" for f in stats.files if f.skipped]
    if per_file:
        extra.append("by file: " + ", ".join(per_file))
    extra.append(f"{stats.ctis_emitted} CTIs emitted; {stats.records} records in "
                 f"{stats.seconds:.2f}s")
    console.print("; ".join(extra), highlight=False)


register_command(Command("replay", "replay recorded event logs through a CTI policy",
                         _configure_replay, _run_replay, description=_REPLAY_HELP))
