"""Well-kept libraries in place of replay's hand-written parts, for ``bench_replay``'s rows.

Neither is part of the product; each plugs in where the product's own part sits, so the
replay around it is the same and the comparison is end to end.

- ``msgspec_scanner``: a JSON Lines fast scanner (``eventlog.fast``'s interface) on
  ``msgspec``: a block decoded into ``Struct``s with the payload kept as ``msgspec.Raw``
  (its bytes, not decoded), the columns gathered from them, the payload texts checked to be
  canonical JSON as the product's scanner checks them. The input lines are not proved
  canonical, so the writer builds every insert's line (as for Parquet).
- ``arrow_writer``: the canonical lines of whole columns with ``pyarrow.compute`` — integers
  to text with ``cast``, the pieces of each line put together with
  ``binary_join_element_wise`` — in place of ``eventlog.write_columns``' SWAR decimals, for
  the inserts' lines and the late lines (integer times; RFC 3339 times keep the product's).

``with scanners(jsonl=[...]):`` and ``with line_writer(arrow_writer):`` install them.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Iterator

import msgspec
import numpy as np

from eventlog import KIND_NAMES
from eventlog.columns import PAD, RawLines
from eventlog.fast import SCANNERS
from eventlog.records import BAD_KIND, NO_SOURCE, Block, RawColumns, Times
from eventlog.scan import payload_texts

__all__ = ["msgspec_scanner", "arrow_writer", "scanners", "line_writer"]

_KINDS = {name: code for code, name in enumerate(KIND_NAMES)}


class Record(msgspec.Struct, gc=False):
    """A record's fields as msgspec decodes them; the payload's JSON text kept as it is."""

    seq: int | None = None
    arrival: int | None = None
    source: str | None = None
    kind: str | None = None
    start: int | None = None
    end: int | None = None
    payload: msgspec.Raw = msgspec.Raw()


_DECODER = msgspec.json.Decoder(list[Record])


def _ints(values: list[Any]) -> Times:
    if None not in values:
        return Times.ints(np.array(values, np.int64))
    present = np.array([v is not None for v in values], np.bool_)
    return Times.ints(np.array([0 if v is None else v for v in values], np.int64), present)


def msgspec_scanner(block: Block) -> RawColumns | None:
    """A JSON Lines block through ``msgspec`` (``None``: a value not of the record's types,
    such as an ISO time, or not JSON: the object path takes the block)."""
    data = bytes(memoryview(block.data)[:block.size])
    try:
        recs = _DECODER.decode(b"[" + data.replace(b"\n", b",")[:-1] + b"]")
        n = len(recs)
        kind = np.array([_KINDS.get(r.kind, BAD_KIND) for r in recs], np.int8)
        names = list(dict.fromkeys(r.source for r in recs if r.source is not None))
        index = {name: i for i, name in enumerate(names)}
        source = np.array([NO_SOURCE if r.source is None else index[r.source] for r in recs],
                          np.int32)
        start = _ints([r.start for r in recs])
        end = _ints([r.end for r in recs])
        seq = _ints([r.seq for r in recs])
        arrival = _ints([r.arrival for r in recs])
    except (msgspec.DecodeError, OverflowError, ValueError):
        return None
    texts = io.BytesIO()
    write = texts.write
    lens = np.fromiter((write(r.payload) for r in recs), np.int64, n)
    texts.write(bytes(PAD))
    p1 = np.cumsum(lens)
    found = payload_texts(np.frombuffer(texts.getbuffer(), np.uint8), p1 - lens, p1, lens > 0)
    if found is None:
        return None
    payload, given = found
    first = block.first_line
    return RawColumns(np.arange(first, first + n, dtype=np.int64), kind, source, names, start,
                      end, seq, arrival, payload, given)


# -- the line writer ---------------------------------------------------------------------


def _strings(pa: Any, values: np.ndarray, valid: np.ndarray | None = None) -> Any:
    """int64 ``values`` as text (null where not ``valid``)."""
    mask = None if valid is None else ~valid
    return pa.compute.cast(pa.array(values, pa.int64(), mask=mask), pa.string())


def _texts(pa: Any, buffer: np.ndarray, p0: np.ndarray, p1: np.ndarray,
           valid: np.ndarray | None = None) -> Any:
    """The texts ``buffer[p0:p1]`` (ascending, disjoint) as a string array (null where not
    ``valid``), taken by Arrow from the buffer as it is: the buffer cut at every ``p0`` and
    ``p1`` is a string array whose elements ``3 j + 1`` are the texts."""
    k = len(p0)
    offsets = np.empty(3 * k + 1, np.int32)
    offsets[0] = 0
    offsets[1::3] = p0
    offsets[2::3] = p1
    offsets[3::3] = p1
    whole = pa.StringArray.from_buffers(3 * k, pa.py_buffer(offsets), pa.py_buffer(buffer))
    mask = None if valid is None else ~valid
    return pa.compute.take(whole, pa.array(np.arange(1, 3 * k, 3), pa.int64(), mask=mask))


def _lines_of(joined: Any) -> tuple[np.ndarray, np.ndarray]:
    """A string array's bytes (padded) and offsets."""
    _, offsets, data = joined.buffers()
    at = np.frombuffer(offsets, np.int32, count=len(joined) + 1)
    buffer = np.zeros(at[-1] + PAD, np.uint8)
    buffer[:at[-1]] = np.frombuffer(data, np.uint8, count=int(at[-1]))
    return buffer, at.astype(np.int64)


def arrow_insert_lines(prefixes: np.ndarray, prefix_lens: np.ndarray, source: np.ndarray,
                       start: np.ndarray, end: np.ndarray, has_end: np.ndarray,
                       buffer: np.ndarray, p0: np.ndarray, p1: np.ndarray, rows: np.ndarray,
                       n: int, times: Any = None) -> RawLines:
    """``eventlog.write_columns.insert_lines`` with ``pyarrow.compute``: each line is the
    join of its pieces, absent pieces (null) skipped."""
    from eventlog import write_columns

    if times is not None and times is not write_columns.decimals:
        return write_columns.insert_lines(prefixes, prefix_lens, source, start, end, has_end,
                                          buffer, p0, p1, rows, n, times)
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pa.array([prefixes[c, :prefix_lens[c]].tobytes().decode() for c in
                      range(len(prefix_lens))], pa.string())
    src = source[rows]
    join = pc.binary_join_element_wise
    end_text = join(',"end":', _strings(pa, end[rows], has_end[rows]), "")
    payload = join(',"payload":', _texts(pa, buffer, p0, p1, p1 > p0), "")
    joined = join(pc.take(names, pa.array(src)), _strings(pa, start[rows]), end_text, payload,
                  "}\n", "", null_handling="skip")
    data, at = _lines_of(joined)
    body = np.zeros(n, np.int64)
    stop = np.zeros(n, np.int64)
    start_at = np.zeros(n, np.int64)
    body[rows] = at[:-1]
    stop[rows] = at[1:]
    start_at[rows] = at[:-1] + prefix_lens[src]
    return RawLines(data[:int(at[-1])], body, stop, start_at, data)


def arrow_late_text(raw: RawLines, rows: np.ndarray, cti: np.ndarray, adjusted: np.ndarray,
                    times: Any = None) -> np.ndarray:
    """``eventlog.write_columns.late_text`` with ``pyarrow.compute``."""
    from eventlog import write_columns

    if times is not None and times is not write_columns.decimals:
        return write_columns.late_text(raw, rows, cti, adjusted, times)
    import pyarrow as pa
    import pyarrow.compute as pc

    body = raw.body[rows]
    lines = _texts(pa, raw.data, body, raw.stop[rows] - 2)  # without the closing }\n
    join = pc.binary_join_element_wise
    c = _strings(pa, cti)
    action = pc.coalesce(
        join(',"action":"adjusted","adjusted_start":', _strings(pa, cti, adjusted), "}\n", ""),
        ',"action":"dropped"}\n')
    data, at = _lines_of(join(lines, ',"cti":', c, action, ""))
    return data[:int(at[-1])]


#: the line writer as ``(insert_lines, late_text)``
arrow_writer = (arrow_insert_lines, arrow_late_text)


@contextlib.contextmanager
def scanners(**by_format: list[Any]) -> Iterator[None]:
    """The fast scanners of the given formats replaced for the block."""
    saved = {fmt: SCANNERS[fmt] for fmt in by_format}
    SCANNERS.update(by_format)
    try:
        yield
    finally:
        SCANNERS.update(saved)


@contextlib.contextmanager
def line_writer(writer: tuple[Any, Any] | None) -> Iterator[None]:
    """Replay's columnar writer built on ``writer`` (``None``: the product's)."""
    from goldilocks import columnar

    saved = columnar.insert_lines, columnar.late_text
    if writer is not None:
        columnar.insert_lines, columnar.late_text = writer
    try:
        yield
    finally:
        columnar.insert_lines, columnar.late_text = saved
