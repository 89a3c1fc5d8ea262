"""The parts of ``goldilocks serve --out-dir``: rolling event-log files that agree with every
checkpoint (``docs/checkpoint.md``, "Serve").

A ``PartWriter`` writes canonical event-log lines (``eventlog.format``), each with its
``"seq"``, to numbered parts ``<prefix>-NNNNNN.jsonl`` in one directory. A part is written
under a hidden temporary name ``.<prefix>-NNNNNN.jsonl.tmp`` and appears under its own name
only whole, by an atomic rename. It is closed after ``max_events`` lines or at the first line
after it has been open ``max_seconds`` (by the injected clock).

**With a checkpoint** (``deferred``) a closed part is not published at once: it waits until a
checkpoint covers it — the two-phase publication of Flink's file sink. At a checkpoint,
``mark()`` (on the writer's thread, at the cut) flushes the open part and returns the record a
checkpoint keeps: the open part and its length, the closed parts waiting and theirs, the next
part number and ``seq``, the last part published. ``sync(record)`` makes those bytes durable
(``fsync``, any thread); once the checkpoint naming them is durable, ``publish(record)``
renames the parts it covers into place. So a published part is always covered by the
checkpoint on disk: nothing a reader of the directory (Spark) has seen is ever taken back.

At start from a checkpoint, ``check(record)`` compares the directory with what the record
says — nothing touched — and ``resume(record)`` then finishes what the crash interrupted: the
closed parts recorded are published (cut to their recorded length), the open part is cut
back to its recorded length (a torn or unrecorded tail dropped) and written on, temporary
parts the record does not know are removed; numbering and ``seq`` continue from the record.
Without a checkpoint a start continues after what the directory holds: the last part's last
``seq`` and number, a temporary part left by a crash published with its whole lines.

Memory: O(1) (one open file, the list of closed parts waiting for a checkpoint, and the first
``seq`` of each part, 16 bytes a part).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from engine.event import CTI, END, INTERVAL, POINT, START, Event, LateRecord
from engine.times import MAX_TIME
from engine.subscription import refuse_subscription
from eventlog.format import encode_event, encode_late
from goldilocks.failpoints import failpoint
from goldilocks.outputs import fsync_dir, open_resumed
from operators.checkpoint import CheckpointError

__all__ = ["PartWriter", "PartStats", "PartSubscriber", "read_part"]

_PART = re.compile(r"^(\.?)(.+)-(\d{6,})\.jsonl(\.tmp)?$")
_SEQ = re.compile(rb'^\{"seq":(\d+),')


@dataclass(frozen=True, slots=True)
class PartStats:
    """A ``PartWriter``'s counts: lines written by this process (``count``), parts published
    by it, lines in the part still open, closed parts waiting for a checkpoint, the next
    ``seq`` and whether writing failed (``error``: the first ``OSError``)."""

    count: int
    parts: int
    in_open_part: int
    waiting: int
    seq: int
    error: str | None = None


def _seq_of(line: bytes) -> int | None:
    m = _SEQ.match(line)
    return int(m.group(1)) if m else None


def _last_line(path: str) -> tuple[int, bytes]:
    """``(length of the whole lines, the last whole line)`` of ``path``: a torn tail (a crash
    mid-line) is not counted."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        back = 1 << 12
        while True:
            start = max(0, size - back)
            f.seek(start)
            tail = f.read(size - start)
            end = tail.rfind(b"\n")
            if end < 0 and start > 0:
                back *= 4
                continue
            if end < 0:
                return 0, b""
            begin = tail.rfind(b"\n", 0, end) + 1
            if begin == 0 and start > 0:
                back *= 4
                continue
            return start + end + 1, tail[begin:end + 1]


class PartWriter:
    """Rolling parts with atomic publication, consistent with checkpoints (see the module
    doc). Not thread-safe: one thread writes (the server's loop); ``sync`` alone may run on
    another thread.

    ``record``: what a checkpoint recorded (``mark()``), to continue from; ``None`` starts
    after what ``directory`` holds. ``deferred``: closed parts wait for ``publish`` (a
    checkpoint covering them); otherwise each is published as it closes."""

    def __init__(self, directory: str | os.PathLike, *, prefix: str = "events",
                 max_events: int = 100_000, max_seconds: float | None = None,
                 deferred: bool = False, record: dict[str, Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_events <= 0 or (max_seconds is not None and max_seconds <= 0):
            raise ValueError(f"{prefix} parts: max_events={max_events}, "
                             f"max_seconds={max_seconds}; expected both > 0")
        self.directory = os.path.realpath(os.fspath(directory))
        os.makedirs(self.directory, exist_ok=True)
        self.prefix = prefix
        self.max_events = max_events
        self.max_seconds = max_seconds
        self.deferred = deferred
        self._clock = clock
        self._file: BinaryIO | None = None
        self.open_part: int | None = None
        self._in_part = 0
        self._opened_at = 0.0
        self.closed: list[tuple[int, int]] = []   # (part, length): waiting for a checkpoint
        self.published: tuple[int, int] | None = None  # the last part published: (part, size)
        self.firsts: dict[int, int] = {}           # part -> its first seq (parts known)
        self.count = 0
        self.parts = 0
        self.error: OSError | None = None
        if record is None:
            self.next_part, self.seq = self._continue()
        else:
            self.next_part, self.seq = self._resume(record)

    # ---------------------------------------------------------------- names
    def final(self, n: int) -> str:
        return os.path.join(self.directory, f"{self.prefix}-{n:06d}.jsonl")

    def temp(self, n: int) -> str:
        return os.path.join(self.directory, f".{self.prefix}-{n:06d}.jsonl.tmp")

    def _listing(self) -> tuple[dict[int, str], dict[int, str]]:
        """The directory's parts of this prefix: ``(published, temporary)``, by number."""
        published: dict[int, str] = {}
        temps: dict[int, str] = {}
        for name in os.listdir(self.directory):
            m = _PART.match(name)
            if m is None or m.group(2) != self.prefix or bool(m.group(1)) != bool(m.group(4)):
                continue
            (temps if m.group(4) else published)[int(m.group(3))] = \
                os.path.join(self.directory, name)
        return published, temps

    # ---------------------------------------------------------------- starting
    def _continue(self) -> tuple[int, int]:
        """A start without a record: after the directory's last part (its number, its last
        ``seq``). A temporary part left by a crash is published with its whole lines first —
        its events were handed to the outputs and nothing else has them."""
        published, temps = self._listing()
        for n in sorted(temps):
            if n in published:  # published already (a crash after the rename): a leftover
                os.unlink(temps[n])
                continue
            length, _ = _last_line(temps[n])
            if length == 0:
                os.unlink(temps[n])
                continue
            with open(temps[n], "r+b") as f:
                f.truncate(length)
                os.fsync(f.fileno())
            os.replace(temps[n], self.final(n))
            published[n] = self.final(n)
        if published:
            fsync_dir(self.directory)
        if not published:
            return 0, 0
        last = max(published)
        self.published = (last, os.path.getsize(published[last]))
        seq = 0
        for n in sorted(published, reverse=True):  # the newest part with a line in it
            _, line = _last_line(published[n])
            found = _seq_of(line)
            if found is not None:
                seq = found + 1
                break
        return last + 1, seq

    @classmethod
    def check(cls, directory: str | os.PathLike, prefix: str, record: dict[str, Any],
              where: str) -> None:
        """Refuse (``CheckpointError``, one line saying what differs, nothing touched) a
        record that does not match the directory: a part it needs missing or shorter than
        recorded, the last part it published changed or gone, or parts published beyond it
        (the directory has moved on: another server's files, or an older checkpoint)."""
        self = cls.__new__(cls)  # only its names and listing: nothing is opened
        self.directory = os.path.realpath(os.fspath(directory))
        self.prefix = prefix
        name = f"{where}: --out-dir {self.directory}"
        published, temps = self._listing() if os.path.isdir(self.directory) else ({}, {})
        rec = _Record.read(record, where)
        if rec.published is not None:
            n, size = rec.published
            path = published.get(n)
            if path is None:
                raise CheckpointError(f"{name}: the part {os.path.basename(self.final(n))} "
                                      "the checkpoint published last is missing; expected "
                                      "the out-dir of the server that wrote the checkpoint "
                                      "(remove the checkpoint to start over)")
            if os.path.getsize(path) != size:
                raise CheckpointError(f"{name}: {os.path.basename(path)} is "
                                      f"{os.path.getsize(path)} bytes, the checkpoint "
                                      f"published it with {size}; expected the out-dir of "
                                      "the server that wrote the checkpoint")
        waiting = dict(rec.closed)
        if rec.open is not None:
            waiting[rec.open[0]] = rec.open[1]
        last = rec.published[0] if rec.published is not None else -1
        beyond = sorted(n for n in published if n > last and n not in dict(rec.closed))
        if beyond:
            raise CheckpointError(f"{name}: holds {os.path.basename(self.final(beyond[0]))}, "
                                  f"published after the checkpoint's last part "
                                  f"({'none' if last < 0 else os.path.basename(self.final(last))})"
                                  "; the out-dir has moved on past this checkpoint (another "
                                  "server's files, or an older checkpoint)")
        for n, length in sorted(waiting.items()):
            if n in published and rec.open is not None and n == rec.open[0]:
                raise CheckpointError(f"{name}: {os.path.basename(self.final(n))} is "
                                      "published, the checkpoint has it still open; the "
                                      "out-dir has moved on past this checkpoint")
            path = published.get(n) if n in published else temps.get(n)
            have = None if path is None else os.path.getsize(path)
            exact = n in published  # published after the checkpoint: whole, as recorded
            if have is None or have < length or (exact and have != length):
                what = "missing" if have is None else f"{have} bytes"
                raise CheckpointError(f"{name}: the part {os.path.basename(self.temp(n))} is "
                                      f"{what}, the checkpoint needs its first {length} "
                                      "bytes; expected the out-dir of the server that wrote "
                                      "the checkpoint (remove the checkpoint to start over)")

    def _resume(self, record: dict[str, Any]) -> tuple[int, int]:
        """Apply a checked record: publish the closed parts it covers, cut the open part
        back, remove the temporary parts it does not know."""
        rec = _Record.read(record, "checkpoint")
        published, temps = self._listing()
        self.published = rec.published
        for n, length in rec.closed:
            if n not in published:
                with open(self.temp(n), "r+b") as f:
                    f.truncate(length)
                    os.fsync(f.fileno())
                os.replace(self.temp(n), self.final(n))
            self.published = (n, length)
            temps.pop(n, None)
        keep = rec.open[0] if rec.open is not None else None
        for n, path in temps.items():
            if n != keep:
                os.unlink(path)  # an unrecorded tail: nothing of it is covered
        fsync_dir(self.directory)
        self.firsts.update(rec.firsts)
        if rec.open is not None:
            n, length = rec.open
            self._file = open_resumed(self.temp(n), length, "--out-dir")
            self.open_part = n
            self._in_part = rec.open_count
            self._opened_at = self._clock()
        return rec.next, rec.seq

    # ---------------------------------------------------------------- writing
    def write_events(self, events: Iterable[Event]) -> None:
        """Events (and CTIs) as canonical lines, each with its ``seq``."""
        self._write(encode_event, events)

    def write_late(self, records: Iterable[LateRecord]) -> None:
        self._write(encode_late, records)

    def _write(self, encode: Callable[[Any], bytes], items: Iterable[Any]) -> None:
        if self.error is not None:
            return
        try:
            seq = self.seq
            lines: list[bytes] = []
            for item in items:
                if self._file is None:
                    self._open(seq)
                elif self._in_part + len(lines) >= self.max_events or (
                        self.max_seconds is not None
                        and self._clock() - self._opened_at >= self.max_seconds):
                    self._put(lines)
                    lines = []
                    self._roll(seq)
                line = encode(item)
                lines.append(b'{"seq":%d,%b' % (seq, line[1:]))
                seq += 1
            self._put(lines)
            self.seq = seq
        except OSError as err:
            self.error = err

    def _put(self, lines: list[bytes]) -> None:
        if lines:
            assert self._file is not None
            self._file.write(b"".join(lines))
            self._in_part += len(lines)
            self.count += len(lines)

    def _open(self, seq: int) -> None:
        n = self.next_part
        self.next_part += 1
        self._file = open(self.temp(n), "wb")
        self.open_part = n
        self.firsts[n] = seq
        self._in_part = 0
        self._opened_at = self._clock()

    def _roll(self, seq: int) -> None:
        self.close_part()
        self._open(seq)

    def close_part(self) -> None:
        """Close the open part (if any): published at once, or waiting for a checkpoint."""
        file = self._file
        if file is None:
            return
        n = self.open_part
        assert n is not None
        self._file = None
        self.open_part = None
        length = file.tell()
        file.close()
        if length == 0:
            os.unlink(self.temp(n))
            return
        if self.deferred:
            self.closed.append((n, length))
        else:
            os.replace(self.temp(n), self.final(n))  # atomic: the whole part or none
            self.published = (n, length)
            self.parts += 1

    def flush(self) -> None:
        """Hand what is written to the operating system (a reader of the files sees it)."""
        if self._file is not None and self.error is None:
            try:
                self._file.flush()
            except OSError as err:
                self.error = err

    # ---------------------------------------------------------------- checkpoints
    def mark(self) -> dict[str, Any]:
        """What a checkpoint taken now records (at the cut; the writer's thread): the open
        part is flushed and its length taken. ``OSError`` if writing failed: a checkpoint
        must not name lines that are not in the files."""
        if self.error is not None:
            raise self.error
        open_ = None
        if self._file is not None:
            self._file.flush()
            open_ = [self.open_part, self._file.tell(), self._in_part]
        firsts = {n: s for n, s in self.firsts.items()
                  if self.published is None or n >= self.published[0]}
        return {"next": self.next_part, "seq": self.seq, "open": open_,
                "closed": [list(c) for c in self.closed],
                "published": None if self.published is None else list(self.published),
                "firsts": sorted(firsts.items())}

    def sync(self, record: dict[str, Any]) -> None:
        """``fsync`` the parts ``record`` names (any thread: the files are opened again by
        name, so the writer may go on writing and rolling meanwhile)."""
        parts = [n for n, _ in record["closed"]]
        if record["open"] is not None:
            parts.append(record["open"][0])
        for n in parts:
            path = self.temp(n)
            if not os.path.exists(path):  # published meanwhile (not by us: by a restart)
                path = self.final(n)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def publish(self, record: dict[str, Any]) -> list[str]:
        """Publish the closed parts ``record`` names, in order (once the checkpoint that
        holds ``record`` is durable); returns their paths. ``publish_files`` (any thread)
        then ``published`` (the writer's thread)."""
        done = self.publish_files(record)
        self.published_parts(record)
        return done

    def publish_files(self, record: dict[str, Any]) -> list[str]:
        """The renames of ``publish`` and the directory's ``fsync`` (any thread): a part
        found published already (by a restart's roll-forward) is left as it is."""
        done = []
        for n, _length in record["closed"]:
            failpoint("part.publish")
            try:
                os.replace(self.temp(n), self.final(n))  # atomic: readers see the whole part
            except FileNotFoundError:
                if not os.path.exists(self.final(n)):
                    raise
            done.append(self.final(n))
        if done:
            fsync_dir(self.directory)
        return done

    def published_parts(self, record: dict[str, Any]) -> None:
        """Note the parts ``publish_files`` published (the writer's thread)."""
        names = {n for n, _ in record["closed"]}
        if not names:
            return
        self.closed = [c for c in self.closed if c[0] not in names]
        n, length = record["closed"][-1]
        self.published = (n, length)
        self.parts += len(names)
        for old in [k for k in self.firsts if k < n - 1024]:
            del self.firsts[old]  # a few are enough to find a position; older ones are read

    def finish(self) -> list[str]:
        """The end without a checkpoint: the open part closed and published with every part
        waiting (with a checkpoint, close the part and let the last checkpoint publish)."""
        try:
            self.close_part()
        except OSError as err:
            self.error = self.error or err
        return self.publish({"closed": list(self.closed)}) if self.closed else []

    def discard(self) -> None:
        """Close without publishing (a failed start); the files stay for a restart."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    # ---------------------------------------------------------------- reading back
    def paths_from(self, position: int) -> list[tuple[int, str]]:
        """``(first seq, path)`` of every part that holds lines at ``position`` or after, in
        order (the open part flushed first). A part is looked for under its final name, then
        its temporary one; parts from before this process are found by their first line."""
        self.flush()
        published, temps = self._listing()
        numbers = sorted(set(published) | set(temps))
        out: list[tuple[int, str]] = []
        for n in reversed(numbers):
            first = self.firsts.get(n)
            path = published.get(n) or temps[n]
            if first is None:
                with open(path, "rb") as f:
                    first = _seq_of(f.readline())
                if first is None:
                    continue
                self.firsts[n] = first
            out.append((first, path))
            if first <= position:
                break
        return out[::-1]

    def stats(self) -> PartStats:
        return PartStats(self.count, self.parts, self._in_part if self._file else 0,
                         len(self.closed), self.seq,
                         None if self.error is None else str(self.error))


class _Record:
    """A ``mark()`` record, checked (``CheckpointError`` naming the field otherwise)."""

    def __init__(self) -> None:
        self.next = 0
        self.seq = 0
        self.open: tuple[int, int] | None = None
        self.open_count = 0
        self.closed: list[tuple[int, int]] = []
        self.published: tuple[int, int] | None = None
        self.firsts: dict[int, int] = {}

    @classmethod
    def read(cls, obj: Any, where: str) -> _Record:
        rec = cls()
        try:
            rec.next, rec.seq = int(obj["next"]), int(obj["seq"])
            if obj["open"] is not None:
                n, length, count = obj["open"]
                rec.open, rec.open_count = (int(n), int(length)), int(count)
            rec.closed = [(int(n), int(length)) for n, length in obj["closed"]]
            if obj["published"] is not None:
                n, size = obj["published"]
                rec.published = (int(n), int(size))
            rec.firsts = {int(n): int(s) for n, s in obj.get("firsts", ())}
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{where}: malformed parts record: {err!r}") from None
        return rec


class PartSubscriber:
    """A Reactive Streams subscriber writing what it receives (``LateRecord`` or ``Event``)
    through a ``PartWriter``: ``request(batch)`` at subscription, topped up when half is
    used. Memory: O(1)."""

    def __init__(self, writer: PartWriter, *, batch: int = 1024) -> None:
        self.writer = writer
        self._batch = batch
        self._subscription: Any = None
        self._outstanding = 0
        self.done = False
        self.error: BaseException | None = None

    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe(None)")
        if self._subscription is not None or self.done:
            refuse_subscription(subscription, repr(self))
            return
        self._subscription = subscription
        self._outstanding = self._batch
        subscription.request(self._batch)

    def on_next(self, item: Any) -> None:
        if item is None:
            raise TypeError("RS §2.13: on_next(None)")
        if isinstance(item, LateRecord):
            self.writer.write_late((item,))
        else:
            self.writer.write_events((item,))
        self._outstanding -= 1
        if self._outstanding <= self._batch // 2:
            more = self._batch - self._outstanding
            self._outstanding += more
            self._subscription.request(more)

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error(None)")
        self.error = error
        self.done = True

    def on_complete(self) -> None:
        self.done = True

    def __repr__(self) -> str:
        return f"PartSubscriber({self.writer.prefix!r} in {self.writer.directory})"


def read_part(path: str, position: int, limit: int) -> tuple[list[Event], int, bool]:
    """Up to ``limit`` events of the part at ``path`` from ``position`` on: ``(events, the
    position after them, whether the part's end was reached)``. Reads whole lines only (the
    open part may end mid-line)."""
    events: list[Event] = []
    nxt = position
    with open(path, "rb") as f:
        for line in _lines(f):
            seq = _seq_of(line)
            if seq is None or seq < position:
                continue
            if len(events) >= limit:
                return events, nxt, False
            obj = orjson.loads(line)
            events.append(_event(obj))
            nxt = seq + 1
    return events, nxt, True


def _lines(f: BinaryIO) -> Iterator[bytes]:
    for line in f:
        if line.endswith(b"\n"):
            yield line


def _event(obj: dict[str, Any]) -> Event:
    """An event back from its canonical line (``eventlog.format.encode_event``): ``insert``
    is a point without an ``end``, an interval with one; a start edge is open (TS §7.1)."""
    kind = obj["kind"]
    start = obj["start"]
    end = obj.get("end")
    source = obj.get("source")
    if kind == "cti":
        return Event(CTI, start, None, None, source)
    if kind == "insert":
        if end is None:
            return Event(POINT, start, start + 1, obj.get("payload"), source)
        return Event(INTERVAL, start, end, obj.get("payload"), source)
    if kind == "start":
        return Event(START, start, MAX_TIME, obj.get("payload"), source, obj["id"])
    return Event(END, start, end, obj.get("payload"), source, obj["id"])
