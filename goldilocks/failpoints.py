"""Failpoints: a testing facility that kills the process at a named point of the code that
makes outputs durable, so that a test can crash a real server or replay at the worst moment.

``GOLDILOCKS_FAILPOINT="NAME:N"`` (several: ``"NAME:N,OTHER:M"``) makes the ``N``-th call of
``failpoint("NAME")`` send the process ``SIGKILL`` — the same death as ``kill -9``: no
``finally`` block, no buffer flushed, no file closed. Unset (as in production), a failpoint
costs one dictionary lookup. The points (``docs/checkpoint.md``, "Failpoints"):

- ``checkpoint.write``: half of a checkpoint's bytes are in its temporary file, the rest
  not yet (a torn checkpoint write);
- ``checkpoint.rename``: the outputs and the new checkpoint are ``fsync``-ed, the checkpoint
  not yet renamed over the old one;
- ``part.publish``: a part of ``serve --out-dir`` is about to be renamed into place, after
  the checkpoint that covers it (with several parts to publish, between two of them);
- ``part.published``: the parts a checkpoint covers are in place, the devices not yet told.

The variable is read once, when this module is imported.
"""

from __future__ import annotations

import os
import signal

__all__ = ["failpoint", "ENV", "POINTS"]

#: The environment variable naming the armed points.
ENV = "GOLDILOCKS_FAILPOINT"
#: Every point the code has (an armed name not among them is refused at import).
POINTS = ("checkpoint.write", "checkpoint.rename", "part.publish", "part.published")


def _armed(text: str) -> dict[str, int]:
    armed: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, count = item.partition(":")
        if name not in POINTS or not count.isdigit() or int(count) < 1:
            raise ValueError(f"{ENV}={text!r}: {item!r}; expected NAME:N with NAME one of "
                             f"{', '.join(POINTS)} and N >= 1")
        armed[name] = int(count)
    return armed


_ARMED = _armed(os.environ.get(ENV, ""))


def failpoint(name: str) -> None:
    """Count a pass through point ``name``; on the armed count, die by ``SIGKILL``."""
    if not _ARMED:
        return
    left = _ARMED.get(name)
    if left is None:
        return
    if left > 1:
        _ARMED[name] = left - 1
        return
    os.kill(os.getpid(), signal.SIGKILL)
