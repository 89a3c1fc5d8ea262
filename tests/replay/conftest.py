"""Shared fixtures for replay tests: real files on disk under tmp_path."""

from __future__ import annotations

import pytest

from eventlog import BadRecords, SourceTable
from eventlog.columns import PAD
from eventlog.fast import fast_columns
from eventlog.records import Block, FileState

SEED_LOG = (
    b'{"source":"A","kind":"insert","start":300000000000}\n'
    b'{"source":"B","kind":"insert","start":0}\n'
    b'{"source":"A","kind":"cti","start":300000000000}\n'
    b'{"source":"B","kind":"cti","start":0}\n'
    b'{"source":"A","kind":"insert","start":420000000000}\n'
    b'{"source":"A","kind":"cti","start":480000000000}\n'
    b'{"source":"B","kind":"insert","start":60000000000}\n'
)


@pytest.fixture
def seed_log(tmp_path):
    path = tmp_path / "seed.jsonl"
    path.write_bytes(SEED_LOG)
    return path


def scan_block(raw, mode, table: SourceTable, last_key: int, size=None):
    """The JSON Lines fast path on one block of whole lines — the flat scanner and the rules
    of a record — as ``(mode, kind, source, start, end, has_end, key, payload, lines)`` (key
    ``None`` by position), or ``None`` when it does not take the block. Integer times are
    nanoseconds (``--time-unit ns``). With ``size``, ``raw`` is the reader's bytearray,
    ``size`` bytes of lines and at least ``PAD`` after them, read in place."""
    if size is None:
        raw, size = bytearray(raw + bytes(PAD)), len(raw)
    state = FileState("f.jsonl", 0, table, BadRecords(), 1)
    state.mode, state.last_key = mode, last_key
    cols = fast_columns(Block("jsonl", raw, size, 1, state))
    if cols is None:
        return None
    return (state.mode, cols.kind, cols.source, cols.start, cols.end, cols.has_end,
            None if state.mode == "position" else cols.key, cols.payload, cols.raw)
