"""The ``goldilocks`` command line: ``goldilocks replay LOG... [options]``, ``goldilocks --help``,
``goldilocks --version``.

The built-in subcommands are ``replay`` (here) and ``serve`` (``goldilocks.net.cli``, which
imports the network code only when it runs); other packages add theirs through
``goldilocks.commands``. ``python -m goldilocks`` is the same command.

Exit status: 0 on success, 1 on an input error (a bad record, a missing file; one line on
stderr naming the file and line), 2 on a usage error: argparse's own (usage and one line
``goldilocks replay: error: argument --delay: …``), or an argument that cannot be used as
given, found before any work starts (an ``engine.errors.UsageError``: one line naming the
argument and the path, e.g. an ``--out`` that is an input log); 130 when interrupted (Ctrl-C)
and 143 when terminated (SIGTERM: ``kill``, ``timeout``, ``docker stop``), one line saying so
— and, with ``--checkpoint``, how to resume — after the outputs' temporaries are removed.
``main`` returns the status in every case (``--help`` and ``--version`` too) rather than
raising ``SystemExit``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Sequence

from engine.errors import GoldilocksError, InputError, UsageError

from goldilocks.commands import Command, commands, duration, negative_values, register_command
from goldilocks.net.cli import SERVE

__all__ = ["build_parser", "main", "distribution_version", "Terminated"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program runs so that it stops as Ctrl-C stops it: every
    ``finally`` runs, and no output's temporary is left behind."""


@contextmanager
def terminated_as_interrupted():
    """Within: SIGTERM raises ``Terminated`` in the main thread (elsewhere: nothing
    changes). The handler that was there is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

def distribution_version(name: str = "goldilocks") -> str:
    """The installed distribution's version; in a checkout that is not installed, the version
    in its ``pyproject.toml`` marked as such; ``"unknown"`` if neither is found."""
    try:
        return version(name)
    except PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            found = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
        except (OSError, KeyError, TypeError, ValueError):
            return "unknown"
        return f"{found} (not installed: {pyproject.parent})"


class _Version(argparse.Action):
    """``--version``: looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"{parser.prog} {distribution_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="goldilocks",
        description="Merge event streams whose clocks disagree onto one monotone clock (CTIs), "
                    "and say which events were late.")
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in sorted(commands().items()):
        p = sub.add_parser(name, help=cmd.help, description=cmd.description or cmd.help,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def _rewrite(argv: list[str], found: dict[str, Command]) -> list[str]:
    """Apply the command's ``rewrite`` to the arguments after its name (the first argument
    that is not an option)."""
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            cmd = found.get(arg)
            if cmd is not None and cmd.rewrite is not None:
                return argv[:i + 1] + cmd.rewrite(argv[i + 1:])
            break
    return argv


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments of ``goldilocks COMMAND …``: the command's own parser reads what follows
    its name with options and positionals in any order (``replay a.jsonl --delay 2m
    b.jsonl``: both logs), and a negative duration reaches the duration's check
    (``negative_values``). Anything else (``--help``, ``--version``, no or an unknown
    command) is the top-level parser's."""
    subparsers = next((a for a in parser._actions
                       if isinstance(a, argparse._SubParsersAction)), None)
    name = argv[0] if argv else None
    if subparsers is None or name not in subparsers.choices:
        return parser.parse_args(argv)
    sub = subparsers.choices[name]
    rest = negative_values(sub, argv[1:])
    intermixed = not any(a.nargs in (argparse.PARSER, argparse.REMAINDER)
                         for a in sub._actions)
    args = sub.parse_intermixed_args(rest) if intermixed else sub.parse_args(rest)
    args.command = name
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``goldilocks`` script; returns the exit status (0 ok, 1 input
    error, 2 usage error)."""
    parser = build_parser()
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parse(parser, _rewrite(args_list, commands()))
    except SystemExit as done:  # argparse: --help, --version, or its usage error (2)
        return done.code if isinstance(done.code, int) else 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (Terminated): the outputs are
        terminated = isinstance(stop, Terminated)  # cleaned up by now
        checkpoint = getattr(args, "checkpoint", None)
        after = (f"; run the same command to resume from {checkpoint}" if checkpoint
                 else "")
        print(f"goldilocks {args.command}: {'terminated' if terminated else 'interrupted'}"
              f"{after}", file=sys.stderr)
        return 143 if terminated else 130
    except UsageError as err:  # found before any work started
        flag = err.option if err.option.startswith("-") else "--" + err.option.replace("_", "-")
        print(f"goldilocks {args.command}: error: argument {flag}: {_one_line(err.reason)}",
              file=sys.stderr)
        return 2
    except GoldilocksError as err:
        print(f"goldilocks {args.command}: error: {_one_line(str(err))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `goldilocks replay … | head`
        return 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- replay ----------------------------------------------------------------------------

_REPLAY_HELP = """\
Replay recorded event logs (JSON Lines, CSV, Parquet; see docs/event-log.md) through a CTI
policy, in recorded arrival order. Output events and CTIs go to --out (stdout by default) as a
canonical event log; a per-input summary goes to stderr. With --window, one row per window
closed by the policy's CTIs instead.

Outputs are safe: an --out, --late, --quarantine or --plot that is one of the input logs (by
name, link or inode), or two outputs naming one file, are refused before anything is opened;
each file is written under a temporary name beside it and renamed into place only when the
replay succeeds. Exit status: 0 ok, 1 input error (a bad record: FILE:LINE), 2 usage error.

example:
  goldilocks replay examples/data/fleet.jsonl
  goldilocks replay examples/data/devices/*.jsonl --delay 2m --late late.jsonl --plot fleet.png
  goldilocks replay epoch-seconds.csv --time-unit s --time-format iso --out merged.jsonl
  goldilocks replay examples/data/fleet.jsonl --window 1m --agg mean:celsius --key source
  goldilocks replay big/*.jsonl --out merged.jsonl --checkpoint merged.ckpt   # again to resume
  goldilocks replay big/*.jsonl --window 1m --agg mean:c --out rows.jsonl --checkpoint rows.ckpt
"""


def _policy_name(text: str) -> str:
    """A policy name as ``--policy`` takes it: a registered one, or ``quantile:K``."""
    from operators.policies import policy_names

    name = text.partition(":")[0]
    if name not in policy_names():
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from "
                                         f"{', '.join(map(repr, policy_names()))}); "
                                         "quantile:K gives the quantile rule its k")
    return text


def _speed(text: str) -> str | float:
    if text == "max":
        return text
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not 0 < factor < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}; expected 'max' or a positive factor such "
                                         "as 1 (as recorded) or 10 (ten times faster)")
    return factor


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}; expected a positive whole number")
    return n


def _field(text: str) -> tuple[str, str]:
    """``--field FIELD=NAME``: a record's field read from the logs' field ``NAME``."""
    from eventlog import RECORD_FIELDS

    field, eq, name = text.partition("=")
    field, name = field.strip(), name.strip()
    if not eq or not name or field not in RECORD_FIELDS:
        raise argparse.ArgumentTypeError(
            f"{text!r}; expected FIELD=NAME, FIELD one of {', '.join(RECORD_FIELDS)} and NAME "
            "the field of the logs' records that holds it (e.g. start=created)")
    return field, name


def _fields(args: argparse.Namespace) -> dict[str, str] | None:
    """The ``--field`` options as replay takes them; a field given twice is a usage error."""
    if not args.field:
        return None
    fields: dict[str, str] = {}
    for field, name in args.field:
        if field in fields:
            raise UsageError("--field", f"{field} is given twice ({fields[field]!r} and "
                             f"{name!r}); expected each field once")
        fields[field] = name
    return fields


def _configure_replay(p: argparse.ArgumentParser) -> None:
    from eventlog import BAD_RECORD_MODES, FORMATS, TIME_FORMATS
    from operators.policies import policy_names
    from engine.times import TIME_UNITS

    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="event logs: files (compressed too: .gz, .bz2, .xz), directories of "
                        "parts (as Spark writes them), or - for standard input")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="the logs' format, for names that do not say it (app.log, -): every "
                        "LOG is read as this (default: from each name's extension; - is "
                        "jsonl)")
    p.add_argument("--field", action="append", type=_field, default=None,
                   metavar="FIELD=NAME",
                   help="read a record's FIELD from the logs' field NAME, e.g. start=created "
                        "source=name payload=message for a logging JSON log (repeat for "
                        "several); a record without a kind is then an insert")
    p.add_argument("--merge", choices=("auto", "arrival", "time"), default="auto",
                   help="how several logs are merged: arrival: by their seq/arrival order "
                        "keys; time: the next record from the log furthest behind in time; "
                        "auto (default): time when no log carries seq or arrival (one log "
                        "per device), else arrival. The summary says which ran")
    p.add_argument("--delay", default=None, type=duration, metavar="D",
                   help="CTI delay, with its unit: 5m, 90s, 1h30m, 250ms, 300ns, PT5M, "
                        "'5 minutes' (default: 5m for goldilocks, 0 otherwise)")
    p.add_argument("--policy", default="goldilocks", type=_policy_name, metavar="P",
                   help=f"{' | '.join(policy_names())} (any installed policy; default "
                        "goldilocks); quantile:K follows the K-th most advanced input")
    p.add_argument("--max-ahead", default=None, type=duration, metavar="D",
                   help="with goldilocks: an input's CTI counts for at most the other "
                        "inputs' median plus D until they corroborate it")
    p.add_argument("--on-late", choices=("drop", "adjust"), default="drop",
                   help="what happens to late inserts (default drop)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="output event log (default: stdout; '-' is stdout too)")
    p.add_argument("--late", default=None, metavar="FILE", help="late records (JSON Lines)")
    p.add_argument("--speed", default="max", type=_speed, metavar="max|FACTOR",
                   help="max (default) or a factor pacing by recorded arrival times (1 = real time)")
    p.add_argument("--bad-records", choices=BAD_RECORD_MODES, default=None,
                   help="fail (default): stop at the first bad record; skip: count it and go "
                        "on; quarantine: count it and write it to --quarantine FILE")
    p.add_argument("--quarantine", default=None, metavar="FILE",
                   help="where bad records go (implies --bad-records quarantine)")
    p.add_argument("--time-unit", choices=tuple(TIME_UNITS), default=None,
                   help="unit of the logs' integer times (default: nanoseconds, refusing "
                        "integers that look like epoch s, ms or us)")
    p.add_argument("--time-format", choices=TIME_FORMATS, default="ns",
                   help="times in --out and --late: ns (default, integer nanoseconds) or iso "
                        "(RFC 3339 UTC)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="draw event time against arrival, the CTI and late events "
                        "(.png, .svg, .pdf, …; needs the plot extra)")
    p.add_argument("--plot-tz", default=None, metavar="ZONE",
                   help="with --plot: show event times in this time zone (e.g. Europe/Paris; "
                        "default UTC)")
    p.add_argument("--no-summary", action="store_true", help="do not print the summary table")
    c = p.add_argument_group("checkpoints", "resume an interrupted replay: run the same command "
                             "again (docs/checkpoint.md)")
    c.add_argument("--checkpoint", default=None, metavar="FILE",
                   help="keep a checkpoint in FILE; if FILE exists, resume from it (removed "
                        "when the replay completes; --out and --late must be files). With "
                        "--window the open windows, their accumulators and the clocks are "
                        "in it too")
    c.add_argument("--checkpoint-every", default=None, type=_positive, metavar="N",
                   help="records between checkpoints (default 100000)")
    w = p.add_argument_group("windows", "one row per window closed by the policy's CTIs "
                             "instead of the merged events (docs/replay.md)")
    w.add_argument("--window", default=None, type=duration, metavar="D",
                   help="window size: tumbling windows of D (1m, 30s, PT5M, …)")
    w.add_argument("--hop", default=None, type=duration, metavar="D",
                   help="hopping windows: one of size --window starting every D")
    w.add_argument("--agg", action="append", default=None, metavar="KIND[:FIELD]",
                   help="count, or sum|mean|min|max|count of a payload field, e.g. "
                        "mean:temperature; repeat for several (default: count)")
    w.add_argument("--key", default=None, metavar="source|FIELD",
                   help="one window per key: 'source' (the input) or a payload field "
                        "holding a string (default: one window for all)")
    w.add_argument("--clock", default="merged", choices=("merged", "key"),
                   help="merged (default): the policy's CTIs over all inputs close every "
                        "window; key: with --key source, each input's own CTIs, through "
                        "its own copy of the policy, close its windows")
    w.add_argument("--final-cti", action="store_true",
                   help="the logs are complete: after the last record a CTI at +inf closes "
                        "every window still open, and its row is written (merged clock)")
    w.add_argument("--idle-after", default=None, type=duration, metavar="D",
                   help="with --clock key: evict an input whose time falls more than D "
                        "behind the most advanced input's clock (its open windows are "
                        "written then)")


def _rewrite_replay(argv: list[str]) -> list[str]:
    """``--bad-records quarantine FILE``, the spelling from before ``--quarantine``, means
    ``--bad-records quarantine --quarantine FILE`` when no ``--quarantine`` is given: the only
    reading that is valid, as ``quarantine`` without a file is refused."""
    if any(a == "--quarantine" or a.startswith("--quarantine=") for a in argv):
        return argv
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == "--bad-records=quarantine":
            at = i + 1
        elif arg == "--bad-records" and i + 1 < len(out) and out[i + 1] == "quarantine":
            at = i + 2
        else:
            continue
        if at < len(out) and not out[at].startswith("-"):
            out.insert(at, "--quarantine")
        break
    return out


def _run_windows(args: argparse.Namespace, mode: str) -> int:
    """``replay --window``: rows of windows instead of events (``goldilocks.windowed``)."""
    from goldilocks.windowed import replay_windows
    from operators.windows import hopping_spec, parse_fold

    for flag, given in (("--plot", args.plot), ("--quarantine", args.quarantine),
                        ("--speed", args.speed != "max")):
        if given:
            raise UsageError(flag, "is not available with --window")
    try:
        aggregates = [parse_fold(a) for a in args.agg or ["count"]]
    except InputError as err:
        raise UsageError("--agg", str(err)) from None
    if args.hop is not None:
        try:
            hopping_spec(args.window, args.hop)
        except InputError as err:
            raise UsageError("--hop", str(err)) from None
    out = sys.stdout.buffer if args.out in (None, "-") else args.out
    checkpointing: dict = {}
    if args.checkpoint is not None:  # TS §8.3: the windows' state is in the checkpoint
        from goldilocks.resume import DEFAULT_EVERY

        if not isinstance(out, str):
            raise UsageError("--out", "a replay with --checkpoint writes to a file (it "
                             "resumes it): give --out FILE")
        checkpointing = {"checkpoint": args.checkpoint,
                         "checkpoint_every": args.checkpoint_every or DEFAULT_EVERY}
    stats = replay_windows(args.logs, window=args.window, hop=args.hop, aggregates=aggregates,
                           key=args.key, delay=args.delay, policy=args.policy,
                           on_late=args.on_late, out=out, late=args.late, bad_records=mode,
                           time_unit=args.time_unit, time_format=args.time_format,
                           clock=args.clock, idle_after=args.idle_after, merge=args.merge,
                           format=args.format, fields=_fields(args),
                           final_cti=args.final_cti, **checkpointing)
    if not args.no_summary:
        from engine.times import format_duration_ns
        print(f"windows of {format_duration_ns(stats.size)}"
              + (f" every {format_duration_ns(stats.hop)}" if stats.hop != stats.size else "")
              + (" by each input's clock" if args.clock == "key" else "")
              + f" ({stats.path} path): {stats.windows} written, {stats.open} still open at "
              f"the end" + (" (--final-cti writes them)" if stats.open and args.clock == "merged"
                            and not args.final_cti else "")
              + f", at most {stats.peak_open} open; {stats.records} records, "
              f"{stats.inserts} inserts in windows, {stats.late} late "
              f"({stats.policy}, delay {format_duration_ns(stats.delay)}); "
              f"{stats.seconds:.2f}s", file=sys.stderr)
    for field in stats.missing_fields:  # a typo gives null values: say so, always
        seen = ", ".join(stats.payload_fields) or "none"
        print(f"goldilocks replay: warning: no insert has a number in the payload field "
              f"{field!r} (--agg); payload fields seen: {seen}", file=sys.stderr)
    return 0


def _run_replay(args: argparse.Namespace) -> int:
    with terminated_as_interrupted():  # SIGTERM cleans up as Ctrl-C does
        return _replay_command(args)


def _replay_command(args: argparse.Namespace) -> int:
    from goldilocks.outputs import AtomicOutput, check_outputs
    from goldilocks.replay import replay, resolve
    from goldilocks.resume import DEFAULT_EVERY

    mode = args.bad_records or ("quarantine" if args.quarantine is not None else "fail")
    if mode == "quarantine" and args.quarantine is None:
        raise UsageError("bad_records", "quarantine needs a file: --quarantine FILE")
    if mode != "quarantine" and args.quarantine is not None:
        raise UsageError("quarantine", f"{args.quarantine} is for --bad-records quarantine, "
                         f"but --bad-records is {mode}")
    try:
        policy = resolve(args.policy, args.delay, args.on_late, args.max_ahead)
    except InputError as err:
        flag = ("--max-ahead" if args.max_ahead is not None and "max_ahead" in str(err)
                else "delay" if args.delay is not None else "policy")
        raise UsageError(flag, str(err)) from None
    if args.checkpoint_every is not None and args.checkpoint is None:
        raise UsageError("--checkpoint-every", "goes with --checkpoint FILE")
    if args.window is not None:
        if args.max_ahead is not None:  # the built policy carries it
            args.policy, args.delay = policy, None
        return _run_windows(args, mode)
    for flag, given in (("--hop", args.hop), ("--agg", args.agg), ("--key", args.key),
                        ("--idle-after", args.idle_after),
                        ("--final-cti", args.final_cti or None),
                        ("--clock", None if args.clock == "merged" else args.clock)):
        if given is not None:
            raise UsageError(flag, "goes with --window D (the window size)")
    out = sys.stdout.buffer if args.out in (None, "-") else args.out
    check_outputs(args.logs, {"--out": out, "--late": args.late,
                              "--quarantine": args.quarantine, "--plot": args.plot,
                              "--checkpoint": args.checkpoint})
    checkpointing: dict = {}
    if args.checkpoint is not None:
        for flag, given in (("--plot", args.plot), ("--quarantine", args.quarantine),
                            ("--speed", args.speed != "max")):
            if given:
                raise UsageError(flag, "is not available with --checkpoint")
        if not isinstance(out, str):
            raise UsageError("--out", "a replay with --checkpoint writes to a file (it "
                             "resumes it): give --out FILE")
        checkpointing = {"checkpoint": args.checkpoint,
                         "checkpoint_every": args.checkpoint_every or DEFAULT_EVERY}
    plot_out = plot_format = None
    if args.plot_tz is not None and not args.plot:
        raise UsageError("--plot-tz", "goes with --plot FILE")
    if args.plot:
        from goldilocks.plot import plot_format as _format

        plot_format = _format(args.plot)  # matplotlib there, and a suffix it writes
        if args.plot_tz is not None:
            from goldilocks.plot import time_zone

            time_zone(args.plot_tz)  # a zone that exists, before the work
        plot_out = AtomicOutput(args.plot, "plot")  # writable: checked before the replay
    ok = False
    try:
        stats = replay(args.logs, policy=policy, out=out, late=args.late, speed=args.speed,
                       bad_records=mode, quarantine=args.quarantine, progress=True,
                       plot=plot_out is not None, time_unit=args.time_unit,
                       time_format=args.time_format, merge=args.merge, format=args.format,
                       fields=_fields(args), **checkpointing)
        if plot_out is not None:
            from goldilocks.plot import plot_replay

            plot_replay(stats, plot_out.file, format=plot_format, tz=args.plot_tz)
            plot_out.commit()
        ok = True
    finally:
        if plot_out is not None and not ok:
            plot_out.discard()
    if args.merge == "time" and len(stats.files) == 1:
        print(f"goldilocks replay: note: --merge time with one log changes nothing: its "
              f"records are replayed in the file's order", file=sys.stderr)
    if not args.no_summary:
        print_summary(stats, late=args.late)
    return 0


#: the share of inserts late above which the summary says how the logs were merged
MOSTLY_LATE = 0.5


def _notes(stats: Any, late: Any) -> list[str]:
    """The lines under the summary table: the files, how they were merged, where the late
    records went, and a hint when most inserts came out late."""
    notes = []
    files = stats.files
    shown = [f"{f.path} ({f.records} records" + (", empty" if not f.records and not f.skipped
                                                 else "")
             + (f", {f.skipped} bad" if f.skipped else "") + ")" for f in files[:8]]
    more = f" and {len(files) - 8} more" if len(files) > 8 else ""
    notes.append(f"{len(files)} log{'s' if len(files) != 1 else ''}: {', '.join(shown)}{more}")
    positions = all(f.order in ("position", None) for f in files)
    if stats.merge == "time":
        why = (" (no log carries seq or arrival: each is taken as one device's log; "
               "--merge arrival reads them by position)" if stats.merge_asked == "auto" else "")
        notes.append(f"merged by time{why}")
    elif stats.merge == "arrival" and len(files) > 1:
        notes.append("merged by position (no log carries seq or arrival)" if positions
                     else "merged by the logs' arrival order (seq/arrival)")
    inserts = stats.inserts
    if inserts and stats.late > MOSTLY_LATE * inserts:
        share = f"most inserts were late ({stats.late} of {inserts})"
        if stats.merge == "arrival" and positions:
            notes.append(f"{share}: the logs were read round-robin by position; if each is "
                         "one device's log, --merge time merges them by time")
        elif stats.merge == "file" and positions:
            notes.append(f"{share}: the records were replayed in the file's order; if it "
                         "joins several devices' logs one after another, replay them as "
                         "separate files (merged by time)")
        else:
            notes.append(f"{share}: a longer --delay tolerates more skew")
    if stats.late:
        if late is None:
            notes.append(f"the {stats.late} late inserts were counted, not kept: "
                         "--late FILE keeps them")
        elif isinstance(late, str) and late != "-":
            notes.append(f"the {stats.late} late inserts are in {late}")
    return notes


def print_summary(stats, file=None, *, late: Any = None) -> None:
    """The per-input summary table (rich) on stderr.

    One row per input and a total row that is the sum of the rows: ``records`` counts every
    record of the input (inserts, CTIs, its join and leave records), so the rows add up to
    the records read. ``CTIs`` are the CTIs it sent, ``CTIs out`` the output CTIs its records
    caused (the policy advanced time on them); ``last CTI in`` is the last CTI it sent,
    ``last CTI out`` the last output CTI it caused — in the total row, the output's final
    CTI. Times are RFC 3339 UTC, all with the same number of fraction digits: the fewest
    (0, 3, 6 or 9) that show every time of the table exactly.
    """
    from rich.console import Console
    from rich.table import Table

    from engine.times import MAX_TIME, MIN_TIME, format_duration_ns, format_rfc3339, \
        fraction_digits

    times = [t for s in stats.inputs for t in (s.final_cti, s.last_cti_out) if t is not None]
    digits = fraction_digits(t for t in times if MIN_TIME < t < MAX_TIME)

    def when(t: int | None) -> str:
        if t is None:
            return "—"
        if t >= MAX_TIME or t <= MIN_TIME:
            return "+inf" if t > 0 else "-inf"
        return format_rfc3339(t, digits)

    title = (f"replay: {stats.policy}, delay {format_duration_ns(stats.delay)}, "
             f"on late {stats.on_late} ({stats.path} path)")
    table = Table()
    columns = ("input", "records", "CTIs", "late", "adjusted", "emitted", "CTIs out",
               "last CTI in", "last CTI out")
    for col in columns:
        table.add_column(col, justify="left" if col in ("input", "last CTI in", "last CTI out")
                         else "right")
    for s in stats.inputs:
        table.add_row("(merged)" if s.name is None else s.name, str(s.records), str(s.ctis),
                      str(s.late), str(s.adjusted), str(s.emitted), str(s.ctis_out),
                      when(s.final_cti), when(s.last_cti_out))
    table.add_section()
    table.add_row("total", str(stats.records), str(sum(s.ctis for s in stats.inputs)),
                  str(stats.late), str(stats.adjusted), str(stats.emitted),
                  str(stats.ctis_emitted), "", when(stats.final_cti), style="bold")
    out = file or sys.stderr
    console = Console(file=out, width=None if out.isatty() else 160)
    console.print(title, highlight=False)  # its own line: not padded to the table's width
    console.print(table)
    for note in _notes(stats, late):
        console.print(note, highlight=False, soft_wrap=True)
    extra = []
    if stats.skipped:
        extra.append(f"{stats.skipped} bad records skipped")
    if stats.quarantined:
        extra.append(f"{stats.quarantined} bad records quarantined")
    per_file = [f"{f.path}: {f.skipped}" for f in stats.files if f.skipped]
    if per_file:
        extra.append("by file: " + ", ".join(per_file))
    edges = stats.edges
    if edges is not None and (edges.opened or edges.unmatched or edges.dropped):
        extra.append(_edges_line(edges))  # TS §7.5
    extra.append(f"{stats.records} records in {stats.seconds:.2f}s")
    console.print("; ".join(extra), highlight=False)


def _edges_line(e: Any) -> str:
    """The edges' part of replay's summary (TS §7.5): what opened and closed, and every
    unmatched kind that occurred."""
    parts = [f"edges: {e.opened} opened, {e.closed} closed"]
    for count, what in ((e.moved, "ends moved to the CTI"), (e.dropped, "ends dropped with "
                        "their start"), (e.no_start, "ends without a start"),
                        (e.duplicate, "duplicate starts"), (e.full, "starts refused (full)"),
                        (e.not_closed, "never closed")):
        if count:
            parts.append(f"{count} {what}")
    return ", ".join(parts)


register_command(Command("replay", "replay recorded event logs through a CTI policy",
                         _configure_replay, _run_replay, description=_REPLAY_HELP,
                         rewrite=_rewrite_replay))
register_command(SERVE)
