"""The event-log format's leaf: kind codes and names, the modes and time formats, and the
canonical encoders, and the format of a log from its file name (``docs/event-log.md``).

Canonical JSON Lines: compact, keys in the order ``source, kind, start, end, payload``, times
as int nanoseconds (or RFC 3339 text with ``time_format="iso"``), so the same events always
give the same bytes (TS §5.1). Readers and writers both build on this module; it imports
nothing of ``eventlog`` itself.

>>> from engine.event import Event
>>> encode_event(Event.point(5, payload={"v": 1}, source="A"))
b'{"source":"A","kind":"insert","start":5,"payload":{"v":1}}\\n'
>>> encode_event(Event.cti(3))
b'{"kind":"cti","start":3}\\n'
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import sys
from typing import Any, Callable

import orjson

from engine.codes import Kind
from engine.errors import InputError
from engine.event import CTI as _CTI_KIND
from engine.event import END as _END_KIND
from engine.event import START as _START_KIND
from engine.event import INTERVAL, Event, LateRecord
from engine.times import format_rfc3339

__all__ = [
    "INSERT",
    "CTI",
    "JOIN",
    "LEAVE",
    "START",
    "END",
    "KIND_NAMES",
    "KIND_CODES",
    "EDGE_CODES",
    "ALL_KIND_CODES",
    "timed",
    "edge_line",
    "edge_line_iso",
    "BAD_RECORD_MODES",
    "TIME_FORMATS",
    "insert_prefix",
    "insert_line",
    "cti_line",
    "late_line",
    "reason_field",
    "iso_time",
    "insert_line_iso",
    "cti_line_iso",
    "late_line_iso",
    "encode_event",
    "encode_late",
    "log_format",
    "open_log",
    "compression",
    "FORMATS",
    "COMPRESSIONS",
    "LOG_EXTENSIONS",
    "STDIN",
]

#: kind codes of the column form (``engine.codes.Kind``, as plain ints), and their names in a
#: record
INSERT, CTI, JOIN, LEAVE = (int(k) for k in (Kind.INSERT, Kind.CTI, Kind.JOIN, Kind.LEAVE))
#: edges (TS §7): a start edge and an end edge, matched by source and ``id``
START, END = int(Kind.START), int(Kind.END)
#: the kinds the fast scanners read (a block with any other kind is read by the object path)
KIND_NAMES = tuple(k.text for k in (Kind.INSERT, Kind.CTI, Kind.JOIN, Kind.LEAVE))
KIND_CODES = {name: code for code, name in enumerate(KIND_NAMES)}
EDGE_CODES = {Kind.START.text: START, Kind.END.text: END}
#: every kind of a record, by name (the object path's)
ALL_KIND_CODES = {**KIND_CODES, **EDGE_CODES}


def timed(kind: Any) -> Any:
    """Where ``kind`` (codes, a numpy column) is a record with a time: an insert, a CTI or an
    edge — not a join or a leave."""
    return (kind <= CTI) | (kind >= START)
#: what a reader does with a bad record (TS §5.3)
BAD_RECORD_MODES = ("fail", "skip", "quarantine")

_dumps = orjson.dumps

_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
               ".parquet": "parquet", ".pq": "parquet"}
#: the formats of event logs
FORMATS = ("jsonl", "csv", "parquet")
#: compressed logs: a file's last suffix and the standard library's module that reads it
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}
_OPENERS: dict[str, Callable[..., Any]] = {"gzip": gzip.open, "bz2": bz2.open,
                                           "lzma": lzma.open}
#: the extensions of log files (what a directory of parts is read for)
LOG_EXTENSIONS = tuple(ext + z for ext in _EXTENSIONS for z in ("", *COMPRESSIONS))
#: the path that names standard input
STDIN = "-"


def compression(path: str | os.PathLike[str]) -> str | None:
    """The module that decompresses ``path`` (``"gzip"`` for ``.gz``…), or ``None``."""
    return COMPRESSIONS.get(os.path.splitext(os.fspath(path))[1].lower())


def log_format(path: str | os.PathLike[str], format: str | None = None) -> str:
    """``"jsonl"``, ``"csv"`` or ``"parquet"``: ``format`` if given, else from the file name,
    a compression suffix set aside (``fleet.jsonl.gz`` is JSON Lines); standard input
    (``"-"``) is JSON Lines unless ``format`` says otherwise."""
    name = os.fspath(path)
    if format is not None:
        if format not in FORMATS:
            raise InputError(f"format={format!r}; expected one of {', '.join(FORMATS)}")
        return format
    if name == STDIN:
        return "jsonl"
    base = name[:-len(os.path.splitext(name)[1])] if compression(name) else name
    ext = os.path.splitext(base)[1].lower()
    try:
        return _EXTENSIONS[ext]
    except KeyError:
        raise InputError(f"{name}: unknown event-log extension {ext!r}; expected one of "
                         f"{', '.join(sorted(_EXTENSIONS))} (compressed too: .gz, .bz2, .xz), "
                         "or name the format: --format jsonl|csv|parquet "
                         "(replay(..., format=...))") from None


def open_log(path: str, *, raw: bool = False) -> Any:
    """``path`` opened for reading its bytes: standard input for ``"-"`` (left open when the
    returned file is closed), a compressed file decompressed as it is read, else the file
    (unbuffered with ``raw``, for ``readinto``)."""
    opened: Any  # a binary file with read, readinto and seek (io.RawIOBase or BufferedIOBase)
    if path == STDIN:
        opened = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0 if raw else -1)
    elif compression(path) is not None:
        opened = _OPENERS[COMPRESSIONS[os.path.splitext(path)[1].lower()]](path, "rb")
    else:
        opened = open(path, "rb", buffering=0 if raw else -1)
    return opened


def insert_prefix(source: str | None) -> bytes:
    """The bytes of a canonical insert line up to its start value."""
    if source is None:
        return b'{"kind":"insert","start":'
    return b'{"source":' + _dumps(source) + b',"kind":"insert","start":'


def insert_line(prefix: bytes, start: int, end: int | None, payload: Any) -> bytes:
    """A canonical insert line; ``end`` is ``None`` for a point."""
    if end is None:
        if payload is None:
            return b"%b%d}\n" % (prefix, start)
        return b'%b%d,"payload":%b}\n' % (prefix, start, _dumps(payload))
    if payload is None:
        return b'%b%d,"end":%d}\n' % (prefix, start, end)
    return b'%b%d,"end":%d,"payload":%b}\n' % (prefix, start, end, _dumps(payload))


def edge_line(source: str | None, kind: str, start: int, end: int | None, id: Any,
              payload: Any, iso: bool = False) -> bytes:
    """A canonical edge line (TS §7.1): ``source, kind, start, end, id, payload`` — a start
    edge has no ``end``; ``iso``: RFC 3339 times."""
    time = iso_time if iso else b"%d".__mod__
    line = (b'{"source":%b,' % _dumps(source) if source is not None else b"{") + \
        b'"kind":"%b","start":%b' % (kind.encode(), time(start))
    if end is not None:
        line += b',"end":%b' % time(end)
    line += b',"id":%b' % _dumps(id)
    if payload is not None:
        line += b',"payload":%b' % _dumps(payload)
    return line + b"}\n"


def edge_line_iso(source: str | None, kind: str, start: int, end: int | None, id: Any,
                  payload: Any) -> bytes:
    """``edge_line`` with RFC 3339 times."""
    return edge_line(source, kind, start, end, id, payload, True)


def _edge_of(event: Event, source: str | None, iso: bool = False) -> bytes:
    return edge_line(source, event.kind, event.start,
                     event.end if event.kind == _END_KIND else None, event.id, event.payload,
                     iso)


def cti_line(t: int) -> bytes:
    """A canonical CTI line of the merged stream (no source)."""
    return b'{"kind":"cti","start":%d}\n' % t


def reason_field(reason: str | None) -> bytes:
    """The late line's last field, ``,"reason":"…"`` (empty for a record without a reason:
    such a line is byte for byte what it was before reasons were written)."""
    return b"" if reason is None else b',"reason":' + _dumps(reason)


def late_line(line: bytes, cti: int, action: str, adjusted_start: int | None,
              reason: str | None = None) -> bytes:
    """A late-file line from the late event's canonical insert ``line``."""
    if adjusted_start is None:
        return b'%b,"cti":%d,"action":"%b"%b}\n' % (line[:-2], cti, action.encode(),
                                                     reason_field(reason))
    return b'%b,"cti":%d,"action":"%b","adjusted_start":%d%b}\n' % (
        line[:-2], cti, action.encode(), adjusted_start, reason_field(reason))


# -- the same lines with RFC 3339 times (``time_format="iso"``) --------------------------

#: the time formats of written logs: integer nanoseconds (canonical) or RFC 3339 UTC text
TIME_FORMATS = ("ns", "iso")


def iso_time(t: int) -> bytes:
    """``t`` as a JSON string of RFC 3339 UTC (``engine.times.format_rfc3339``: a fraction
    only as needed, in groups of three digits)."""
    return b'"%b"' % format_rfc3339(t).encode()


def insert_line_iso(prefix: bytes, start: int, end: int | None, payload: Any) -> bytes:
    """``insert_line`` with RFC 3339 times (``iso_time``)."""
    line = b"%b%b" % (prefix, iso_time(start))
    if end is not None:
        line += b',"end":%b' % iso_time(end)
    if payload is not None:
        line += b',"payload":%b' % _dumps(payload)
    return line + b"}\n"


def cti_line_iso(t: int) -> bytes:
    """``cti_line`` with an RFC 3339 time."""
    return b'{"kind":"cti","start":%b}\n' % iso_time(t)


def late_line_iso(line: bytes, cti: int, action: str, adjusted_start: int | None,
                  reason: str | None = None) -> bytes:
    """``late_line`` with RFC 3339 times, from the late event's ``insert_line_iso``."""
    if adjusted_start is None:
        return b'%b,"cti":%b,"action":"%b"%b}\n' % (line[:-2], iso_time(cti), action.encode(),
                                                     reason_field(reason))
    return b'%b,"cti":%b,"action":"%b","adjusted_start":%b%b}\n' % (
        line[:-2], iso_time(cti), action.encode(), iso_time(adjusted_start),
        reason_field(reason))


def encode_event(event: Event) -> bytes:
    """One canonical line for an event; a CTI keeps its source if it has one."""
    if event.kind == _CTI_KIND:
        if event.source is None:
            return cti_line(event.start)
        return b'{"source":%b,"kind":"cti","start":%d}\n' % (_dumps(event.source), event.start)
    if event.kind == _START_KIND or event.kind == _END_KIND:
        return _edge_of(event, event.source)
    end = event.end if event.kind == INTERVAL else None
    return insert_line(insert_prefix(event.source), event.start, end, event.payload)


def encode_late(record: LateRecord, time_format: str = "ns") -> bytes:
    """One late-file line for a ``LateRecord`` (an insert line plus cti, action,
    adjusted_start, reason); ``time_format="iso"``: with RFC 3339 times."""
    ev = record.event
    if ev.kind == _START_KIND or ev.kind == _END_KIND:
        return _late_edge(record, time_format == "iso")
    end = ev.end if ev.kind == INTERVAL else None
    adjusted = record.adjusted.start if record.adjusted is not None else None
    if time_format == "iso":
        line = insert_line_iso(insert_prefix(record.input), ev.start, end, ev.payload)
        return late_line_iso(line, record.cti, record.action, adjusted, record.reason)
    line = insert_line(insert_prefix(record.input), ev.start, end, ev.payload)
    return late_line(line, record.cti, record.action, adjusted, record.reason)


def _late_edge(record: LateRecord, iso: bool) -> bytes:
    """The late-file line of an edge's record (TS §7.5): the edge's line plus ``cti``,
    ``action``, what was changed when it was adjusted (``adjusted_start`` of a clipped start
    edge, ``adjusted_start``/``adjusted_end`` of an end edge that went out otherwise than it
    came) and the ``reason``."""
    ev = record.event
    time = iso_time if iso else b"%d".__mod__
    line = _edge_of(ev, record.input, iso)[:-2] + b',"cti":%b,"action":"%b"' % (
        time(record.cti), record.action.encode())
    out = record.adjusted
    if out is not None:
        if out.start != ev.start:
            line += b',"adjusted_start":%b' % time(out.start)
        if ev.kind == _END_KIND and out.end != ev.end:
            line += b',"adjusted_end":%b' % time(out.end)  # type: ignore[arg-type]
    if record.reason is not None:
        line += b',"reason":%b' % _dumps(record.reason)
    return line + b"}\n"
