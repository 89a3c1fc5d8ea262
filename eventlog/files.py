"""Which files a replay reads: ``log_files(paths)``.

A path names a log file, or a directory whose log files (by extension: ``.jsonl``, ``.csv``,
``.parquet``…, compressed or not) are read in the order of their names, hidden files (``.…``)
and Spark's markers (``_SUCCESS``…) left out — a directory of parts, as Spark and the rolling
file sink write them, is one log cut in pieces. ``"-"`` is standard input. Every file is
checked before any output is opened: a missing, unreadable or empty directory is an
``InputError`` naming the path and the reason, one line, never a traceback.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> for name in ("part-00001.jsonl", "part-00000.jsonl", "_SUCCESS", ".part-00000.jsonl.crc"):
...     open(os.path.join(d, name), "w").close()
>>> [os.path.basename(p) for p in log_files([d])]
['part-00000.jsonl', 'part-00001.jsonl']
"""

from __future__ import annotations

import os
from typing import Iterable

from engine.errors import InputError

from eventlog.format import LOG_EXTENSIONS, STDIN, log_format

__all__ = ["log_files"]


def log_files(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
              format: str | None = None) -> list[str]:
    """The log files ``paths`` name, in order (a directory: its log files by name), each
    checked to exist and be readable. One path may be given alone (``"fleet.jsonl"``).
    ``format``: the logs' format when given (``log_format``), so a directory gives every file
    that is not hidden."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files: list[str] = []
    for item in items:
        path = os.fspath(item)
        if path == STDIN:
            files.append(path)
        elif os.path.isdir(path):
            files.extend(_parts(path, format))
        elif not os.path.exists(path):
            raise InputError(f"{path}: no such file" + (
                " (a broken link)" if os.path.islink(path) else ""))
        else:
            files.append(path)
    for path in files:
        if path != STDIN:
            _check_readable(path)
    return files


def _parts(directory: str, format: str | None) -> list[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError as err:
        raise InputError(f"{directory}: cannot read the directory: "
                         f"{err.strerror or err}") from None
    found = [os.path.join(directory, n) for n in names if not n.startswith((".", "_"))
             and (format is not None or n.lower().endswith(LOG_EXTENSIONS))
             and not os.path.isdir(os.path.join(directory, n))]
    if not found:
        named = ", *".join(LOG_EXTENSIONS[:4])
        raise InputError(f"{directory}: is a directory with no event-log file in it; expected "
                         f"a log file, or a directory of parts named *{named} …")
    return found


def _check_readable(path: str) -> None:
    """``InputError`` unless ``path`` can be opened for reading (and has a known format)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise InputError(f"{path}: cannot read it: {err.strerror or err}") from None
