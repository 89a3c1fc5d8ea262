"""The fast scanners, behind one interface: ``fast_columns(block) -> Columns | None``.

A scanner reads a whole ``Block`` of one format at C or numpy speed, with no Python object
per record, and returns ``RawColumns`` — or ``None`` when the block is not in the shape it
reads. It decides nothing about validity: ``eventlog.records.accept`` applies the rules of a
record to its columns and takes the block only if every row is good. ``fast_columns``
returns ``None`` when no scanner reads the block or a rule is broken; the reader then takes
the block by the object path (``eventlog.records.settle``), which names each bad record.
So a scanner can never change what a log means, only how fast it is read.

To add a scanner: write ``scanner(block) -> RawColumns | None`` for a format and put it in
``SCANNERS`` (first match wins). What each built-in reads:

- ``"jsonl"``: ``eventlog.compact.spaced_columns`` — the same lines with whitespace between
  tokens, as ``json.dumps`` writes them (``{"kind": "cti", "start": 5}``), compacted first;
  then ``eventlog.scan.flat_columns`` — lines in the flat shape the engine writes (keys in
  canonical order, integer or ISO-8601 times); with integer times proved canonical, so their
  bytes are reused; then ``eventlog.compact.mixed_columns`` — a block whose whitespace
  between tokens starts after its first line; last ``eventlog.keyed.keyed_columns`` —
  records with their keys in any order, decoded by msgspec (payloads kept as raw text).
- ``"csv"``: ``eventlog.arrow.csv_columns`` — a block of rows parsed by pyarrow.csv, one
  row per line (integer or ISO-8601 times, payload JSON text).
- ``"parquet"``: ``eventlog.arrow.arrow_columns`` — a record batch's Arrow columns
  (integer or timestamp times, string kinds and names, canonical JSON payload texts).
"""

from __future__ import annotations

from typing import Callable

from eventlog.arrow import arrow_columns, csv_columns
from eventlog.columns import Columns
from eventlog.compact import mixed_columns, spaced_columns
from eventlog.keyed import keyed_columns
from eventlog.records import Block, RawColumns, accept
from eventlog.scan import flat_columns

__all__ = ["Scanner", "SCANNERS", "fast_columns"]

#: a fast scanner: a block of its format as raw columns, or ``None`` (not its shape)
Scanner = Callable[[Block], "RawColumns | None"]

#: the scanners tried for each format, in order
SCANNERS: dict[str, list[Scanner]] = {
    "jsonl": [spaced_columns, flat_columns, mixed_columns, keyed_columns],
    "csv": [csv_columns],
    "parquet": [arrow_columns],
}


def fast_columns(block: Block) -> Columns | None:
    """The block as ``Columns`` if a scanner reads it and every record in it is good; else
    ``None`` and nothing changed (the object path takes the block)."""
    for scanner in SCANNERS.get(block.format, ()):
        raw = scanner(block)
        if raw is not None:  # TS §5.7: taken whole or not at all
            return accept(raw, block.state)  # a broken rule: the object path names it
    return None
