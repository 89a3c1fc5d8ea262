"""Positions: how many of each device's events the server has taken, and how many are durable —
the server's side of "each event exactly once" (``docs/protocol.md``, "Exactly once").

A device numbers its events 0, 1, 2, … in the order it sends them, across reconnects and
restarts of the server, as Kafka's idempotent producer numbers its records. The ``Ledger``
keeps, per device name, its **position** (``taken``: how many of its events the server has
dealt with — merged into the union, or refused for a reason that sending again would not
cure) and its **durable** position (how many of those a checkpoint covers whose files are on
disk; without a checkpoint, how many are merged and handed to the outputs).

Any way in shares it: the ``publish`` streams of WebSocket and TCP (``devices``) and any
other ingress of the same server (a broker's, whose acknowledgements must follow durability)
call ``take`` as the union accepts a device's events and ``watch`` (one device) or ``listen``
(every device) to be told, after each checkpoint, the positions that became durable.

The positions at a checkpoint's cut are part of the checkpoint (``snapshot``/``load``), so
after a restart each device's position is what the restored union has of it. The positions of
devices not publishing are kept for the ``keep`` most recently active ones; an older one is
forgotten (a device coming back after that starts at 0, as a new one). Memory: O(devices
publishing + ``keep``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from operators.checkpoint import CheckpointError

__all__ = ["Ledger", "DEFAULT_KEEP"]

#: Positions of devices not publishing kept, at most (the least recently active go first).
DEFAULT_KEEP = 65_536

Listener = Callable[[Mapping[str, int]], None]


class Ledger:
    """Per-device positions and their durability (see the module doc). Runs on one thread
    (the server's loop)."""

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        if not isinstance(keep, int) or keep < 0:
            raise ValueError(f"ledger: keep must be an int >= 0, got {keep!r}")
        self.keep = keep
        self._taken: OrderedDict[str, int] = OrderedDict()  # least recently active first
        self._durable: dict[str, int] = {}
        self._watchers: dict[str, list[Callable[[int], None]]] = {}
        self._listeners: list[Listener] = []
        self.forgotten = 0

    # ---------------------------------------------------------------- positions
    def position(self, name: str) -> int:
        """How many of ``name``'s events the server has (0 for a device it does not know)."""
        return self._taken.get(name, 0)

    def durable(self, name: str) -> int:
        return self._durable.get(name, 0)

    def take(self, name: str, n: int) -> int:
        """``n`` more of ``name``'s events are dealt with; its new position."""
        taken = self._taken
        position = taken.get(name, 0) + n
        taken[name] = position
        taken.move_to_end(name)
        return position

    def __len__(self) -> int:
        return len(self._taken)

    # ---------------------------------------------------------------- durability
    def watch(self, name: str, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(position)`` whenever ``name``'s durable position advances; returns
        the function that stops it. A watched device's position is never forgotten."""
        self._watchers.setdefault(name, []).append(callback)
        self._taken.setdefault(name, 0)
        self._taken.move_to_end(name)

        def stop() -> None:
            callbacks = self._watchers.get(name)
            if callbacks is not None and callback in callbacks:
                callbacks.remove(callback)
                if not callbacks:
                    del self._watchers[name]
        return stop

    def listen(self, callback: Listener) -> Callable[[], None]:
        """Call ``callback({name: position})`` with every position that advanced, after each
        checkpoint (or, without one, each time the outputs have taken what was merged)."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners \
            else None

    def snapshot(self) -> dict[str, int]:
        """The positions at this instant (a checkpoint's cut), and the positions of those
        forgotten since are not in it."""
        self._forget()
        return dict(self._taken)

    def committed(self, positions: Mapping[str, int]) -> dict[str, int]:
        """``positions`` (a ``snapshot``) are durable now: note them and tell the watchers
        and listeners of each that advanced. Returns those."""
        durable = self._durable
        advanced = {}
        for name, position in positions.items():
            if position > durable.get(name, 0):
                durable[name] = position
                advanced[name] = position
        for name in [n for n in durable if n not in self._taken]:
            del durable[name]  # forgotten meanwhile
        for name, position in advanced.items():
            for callback in list(self._watchers.get(name, ())):
                callback(position)
        if advanced:
            for listener in list(self._listeners):
                listener(advanced)
        return advanced

    def _forget(self) -> None:
        taken = self._taken
        watched = self._watchers
        excess = len(taken) - len(watched) - self.keep
        if excess <= 0:
            return
        for name in list(taken):
            if excess <= 0:
                break
            if name not in watched:
                del taken[name]
                self._durable.pop(name, None)
                self.forgotten += 1
                excess -= 1

    # ---------------------------------------------------------------- checkpoints
    def load(self, positions: Any, where: str) -> None:
        """Positions a checkpoint recorded: each is both taken and durable."""
        if not isinstance(positions, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                and v >= 0 for k, v in positions.items()):
            raise CheckpointError(f"{where}: malformed device positions")
        self._taken = OrderedDict(positions)
        self._durable = dict(positions)
