"""What makes a server's output survive it: its files, the devices' positions and its checkpoint,
kept consistent with one another (``docs/checkpoint.md``, "Serve").

``Durability`` owns the parts of ``--out-dir`` (``goldilocks.parts.PartWriter``, one for the
merged stream, one for late records), the devices' positions (``ledger.Ledger``) and the
checkpoint file. Its state is saved *inside* the union's checkpoint, as a stage of kind
``"serve"`` (``snapshot``, read at the union's cut): the parts' record (the open part and its
length, the closed parts waiting, the next part and ``seq`` of each), every device's position,
the merged stream's position, and the identity of the out-dir (a random id written to
``<out-dir>/.goldilocks-serve`` when the checkpoint is first made).

A **commit** (``commit``: every ``checkpoint_every``, and at shutdown) takes the union's
checkpoint — the cut — then, in a thread: ``fsync``s the parts it names, writes the checkpoint
atomically (beside it, ``fsync``, rename, ``fsync`` of the directory); then publishes the
closed parts it covers (rename); then raises the durable positions: the ledger tells every
way in (``Ledger.watch``/``listen``) which devices' events are durable now, and the server
tells its subscribers how far the merged stream is. A crash anywhere in between leaves the
previous checkpoint and the files it names, or the new ones; a restart finishes what a commit
started. Without a checkpoint there is nothing to make durable beyond the outputs: a commit
(every ``TICK`` s) hands what is written to the operating system and raises the positions of
what is merged.

At start, ``start`` restores the union from the checkpoint if there is one and checks the
out-dir against it before anything is touched: the out-dir's identity, the parts the record
needs (present, at least as long as recorded), and no part published beyond it. A mismatch
is one line (``CheckpointError``) saying what differs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Callable
from typing import Any

import orjson

from engine.errors import ClosedError
from engine.policy import Policy
from goldilocks.failpoints import failpoint
from goldilocks.net.ledger import Ledger
from goldilocks.outputs import remove_stale_temps, write_atomic
from goldilocks.parts import PartSubscriber, PartWriter
from operators.checkpoint import CheckpointError, field
from operators.union import Union

__all__ = ["Durability", "MARKER", "TICK", "STAGE"]

_log = logging.getLogger("goldilocks.net")

#: The out-dir's identity file (written when a checkpoint is first made for it).
MARKER = ".goldilocks-serve"
#: The name of the server's state among the union checkpoint's stages.
STAGE = "serve"
#: Seconds between commits without a checkpoint (durable: merged and handed to the outputs).
TICK = 0.2


class _Stage:
    """The server's state as a stage of the union's checkpoint (``checkpoint_kind``)."""

    checkpoint_kind = "serve"

    def __init__(self, owner: Durability) -> None:
        self.owner = owner
        self.loaded: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None

    def snapshot(self) -> dict[str, Any]:
        if not self.owner.started:
            return self.loaded or {}
        self.last = self.owner.mark()
        return self.last

    def load(self, state: Any, where: str) -> None:
        if not state:  # the state before a load (put back if another stage refused)
            self.loaded = None
            return
        where = f"{where} (the server's record)"
        field(state, "id", (str, type(None)), where)
        field(state, "out_dir", (str, type(None)), where)
        field(state, "position", int, where)
        field(state, "positions", dict, where)
        for key in ("events", "late"):
            field(state, key, (dict, type(None)), where)
        self.loaded = state


class Durability:
    """A server's files, positions and checkpoint (see the module doc). Runs on the server's
    loop; the file system's slow calls run in threads."""

    def __init__(self, *, name: str, out_dir: str | None, checkpoint: str | None,
                 part_events: int, part_seconds: float | None, keep_positions: int) -> None:
        self.name = name
        self.out_dir = None if out_dir is None else os.path.realpath(out_dir)
        self.checkpoint = checkpoint
        self.part_events = part_events
        self.part_seconds = part_seconds
        self.ledger = Ledger(keep_positions)
        self.events: PartWriter | None = None
        self.late: PartWriter | None = None
        self.id: str | None = None
        self.position = 0         # the merged stream's position at start
        self.restored = False
        self.started = False
        self.checkpoints = 0      # checkpoints written
        self.misses = 0           # commits that could not be made (no cut in time, an error)
        self.durable_position = 0  # of the merged stream: below it nothing changes
        self.output_position: Callable[[], int] = lambda: self.position
        self._stage = _Stage(self)
        self._lock = asyncio.Lock()
        self.union: Union | None = None

    # ---------------------------------------------------------------- start
    def start(self, policy: Policy, config: dict[str, Any]) -> Union:
        """The union — restored from the checkpoint if there is one, checked against the
        out-dir first — and the writers, continuing where the checkpoint (or, without one,
        the out-dir) says."""
        record = None
        if self.checkpoint is not None:
            for name in remove_stale_temps(self.checkpoint):  # a write a crash cut short
                _log.info("%s: removed %s, a checkpoint write cut short", self.name, name)
        if self.checkpoint is not None and os.path.exists(self.checkpoint):
            with open(self.checkpoint, "rb") as f:
                data = f.read()
            try:
                # TS §8.1: devices re-attach by name as they publish again (union.add)
                union = Union.restore(data, policy=policy, stages={STAGE: self._stage},
                                      **config)
            except CheckpointError as err:
                if f"holds no stage {STAGE!r}" in str(err):
                    raise CheckpointError(
                        f"{self.checkpoint}: written by a server that kept no record of its "
                        "files and devices' positions (an earlier version); remove it to "
                        "start over") from None
                raise CheckpointError(f"{self.checkpoint}: {err}") from None
            record = self._stage.loaded
            assert record is not None
            self._check(record)  # TS §8.2: nothing touched before it all matches
            self.ledger.load(record["positions"], self.checkpoint)
            self.id = record["id"]
            self.position = self.durable_position = record["position"]
            self.restored = True
        else:
            union = Union(policy, **config)
        deferred = self.checkpoint is not None
        if self.out_dir is not None:
            os.makedirs(self.out_dir, exist_ok=True)
            self.events = PartWriter(self.out_dir, prefix="events",
                                     max_events=self.part_events,
                                     max_seconds=self.part_seconds, deferred=deferred,
                                     record=None if record is None else record["events"])
            self.late = PartWriter(self.out_dir, prefix="late", max_events=self.part_events,
                                   max_seconds=self.part_seconds, deferred=deferred,
                                   record=None if record is None else record["late"])
            if record is None:
                self.position = self.durable_position = self.events.seq
            union.late.subscribe(PartSubscriber(self.late))
        if self.checkpoint is not None and record is None:
            self.id = secrets.token_hex(8)
            if self.out_dir is not None:  # the out-dir now belongs to this checkpoint
                write_atomic(os.path.join(self.out_dir, MARKER),
                             orjson.dumps({"id": self.id}), "--out-dir", failpoints=False)
        self.union = union
        self.started = True
        return union

    def _check(self, record: dict[str, Any]) -> None:
        """Refuse a checkpoint that does not match the out-dir (nothing touched)."""
        where = str(self.checkpoint)
        then = record.get("out_dir")
        if (then is None) != (self.out_dir is None):
            raise CheckpointError(
                f"{where}: written by a server " + (f"with --out-dir {then}, started without "
                                                    "one" if then is not None else
                                                    f"without --out-dir, started with "
                                                    f"{self.out_dir}")
                + "; give the same --out-dir, or remove the checkpoint to start over")
        if self.out_dir is None:
            return
        marker = os.path.join(self.out_dir, MARKER)
        try:
            with open(marker, "rb") as f:
                found = orjson.loads(f.read()).get("id")
        except (OSError, ValueError, AttributeError):
            found = None
        if found is None:
            raise CheckpointError(
                f"{where}: --out-dir {self.out_dir} holds no record of the server that wrote "
                f"the checkpoint ({MARKER}; it wrote to {then}): another directory, or one "
                "emptied since; give its out-dir, or remove the checkpoint to start over")
        if found != record.get("id"):
            raise CheckpointError(
                f"{where}: --out-dir {self.out_dir} belongs to another server's checkpoint "
                f"(its id {found}, this checkpoint's {record.get('id')}); give the "
                "checkpoint that goes with it, or remove this one to start over")
        for prefix in ("events", "late"):
            if record.get(prefix) is not None:
                PartWriter.check(self.out_dir, prefix, record[prefix], where)

    # ---------------------------------------------------------------- the cut
    def mark(self) -> dict[str, Any]:
        """The server's state at the union's cut (called inside ``Union.checkpoint``): the
        parts flushed and measured, the positions, the merged stream's position."""
        return {"id": self.id, "out_dir": self.out_dir, "position": self.output_position(),
                "positions": self.ledger.snapshot(),
                "events": None if self.events is None else self.events.mark(),
                "late": None if self.late is None else self.late.mark()}

    # ---------------------------------------------------------------- commits
    async def commit(self, timeout: float = 1.0) -> dict[str, Any] | None:
        """A checkpoint and the publication it allows (see the module doc); without a
        checkpoint file, the outputs flushed and the merged positions raised. Returns what
        became durable (``mark()``'s record) or ``None`` when no commit could be made
        (counted in ``misses``, nothing changed)."""
        async with self._lock:
            if self.checkpoint is None:
                return self._tick()
            union = self.union
            if union is None:
                raise ClosedError(f"{self.name}: not started")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                try:
                    data = union.checkpoint(stages={STAGE: self._stage})
                    break
                except CheckpointError:
                    if loop.time() >= deadline:
                        self.misses += 1
                        return None
                    await asyncio.sleep(0.002)
                except OSError as err:  # the files cannot be written: no checkpoint names them
                    _log.error("%s: no checkpoint: %s", self.name, err)
                    self.misses += 1
                    return None
            record = self._stage.last
            assert record is not None
            try:
                await asyncio.to_thread(self._write, data, record)
            except OSError as err:
                _log.error("%s: cannot write the checkpoint %s: %s", self.name,
                           self.checkpoint, err)
                self.misses += 1
                return None
            self.checkpoints += 1
            writers = [(w, record[k]) for w, k in ((self.events, "events"),
                                                   (self.late, "late")) if w is not None]
            for writer, rec in writers:  # TS §8.4: published once a checkpoint covers them
                await asyncio.to_thread(writer.publish_files, rec)
                writer.published_parts(rec)
            failpoint("part.published")
            self.durable_position = record["position"]
            self.ledger.committed(record["positions"])  # TS §8.4: durable once on disk
            return record

    def _write(self, data: bytes, record: dict[str, Any]) -> None:
        """The parts the record names made durable, then the checkpoint (a thread)."""
        for writer, key in ((self.events, "events"), (self.late, "late")):
            if writer is not None:
                writer.sync(record[key])  # TS §8.3: the data first
        assert self.checkpoint is not None
        write_atomic(self.checkpoint, data)

    def _tick(self) -> dict[str, Any]:
        """Without a checkpoint: what is written goes to the operating system, and each
        device's events merged (its input holds none unmerged) are durable."""
        for writer in (self.events, self.late):
            if writer is not None:
                writer.flush()
        union = self.union
        positions = self.ledger.snapshot()
        if union is not None:
            busy = {s.name for s in union.stats().inputs if s.state == "active" and s.buffered}
            positions = {k: v for k, v in positions.items() if k not in busy}
        position = self.output_position()
        self.durable_position = position
        self.ledger.committed(positions)
        return {"position": position, "positions": positions}

    def close_parts(self) -> None:
        """Close the open parts (at shutdown, before the last commit publishes them)."""
        for writer in (self.events, self.late):
            if writer is not None:
                try:
                    writer.close_part()
                except OSError as err:
                    writer.error = writer.error or err

    def finish(self) -> None:
        """The end without a checkpoint: the open parts published."""
        for writer in (self.events, self.late):
            if writer is not None:
                writer.finish()
