"""Subcommands of the ``goldilocks`` command line: what one is, and where they are found.

A subcommand is a ``Command``: a name, a help line, a function that adds its arguments and one
that runs it and returns the exit status. The built-in ones (``replay``, ``serve``) are
imported by ``goldilocks.cli``; another package adds its own by declaring a ``Command`` in the
``goldilocks.commands`` entry-point group (``demo = "mypackage.demo:COMMAND"``) or by calling
``register_command``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Callable

__all__ = ["Command", "register_command", "commands", "ENTRY_POINT_GROUP", "duration",
           "negative_values"]

#: the entry-point group through which other packages add subcommands
ENTRY_POINT_GROUP = "goldilocks.commands"


@dataclass(frozen=True)
class Command:
    """A subcommand: ``configure(parser)`` adds its arguments, ``run(args) -> exit status``."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None
    #: rewrites the command's own arguments before parsing (a spelling kept for
    #: compatibility that argparse cannot express); ``None``: as given
    rewrite: Callable[[list[str]], list[str]] | None = None


_COMMANDS: dict[str, Command] = {}


def duration(text: str) -> str:
    """The ``type`` of a duration option (``--delay 5m``): the text as the user wrote it (so
    that messages quote it) once ``engine.times.to_duration_ns`` reads it. On the command line
    a duration needs its unit: ``--delay 300`` is a usage error naming ``300s``, ``5m``,
    ``PT5M`` and ``300ns``, as is a negative one ("must not be negative")."""
    from engine.errors import InputError
    from engine.times import to_duration_ns

    try:
        to_duration_ns(text, what="duration")
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("duration: ")) from None
    return text.strip()


def negative_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--delay -5m`` as ``--delay=-5m`` for the options that take one value: argparse takes
    a value that starts with ``-`` for an option and would say "expected one argument";
    joined, the value reaches the option's own check, which says what is wrong with it (a
    duration: "must not be negative")."""
    takes = {flag for action in parser._actions
             if action.option_strings and action.nargs is None
             for flag in action.option_strings}
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if (arg in takes and i + 1 < len(argv) and argv[i + 1][:1] == "-"
                and argv[i + 1][1:2].isdigit()):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def register_command(command: Command) -> Command:
    """Add a subcommand (a later registration under the same name replaces the earlier)."""
    if command is None:
        raise TypeError("register_command(None); expected a Command")
    _COMMANDS[command.name] = command
    return command


def commands() -> dict[str, Command]:
    """The registered subcommands, built-in and from the entry-point group, by name."""
    found = dict(_COMMANDS)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in found:
            cmd = ep.load()
            if isinstance(cmd, Command):
                found[ep.name] = cmd
    return found
