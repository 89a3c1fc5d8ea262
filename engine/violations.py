"""One hook for Reactive Streams violations committed by *other* parties.

A subscriber that raises from ``on_next`` (RS §2.13), a publisher that signals beyond demand
(RS §1.1) or after a terminal signal (RS §1.7), a second ``on_subscribe`` (RS §2.5): the party
that notices calls ``report_violation``. By default the violation is logged on the
``goldilocks.violations`` logger; ``set_violation_handler`` installs another handler, and
``collect_violations()`` gathers them (the test suite runs strict: any violation a test did not
expect fails it).

The reporter never raises into the producer's thread: a handler that raises is itself logged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from engine.errors import SpecViolation

__all__ = ["report_violation", "set_violation_handler", "collect_violations", "Violation"]

_log = logging.getLogger("goldilocks.violations")


class Violation(SpecViolation):
    """A reported violation: ``rule``, the message, the offending ``party`` and the ``cause``."""

    def __init__(self, rule: str, message: str, party: object = None,
                 cause: BaseException | None = None) -> None:
        super().__init__(rule, message)
        self.party = party
        self.cause = cause


def _log_violation(violation: Violation) -> None:
    _log.error("%s (party: %r)", violation, violation.party, exc_info=violation.cause)


_handler: Callable[[Violation], None] = _log_violation
_handler_lock = threading.Lock()


def set_violation_handler(handler: Callable[[Violation], None] | None) -> Callable[[Violation], None]:
    """Install ``handler`` (``None`` restores logging); returns the previous one."""
    global _handler
    with _handler_lock:
        previous = _handler
        _handler = handler or _log_violation
    return previous


def report_violation(rule: str, message: str, *, party: object = None,
                     cause: BaseException | None = None) -> None:
    """Report that ``party`` broke ``rule`` (``"RS §2.13"``). Never raises."""
    violation = Violation(rule, message, party, cause)
    try:
        _handler(violation)
    except Exception:  # a broken handler must not break the stream
        _log.exception("violation handler failed on %s", violation)


@contextlib.contextmanager
def collect_violations() -> Iterator[list[Violation]]:
    """Gather every violation reported inside the block (from any thread) into a list."""
    found: list[Violation] = []
    lock = threading.Lock()

    def record(violation: Violation) -> None:
        with lock:
            found.append(violation)

    previous = set_violation_handler(record)
    try:
        yield found
    finally:
        set_violation_handler(previous)
