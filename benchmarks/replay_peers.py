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


def _strings(pa: Any, values: np.ndarray) -> Any:
    return pa.compute.cast(pa.array(values, pa.int64()), pa.string())


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
    """``eventlog.write_columns.insert_lines`` with ``pyarrow.compute``."""
    from eventlog import write_columns

    if times is not None and times is not write_columns.decimals:
        return write_columns.insert_lines(prefixes, prefix_lens, source, start, end, has_end,
                                          buffer, p0, p1, rows, n, times)
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pa.array([prefixes[c, :prefix_lens[c]].tobytes().decode() for c in
                      range(len(prefix_lens))], pa.string())
    src = source[rows]
    interval = has_end[rows]
    pay = p1 - p0
    empty = pa.scalar("", pa.string())
    end_text = pc.if_else(pa.array(interval), pc.binary_join_element_wise(
        ',"end":', _strings(pa, end[rows]), ""), empty)
    texts = pa.StringArray.from_buffers(len(rows), pa.py_buffer(
        np.concatenate(([0], np.cumsum(pay))).astype(np.int32)), pa.py_buffer(
        _gathered(buffer, p0, p1)))
    payload = pc.if_else(pa.array(pay > 0), pc.binary_join_element_wise(
        ',"payload":', texts, ""), empty)
    joined = pc.binary_join_element_wise(pc.take(names, pa.array(src)),
                                         _strings(pa, start[rows]), end_text, payload, "}\n", "")
    data, at = _lines_of(joined)
    body = np.zeros(n, np.int64)
    stop = np.zeros(n, np.int64)
    start_at = np.zeros(n, np.int64)
    body[rows] = at[:-1]
    stop[rows] = at[1:]
    start_at[rows] = at[:-1] + prefix_lens[src]
    return RawLines(data[:int(at[-1])], body, stop, start_at, data)


def _gathered(buffer: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    from eventlog.columns import gather

    return gather(buffer, p0, p1)


def arrow_late_text(raw: RawLines, rows: np.ndarray, cti: np.ndarray, adjusted: np.ndarray,
                    times: Any = None) -> np.ndarray:
    """``eventlog.write_columns.late_text`` with ``pyarrow.compute``."""
    from eventlog import write_columns

    if times is not None and times is not write_columns.decimals:
        return write_columns.late_text(raw, rows, cti, adjusted, times)
    import pyarrow as pa
    import pyarrow.compute as pc

    from eventlog.columns import gather

    body = raw.body[rows]
    head = raw.stop[rows] - 2 - body  # each line without its closing }\n
    lines = pa.StringArray.from_buffers(len(rows), pa.py_buffer(
        np.concatenate(([0], np.cumsum(head))).astype(np.int32)), pa.py_buffer(
        gather(raw.data, body, body + head)))
    c = _strings(pa, cti)
    action = pc.if_else(pa.array(adjusted),
                        pc.binary_join_element_wise(',"action":"adjusted","adjusted_start":', c,
                                                    "}\n", ""),
                        pa.scalar(',"action":"dropped"}\n', pa.string()))
    joined = pc.binary_join_element_wise(lines, ',"cti":', c, action, "")
    data, at = _lines_of(joined)
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
