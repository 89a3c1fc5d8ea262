"""Waiting in tests for a state that no signal announces (another thread's progress): check a
condition every couple of milliseconds until it holds, and fail after a timeout."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float,
               what: str = "condition not reached") -> None:
    """Return once ``predicate()`` is truthy; fail the test after ``timeout`` s."""
    tick = threading.Event()
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        tick.wait(0.002)
