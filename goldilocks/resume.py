"""Resumable replays: ``replay(…, checkpoint=FILE, checkpoint_every=N)`` and
``goldilocks replay LOG... --checkpoint FILE [--checkpoint-every N]`` (TS §8.3).

A replay with a checkpoint writes its outputs under fixed names beside them
(``.NAME.partial``), and after every ``N``-th merged record — once the records before it are
written — makes them durable (flush, ``fsync``) and replaces the checkpoint file atomically
(written beside it, ``fsync``, renamed over it). The checkpoint (``operators.checkpoint``'s
format, kind ``"replay"``) holds the position (records of the merged stream done, and the
last line of each log among them), the policy's state, the counts so far, each output's
length at that point, and what the replay was made of: the logs (path, size, a digest of
their first and last 64 KiB), the policy and the options that change the bytes.

Run again with the same command, a replay finds its checkpoint, checks it against the logs
and options (a checkpoint of another replay, a log that changed, a partial output missing
or shorter than recorded: ``CheckpointError``, nothing touched), cuts each partial output
back to its recorded length, reads the logs again skipping the records done — the merge is
deterministic (TS §5.2), so they are the same records; none is decided or written again —
and continues with the recorded state and counts. Whatever was written after the checkpoint
is written again, the same bytes (TS §5.1), so a replay killed at any point and run again
ends with the bytes of one uninterrupted run. At the end the checkpoint is marked complete,
the outputs are renamed into place, and the checkpoint is removed; a run killed between
those steps finishes them when run again.

What a resumed run costs: reading and parsing the logs up to the position again (no
decisions, no writing), then the rest as usual.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import astuple, replace
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from engine.errors import UsageError
from engine.policy import Policy
from eventlog import Columns
from eventlog.columns import Payloads, RawLines
from goldilocks.columnar import Tally
from goldilocks.outputs import AtomicOutput, Output, durable, open_resumed, write_atomic
from operators.checkpoint import (CheckpointError, check_policy, decode_state, describe_policy,
                                  encode_state, field, pack, unpack)
from operators.edges import EdgeStats

__all__ = ["ReplayCheckpoint", "KIND", "DEFAULT_EVERY", "partial_path", "rows"]

#: the ``kind`` of a replay's checkpoint
KIND = "replay"
#: records between checkpoints by default
DEFAULT_EVERY = 100_000
_EDGE = 64 << 10  # bytes of each end of a log in its digest

_COUNTS = ("received", "inserts", "ctis", "emitted", "late", "adjusted", "control", "ctis_out")


def partial_path(target: str) -> str:
    """Where a checkpointed replay writes ``target`` until it is complete."""
    folder, name = os.path.split(os.path.realpath(target))
    return os.path.join(folder, f".{name}.partial")


def _digest(path: str) -> list[Any]:
    """``[size, sha256 of its first and last 64 KiB]``: a log changed since is told apart."""
    size = os.path.getsize(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(_EDGE))
        if size > _EDGE:
            f.seek(max(_EDGE, size - _EDGE))
            h.update(f.read(_EDGE))
    return [size, h.hexdigest()]


class _Partial(AtomicOutput):
    """An output under its fixed partial name, started afresh (``length`` None) or cut back
    to ``length`` (``open_resumed``); ``commit`` renames it into place, ``discard`` only
    closes it (it is kept for the next run)."""

    def __init__(self, path: str, option: str, length: int | None) -> None:
        self.path = path
        self.option = option
        self.target = os.path.realpath(path)
        info = os.stat(self.target) if os.path.exists(self.target) else None
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise UsageError(option, f"{path} is not a regular file; a checkpointed replay "
                             "writes regular files (it renames them into place)")
        self.temp: str | None = partial_path(path)
        self.file = open_resumed(self.temp, length, option)

    def discard(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass

    def durable(self) -> int:
        """Flush and ``fsync``; the length written."""
        return durable(self.file)


def rows(chunk: Columns, a: int, b: int) -> Columns:
    """Rows ``[a, b)`` of ``chunk``, its canonical lines, payload texts and edge ids kept."""
    if a == 0 and b == len(chunk):
        return chunk
    p = chunk.payload
    if isinstance(p, Payloads):
        keep = np.zeros(len(chunk), np.bool_)
        keep[a:b] = True
        payload: Any = p.take(keep)
    else:
        payload = list(p[a:b])
    raw = chunk.raw
    return Columns(chunk.kind[a:b], chunk.source[a:b], chunk.start[a:b], chunk.end[a:b],
                   chunk.has_end[a:b], payload, chunk.key[a:b], chunk.file[a:b],
                   chunk.line[a:b],
                   None if raw is None else RawLines(raw.data, raw.body[a:b], raw.stop[a:b],
                                                     raw.start_at[a:b]),
                   None if chunk.ids is None else chunk.ids[a:b])  # TS §7.1: edges' ids


def _encode_tally(t: Tally) -> dict[str, Any]:
    return {"names": list(t.names), **{k: list(getattr(t, k)) for k in _COUNTS},
            "last_cti": sorted(t.last_cti.items()), "last_out": sorted(t.last_out.items()),
            "per_file": sorted(t.per_file.items()), "records": t.records,
            "emitted_total": t.emitted_total, "ctis_total": t.ctis_total,
            "late_total": t.late_total, "adjusted_total": t.adjusted_total, "final": t.final,
            "edges": None if t.edges is None else list(astuple(t.edges))}


def _decode_tally(obj: Any, names: list[str], where: str) -> Tally:
    try:
        counts: dict[str, Any] = {k: [int(v) for v in obj[k]] for k in _COUNTS}
        for k in ("last_cti", "last_out", "per_file"):
            counts[k] = {int(a): int(b) for a, b in obj[k]}
        for k in ("records", "emitted_total", "ctis_total", "late_total", "adjusted_total"):
            counts[k] = int(obj[k])
        edges = obj.get("edges")  # the edges' accounting (TS §7.5), when the policy has it
        return Tally(names, final=None if obj["final"] is None else int(obj["final"]),
                     edges=None if edges is None else EdgeStats(*(int(v) for v in edges)),
                     **counts)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{where}: malformed counts: {err!r}") from None


class ReplayCheckpoint:
    """One checkpointed replay (see the module docstring): ``open`` it, take ``sinks``,
    run the chunks through ``cut`` with ``resume`` and ``after``, then ``seal`` and
    ``remove`` on success (``close`` always)."""

    def __init__(self, path: str, every: int, made: dict[str, Any],
                 targets: Mapping[str, Any], names: list[str],
                 on_checkpoint: Callable[[bytes], None] | None, kind: str = KIND,
                 counts: tuple[Any, Any] = (None, None)) -> None:
        self.path = path
        self.kind = kind
        self.encode_counts = counts[0] or _encode_tally
        self.decode_counts = counts[1] or _decode_tally
        self.every = every
        self.made = made
        self.names = names
        self.on_checkpoint = on_checkpoint
        self.options = list(targets)  # every output, in order (None: discarded)
        self.targets = {k: os.fspath(v) for k, v in targets.items() if v is not None}
        self.position = 0    # records of the merged stream taken (skipped or handed on)
        self.skip = 0        # records done before this run
        self.lines: dict[int, int] = {}  # file index -> last line taken
        self.resume: tuple[Any, Tally] | None = None
        self.complete: Tally | None = None
        self.skipped: dict[str, int] = {}
        self.partials: dict[str, _Partial] = {}
        self.last: tuple[Any, Callable[[], Tally]] | None = None
        self.expected: dict[int, int] = {}
        self.policy: Policy | None = None

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: Any, every: int, paths: list[str], pol: Policy,
             options: dict[str, Any], targets: Mapping[str, Any], names: list[str],
             on_checkpoint: Callable[[bytes], None] | None = None, *, kind: str = KIND,
             counts: tuple[Any, Any] = (None, None)) -> ReplayCheckpoint:
        """Check the arguments, read the checkpoint if there is one, check it against this
        replay (``CheckpointError``, nothing touched), and open the partial outputs.

        ``kind`` and ``counts`` are for a replay that counts otherwise than ``Tally`` (the
        windowed replay): ``counts = (encode, decode)`` write its counts as a JSON object
        holding ``"names"`` (the inputs) and read them back, ``decode(obj, names, where)``
        raising ``CheckpointError``; the counts object is a dataclass with ``names``."""
        if isinstance(every, bool) or not isinstance(every, int) or every <= 0:
            raise UsageError("checkpoint_every", f"{every!r}; expected a positive number of "
                             "records")
        for option, target in targets.items():
            if target is not None and not isinstance(target, (str, os.PathLike)):
                raise UsageError(option, "a checkpointed replay writes its outputs to files "
                                 "(it resumes them); give a file name")
        path = os.fspath(path)
        AtomicOutput(path, "checkpoint").discard()  # writable: found now, not after the work
        made = {"logs": [[os.path.abspath(p), *_digest(p)] for p in paths],
                "policy": describe_policy(pol), "options": options,
                "outputs": {k: os.path.realpath(os.fspath(v))
                            for k, v in targets.items() if v is not None}}
        ck = cls(path, every, made, targets, names, on_checkpoint, kind, counts)
        ck.policy = pol
        lengths: dict[str, int | None] = {k: None for k in ck.targets}
        if os.path.exists(path):
            lengths = ck._read(pol)
        if ck.complete is None:
            opened: list[_Partial] = []
            try:
                for option, target in ck.targets.items():
                    opened.append(_Partial(target, option, lengths[option]))
                    ck.partials[option] = opened[-1]
            except BaseException:
                for o in opened:
                    o.discard()
                raise
        return ck

    def _read(self, pol: Policy) -> dict[str, int | None]:
        where = self.path
        try:
            with open(where, "rb") as f:
                data = f.read()
        except OSError as err:
            raise CheckpointError(f"{where}: cannot read the checkpoint: "
                                  f"{err.strerror or err}") from None
        body = unpack(data, self.kind, where)
        made = field(body, "made", dict, where)
        for key, what in (("logs", "the logs (their paths, sizes or contents)"),
                          ("options", "the options"), ("outputs", "the outputs")):
            if made.get(key) != self.made[key]:
                raise CheckpointError(
                    f"{where}: a checkpoint of another replay: {what} differ ({made.get(key)} "
                    f"then, {self.made[key]} now); run the same command, or remove {where} "
                    "to start over")
        check_policy(pol, made.get("policy"), where)
        state = decode_state(pol, body.get("state"), f"{where}: policy state")
        tally = self.decode_counts(field(body, "counts", dict, where), self.names, where)
        lengths = field(body, "lengths", dict, where)
        if set(lengths) != set(self.targets):
            raise CheckpointError(f"{where}: malformed: lengths of {sorted(lengths)}")
        if body.get("complete"):  # nothing is read again: the names are the checkpoint's
            self.complete = replace(tally, names=[str(n) for n in field(
                body["counts"], "names", list, where)])
            self.skipped = dict(body.get("skipped") or {})
            return {}
        for option, n in lengths.items():
            partial = partial_path(self.targets[option])
            have = os.path.getsize(partial) if os.path.exists(partial) else None
            if not isinstance(n, int) or have is None or have < n:
                raise CheckpointError(
                    f"{where}: the partial output {partial} ({option}) is "
                    f"{'missing' if have is None else f'{have} bytes'}, the checkpoint needs "
                    f"{n}; remove {where} to start over")
        self.skip = field(body, "position", int, where)
        self.resume = (state, tally)
        self.expected = {int(f): int(line) for f, line in field(body, "lines", list, where)}
        return lengths

    # ------------------------------------------------------------------ running
    def sinks(self) -> list[Output]:
        """The ``Output`` of each target given to ``open`` (``None``: discarded)."""
        return [Output(None, self.partials.get(option)) for option in self.options]

    def cut(self, chunks: Iterable[Columns]) -> Iterator[Columns]:
        """The chunks after the records done, cut so that each ``every``-th record ends a
        chunk (the loop then calls ``after``)."""
        every, skip = self.every, self.skip
        checked = skip == 0
        for chunk in chunks:
            n = len(chunk)
            begin = self.position
            lo = min(n, max(0, skip - begin))
            first = (begin + lo) // every * every + every
            ends = list(range(first - begin, n, every)) + [n]
            if lo:
                self._took(chunk.file[:lo], chunk.line[:lo])
                self.position = begin + lo
            if not checked and self.position == skip:
                checked = True
                if self.lines != self.expected:
                    raise CheckpointError(
                        f"{self.path}: the logs read differently: the checkpoint's records "
                        f"end at lines {self.expected} (by file index), these at {self.lines}")
            a = lo
            for b in ends:
                if b <= a:
                    continue
                part = rows(chunk, a, b)
                self._took(part.file, part.line)
                self.position = begin + b
                yield part
                a = b
        if not checked:
            raise CheckpointError(f"{self.path}: the logs hold {self.position} records, "
                                  f"fewer than the {skip} the checkpoint has done")

    def _took(self, file: np.ndarray, line: np.ndarray) -> None:
        for f in np.unique(file).tolist():
            self.lines[f] = int(line[file == f].max())

    def after(self, state: Any, tally: Callable[[], Tally]) -> None:
        """Called by the loop once a chunk is written: a checkpoint at every ``every``-th
        record."""
        self.last = (state, tally)
        if self.position % self.every == 0 and self.position > self.skip:
            self._write(state, tally(), False)

    def _write(self, state: Any, tally: Tally, complete: bool,
               skipped: Mapping[str, int] | None = None) -> None:
        lengths = {k: p.durable() for k, p in self.partials.items()}  # TS §8.3: data first
        data = pack(self.kind, {"made": self.made, "position": self.position,
                           "lines": sorted(self.lines.items()),
                           "state": encode_state(self.policy, state),  # type: ignore[arg-type]
                           "counts": self.encode_counts(tally), "lengths": lengths,
                           "complete": complete, "skipped": dict(skipped or {})})
        write_atomic(self.path, data)  # the checkpoint is replaced whole, atomically
        if self.on_checkpoint is not None:
            self.on_checkpoint(data)

    # ------------------------------------------------------------------ ending
    def seal(self, tally: Tally, skipped: Mapping[str, int]) -> None:
        """The replay succeeded: a complete checkpoint, before the outputs are renamed."""
        if self.last is not None:
            state = self.last[0]
        elif self.resume is not None:
            state = self.resume[0]
        else:
            state = self.policy.initial()  # type: ignore[union-attr]  # no record at all
        self._write(state, tally, True, skipped)

    def finish_complete(self) -> None:
        """A complete checkpoint found: rename what was not renamed yet, then ``remove``."""
        for target in self.targets.values():
            partial = partial_path(target)
            if os.path.exists(partial):
                os.replace(partial, os.path.realpath(target))
        self.remove()

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
