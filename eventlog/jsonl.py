"""Reading JSON Lines logs in blocks: the fast scanners first, the object path for the rest.

The file is read in blocks of ``CHUNK_BYTES`` of whole lines, each into a fresh buffer with
``PAD`` spare bytes, so that a scanner can read it in place (``eventlog.fast``). A block no
scanner takes is decoded by orjson — the whole block as one array when it decodes so, else
line by line, so that a line that is not JSON is named — and handed to the rules of a record
(``eventlog.records``) as Python values. Memory: one block and its records.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import orjson

from eventlog.columns import PAD, Columns
from eventlog.fast import fast_columns
from eventlog.format import open_log
from eventlog.records import MISSING, RECORD_FIELDS, Block, FileState, settle
from eventlog.values import from_fields

__all__ = ["CHUNK_BYTES", "read_jsonl", "object_columns"]

#: bytes of JSON Lines read per block (the memory bound of the JSON Lines reader)
CHUNK_BYTES = 4 << 20

_loads = orjson.loads
_FIELDS = ("source", "kind", "start", "end", "payload", "id")
_UNREADABLE: Any = type("Unreadable", (), {})()


def _decode_error(raw: bytes, err: Exception, last: bool) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return (f"byte 0x{raw[bad.start]:02x} at column {bad.start + 1} is not valid UTF-8; "
                "expected UTF-8 text")
    hint = " (truncated last line: the file ends without a newline mid-record)" if last else ""
    return f"not valid JSON: {err}{hint}"


def object_columns(lines: list[bytes], first_line: int, st: FileState, last: bool) -> Columns:
    """The object path: ``lines`` (numbered from ``first_line``; ``last``: the file's last
    line, without its newline) decoded by orjson, judged by the rules of a record."""
    objs: list[Any] | None = None
    texts = lines
    numbers: Any = None
    unreadable: dict[int, tuple[str, str | None]] = {}
    try:
        objs = _loads(b"[" + b",".join(lines) + b"]")
        if len(objs) != len(lines):  # a line held more than one value
            objs = None
    except orjson.JSONDecodeError:
        pass
    if objs is None:  # line by line: blank lines skipped, each line's error its own
        objs, texts, numbers = [], [], []
        final = len(lines) - 1
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue  # a blank line holds no record
            try:
                obj = _loads(raw)
            except orjson.JSONDecodeError as err:
                unreadable[len(objs)] = (_decode_error(raw, err, last and i == final), None)
                obj = _UNREADABLE
            objs.append(obj)
            texts.append(raw)
            numbers.append(first_line + i)
    if st.fields:  # a field mapping: the records' fields under their canonical names
        objs = _renamed(objs, st.fields)
    n = len(objs)
    row_lines = (np.arange(first_line, first_line + n, dtype=np.int64) if numbers is None
                 else np.array(numbers, np.int64).reshape(n))
    wanted = _FIELDS + (("arrival", "seq") if st.mode is None else
                        () if st.mode == "position" else (st.mode,))
    not_record = None
    if set(map(type, objs)) <= {dict}:
        fields = {f: [o.get(f, MISSING) for o in objs] for f in wanted}
    else:
        records = [o if type(o) is dict else {} for o in objs]
        fields = {f: [o.get(f, MISSING) for o in records] for f in wanted}
        not_record = np.array([type(o) is not dict for o in objs], np.bool_)
    return settle(from_fields(fields, row_lines, objects=objs, text=texts.__getitem__,
                              unreadable=unreadable, not_record=not_record, scale=st.scale), st)


def _renamed(objs: list[Any], named: dict[str, str]) -> list[Any]:
    """The records with their fields under the canonical names (``named``: field -> the name
    the log gives it); a record without a kind is an insert, unless the kind is mapped."""
    pairs = [(f, named.get(f, f)) for f in RECORD_FIELDS]
    default_kind = "kind" not in named
    out: list[Any] = []
    for o in objs:
        if type(o) is dict:
            o = {f: o[name] for f, name in pairs if name in o}
            if default_kind and "kind" not in o:
                o["kind"] = "insert"  # a plain log's records are readings
        out.append(o)
    return out


def read_jsonl(st: FileState, on_bytes: Callable[[int], None] | None) -> Iterator[Columns]:
    """The file's records (those of ``st.span``), a block of ``CHUNK_BYTES`` at a time."""
    size = CHUNK_BYTES
    span = st.span
    left = None if span.stop is None else span.stop - span.start  # bytes still to read
    # Each block is read into a fresh buffer after the previous block's unfinished line, with
    # room for the scanner's padding, so the scanner works on it in place: no copies.
    f: Any
    with st.open(raw=True) as f:
        if span.start:
            f.seek(span.start)
        rest = b""
        line = span.first_line
        while True:
            held = len(rest)
            buf = bytearray(held + size + PAD)
            buf[:held] = rest
            want = size if left is None else min(size, left)
            with memoryview(buf) as view:
                got = f.readinto(view[held:held + want]) if want else 0
            if left is not None:
                left -= got
            if not got:
                break
            if on_bytes is not None:
                on_bytes(got)
            end = held + got
            cut = buf.rfind(b"\n", 0, end)
            if cut < 0:
                rest = bytes(buf[:end])
                continue
            rest = bytes(buf[cut + 1:end])
            scanned = (None if st.fields else  # the scanners read the canonical names
                       fast_columns(Block("jsonl", buf, cut + 1, line, st)))
            if scanned is not None:
                yield scanned
                line += len(scanned)
                continue
            lines = bytes(buf[:cut]).split(b"\n")
            del buf
            yield object_columns(lines, line, st, False)
            line += len(lines)
        if rest.strip():
            yield object_columns([rest], line, st, True)
