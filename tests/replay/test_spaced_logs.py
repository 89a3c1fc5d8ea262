"""JSON Lines as Python writes it (``json.dumps``' ``", "`` and ``": "``), and with any other
whitespace between tokens, on the fast path (TS §5.7): the compaction of
``eventlog.compact`` removes exactly the whitespace outside strings, a log so written gives
the same output bytes, late file, quarantine, counts and errors (file:line) whether the fast
scanners or the object path read it, and a clean one is taken by the fast scanners."""

from __future__ import annotations

import contextlib
import json
import re

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import BadRecords, SourceTable
from eventlog.columns import PAD
from eventlog.compact import compacted
from eventlog.records import Block, FileState
from tests.replay.test_iso_scan import (MODES, T0, iso_of, same_either_way, small_blocks,
                                        taken_fast)

#: names and payload strings that hold what compaction must leave alone: spaces, tabs'
#: look-alikes, the separators json.dumps writes, quotes and backslashes (escaped)
TRICKY = ["dev 1", "a, b", 'say ": "', "x , y", " lead", "trail ", "q\"uote", "back\\slash",
          "tab\tin", "", "é ü", "  ", ": ", ", "]
NAMES = ["dev-1", "A", "ninechars", "x" * 40] + TRICKY


@st.composite
def spaced_logs(draw, clean: bool):
    """Records in the flat key order (sometimes another): order key, kinds, intervals,
    integer or ISO times, payloads with tricky strings; unless ``clean``, now and then a
    bad record."""
    mode = draw(st.sampled_from(["position", "seq", "arrival"]))
    # (floats only in bad logs: json.dumps and orjson spell some apart, 1e-05 and 1e-5, so
    # a log holding them is not canonical after compaction and takes the object path)
    recs = []
    key = T0 - 10**12
    names = NAMES[:4] if clean else NAMES
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["insert", "insert", "insert", "cti", "join", "leave"]))
        rec: dict = {}
        if mode == "seq":
            key += draw(st.integers(0, 3))
            rec["seq"] = key
        elif mode == "arrival":
            key += draw(st.integers(0, 10**9))
            rec["arrival"] = iso_of(key, 0, 9, "") if draw(st.booleans()) else key
        if kind != "cti" or draw(st.booleans()):
            rec["source"] = draw(st.sampled_from(names))
        rec["kind"] = kind
        if kind in ("insert", "cti"):
            ns = T0 + draw(st.integers(-10**12, 10**12))
            rec["start"] = ns if draw(st.booleans()) else iso_of(
                ns, draw(st.sampled_from([0, 60, -330])), draw(st.sampled_from([0, 3, 6, 9])),
                "")
        if kind == "insert" and draw(st.integers(0, 3)) == 0:
            start = rec["start"] if isinstance(rec["start"], int) else None
            rec["end"] = (start or T0 + 2 * 10**12) + draw(st.integers(1, 10**11))
        if kind == "insert" and draw(st.booleans()):
            rec["payload"] = draw(st.one_of(
                st.dictionaries(st.sampled_from(["v", "celsius", "a b", "k: v"]),
                                st.one_of(st.integers(-5, 100),
                                          *([] if clean else [st.floats(-50, 50)]),
                                          st.sampled_from(TRICKY if not clean else ["ok"]),
                                          st.lists(st.integers(0, 3), max_size=3)),
                                max_size=3),
                st.integers(0, 9), st.lists(st.booleans(), max_size=2),
                *([] if clean else [st.none(), st.sampled_from(TRICKY)])))
        if not clean and draw(st.integers(0, 9)) == 0:
            what = draw(st.sampled_from(["kind", "source", "key", "order"]))
            if what == "kind":
                rec["kind"] = "update"
            elif what == "source" and kind != "cti":
                rec.pop("source", None)
            elif what == "key" and mode != "position":
                rec[mode] = -1
            elif what == "order":
                rec = dict(reversed(list(rec.items())))
        recs.append(rec)
    return recs


#: how lines are spelt: json.dumps' default, compact, or whitespace of any kind anywhere
#: JSON allows it
SPELLINGS = ["dumps", "compact", "dumps-indent-none", "wide", "mixed"]


def spelt(rec: dict, spelling: str, draw) -> bytes:
    if spelling == "compact":
        return orjson.dumps(rec)
    if spelling == "dumps":
        return json.dumps(rec).encode()
    if spelling == "dumps-indent-none":
        return json.dumps(rec, ensure_ascii=False, separators=(", ", ": ")).encode()
    text = json.dumps(rec, ensure_ascii=False, separators=(",", ":"))
    # whitespace between tokens only: split the text into strings and the rest
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    ws = (st.sampled_from(["", " ", "  ", "\t", " \t "]) if spelling == "mixed"
          else st.just(" "))
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a string: as it is
            out.append(part)
            continue
        for ch in part:
            out.append(draw(ws) + ch if ch in "{}[],:" else ch)
        out.append(draw(ws))
    return "".join(out).encode()


def log_bytes(recs: list[dict], draw, spelling: str) -> bytes:
    lines = [spelt(r, spelling, draw) for r in recs]
    if spelling == "mixed" and draw(st.booleans()):
        return b"".join(line + b"\r\n" for line in lines)  # as written on Windows
    return b"".join(line + b"\n" for line in lines)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spaced_logs(clean=False), MODES, st.sampled_from(SPELLINGS),
       st.sampled_from([None, 64, 300]), st.data())
def test_spaced_logs_give_the_same_bytes_and_errors_on_either_path(tmp_path, recs, mode,
                                                                   spelling, block, data):
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_bytes(recs, data.draw, spelling))
    with small_blocks(block) if block else contextlib.nullcontext():
        same_either_way(path, tmp_path, "jsonl", mode)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spaced_logs(clean=True), st.sampled_from(["dumps", "dumps-indent-none", "wide",
                                                 "mixed"]), st.data())
def test_clean_spaced_logs_are_taken_by_the_fast_scanners(tmp_path, recs, spelling, data):
    if not any(r["kind"] in ("insert", "cti") for r in recs):
        return  # a log of joins and leaves alone has no time to read
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_bytes(recs, data.draw, spelling))
    assert taken_fast(path, "jsonl")


def squeezed(text: bytes) -> bytes | None:
    """The reference: ``text`` with whitespace outside strings removed, one byte at a
    time; ``None`` where ``compacted`` must refuse (a backslash, tokens it would join)."""
    if b"\\" in text:
        return None

    def token(ch: str) -> bool:  # a byte of a number or of true, false, null
        return ch.isascii() and (ch.isalnum() or ch in "+-.")

    out = bytearray()
    inside = False
    pending = False
    for byte in text:
        ch = chr(byte)
        if ch == '"':
            inside = not inside
        elif ch == "\n":
            inside = False if text.count(b'"') % 2 == 0 else inside
        if not inside and ch in " \t\r":
            pending = True
            continue
        if pending and out and token(chr(out[-1])) and token(ch):
            return None
        pending = False
        out.append(byte)
    return bytes(out)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(st.sampled_from(list(' \t\r"{}[],:0123456789abcetrue-.é')),
                        max_size=30), min_size=1, max_size=6))
def test_compaction_removes_exactly_the_whitespace_outside_strings(lines):
    text = "".join(line + "\n" for line in lines).encode()
    if text.count(b'"') % 2:
        return  # quote parity across lines: the flat scanner refuses such a block
    if any(line.count('"') % 2 for line in lines):
        return
    expected = squeezed(text)
    state = FileState("f.jsonl", 0, SourceTable(), BadRecords())
    for after in (bytes(PAD), b'" \t' * PAD):  # whatever lies after the block
        got = compacted(Block("jsonl", bytearray(text + after), len(text), 1, state))
        if expected is None or expected == text:
            assert got is None
        else:
            assert got is not None and bytes(got.data[:got.size]) == expected
            assert len(got.data) >= got.size + PAD


def test_compaction_refuses_to_join_tokens():
    state = FileState("f.jsonl", 0, SourceTable(), BadRecords())
    for text in (b'{"start": 12 34}\n', b'{"a": tr ue}\n', b'{"a": [1  ,2 3]}\n',
                 b'{"a": 1.5 e3}\n'):
        assert compacted(Block("jsonl", bytearray(text + bytes(PAD)), len(text), 1,
                               state)) is None, text


def test_a_users_log_written_by_json_dumps_replays_on_the_fast_path(tmp_path):
    """The shape of the logs users have: json.dumps' default separators, no order key, a
    nested payload, ISO times with an offset and any fraction digits."""
    recs = []
    for i in range(500):
        rec = {"source": f"dev-{i % 3}", "kind": "cti" if i % 10 == 9 else "insert",
               "start": iso_of(T0 + i * 10**6 - (i % 7) * 10**9, 60 * (i % 2), 3 * (i % 4),
                               "")}
        if rec["kind"] == "insert":
            rec["payload"] = {"v": i % 100, "unit": "C", "note": "a, b: c"}
        recs.append(rec)
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in recs))
    assert taken_fast(path, "jsonl")
    same_either_way(path, tmp_path, "jsonl", "fail")
    compact = tmp_path / "compact.jsonl"
    compact.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    from goldilocks.replay import replay
    for log, tag in ((path, "spaced"), (compact, "compact")):
        replay([log], delay="2s", out=tmp_path / f"{tag}.out", late=tmp_path / f"{tag}.late")
    assert (tmp_path / "spaced.out").read_bytes() == (tmp_path / "compact.out").read_bytes()
    assert (tmp_path / "spaced.late").read_bytes() == (tmp_path / "compact.late").read_bytes()
    assert np.frombuffer((tmp_path / "spaced.late").read_bytes(), np.uint8).size  # some late
