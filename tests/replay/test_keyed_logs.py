"""JSON Lines records with their keys in any order (TS §5.7): read by msgspec
(``eventlog.keyed``) to the same output bytes, late file, quarantine, counts and errors as the
object path, and a clean log is taken by the fast scanners whatever its key order."""

from __future__ import annotations

import contextlib
import json

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import BadRecords, SourceTable
from eventlog.columns import PAD
from eventlog.keyed import keyed_columns
from eventlog.records import Block, FileState
from tests.replay.test_iso_scan import MODES, same_either_way, small_blocks, taken_fast
from tests.replay.test_spaced_logs import spaced_logs


def shuffled(recs: list[dict], draw) -> list[dict]:
    return [dict(draw(st.permutations(list(r.items())))) for r in recs]


def written(recs: list[dict], spaced: bool) -> bytes:
    if spaced:
        return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in recs)
    return b"".join(orjson.dumps(r) + b"\n" for r in recs)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spaced_logs(clean=False), MODES, st.booleans(), st.sampled_from([None, 64, 300]),
       st.data())
def test_logs_in_any_key_order_give_the_same_bytes_and_errors_on_either_path(
        tmp_path, recs, mode, spaced, block, data):
    path = tmp_path / "log.jsonl"
    path.write_bytes(written(shuffled(recs, data.draw), spaced))
    with small_blocks(block) if block else contextlib.nullcontext():
        same_either_way(path, tmp_path, "jsonl", mode)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spaced_logs(clean=True), st.booleans(), st.data())
def test_clean_logs_in_any_key_order_are_taken_by_the_fast_scanners(tmp_path, recs, spaced,
                                                                    data):
    if not any(r["kind"] in ("insert", "cti") for r in recs):
        return  # a log of joins and leaves alone has no time to read
    path = tmp_path / "log.jsonl"
    path.write_bytes(written(shuffled(recs, data.draw), spaced))
    assert taken_fast(path, "jsonl")


def test_what_msgspec_would_read_differently_is_left_to_the_object_path():
    """Values of another type than the flat shape's, ids, blank lines: not the scanner's."""
    for text in (b'{"kind":"insert","start":1.5,"source":"A"}\n',
                 b'{"kind":"insert","start":true,"source":"A"}\n',
                 b'{"kind":"insert","start":5,"source":null}\n',
                 b'{"kind":"insert","start":5,"source":"A","id":7}\n',
                 b'{"kind":"insert","start":5,"source":"A"}\n\n',
                 b'[1]\n', b'{"kind":"insert","start":5}{"kind":"cti","start":6}\n'):
        state = FileState("f.jsonl", 0, SourceTable(), BadRecords(), 1)
        assert keyed_columns(Block("jsonl", bytearray(text + bytes(PAD)), len(text), 1,
                                   state)) is None, text
