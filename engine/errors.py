"""A small exception taxonomy; every message names where and what was expected.

- ``GoldilocksError``: the root.
- ``SpecViolation``: another party broke a Reactive Streams rule (``rule`` holds ``"RS §x.y"``).
- ``InputError``: bad input from a user or a file; ``TimeFormatError`` and ``BadRecordError``
  are its kinds. A ``BadRecordError`` carries ``path``, ``line`` and ``field``.
- ``UsageError``: an argument that cannot be used as given (an output that is an input, a
  path that cannot be written, a missing optional extra); ``option`` names the argument. The
  command line reports it as a usage error (exit status 2), before any work starts.
- ``ClosedError``: an operation on something that was closed on purpose (as opposed to broken).
- ``RejectedError``: an executor refused work (shut down).
- ``TooSlowError``: a subscriber fell further behind a live stream than its bound allows and
  was cut off; ``position`` is where it was, so it can come back from there.
"""

from __future__ import annotations

__all__ = [
    "GoldilocksError",
    "SpecViolation",
    "InputError",
    "TimeFormatError",
    "BadRecordError",
    "UsageError",
    "ClosedError",
    "RejectedError",
    "TooSlowError",
]


class GoldilocksError(Exception):
    """Root of every error this project raises on purpose."""


class SpecViolation(GoldilocksError):
    """A party broke a rule of the Reactive Streams specification."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule


class InputError(GoldilocksError, ValueError):
    """Bad input: the message says where (input, file and line, field) and what was expected."""


class TimeFormatError(InputError):
    """A value that is not an instant or a duration of an accepted form."""


class BadRecordError(InputError):
    """A malformed record in an event log, located by file and line."""

    def __init__(self, path: str, line: int, message: str, *, field: str | None = None) -> None:
        where = f"{path}:{line}"
        if field:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.field = field
        self.reason = message


class UsageError(InputError):
    """An argument that cannot be used as given; ``option`` names it (``"out"``, ``"plot"``)
    and ``reason`` says why and what to do instead."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.reason = message


class ClosedError(GoldilocksError):
    """The target was closed deliberately; nothing is broken."""


class RejectedError(GoldilocksError, RuntimeError):
    """An executor refused to run a task (for example, it was shut down)."""


class TooSlowError(GoldilocksError):
    """A subscriber of a live stream fell more than ``bound`` elements behind and was cut off
    (the stream's producers are never slowed by it). ``position``: the absolute index of the
    first element it had not taken, where it can come back from."""

    def __init__(self, message: str, *, position: int, bound: int) -> None:
        super().__init__(message)
        self.position = position
        self.bound = bound
