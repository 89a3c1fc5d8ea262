"""Where event logs live: listed, opened and measured through ``pyarrow.fs``, so that a log
is read from wherever Spark's executors can reach it — a local or mounted path, a
``file://`` URI, or a store's URI (``s3://`` and Hadoop's ``s3a://``, ``gs://``,
``abfs://``/``abfss://``, ``hdfs://``) — as the stage's ``state_dir`` is. No pyspark import.

What a path names (``list_logs``):

- a file: itself, read by its extension (``.jsonl``, ``.ndjson``, ``.json``, ``.csv``,
  ``.parquet``, ``.pq``), also compressed as Spark compresses what it writes (a further
  ``.gz``, ``.bz2``, ``.deflate``, ``.snappy``, ``.lz4``, or ``.zst``);
- a directory: every such file in it, in its sub-folders too, sorted by path. A folder
  named ``key=value`` (Spark's ``partitionBy``) gives its files' records that field where
  they lack it (``source``, ``kind``: Spark leaves the partition column out of the files;
  other keys, such as ``date=…``, are read as folder names only). Names Spark and our sinks
  hide (starting with ``.`` or ``_``: ``_SUCCESS``, ``.crc`` files, ``_temporary``) are
  skipped; any other file or folder is refused, by name — a log is never read in part
  without a word;
- a glob (``*``, ``?``, ``[…]``, ``{a,b}``, as Hadoop's): the files it matches, each as
  above (a matched directory: its files);
- a list of those, in its order.

On an executor, ``open_log`` gives the engine's readers (``eventlog.LogFile``) a file object
of the bytes: a local file as such, a compressed file decompressed as it is read (it is
then read whole, by one task), a remote file through its file system.
"""

from __future__ import annotations

import fnmatch
import functools
import io
import os
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO, Sequence
from urllib.parse import unquote

from engine.errors import InputError
from eventlog.logfile import RESTORED_FIELDS, LogFile

__all__ = ["LogPath", "list_logs", "open_log", "list_directory", "LOG_EXTENSIONS",
           "COMPRESSIONS", "is_uri"]

#: the event-log formats, by extension
LOG_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
                  ".parquet": "parquet", ".pq": "parquet"}
#: the compressions Spark writes (its ``compression`` option), by extension
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".deflate": "deflate", ".snappy": "snappy",
                ".lz4": "lz4", ".zst": "zstd"}
#: Hadoop's names for stores that pyarrow knows by another
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_GLOB = re.compile(r"[*?\[{]")
_FORMS = ("event-log files (.jsonl, .ndjson, .json, .csv, .parquet, .pq; each may be "
          "compressed: .gz, .bz2, .deflate, .snappy, .lz4, .zst), in the directory or in "
          "partition folders (key=value)")


@dataclass(frozen=True)
class LogPath:
    """One log file as listed (picklable: it travels to the executors in a partition).

    ``uri``: what messages call it and what ``open_log`` opens (a local absolute path or a
    URI). ``format``: ``jsonl``, ``csv``, ``parquet``. ``compression``: ``None`` or a
    ``COMPRESSIONS`` name. ``fields``: ``(field, value)`` of its partition folders that its
    records may lack. ``size``: bytes on storage.
    """

    uri: str
    format: str
    compression: str | None = None
    fields: tuple[tuple[str, str | None], ...] = ()
    size: int = 0

    def to_list(self) -> list:
        return [self.uri, self.format, self.compression, [list(f) for f in self.fields],
                self.size]

    @classmethod
    def from_list(cls, value: list) -> LogPath:
        uri, fmt, compression, fields, size = value
        return cls(uri, fmt, compression, tuple((k, v) for k, v in fields), size)

    @property
    def plain(self) -> bool:
        """A local file the readers open themselves: uncompressed, nothing to add."""
        return not is_uri(self.uri) and self.compression is None and not self.fields


def is_uri(path: str) -> bool:
    return _URI.match(path) is not None


# -- file systems ------------------------------------------------------------------------------

def _resolve(path: str) -> tuple[Any, str]:
    """``(pyarrow FileSystem, its path)`` of a local path or a URI; an ``InputError`` naming
    the path when no file system of pyarrow's takes it."""
    from pyarrow import fs

    found = _URI.match(path)
    if found is None:
        return fs.LocalFileSystem(), os.path.abspath(path)
    scheme = found.group(1).lower()
    if scheme == "file":
        return fs.LocalFileSystem(), unquote(path[len("file://"):]) or "/"
    return _remote(_SCHEME_ALIASES.get(scheme, scheme) + path[len(scheme):], path)


@functools.lru_cache(maxsize=4096)  # a store's client is made once per process and file
def _remote(uri: str, given: str) -> tuple[Any, str]:
    from pyarrow import fs

    try:
        return fs.FileSystem.from_uri(uri)
    except Exception as err:
        raise InputError(
            f"{given}: cannot open its file system through pyarrow ({err}); read_event_log "
            "reads local paths, file:// and the URIs pyarrow.fs opens (s3:// and s3a://, "
            "gs://, abfs:// and abfss://, hdfs:// with libhdfs), with the credentials of "
            "the environment of the driver and of every executor") from None


def _join(base: str, child: str) -> str:
    return base.rstrip("/") + "/" + child


# -- listing (driver) -------------------------------------------------------------------------

def _kind(name: str) -> tuple[str, str | None] | None:
    """``(format, compression)`` of a file name, or ``None`` when it is not a log's."""
    stem, ext = os.path.splitext(name.lower())
    compression = COMPRESSIONS.get(ext)
    if compression is not None:
        stem, ext = os.path.splitext(stem)
    fmt = LOG_EXTENSIONS.get(ext)
    if fmt is None:
        return None
    return fmt, compression


def _hidden(name: str) -> bool:
    """Spark's hidden names: ``.…`` and ``_…`` (``_SUCCESS``, ``_temporary``, checksums)."""
    return name.startswith((".", "_"))


def _partition(name: str) -> tuple[str, str | None] | None:
    """``(key, value)`` of a partition folder ``key=value`` (Spark escapes with ``%XX``;
    ``__HIVE_DEFAULT_PARTITION__`` is null), else ``None``."""
    key, eq, value = name.partition("=")
    if not eq or not key:
        return None
    return unquote(key), None if value == "__HIVE_DEFAULT_PARTITION__" else unquote(value)


def _log_path(shown: str, name: str, size: int) -> LogPath:
    """The file ``shown``; its folders named ``key=value`` give its records' fields, however
    it was named (in a directory, by a glob, by itself), the innermost for a key twice."""
    kind = _kind(name)
    if kind is None:
        raise InputError(f"{shown}: not an event-log file; read_event_log reads {_FORMS}. "
                         "Name the files to read (a list or a glob) to leave it out")
    found: dict[str, str | None] = {}
    for folder in shown.split("://", 1)[-1].split("/")[:-1]:
        part = _partition(folder)
        if part is not None and part[0] in RESTORED_FIELDS:
            found[part[0]] = part[1]
    return LogPath(shown, kind[0], kind[1], tuple(found.items()), size)


def _walk(filesystem: Any, root: str, shown: str, out: list[LogPath]) -> None:
    """The logs under directory ``root`` (shown as ``shown``), by name, depth first."""
    from pyarrow import fs

    infos = filesystem.get_file_info(fs.FileSelector(root, recursive=False))
    for info in sorted(infos, key=lambda i: i.base_name):
        name = info.base_name
        if _hidden(name) and "=" not in name:
            continue
        child = _join(shown, name)
        if info.type == fs.FileType.Directory:
            part = _partition(name)
            if part is None:
                raise InputError(
                    f"{child}: a folder that is not a partition folder (key=value, as "
                    f"Spark's partitionBy writes them); read_event_log reads {_FORMS}. Name "
                    "the files or folders to read (a list or a glob)")
            _walk(filesystem, info.path, child, out)
        elif info.type == fs.FileType.File:
            out.append(_log_path(child, name, info.size or 0))


def _braces(pattern: str) -> list[str]:
    """Hadoop's ``{a,b}`` alternatives expanded (not nested)."""
    found = re.search(r"\{([^{}]*)\}", pattern)
    if found is None:
        return [pattern]
    head, tail = pattern[:found.start()], pattern[found.end():]
    return [x for alt in found.group(1).split(",") for x in _braces(head + alt + tail)]


def _glob(path: str) -> list[tuple[str, str]]:
    """``(shown, path)`` of what a glob matches, sorted: each ``/``-component of the
    pattern matches one component (``*`` does not cross a ``/``), as Hadoop's globs."""
    from pyarrow import fs

    matched: dict[str, str] = {}
    for pattern in _braces(path):
        found = _URI.match(pattern)
        prefix = found.group(0) if found else ""
        body = pattern[len(prefix):]
        parts = body.split("/")
        static = next((i for i, p in enumerate(parts) if _GLOB.search(p)), None)
        if static is None:  # an alternative without wildcards: the path itself, if there
            filesystem, real = _resolve(pattern)
            if filesystem.get_file_info(real).type != fs.FileType.NotFound:
                matched.setdefault(pattern, real)
            continue
        base_shown = prefix + "/".join(parts[:static])
        filesystem, base = _resolve(base_shown or ".")
        candidates = [(base_shown, base)]
        for i, part in enumerate(parts[static:], start=static):
            last = i == len(parts) - 1
            nxt = []
            for shown, real in candidates:
                info = filesystem.get_file_info(real)
                if info.type != fs.FileType.Directory:
                    continue
                for child in filesystem.get_file_info(fs.FileSelector(real)):
                    name = child.base_name
                    if fnmatch.fnmatchcase(name, part) and (last or child.type ==
                                                            fs.FileType.Directory):
                        if _hidden(name) and not part.startswith((".", "_")):
                            continue
                        nxt.append((_join(shown, name), child.path))
            candidates = nxt
        for shown, real in candidates:
            matched.setdefault(shown, real)
    return sorted(matched.items())


def list_logs(path: str | os.PathLike | Sequence[str | os.PathLike]) -> list[LogPath]:
    """The log files ``path`` names (module docstring), in replay order (their file
    indexes). Driver. Refuses, naming it, what it cannot read; a directory or glob that
    names no log is an ``InputError`` that says what it reads."""
    from pyarrow import fs

    items = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if not items:
        raise InputError("read_event_log: no paths given; expected a file, a directory, a "
                         "glob or a list of them")
    out: list[LogPath] = []
    for item in items:
        given = os.fspath(item)
        if not is_uri(given):
            given = os.path.abspath(given)
        if _GLOB.search(given.split("://", 1)[-1]):
            found = _glob(given)
            if not found:
                raise InputError(f"{given}: the glob matches no file; read_event_log reads "
                                 f"{_FORMS}")
            for shown, _ in found:
                out.extend(_listed(shown))
            continue
        out.extend(_listed(given))
    return out


def _listed(given: str) -> list[LogPath]:
    from pyarrow import fs

    filesystem, real = _resolve(given)
    info = filesystem.get_file_info(real)
    if info.type == fs.FileType.NotFound:
        raise InputError(f"{given}: no such file or directory")
    if info.type == fs.FileType.Directory:
        found: list[LogPath] = []
        _walk(filesystem, real, given.rstrip("/"), found)
        if not found:
            raise InputError(f"{given}: a directory with no event log in it; read_event_log "
                             f"reads {_FORMS}")
        return found
    return [_log_path(given, info.base_name, info.size or 0)]


def list_directory(directory: str) -> list[tuple[str, str]]:
    """``(name, path or URI)`` of the files directly in ``directory`` (a path or a URI);
    empty when it does not exist. For the streaming source's parts."""
    from pyarrow import fs

    filesystem, real = _resolve(directory)
    try:
        infos = filesystem.get_file_info(fs.FileSelector(real, allow_not_found=True))
    except (OSError, ValueError):
        return []
    shown = directory.rstrip("/")
    return [(i.base_name, _join(shown, i.base_name) if is_uri(directory) else i.path)
            for i in infos if i.type == fs.FileType.File]


# -- opening (executor) -----------------------------------------------------------------------

def open_log(log: LogPath) -> str | LogFile:
    """What the engine's readers read ``log`` from: its local path, or a ``LogFile`` that
    opens it through its file system, decompressing. Runs where the file is read."""
    if log.plain:
        return log.uri
    filesystem, real = _resolve(log.uri)
    compression = log.compression

    def raw() -> Any:
        if compression is None:
            return filesystem.open_input_file(real)  # random access: spans
        return filesystem.open_input_stream(real, compression=None)

    def opened() -> BinaryIO:
        if compression is None:
            return raw()
        return _decompressing(raw(), compression, log.uri)

    def size() -> int:
        return int(filesystem.get_file_info(real).size or 0)

    return LogFile(log.uri, log.format, opened, size, seekable=compression is None,
                   fields=log.fields)


def _decompressing(stream: Any, compression: str, name: str) -> BinaryIO:
    import pyarrow as pa

    if compression in ("gzip", "bz2", "zstd"):
        return pa.CompressedInputStream(stream, compression)
    if compression == "deflate":  # Hadoop's DefaultCodec: a zlib stream
        return io.BufferedReader(_Inflating(stream))
    return io.BufferedReader(_HadoopBlocks(stream, compression, name))


class _Decoded(io.RawIOBase):
    """A compressed stream read as its decoded bytes: ``_more()`` gives the next piece
    (``b""``: nothing yet, ``None``: the end)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.pending = b""

    def readable(self) -> bool:
        return True

    def _more(self) -> bytes | None:
        raise NotImplementedError

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            more = self._more()
            if more is None:
                return 0
            self.pending = more
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def close(self) -> None:
        self.stream.close()
        super().close()


class _Inflating(_Decoded):
    """A zlib stream (Hadoop's ``.deflate``), decompressed as it is read."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.inflate = zlib.decompressobj()

    def _more(self) -> bytes | None:
        data = self.stream.read(1 << 16)
        if not data:
            return self.inflate.flush() or None
        return self.inflate.decompress(data)


class _HadoopBlocks(_Decoded):
    """Hadoop's block framing (its ``.snappy`` and ``.lz4`` codecs, which Spark writes):
    blocks of ``[uncompressed length][compressed length][compressed bytes]…`` (big-endian
    32-bit lengths), each decompressed as a raw snappy or LZ4 block."""

    def __init__(self, stream: Any, compression: str, name: str) -> None:
        import pyarrow as pa

        super().__init__(stream)
        self.codec = pa.Codec("snappy" if compression == "snappy" else "lz4_raw")
        self.snappy = compression == "snappy"
        self.name = name

    def _exactly(self, n: int) -> bytes | None:
        data = self.stream.read(n)
        while len(data) < n:
            more = self.stream.read(n - len(data))
            if not more:
                if not data:
                    return None
                raise InputError(f"{self.name}: the compressed file ends inside a block; is "
                                 "it complete?")
            data += more
        return bytes(data)

    def _block(self) -> bytes | None:
        head = self._exactly(4)
        if head is None:
            return None
        (left,) = struct.unpack(">I", head)
        out = []
        while left > 0:
            size = self._exactly(4)
            if size is None:
                raise InputError(f"{self.name}: the compressed file ends inside a block")
            (n,) = struct.unpack(">I", size)
            chunk = self._exactly(n) or b""
            length = _snappy_length(chunk) if self.snappy else left
            data = self.codec.decompress(chunk, decompressed_size=length).to_pybytes()
            out.append(data)
            left -= len(data)
        if left < 0:
            raise InputError(f"{self.name}: a block holds more than its length says; not "
                             "Hadoop's framing of this codec")
        return b"".join(out)

    _more = _block


def _snappy_length(chunk: bytes) -> int:
    """The uncompressed length a raw snappy block begins with (a varint)."""
    value = shift = 0
    for byte in chunk[:5]:
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    raise InputError("a snappy block without its length; not Hadoop's snappy framing")
