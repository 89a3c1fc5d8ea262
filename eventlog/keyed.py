"""JSON Lines records with their keys in any order, decoded by ``msgspec`` (a fast scanner
of ``eventlog.fast``, tried after the flat scanner).

The flat scanner reads the key order the engine writes; a producer that writes
``{"kind": ..., "start": ..., "source": ...}`` (a dict built in another order, a logging
formatter) used to take the object path: orjson decodes a dict per record, and building the
columns from those dicts costs more than the parsing. ``msgspec`` decodes a block straight
into typed ``Struct`` instances, ignoring fields no rule reads, and keeps each payload as its
raw JSON text (``msgspec.Raw``): about three times the object path's rate.

It only reads: any value not of the type the flat shape has (a number with a fraction as a
time, ``null`` for a name, a boolean), a record with an ``id``, a line that is not one JSON
object, a blank line, or bytes that are not UTF-8 (even in a field no rule reads: orjson
refuses them) make it return ``None``, and the object path reads the block and
names what is wrong, as before. Times are integers or ISO-8601 text, read as the object
path reads them (``eventlog.values.times_of``); payloads are checked to be canonical JSON, or
written again by orjson as the object path writes them (``eventlog.scan.payload_texts``).
A block with whitespace between tokens is compacted first (``eventlog.compact``), so that
its payload texts are already canonical. Memory: one block and its records.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from eventlog.columns import PAD
from eventlog.compact import compacted
from eventlog.records import MISSING, Block, RawColumns, Times
from eventlog.scan import payload_texts
from eventlog.values import _kinds, _sources, times_of

__all__ = ["keyed_columns"]


class _Record(msgspec.Struct, gc=False):
    """The fields of a record that the rules read, in the types of the flat shape; absent:
    ``UNSET``. Other fields are skipped (as the object path ignores them)."""

    seq: int | UnsetType = UNSET
    arrival: int | str | UnsetType = UNSET
    source: str | UnsetType = UNSET
    kind: str | UnsetType = UNSET
    start: int | str | UnsetType = UNSET
    end: int | str | UnsetType = UNSET
    payload: msgspec.Raw | UnsetType = UNSET
    id: msgspec.Raw | UnsetType = UNSET


_DECODER = msgspec.json.Decoder(_Record)


def _column(recs: list[_Record], name: str) -> list[Any]:
    """A field's values, ``MISSING`` where a record has none (as ``eventlog.values`` reads)."""
    values = list(map(attrgetter(name), recs))
    return [MISSING if v is UNSET else v for v in values] if UNSET in values else values


def keyed_columns(block: Block) -> RawColumns | None:
    """A JSON Lines block as ``RawColumns`` if every line is one record whose fields have
    the flat shape's types, in any key order; else ``None``. Registered in
    ``eventlog.fast``; ``eventlog.records`` decides validity."""
    squeezed = compacted(block) or block
    data = memoryview(squeezed.data)[:squeezed.size]
    try:
        if not squeezed.data.isascii():  # msgspec does not check the keys it skips
            str(data, "utf-8")
        recs = _DECODER.decode_lines(data)
    except (msgspec.DecodeError, ValueError):  # (invalid UTF-8: UnicodeDecodeError)
        return None
    n = len(recs)
    if n != squeezed.data.count(b"\n", 0, squeezed.size) or _column(recs, "id").count(
            MISSING) != n:
        return None  # a blank line (the object path skips it and keeps the count), or ids
    mode = block.state.mode
    none = Times.absent(n)
    seq = times_of(_column(recs, "seq"), False) if mode in (None, "seq") else none
    arrival = (times_of(_column(recs, "arrival"), True, block.state.scale)
               if mode in (None, "arrival") else none)
    texts = [b"" if p is UNSET else bytes(p) for p in map(attrgetter("payload"), recs)]
    lens = np.fromiter(map(len, texts), np.int64, n)
    ends = np.cumsum(lens)
    buffer = np.frombuffer(b"".join(texts) + bytes(PAD), np.uint8)
    found = payload_texts(buffer, ends - lens, ends, lens > 0, reencode=True)
    if found is None:
        return None
    payload, has_payload = found
    source, names = _sources(_column(recs, "source"))
    first = block.first_line
    return RawColumns(np.arange(first, first + n, dtype=np.int64), _kinds(_column(recs, "kind")),
                      source, names,
                      times_of(_column(recs, "start"), True, block.state.scale),
                      times_of(_column(recs, "end"), True, block.state.scale),
                      seq, arrival, payload, has_payload)
