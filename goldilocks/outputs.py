"""Output files that never destroy an input and never show a half-written result.

``check_outputs(inputs, outputs)`` runs before anything is opened: an output that is one of
the inputs (the same file by path or by inode: through a symbolic or a hard link too), two
outputs that are the same file, an output that is a directory or whose directory does not
exist are refused with a ``UsageError`` naming the option and the path.

``AtomicOutput(path, option)`` then creates a hidden temporary file beside the target
(``.<name>.<pid>-<random>.tmp``, in the target's own directory, so that the final rename is
atomic); creating it is the proof that the target can be written, so it is done before any
work starts. The temporaries of the same target left by a process that is gone (killed with
SIGKILL, or a power cut: nothing could remove them) are removed then. ``commit()`` renames
it over the target (``os.replace``): a reader sees the old file or the whole new one, never
a part. ``discard()`` removes it: a failed or interrupted run leaves no file under the final
name and no temporary behind. A symbolic link as the target
is followed (the link stays, its target is replaced); a target that exists but is not a
regular file (``/dev/null``, a FIFO) is written in place, since it cannot be replaced.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> out = AtomicOutput(os.path.join(d, "out.jsonl"), "out")
>>> _ = out.file.write(b"{}\\n")
>>> os.listdir(d) == [os.path.basename(out.temp)]
True
>>> out.commit()
>>> os.listdir(d)
['out.jsonl']
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from typing import Any, BinaryIO, Iterable, Iterator, Mapping

from engine.errors import UsageError
from goldilocks.failpoints import failpoint

__all__ = ["check_outputs", "unusable_directory", "AtomicOutput", "open_outputs", "is_path",
           "Output", "open_sinks", "write_atomic", "open_resumed", "durable", "fsync_dir", "remove_stale_temps"]


def is_path(target: Any) -> bool:
    """Is ``target`` a file name (``str`` or path-like), as opposed to a file object or
    ``None``?"""
    return isinstance(target, (str, os.PathLike))


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _identity(path: str) -> tuple[str, os.stat_result | None]:
    return os.path.realpath(path), _stat(path)


def _same(a: tuple[str, os.stat_result | None], b: tuple[str, os.stat_result | None]) -> bool:
    if a[0] == b[0]:
        return True
    return a[1] is not None and b[1] is not None and os.path.samestat(a[1], b[1])


def _discarding(ident: tuple[str, os.stat_result | None]) -> bool:
    """A character device (``/dev/null``): written in place, and by several outputs alike."""
    info = ident[1]
    return info is not None and stat.S_ISCHR(info.st_mode)


def unusable_directory(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be a directory to write files in — created if missing — with
    what was expected, or ``None`` if it can (it exists, or was created, and is writable)."""
    path = os.fspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        return "a file of that name is in the way; expected a directory, or a path to make one"
    except OSError as err:
        where = next((p for p in _parents(path) if os.path.exists(p)), None)
        return (f"cannot create the directory: {err.strerror or err}"
                + (f" (the nearest existing parent is {where})" if where else "")
                + "; expected a directory it can create or write in")
    if not os.access(path, os.W_OK | os.X_OK):
        return "cannot write in it (permission denied); expected a writable directory"
    return None


def _parents(path: str) -> Iterator[str]:
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        yield parent
        up = os.path.dirname(parent)
        if up == parent:
            return
        parent = up


def check_outputs(inputs: Iterable[Any], outputs: Mapping[str, Any]) -> None:
    """Refuse, before anything is opened, outputs that would destroy an input or each other,
    or that cannot be a file: ``outputs`` maps an option name to a path (``None`` and file
    objects are skipped). Raises ``UsageError(option, …)``."""
    ins = [(os.fspath(p), _identity(os.fspath(p))) for p in inputs if is_path(p)]
    seen: list[tuple[str, str, tuple]] = []
    for option, target in outputs.items():
        if not is_path(target):
            continue
        path = os.fspath(target)
        ident = _identity(path)
        for name, other in ins:
            if _same(ident, other):  # TS §5.5: an input is never written
                how = "" if os.path.abspath(path) == os.path.abspath(name) else \
                    " (the same file under another name or through a link)"
                raise UsageError(option, f"{path} is the input log {name}{how}; writing it "
                                 "would destroy the input: choose another file")
        for other_option, other_path, other in seen:
            if _same(ident, other) and not _discarding(ident):
                raise UsageError(option, f"{path} is also given as {other_option} "
                                 f"({other_path}); give each output its own file")
        seen.append((option, path, ident))
        real = ident[0]
        if os.path.isdir(real):
            raise UsageError(option, f"{path} is a directory; expected a file name")
        parent = os.path.dirname(real) or "."
        if not os.path.isdir(parent):
            what = "is not a directory" if os.path.exists(parent) else "does not exist"
            raise UsageError(option, f"cannot write {path}: {parent} {what}")


class AtomicOutput:
    """A file written under a temporary name and renamed over ``path`` by ``commit()``.

    ``file`` is the open binary file. Creating the temporary file is the check that ``path``
    can be written: an error is a ``UsageError(option, …)`` naming the path and the reason.
    """

    def __init__(self, path: str | os.PathLike, option: str, *, buffering: int = 1 << 20
                 ) -> None:
        self.path = os.fspath(path)
        self.option = option
        target = os.path.realpath(self.path)
        info = _stat(target)
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise UsageError(option, f"{self.path} is a directory; expected a file name")
        self.target = target
        self.temp: str | None = None
        try:
            if info is not None and not stat.S_ISREG(info.st_mode):  # a device, a FIFO
                self.file: BinaryIO = open(target, "wb", buffering=buffering)
                return
            folder, name = os.path.split(target)
            _remove_stale(folder, name)
            while True:
                temp = os.path.join(folder, f".{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
                try:  # the mode as for any new file (umask), or the replaced file's
                    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                                 0o666)
                except FileExistsError:
                    continue
                break
            self.temp = temp
            if info is not None:
                os.chmod(fd, stat.S_IMODE(info.st_mode))
            self.file = os.fdopen(fd, "wb", buffering=buffering)
        except OSError as err:
            self._remove()
            raise UsageError(option, f"cannot write {self.path}: "
                             f"{err.strerror or err}") from err

    def commit(self) -> None:
        """Close the file and put it in place under its final name (atomically)."""
        self.file.close()
        if self.temp is not None:
            try:  # TS §5.5: the whole file appears at once
                os.replace(self.temp, self.target)
            except OSError:
                self._remove()
                raise
            self.temp = None

    def discard(self) -> None:
        """Close and remove the temporary file; the final name is left as it was."""
        try:
            self.file.close()
        except OSError:
            pass
        self._remove()

    def _remove(self) -> None:
        if self.temp is not None:
            try:
                os.unlink(self.temp)
            except OSError:
                pass
            self.temp = None


def _remove_stale(folder: str, name: str) -> None:
    """Remove the temporaries of ``name`` in ``folder`` whose process is gone
    (``.<name>.<pid>-<random>.tmp``; an older ``.<name>.<random>.tmp`` names no process and
    is taken as gone). A process that still runs keeps its own."""
    prefix, suffix = f".{name}.", ".tmp"
    try:
        entries = os.listdir(folder or ".")
    except OSError:
        return
    for entry in entries:
        if not (entry.startswith(prefix) and entry.endswith(suffix)):
            continue
        tag = entry[len(prefix):-len(suffix)]
        pid, dash, rest = tag.partition("-")
        if dash and pid.isdigit() and _alive(int(pid)):
            continue
        if not dash and not (len(tag) == 8 and all(c in "0123456789abcdef" for c in tag)):
            continue  # not one of ours
        try:
            os.unlink(os.path.join(folder, entry))
        except OSError:
            pass


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def open_outputs(targets: Mapping[str, Any]) -> dict[str, AtomicOutput]:
    """``AtomicOutput`` for each path in ``targets`` (option -> path; others skipped), all or
    none: if one cannot be created the ones before it are discarded and the error raised."""
    opened: dict[str, AtomicOutput] = {}
    try:
        for option, target in targets.items():
            if is_path(target):
                opened[option] = AtomicOutput(target, option)
    except BaseException:
        for o in opened.values():
            o.discard()
        raise
    return opened


class Output:
    """A binary sink: a path (written through its ``AtomicOutput``, put in place by
    ``close(True)``, removed by ``close(False)``), a file object, or ``None`` (discard)."""

    def __init__(self, target: Any, atomic: AtomicOutput | None = None) -> None:
        self.atomic = atomic
        if atomic is not None:
            self.file: BinaryIO | None = atomic.file
        elif target is None:
            self.file = None
        else:
            self.file = getattr(target, "buffer", target)  # a text stream's binary buffer

    def write(self, data: bytes | memoryview) -> None:
        if self.file is not None and data:
            self.file.write(data)

    def close(self, ok: bool) -> None:
        if self.atomic is not None:
            if ok:
                self.atomic.commit()
            else:
                self.atomic.discard()
        elif self.file is not None:
            self.file.flush()


def open_sinks(targets: Mapping[str, Any]) -> list[Output]:
    """An ``Output`` per target (option -> a path, a binary file or ``None``), in order; the
    paths' files are created all or none (``open_outputs``)."""
    for option, target in targets.items():
        if not (target is None or is_path(target) or hasattr(target, "write")):
            raise UsageError(option, f"{target!r}; expected a path, a binary file or None")
    atomic = open_outputs(targets)
    return [Output(target, atomic.get(option)) for option, target in targets.items()]


def write_atomic(path: str | os.PathLike, data: bytes, option: str = "checkpoint", *,
                 failpoints: bool = True) -> None:
    """Replace ``path`` with ``data`` whole (an ``AtomicOutput``), durably: the bytes are
    ``fsync``-ed before the rename and the directory after it, so a reader — or a run after a
    crash, or after a power loss — finds the old file or the new one, never a part. The
    failpoints ``checkpoint.write`` (half the bytes written) and ``checkpoint.rename`` (all
    written and ``fsync``-ed, not yet renamed) are on this path (``goldilocks.failpoints``),
    unless ``failpoints`` is False (a file that is not a checkpoint)."""
    out = AtomicOutput(path, option)
    try:
        half = len(data) // 2
        out.file.write(data[:half])
        out.file.flush()
        if failpoints:
            failpoint("checkpoint.write")  # torn: the old file is still the one in place
        out.file.write(data[half:])
        out.file.flush()
        os.fsync(out.file.fileno())
        if failpoints:
            failpoint("checkpoint.rename")
    except BaseException:
        out.discard()
        raise
    out.commit()
    fsync_dir(out.target)


def fsync_dir(path: str | os.PathLike) -> None:
    """``fsync`` the directory holding ``path``, so that a rename or a removal in it
    survives a power loss (a file's own ``fsync`` does not cover its name)."""
    folder = os.path.dirname(os.path.realpath(path)) or "."
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # a file system that cannot open directories (rare): nothing more to do
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)


def open_resumed(path: str, length: int | None, option: str) -> BinaryIO:
    """The output file under its fixed name ``path``, to be appended to: created empty
    (``length`` None: a fresh start), or cut back to ``length`` bytes — what a checkpoint
    recorded as durable; whatever was written after it, a torn last line included, is
    dropped (TS §8.3). The caller has checked that the file holds at least ``length``
    bytes. Errors are ``UsageError(option, …)`` naming the file."""
    try:
        if length is None:
            return open(path, "wb")
        file = open(path, "r+b")
        try:
            file.truncate(length)
            file.seek(length)
        except BaseException:
            file.close()
            raise
        return file
    except OSError as err:
        raise UsageError(option, f"cannot write {path}: {err.strerror or err}") from err


def durable(file: BinaryIO) -> int:
    """Flush ``file`` and ``fsync`` it; the length written (the position to record in a
    checkpoint: the bytes up to it survive a crash)."""
    file.flush()
    os.fsync(file.fileno())
    return file.tell()


def remove_stale_temps(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files an ``AtomicOutput`` of ``path`` left when its process was
    killed before the rename (``.<name>.<8 hex digits>.tmp`` beside the target); returns
    their names. Only for a target that no other process is writing."""
    target = os.path.realpath(path)
    folder, name = os.path.split(target)
    pattern = re.compile(r"^\." + re.escape(name) + r"\.[0-9a-f]{8}\.tmp$")
    removed: list[str] = []
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return removed
    for entry in names:
        if pattern.match(entry):
            try:
                os.unlink(os.path.join(folder, entry))
                removed.append(entry)
            except OSError:
                pass
    return removed
