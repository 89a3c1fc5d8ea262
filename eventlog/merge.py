"""Logs into one stream of ``Columns``: each file read by its format's reader, several files
merged by ``(order key, file index, line)`` (TS §5.2).

The merge streams: a row is released once no unread row of another file can sort before it.
Memory: one chunk per file plus the runs of equal order keys.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, BinaryIO, Callable, Generator, Iterable, Iterator, Sequence

import numpy as np

from engine.errors import InputError

from eventlog.columns import Columns, SourceTable
from eventlog.csv_log import read_csv
from eventlog.format import ALL_KIND_CODES, END, START, STDIN, log_format, timed
from eventlog.jsonl import read_jsonl
from eventlog.logfile import LogFile
from eventlog.parquet import read_parquet
from eventlog.records import BadRecords, FileState, Span, field_map, time_scale

__all__ = ["read_columns", "merge_columns", "read_records", "by_time", "time_keys",
           "MERGES"]

#: how several logs are merged: ``auto`` (by time when no log carries an order key, else by
#: the order keys), by their order keys (``arrival``, TS §5.2) or by time (TS §5.8)
MERGES = ("auto", "arrival", "time")

_READERS: dict[str, Callable[[FileState, Callable[[int], None] | None], Iterator[Columns]]] = {
    "jsonl": read_jsonl, "csv": read_csv, "parquet": read_parquet}


def _open(path: str | os.PathLike[str] | LogFile, index: int, table: SourceTable,
          bad: BadRecords, scale: int | None, on_bytes: Callable[[int], None] | None,
          span: Span = Span(), format: str | None = None, fields: dict[str, str] | None = None,
          ) -> tuple[FileState, Iterator[Columns]]:
    if isinstance(path, LogFile):  # a file of another file system, compressed, partitioned
        if not path.seekable and not span.whole:
            raise InputError(f"{path.name}: a compressed log is read whole; expected no "
                             "byte range")
        state = FileState(path.name, index, table, bad, scale, span, fields, path)
        return state, _READERS[path.format](state, on_bytes)
    state = FileState(os.fspath(path), index, table, bad, scale, span, fields)
    if state.path != STDIN and not os.path.exists(state.path):
        raise InputError(f"{state.path}: no such file")
    if os.path.isdir(state.path):
        raise InputError(f"{state.path}: is a directory; expected a log file "
                         "(eventlog.log_files reads a directory's parts)")
    return state, _READERS[log_format(state.path, format)](state, on_bytes)


def read_columns(path: str | os.PathLike[str] | LogFile, *, index: int = 0,
                 table: SourceTable | None = None, bad: BadRecords | None = None,
                 on_bytes: Callable[[int], None] | None = None,
                 time_unit: str | None = None, span: Span = Span(),
                 modes: list[Any] | None = None) -> Iterator[Columns]:
    """Stream one log file as ``Columns`` chunks in file order (memory: one chunk).
    ``time_unit``: the unit of integer times (``time_scale``). ``span``: the piece of a
    JSON Lines or CSV file to read (``Span``: bytes, first line, the file's order key and
    its last key before the piece); the whole file by default. ``modes`` (if given) gets
    the file's reading state, as ``merge_columns`` fills it."""
    state, chunks = _open(path, index, table or SourceTable(), bad or BadRecords(),
                          time_scale(time_unit), on_bytes, span)
    if modes is not None:
        modes[:] = [state]
    return chunks


class _FileReader:
    __slots__ = ("state", "chunks", "source")

    def __init__(self, state: FileState, chunks: Iterator[Columns]) -> None:
        self.state = state
        self.chunks = chunks
        self.source = chunks  # the reader's own generator, closed at the end

    def peek(self) -> None:
        """Read the file's first chunk that holds a record (its order key is then known,
        ``state.mode``) and put it back in front of the rest."""
        first = self.next_chunk()
        if first is not None:
            self.chunks = itertools.chain([first], self.chunks)

    def next_chunk(self) -> Columns | None:
        for chunk in self.chunks:
            if len(chunk):
                return chunk
        return None


def merge_columns(paths: Sequence[str | os.PathLike[str]], *, table: SourceTable,
                  bad: BadRecords, on_bytes: Callable[[int], None] | None = None,
                  modes: list[Any] | None = None, time_unit: str | None = None,
                  merge: str = "arrival", chosen: list[str] | None = None,
                  format: str | None = None, fields: dict[str, str] | None = None,
                  ) -> Generator[Columns, None, None]:
    """Merge files by ``(order key, file index, line)`` (TS §5.2), streaming, in chunks.

    A row is released once no unread row of another file can sort before it: every file's
    rows are non-decreasing in key, so rows with key below the smallest "last read key" of the
    unfinished files are final. Memory: one chunk per file plus runs of equal keys.
    ``modes`` (if given) is filled with each file's reading state; ``.mode`` is its order key
    (``"arrival"``, ``"seq"``, ``"position"``, or ``None`` until its first record).
    ``time_unit``: the unit of the logs' integer times (``time_scale``; ``None``:
    nanoseconds, implausible values refused). ``merge``: ``"arrival"`` (the order keys),
    ``"time"`` (``by_time``: each file's key is the latest time it has shown, so the next
    record comes from the file furthest behind; TS §5.8) or ``"auto"``: by time when there
    are several files and none carries an order key (``seq``, ``arrival``: each file is one
    device's log, and their positions say nothing about one another), else by the order
    keys (TS §5.8). ``chosen`` (if given) gets the merge that runs: ``"arrival"`` or
    ``"time"``, or ``"file"`` for a single file, read in its own order. ``format``: the
    logs' format (``log_format``; ``None``: from each name). ``fields``: the names the logs
    give the fields of a record (``field_map``: ``{"start": "created"}``; a record without a
    kind is then an insert).
    """
    if merge not in MERGES:
        raise InputError(f"merge={merge!r}; expected one of {', '.join(MERGES)}")
    scale = time_scale(time_unit)
    names = field_map(fields)
    readers = [_FileReader(*_open(p, i, table, bad, scale, on_bytes, format=format,
                                  fields=names))
               for i, p in enumerate(paths)]
    if merge == "auto":
        merge = "arrival"
        if len(readers) > 1:
            for r in readers:
                r.peek()
            keyed = [r.state.mode for r in readers if r.state.mode is not None]
            if keyed and all(m == "position" for m in keyed):
                merge = "time"  # TS §5.8: nothing orders the files' records among them
    if chosen is not None:
        chosen.append("file" if len(readers) == 1 else merge)
    timed = merge == "time"
    if timed:
        for r in readers:
            r.chunks = by_time(r.chunks)
    if modes is not None:
        modes[:] = [r.state for r in readers]
    try:
        if len(readers) == 1:
            for chunk in readers[0].chunks:
                if len(chunk):
                    yield chunk
            return
        yield from _merge(readers, check=not timed)
    finally:
        for r in readers:
            for chunks in (r.chunks, r.source):
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()


def by_time(chunks: Iterable[Columns]) -> Iterator[Columns]:
    """One file's chunks keyed by time (TS §5.8): a row's key becomes the latest time its
    file has shown up to it (``time_keys``). Keys never decrease, so the merge takes the next
    row from the file furthest behind, and a late row stays where its file put it."""
    high = np.iinfo(np.int64).min
    for chunk in chunks:
        if len(chunk):
            chunk.key, high = time_keys(chunk, high)
        yield chunk


def time_keys(chunk: Columns, high: int) -> tuple[np.ndarray, int]:
    """TS §5.8's keys of a file's next ``chunk`` (not empty): the running maximum of its
    starts from ``high``, the latest time the file showed before it (a row without a time,
    such as a leave, keeps the key before it); and the ``high`` after it."""
    times = np.where(timed(chunk.kind), chunk.start, high)
    times[0] = max(int(times[0]), high)  # the running maximum starts from high
    keys = np.maximum.accumulate(times)
    return keys, int(keys[-1])


def _check_modes(readers: list[_FileReader]) -> None:
    seen: dict[str, str] = {}
    for r in readers:
        if r.state.mode is not None:
            seen.setdefault(r.state.mode, r.state.path)
    if len(seen) > 1:
        (m1, p1), (m2, p2) = list(seen.items())[:2]
        raise InputError(f"{p1} is ordered by {m1!r} but {p2} by {m2!r}; all files of one replay "
                         "must use the same order key (TS §5.2)")


def _merge(readers: list[_FileReader], check: bool = True) -> Iterator[Columns]:
    pending: list[Columns | None] = [None] * len(readers)
    done = [False] * len(readers)

    def refill(i: int) -> None:
        chunk = readers[i].next_chunk()
        if chunk is None:
            done[i] = True
        else:
            held = pending[i]
            pending[i] = chunk if held is None else Columns.concat([held, chunk])

    for i in range(len(readers)):
        refill(i)
    while True:
        if check:  # keyed by time, files of any order key merge alike
            _check_modes(readers)
        live = [i for i in range(len(readers)) if not done[i]]
        bound = min(int(p.key[-1]) for i in live if (p := pending[i]) is not None) if live else 0
        parts = []
        for i, p in enumerate(pending):
            if p is None or not len(p):
                continue
            if not live:
                parts.append(p)
                pending[i] = None
                continue
            cut = int(np.searchsorted(p.key, bound, side="left"))
            if cut:
                parts.append(p.take(np.arange(cut)) if cut < len(p) else p)
                pending[i] = p.take(np.arange(cut, len(p))) if cut < len(p) else None
        if parts:
            merged = Columns.concat(parts)
            order = np.lexsort((merged.line, merged.file, merged.key))  # TS §5.2 tie-break
            yield merged.take(order)
        if not live:
            return
        for i in live:
            p = pending[i]
            if p is None or int(p.key[-1]) <= bound:
                refill(i)


def read_records(paths: Iterable[str | os.PathLike[str]], *, bad_records: str = "fail",
                 quarantine: BinaryIO | None = None,
                 time_unit: str | None = None) -> Iterable[dict[str, Any]]:
    """Merged records as plain dicts (``source, kind, start, end, payload, file, line``;
    an edge's also ``id``, and a start edge's ``end`` is ``None``).

    A convenience for tests and small tools: one dict per record, in replay order (TS §5.2);
    memory is one chunk per file. Replay itself works on the columns. ``time_unit``: the
    unit of integer times (``replay``'s).
    """
    table = SourceTable()
    bad = BadRecords(bad_records, quarantine)
    names = {code: name for name, code in ALL_KIND_CODES.items()}
    for chunk in merge_columns([os.fspath(p) for p in paths], table=table, bad=bad,
                               time_unit=time_unit):
        ids = chunk.ids or [None] * len(chunk)
        for k, s, st, en, he, pl, f, ln, i in zip(chunk.kind.tolist(), chunk.source.tolist(),
                                                  chunk.start.tolist(), chunk.end.tolist(),
                                                  chunk.has_end.tolist(), chunk.payload,
                                                  chunk.file.tolist(), chunk.line.tolist(), ids):
            rec: dict[str, Any] = {"source": table.name(s), "kind": names[k]}
            if timed(k):
                rec["start"] = st
                rec["end"] = en if he or k == END else None
            if k == START or k == END:
                rec["id"] = i
            rec["payload"] = pl
            rec["file"] = f
            rec["line"] = ln
            yield rec
