"""One JSON Lines or CSV log cut into spans read in parallel, each by the engine's reader.

A span (``eventlog.Span``) is a range of bytes that begins at a line start, so no line is
cut or read twice. ``split_spans`` plans them in one sequential read of the file (a newline
count per span, at memory speed, no parsing): each span learns its first line number, so
errors name ``FILE:LINE`` exactly as a whole-file read does. The per-file state a reader
keeps is carried or checked:

- the order key's kind (``arrival``, ``seq``) is the file's, found from its first good
  record before the cut; a file ordered by position (neither key) is not cut, since a
  span's positions would need the record counts of every span before it;
- the order check (TS §5.2): a span is read from the smallest key, and ``order_after``
  checks the other side of each cut: the first good record after a span must not be before
  the span's last good key. Good keys never decrease, so these checks between neighbours
  give the whole file's;
- a CSV span after the first reads the header from line 1;
- a CSV quoted cell may hold a newline: a cut where the count of quote characters before
  it is odd may lie inside one, so the spans either side are joined. A quote inside an
  unquoted cell (not RFC 4180) can hide such a cell from that count; the reader then
  refuses the span whose last record runs past its end, naming the line
  (``eventlog.csv_log``), and the file must be read whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from engine.errors import BadRecordError

from eventlog.columns import SourceTable
from eventlog.format import log_format
from eventlog.logfile import LogFile
from eventlog.merge import read_columns
from eventlog.records import BadRecords, Span

__all__ = ["split_spans", "file_mode", "order_after"]

_READ = 4 << 20  # bytes per read while counting
_PEEK = 64 << 10  # the first window read after a span (grown 16 times each time)


def _format(path: str | LogFile) -> str:
    return path.format if isinstance(path, LogFile) else log_format(path)


def _size(path: str | LogFile) -> int:
    return path.size() if isinstance(path, LogFile) else os.path.getsize(path)


def _open_bytes(path: str | LogFile) -> Any:
    return path.open() if isinstance(path, LogFile) else open(path, "rb")


def file_mode(path: str | LogFile, time_unit: str | None = None) -> str | None:
    """The file's order key (``arrival``, ``seq``, ``position``; ``None``: no good record):
    its first good record's, read by the engine's reader up to that record's chunk."""
    states: list[Any] = []
    chunks = read_columns(path, bad=BadRecords("skip"), modes=states, time_unit=time_unit)
    try:
        for chunk in chunks:
            if len(chunk):
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return states[0].mode if states else None


def _cuts(f: Any, size: int, parts: int, after: int) -> list[int]:
    """Line starts near ``size * i / parts``, each at or after ``after`` (and below
    ``size``), increasing."""
    cuts: list[int] = []
    for i in range(1, parts):
        f.seek(max(size * i // parts, after) - 1)
        f.readline()  # to the next line start (the same byte if it is one)
        at = f.tell()
        if at < size and (not cuts or at > cuts[-1]):
            cuts.append(at)
    return cuts


def _counts(f: Any, bounds: list[int], quotes: bool) -> list[tuple[int, int]]:
    """``(newlines, quote characters)`` in each ``[bounds[i], bounds[i+1])``."""
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        f.seek(lo)
        lines = marks = 0
        left = hi - lo
        while left:
            data = f.read(min(_READ, left))
            if not data:
                break
            left -= len(data)
            lines += data.count(b"\n")
            if quotes:
                marks += data.count(b'"')
        out.append((lines, marks))
    return out


def split_spans(path: str | LogFile, span_bytes: int, *, mode: str | None = None,
                time_unit: str | None = None) -> list[Span]:
    """``path`` as consecutive spans of about ``span_bytes`` each (``[Span()]``, the whole
    file, when it is smaller, is Parquet, is compressed, or is ordered by position).
    ``mode``: the file's order key if known (else ``file_mode``, reading integer times in
    ``time_unit``). Reads the file once, sequentially."""
    if isinstance(path, LogFile) and not path.seekable:
        return [Span(mode=mode)]
    fmt = _format(path)
    size = _size(path)
    parts = -(-size // span_bytes) if span_bytes > 0 else 1
    if fmt == "parquet" or parts <= 1:
        return [Span(mode=mode)]
    if mode is None:
        mode = file_mode(path, time_unit)
    if mode not in ("arrival", "seq"):
        return [Span(mode=mode)]
    with _open_bytes(path) as f:
        header = len(f.readline()) if fmt == "csv" else 0  # the header stays in span 0
        bounds = [0, *_cuts(f, size, parts, max(header, 1)), size]
        counts = _counts(f, bounds, fmt == "csv")
    spans: list[Span] = []
    start, first = 0, 1
    line = marks = 0  # newlines and quote characters before ``stop``
    for (lines, quoted), stop in zip(counts, bounds[1:]):
        line += lines
        marks += quoted
        if marks % 2 and stop < size:  # perhaps inside a quoted cell: not a cut
            continue
        spans.append(Span(start, stop if stop < size else None, first, mode))
        start, first = stop, 1 + line
    return spans


@dataclass
class _Kept(BadRecords):
    """Bad records skipped and kept, for ``order_after``."""

    kept: list[BadRecordError] = field(default_factory=list)

    def handle(self, err: BadRecordError, raw: bytes | str) -> None:
        self.kept.append(err)


def _first_good(path: str | LogFile, span: Span, time_unit: str | None,
                bad: BadRecords) -> tuple[int, int] | None:
    """``(key, line)`` of the first good record read from ``span``, or ``None``."""
    chunks = read_columns(path, bad=bad, table=SourceTable(), time_unit=time_unit, span=span)
    try:
        for chunk in chunks:
            if len(chunk):
                return int(chunk.key[0]), int(chunk.line[0])
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return None


def order_after(path: str | LogFile, stop: int, next_line: int, mode: str, last_key: int,
                time_unit: str | None = None) -> BadRecordError | None:
    """The engine's error for the first record after byte ``stop`` (line ``next_line``) that
    breaks the file's order (TS §5.2) given ``last_key``, the largest good key before it —
    the record a span beginning at ``stop`` took for good, reading from the smallest key —
    or ``None`` if there is none. Reads from ``stop`` only as far as the first good record,
    in windows that grow."""
    size = _size(path)
    window = _PEEK
    while True:
        end: int | None = None
        if stop + window < size:
            with _open_bytes(path) as f:
                f.seek(stop)
                data = f.read(window)
            cut = data.rfind(b"\n")
            end = stop + cut + 1 if cut >= 0 else None
        if end is None and stop + window < size:
            window *= 16
            continue
        span = Span(stop, end, next_line, mode)
        try:
            first = _first_good(path, span, time_unit, BadRecords("skip"))
        except BadRecordError:
            if end is None:
                raise
            first = None  # a CSV record past the window's end: a larger window
        if first is None and end is not None:
            window *= 16
            continue
        if first is None or first[0] >= last_key:
            return None
        kept = _Kept("skip")  # read again from last_key: the engine's own error for it
        _first_good(path, Span(stop, end, next_line, mode, last_key), time_unit, kept)
        return next(err for err in kept.kept if err.line == first[1])
