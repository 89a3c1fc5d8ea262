"""Well-kept libraries in place of replay's hand-written parts, for ``bench_replay``'s rows.

Neither is part of the product; each plugs in where the product's own part sits, so the
replay around it is the same and the comparison is end to end.

- ``msgspec_scanner``: a JSON Lines fast scanner (``eventlog.fast``'s interface): a block
  decoded by ``msgspec`` into ``Struct``s with the payload kept as ``msgspec.Raw`` (its
  bytes, not decoded), the columns gathered from them, the payload texts checked to be
  canonical JSON as the product's scanner checks them. The input lines are not proved
  canonical, so the writer builds every insert's line (as for Parquet). ``with
  scanners(jsonl=[...]):`` installs it (``[]``: no scanner, the orjson object path).
- ``arrow_iso_times``: RFC 3339 text with ``pyarrow.compute.strftime`` (nine fraction
  digits), cut to the digits needed with three regular-expression replacements, in place of
  ``eventlog.write_columns.iso_times``' SWAR text; ``with iso_writer(arrow_iso_times):``.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Iterator

import msgspec
import numpy as np

from eventlog import KIND_NAMES
from eventlog.columns import PAD
from eventlog.fast import SCANNERS
from eventlog.records import BAD_KIND, NO_SOURCE, Block, RawColumns, Times
from eventlog.scan import payload_texts

__all__ = ["msgspec_scanner", "scanners", "arrow_iso_times", "iso_writer"]

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


@contextlib.contextmanager
def scanners(**by_format: list[Any]) -> Iterator[None]:
    """The fast scanners of the given formats replaced for the block."""
    saved = {fmt: SCANNERS[fmt] for fmt in by_format}
    SCANNERS.update(by_format)
    try:
        yield
    finally:
        SCANNERS.update(saved)


def arrow_iso_times(values: np.ndarray) -> Any:
    """``eventlog.write_columns.iso_times`` with ``pyarrow.compute``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ts = pa.array(values, pa.int64()).view(pa.timestamp("ns", "UTC"))
    text = pc.strftime(ts, format='"%Y-%m-%dT%H:%M:%SZ"')
    for pattern, replacement in ((r"\.000000000Z", "Z"), (r"(\.\d{3})000000Z", r"\1Z"),
                                 (r"(\.\d{6})000Z", r"\1Z")):
        text = pc.replace_substring_regex(text, pattern, replacement)
    return text.cast(pa.large_string())


@contextlib.contextmanager
def iso_writer(iso_times: Any) -> Iterator[None]:
    """Replay's RFC 3339 text made by ``iso_times`` (``None``: the product's)."""
    from goldilocks import columnar

    saved = columnar.iso_times
    if iso_times is not None:
        columnar.iso_times = iso_times
    try:
        yield
    finally:
        columnar.iso_times = saved
