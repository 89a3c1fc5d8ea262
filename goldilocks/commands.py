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

__all__ = ["Command", "register_command", "commands", "ENTRY_POINT_GROUP"]

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
