"""ISO-8601 times on the fast path (TS §1.4, §5.1, §5.3, §5.7): the vectorised reader of
``eventlog.iso`` agrees with ``engine.times.to_ns`` on every text it accepts and accepts the
usual shapes; JSON Lines and CSV logs with ISO times give the same output bytes, late file,
counts, quarantine and errors (file:line) whether the fast scanners or the object path read
them, and a clean log is taken by the fast scanners."""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import BadRecordError, TimeFormatError
from eventlog import BadRecords, SourceTable, csv_log, jsonl, read_records
from eventlog.columns import PAD, words_of
from eventlog.fast import SCANNERS, fast_columns
from eventlog.iso import YEARS, iso_ns
from eventlog.records import Block, FileState
from eventlog.values import _iso_ns
from goldilocks.replay import replay

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def read_iso(texts: list[str]) -> list[int] | None:
    """``iso_ns`` over ``texts``, each followed by a quote (as in JSON): ``None`` if it
    refuses one or one goes on after its zone (the scanners' check: the text must end
    there)."""
    buf = b"".join(t.encode() + b'"' for t in texts)
    a = np.frombuffer(buf + bytes(PAD), np.uint8)
    lens = np.array([len(t.encode()) + 1 for t in texts], np.int64)
    found = iso_ns(a, words_of(a), np.cumsum(lens) - lens)
    if found is None:
        return None
    ns, end = found
    return ns.tolist() if (end == np.cumsum(lens) - 1).all() else None


def exact(text: str) -> int | None:
    try:
        return _iso_ns(text)
    except TimeFormatError:
        return None


@st.composite
def iso_texts(draw, *, valid: bool = False, years=(1, 9999)):
    """ISO-8601 instants written as devices write them: any offset or Z, 0 to 12 fraction
    digits; unless ``valid``, fields out of range and single bytes changed too."""
    if valid:
        t = draw(st.datetimes(dt.datetime(max(years[0], 1), 1, 2),
                              dt.datetime(min(years[1], 9999), 12, 30)))
        y, mo, d, h, mi, s = t.year, t.month, t.day, t.hour, t.minute, t.second
    else:
        y = draw(st.integers(*years))
        mo, d = draw(st.integers(0, 13)), draw(st.integers(0, 32))
        h, mi, s = draw(st.integers(0, 25)), draw(st.integers(0, 60)), draw(st.integers(0, 61))
    digits = draw(st.integers(0, 12))
    fraction = "." + draw(st.text("0123456789", min_size=digits, max_size=digits)) if digits else ""
    sign = draw(st.sampled_from("+-"))
    hours = draw(st.integers(0, 23 if valid else 25))
    minutes = draw(st.integers(0, 59 if valid else 61))
    zone = draw(st.sampled_from(["Z", f"{sign}{hours:02d}:{minutes:02d}"]
                                + ([] if valid else ["z", "", "+0100", "+01"])))
    text = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{fraction}{zone}"
    if not valid and draw(st.integers(0, 3)) == 0:
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + draw(st.sampled_from("0T: .,-+Z9a\"")) + text[i + 1:]
    return text


@settings(max_examples=3000, deadline=None)
@given(st.lists(iso_texts(years=(1600, 2300)), min_size=1, max_size=4))
def test_iso_reader_reads_what_it_accepts_as_to_ns_does(texts):
    found = read_iso(texts)
    if found is not None:
        assert found == [exact(t) for t in texts]


@settings(max_examples=1000, deadline=None)
@given(st.lists(iso_texts(valid=True, years=YEARS), min_size=1, max_size=4))
def test_iso_reader_accepts_every_instant_in_its_shape(texts):
    assert read_iso(texts) == [exact(t) for t in texts]


@pytest.mark.parametrize("text", [
    "2026-02-29T08:00:00Z", "2026-11-22T24:00:00Z", "2026-11-22T23:59:60Z",
    "2026-11-22T08:00:00+24:00", "2026-11-22T08:00:00.Z", "2026-11-22t08:00:00Z",
    "2026-11-22T08:00:00z", "2026-11-22T08:00:00", "2026-11-22T08:00:00,5Z",
    "1677-12-31T23:59:59Z", "2262-01-01T00:00:00Z", "2026-11-22T08:00:00.5+01",
    "2026-11-22T08:00:00Z " , "2026-11-22T08:00:00." + "1" * 40 + "Z"])
def test_iso_reader_leaves_the_rest_to_the_object_path(text):
    assert read_iso([text]) is None


def test_fraction_digits_past_the_ninth_are_truncated():  # TS §1.4
    assert read_iso(["2026-11-22T08:00:00.1234567899999Z"]) == [exact(
        "2026-11-22T08:00:00.123456789Z")]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(iso_texts(valid=True, years=YEARS), iso_texts(years=(1600, 2300)),
                          st.integers(-(2**64), 2**64), st.none(), st.just("é")), max_size=8))
def test_object_path_reads_a_column_of_iso_texts_value_by_value_alike(values):
    # the object path reads a column's strings all at once when it can: the same as one by one
    from eventlog.records import MISSING
    from eventlog.values import _cell, times_of

    values = [MISSING if v is None else v for v in values]
    t = times_of(values)
    assert list(zip(t.value.tolist(), t.state.tolist())) == [_cell(v, True) for v in values]


# -- whole logs: the fast path against the object path ----------------------------------

NAMES = ["dev-1", "A", "ninechars", "é", "x" * 40]


def iso_of(ns: int, minutes: int, digits: int, extra: str) -> str:
    """``ns`` as ISO-8601 text at an offset of ``minutes``, ``digits`` fraction digits (the
    instant truncated to them), ``extra`` digits after the ninth."""
    local = ns + minutes * 60 * 10**9
    seconds, frac = divmod(local, 10**9)
    head = (EPOCH + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{frac:09d}"[:digits] + (extra if digits >= 9 else "")
    zone = "Z" if minutes is None or minutes == 0 and extra == "" else (
        f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}")
    return head + ("." + fraction if digits else "") + zone


T0 = 1_795_334_400_000_000_000


@st.composite
def instants(draw):
    ns = T0 + draw(st.integers(-10**12, 10**12))
    if draw(st.integers(0, 4)) == 0:
        return ns  # an integer beside the ISO text
    minutes = draw(st.sampled_from([0, 0, 60, -300, 330, -(23 * 60 + 59), 23 * 60 + 59]))
    return iso_of(ns, minutes, draw(st.integers(0, 12)),
                  draw(st.text("0123456789", max_size=3)))


BAD_TIMES = ["2026-02-30T00:00:00Z", "2026-11-22T08:00:00", "2026-11-22T08:00:00+24:00",
             "yesterday", "2026-11-22T08:00:00,5Z", "2026-11-22 08:00:00Z"]


@st.composite
def iso_logs(draw, clean: bool):
    """Records with ISO times (some integers): order key, kinds, intervals, payloads; unless
    ``clean``, now and then a bad one or an odd one (a time the fast reader leaves alone)."""
    mode = draw(st.sampled_from(["position", "seq", "arrival"]))
    recs = []
    key = T0 - 10**12
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["insert", "insert", "insert", "cti", "join", "leave"]))
        rec: dict = {}
        if mode == "seq":
            key += draw(st.integers(0, 3))
            rec["seq"] = key
        elif mode == "arrival":
            key += draw(st.integers(0, 10**9))
            rec["arrival"] = iso_of(key, 0, 9, "") if draw(st.booleans()) else key
        if kind != "cti" or draw(st.booleans()):
            rec["source"] = draw(st.sampled_from(NAMES))
        rec["kind"] = kind
        if kind in ("insert", "cti"):
            rec["start"] = draw(instants())
        if kind == "insert" and draw(st.booleans()):
            start = rec["start"] if isinstance(rec["start"], int) else _iso_ns(rec["start"])
            rec["end"] = iso_of(start + draw(st.integers(1, 10**11)), 60, 9, "")
        if kind == "insert" and draw(st.booleans()):
            rec["payload"] = draw(st.one_of(
                st.dictionaries(st.sampled_from(["v", "celsius", "é"]),
                                st.one_of(st.integers(-5, 100), st.floats(-50, 50),
                                          st.text("abé ", max_size=3)), max_size=2),
                st.integers(0, 9), *([] if clean else [st.none()])))
        if not clean and draw(st.integers(0, 7)) == 0:
            what = draw(st.sampled_from(["time", "end", "kind", "source", "key"]))
            if what == "time" and "start" in rec:
                rec["start"] = draw(st.sampled_from(BAD_TIMES))
            elif what == "end" and kind == "insert":
                rec["end"] = iso_of(T0 - 10**13, 0, 0, "")
            elif what == "kind":
                rec["kind"] = "update"
            elif what == "source" and kind != "cti":
                rec.pop("source", None)
            elif what == "key" and mode != "position":
                rec[mode] = T0 - 10**14 if mode == "arrival" else -1
        recs.append(rec)
    return recs


def jsonl_bytes(recs: list[dict], spaced: bool) -> bytes:
    if spaced:
        return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in recs)
    return b"".join(orjson.dumps(r) + b"\n" for r in recs)


def csv_bytes(recs: list[dict], draw=None, spaced: bool = False) -> bytes:
    """The records as CSV written by the ``csv`` module; with ``draw``, in any column order,
    payloads sometimes with spaces, ``\\r\\n`` or ``\\n``, minimal or full quoting."""
    fields = ["seq", "arrival", "source", "kind", "start", "end", "payload"]
    used = [f for f in fields if any(f in r for r in recs)]
    for required in ("source", "kind", "start"):
        if required not in used:
            used.append(required)
    terminator, quoting = "\n", csv.QUOTE_MINIMAL
    if draw is not None:
        used = draw(st.permutations(used))
        spaced = draw(st.integers(0, 4)) == 0
        terminator = draw(st.sampled_from(["\n", "\r\n"]))
        quoting = draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=terminator, quoting=quoting)
    writer.writerow(used)
    for r in recs:
        row = []
        for f in used:
            v = r.get(f)
            if f == "payload" and v is not None:
                v = json.dumps(v, ensure_ascii=False) if spaced else orjson.dumps(v).decode()
            row.append("" if v is None else str(v))
        writer.writerow(row)
    return buf.getvalue().encode()


@contextlib.contextmanager
def object_path(fmt: str):
    """The fast scanners of ``fmt`` off: every block by the object path."""
    saved = SCANNERS[fmt]
    SCANNERS[fmt] = []
    try:
        yield
    finally:
        SCANNERS[fmt] = saved


@contextlib.contextmanager
def small_blocks(size: int):
    saved = jsonl.CHUNK_BYTES, csv_log.CSV_BYTES
    jsonl.CHUNK_BYTES = csv_log.CSV_BYTES = size
    try:
        yield
    finally:
        jsonl.CHUNK_BYTES, csv_log.CSV_BYTES = saved


def run(path, tmp, mode: str, tag: str):
    """Everything a replay of ``path`` gives: output, late file, quarantine, counts — or
    the error it stops with."""
    out, late, quarantine = (tmp / f"{tag}-{name}" for name in ("out.jsonl", "late.jsonl",
                                                                "q.jsonl"))
    try:
        stats = replay([path], delay="1s", out=out, late=late, bad_records=mode,
                       quarantine=quarantine if mode == "quarantine" else None,
                       time_format="iso" if tag.endswith("iso") else "ns")
    except BadRecordError as err:
        return ("error", str(err), err.line, err.field)
    return (out.read_bytes(), late.read_bytes(),
            quarantine.read_bytes() if mode == "quarantine" else b"",
            stats.records, stats.skipped, stats.late)


def records(path) -> list | tuple:
    """The records read (source, kind, times, payload, file, line; bad ones skipped), or
    the first error."""
    try:
        return list(read_records([path], bad_records="skip"))
    except BadRecordError as err:  # (skip never raises; kept for a clear failure)
        return ("error", str(err))


def same_either_way(path, tmp, fmt: str, mode: str) -> None:
    """The fast scanners and the object path read the same records and write the same
    bytes, late file, quarantine and counts, or stop with the same error."""
    fast_records = records(path)
    with object_path(fmt):
        assert records(path) == fast_records
    for time_format in ("ns", "iso"):
        fast = run(path, tmp, mode, f"fast-{time_format}")
        with object_path(fmt):
            slow = run(path, tmp, mode, f"slow-{time_format}")
        assert fast == slow


def taken_fast(path, fmt: str) -> bool:
    """Does the fast scanner take the whole file as one block?"""
    data = path.read_bytes()
    header: tuple[str, ...] = ()
    if fmt == "csv":
        first, data = data.split(b"\n", 1)
        header = tuple(h.strip() for h in next(csv.reader([first.decode()])))
    state = FileState(str(path), 0, SourceTable(), BadRecords())
    block = data if header else bytearray(data + bytes(PAD))
    return fast_columns(Block(fmt, block, len(data), 2 if header else 1,
                              state, header)) is not None


MODES = st.sampled_from(["fail", "skip", "quarantine"])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(iso_logs(clean=False), MODES, st.booleans(), st.sampled_from([None, 64, 300]))
def test_jsonl_iso_logs_give_the_same_bytes_and_errors_on_either_path(tmp_path, recs, mode,
                                                                      spaced, block):
    path = tmp_path / "log.jsonl"
    path.write_bytes(jsonl_bytes(recs, spaced))
    with small_blocks(block) if block else contextlib.nullcontext():
        same_either_way(path, tmp_path, "jsonl", mode)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(iso_logs(clean=False), MODES, st.sampled_from([None, 64, 300]), st.data())
def test_csv_iso_logs_give_the_same_bytes_and_errors_on_either_path(tmp_path, recs, mode,
                                                                    block, data):
    if data.draw(st.integers(0, 5)) == 0 and recs:  # a name with a newline: a quoted cell
        recs[0]["source"] = "two\nlines"            # over two lines
    path = tmp_path / "log.csv"
    path.write_bytes(csv_bytes(recs, data.draw))
    with small_blocks(block) if block else contextlib.nullcontext():
        same_either_way(path, tmp_path, "csv", mode)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(iso_logs(clean=True))
def test_clean_iso_logs_are_taken_by_the_fast_scanners(tmp_path, recs):
    path = tmp_path / "log.jsonl"
    path.write_bytes(jsonl_bytes(recs, False))
    good = any(r["kind"] in ("insert", "cti") for r in recs)
    if good:  # (a log of joins and leaves alone has no time to read)
        assert taken_fast(path, "jsonl")
    for spaced in (False, True):  # payload cells as json.dumps writes them: re-encoded
        path = tmp_path / "log.csv"
        path.write_bytes(csv_bytes(recs, spaced=spaced))
        assert taken_fast(path, "csv")


def test_bundled_fleet_log_is_taken_by_the_fast_scanner(tmp_path):
    from pathlib import Path

    fleet = Path(__file__).resolve().parents[2] / "examples" / "data" / "fleet.jsonl"
    assert taken_fast(fleet, "jsonl")
    same_either_way(fleet, tmp_path, "jsonl", "fail")


#: sha256 of the bundled fleet log's replay (delay 2m) as the object path wrote it before the
#: fast scanners read ISO times: output and late file, integer and RFC 3339 times
FLEET_BYTES = {
    "ns": ("2383aba55f4938254628f8696fb711a1a90439efb8fee3fe9964d9f6fc888ec5",
           "4a5a801493cfc5cd23a161946ba6a66657b5a8abe6016e3babe4e6fd8148f41d"),
    "iso": ("593d5cc520ac638da701ddcb87e25379375250d6cac433c9152693ffd3a1a5d0",
            "fb3a4af1803305e761f1e3e4537896fb5265da0dae0ca344ed66b47635ed0aaf"),
}


@pytest.mark.parametrize("time_format", sorted(FLEET_BYTES))
def test_bundled_fleet_log_gives_the_same_bytes_as_before(tmp_path, time_format):
    import hashlib
    from pathlib import Path

    fleet = Path(__file__).resolve().parents[2] / "examples" / "data" / "fleet.jsonl"
    out, late = tmp_path / "out.jsonl", tmp_path / "late.jsonl"
    replay([fleet], delay="2m", out=out, late=late, time_format=time_format)
    assert (hashlib.sha256(out.read_bytes()).hexdigest(),
            hashlib.sha256(late.read_bytes()).hexdigest()) == FLEET_BYTES[time_format]


def test_a_quoted_cell_cut_by_the_block_end_is_read_whole(tmp_path):
    """A block that ends inside a quoted cell (its newline the last of the block) is not the
    fast scanner's: pyarrow.csv read the open cell to the block's end (``'two\\n'``), where
    the record goes on into the next block (``'two\\nlines'``)."""
    path = tmp_path / "log.csv"
    path.write_bytes(b'kind,start,payload,source\n'
                     b'insert,1795334400000000000,,"two\nlines"\n'
                     + b'insert,1795334400000000000,,dev-1\n' * 3)
    with small_blocks(64):
        got = records(path)
    assert [r["source"] for r in got] == ["two\nlines", "dev-1", "dev-1", "dev-1"]
    assert [r["line"] for r in got] == [2, 4, 5, 6]
    with small_blocks(64):
        same_either_way(path, tmp_path, "csv", "fail")


def test_lower_case_z_and_t_replay_as_upper_case(tmp_path):
    """event-log.md's accepted forms include a lower-case ``z`` (RFC 3339 allows ``t`` and
    ``z``): read record by record, to the same instants as upper case."""
    from goldilocks.replay import replay as _replay

    lower, upper = tmp_path / "lower.jsonl", tmp_path / "upper.jsonl"
    lower.write_bytes(b'{"source":"A","kind":"insert","start":"2026-11-22T08:00:12z"}\n'
                      b'{"source":"A","kind":"insert","start":"2026-11-22t08:00:13.5Z"}\n')
    upper.write_bytes(b'{"source":"A","kind":"insert","start":"2026-11-22T08:00:12Z"}\n'
                      b'{"source":"A","kind":"insert","start":"2026-11-22T08:00:13.5Z"}\n')
    a, b = io.BytesIO(), io.BytesIO()
    _replay([lower], out=a)
    _replay([upper], out=b)
    assert a.getvalue() == b.getvalue() != b""
