"""Integer times in a log: nanoseconds unless a unit is given, and integers implausible as
nanoseconds refused (TS §5.4); more than nine fraction digits truncated alike everywhere
(TS §1.4). Every reader path, on real files: JSON Lines through the scanner, the whole-block
parser and the record parser, CSV, Parquet by columns and by rows; columnar and element."""

from __future__ import annotations

import io

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goldilocks.cli import main
from engine.errors import BadRecordError
from eventlog import read_records, write_log
from goldilocks.replay import replay
from engine.times import NS_PER_S, TIME_UNITS, looks_unscaled, to_ns
from engine.times import Nanoseconds

T0 = 1_795_334_400  # 2026-11-22T08:00:00Z in seconds


def _write(path, records, shape):
    """``records`` written in one of the reader paths' shapes."""
    if shape == "jsonl-flat":  # the scanner's shape: keys in order, no spaces
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    elif shape == "jsonl-spaced":  # the whole-block parser (orjson, then columns)
        path.write_bytes(b"".join(orjson.dumps(r).replace(b',"', b', "') + b"\n"
                                  for r in records))
    elif shape == "jsonl-records":  # a blank line: the record parser reads the block
        path.write_bytes(b"\n" + b"".join(orjson.dumps(r).replace(b',"', b', "') + b"\n"
                                          for r in records))
    elif shape == "parquet-rows":  # a payload text not in canonical form: read by rows
        import pyarrow as pa
        import pyarrow.parquet as pq

        def col(name, typ):
            return pa.array([r.get(name) for r in records], typ)

        pq.write_table(pa.table({
            **({"arrival": col("arrival", pa.int64())} if "arrival" in records[0] else {}),
            "source": col("source", pa.string()), "kind": col("kind", pa.string()),
            "start": col("start", pa.int64()), "end": col("end", pa.int64()),
            "payload": pa.array([None if r.get("payload") is None else
                                 orjson.dumps(r["payload"]).decode().replace(":", ": ")
                                 for r in records], pa.string())}), path)
    else:  # csv, parquet (by columns): the documented writer
        write_log(path, records)
    return path


SHAPES = {"jsonl-flat": "jsonl", "jsonl-spaced": "jsonl", "jsonl-records": "jsonl",
          "csv": "csv", "parquet": "parquet", "parquet-rows": "parquet"}

_rec = st.one_of(
    st.tuples(st.just("insert"), st.sampled_from(["A", "B", "dev-7"]), st.integers(0, 90),
              st.integers(0, 5), st.sampled_from([None, 1, {"v": 2}])),
    st.tuples(st.just("cti"), st.sampled_from(["A", "B", "dev-7"]), st.integers(0, 90),
              st.just(0), st.none()),
    st.tuples(st.just("leave"), st.sampled_from(["A", "B"]), st.just(0), st.just(0),
              st.none()))


def _in_ns(records: list[dict], scale: int) -> list[dict]:
    """The same records with their integer times multiplied by ``scale``: nanoseconds."""
    return [{k: v * scale if k in ("arrival", "start", "end") else v for k, v in r.items()}
            for r in records]


def _records(rows, scale: int, arrival: bool) -> list[dict]:
    """The rows as records whose integer times are in units of ``scale`` ns."""
    out = []
    for i, (kind, src, k, d, payload) in enumerate(rows):
        rec: dict = {"arrival": T0 * NS_PER_S // scale + i} if arrival else {}
        rec.update(source=src, kind=kind)
        if kind != "leave":
            rec["start"] = T0 * NS_PER_S // scale + k
        if kind == "insert" and d:
            rec["end"] = rec["start"] + d
        if payload is not None:
            rec["payload"] = payload
        out.append(rec)
    return out


def _first_timed_line(records, shape: str) -> tuple[int, str]:
    for i, r in enumerate(records):
        if "start" in r or "arrival" in r:
            line = i + 1 + (shape in ("csv", "jsonl-records"))  # CSV's header, a blank line
            return line, "start" if "start" in r else "arrival"
    raise AssertionError("no timed record")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_rec, min_size=1, max_size=25).filter(
           lambda rs: any(r[0] != "leave" for r in rs)),
       unit=st.sampled_from(["s", "ms", "us"]), shape=st.sampled_from(sorted(SHAPES)),
       arrival=st.booleans(), columnar=st.booleans(),
       on_late=st.sampled_from(["drop", "adjust"]))
def test_every_reader_path_refuses_unscaled_integers_and_converts_with_the_unit(
        tmp_path_factory, rows, unit, shape, arrival, columnar, on_late):
    d = tmp_path_factory.mktemp("units")
    records = _records(rows, TIME_UNITS[unit], arrival)
    reference = _write(d / "ns.jsonl", _in_ns(records, TIME_UNITS[unit]), "jsonl-flat")
    want_out, want_late = io.BytesIO(), io.BytesIO()
    delay = Nanoseconds(3 * TIME_UNITS[unit])  # three of the log's units
    replay([reference], delay=delay, on_late=on_late, out=want_out, late=want_late,
           columnar=False)
    log = _write(d / f"log.{SHAPES[shape]}", records, shape)
    # no unit given: refused, naming file, line, field, and the option that says the unit
    with pytest.raises(BadRecordError) as info:
        replay([log], delay=delay, on_late=on_late, out=io.BytesIO(), columnar=columnar)
    line, field = _first_timed_line(records, shape)
    message = str(info.value)
    assert message.startswith(f"{log}:{line}: field '{field}': "), message
    assert f"--time-unit {unit}" in message and f"time_unit={unit!r}" in message
    # the unit given: exactly the nanosecond log's output, on either path
    got_late = io.BytesIO()
    if columnar:
        out = d / "out.jsonl"
        replay([log], delay=delay, on_late=on_late, out=out, late=got_late, time_unit=unit)
        got = out.read_bytes()
    else:
        buf = io.BytesIO()
        replay([log], delay=delay, on_late=on_late, out=buf, late=got_late, time_unit=unit)
        got = buf.getvalue()
    assert got == want_out.getvalue()
    assert got_late.getvalue() == want_late.getvalue()


def test_the_plausibility_rule():
    # integers that are an instant of 2000..2100 in s, ms or us are refused as nanoseconds
    assert looks_unscaled(T0) == "s"
    assert looks_unscaled(T0 * 1000) == "ms"
    assert looks_unscaled(T0 * 10**6) == "us"
    for ok in (0, 5, 300 * NS_PER_S, 946_684_799, 10**10, 10**13, T0 * NS_PER_S, -T0):
        assert looks_unscaled(ok) is None, ok
    assert looks_unscaled(4_102_444_799) == "s" and looks_unscaled(4_102_444_800) is None
    # whole seconds as nanoseconds are a relative clock's times: 2 s, 20 min, 12 days
    for whole in (2 * NS_PER_S, 1200 * NS_PER_S, 12 * 86_400 * NS_PER_S):
        assert looks_unscaled(whole) is None and looks_unscaled(whole + 1) is not None


def test_small_relative_integers_stay_nanoseconds(seed_log, tmp_path):
    # logs on a clock that starts at 0 (design.md §4.2's example) are read as before
    stats = replay([seed_log], delay="5m", out=tmp_path / "o.jsonl")
    assert stats.records == 7 and stats.late == 1


def test_the_cli_refuses_epoch_seconds_with_the_option_to_give(tmp_path, capsys):
    log = tmp_path / "epoch.csv"
    log.write_text(f"source,kind,start\nA,insert,{T0}\nA,cti,{T0 + 60}\n")
    out = tmp_path / "out.jsonl"
    assert main(["replay", str(log), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(f"goldilocks replay: error: {log}:2: field 'start': {T0} looks like "
                          "seconds since the epoch (2026-11-22T08:00:00Z), not nanoseconds")
    assert "--time-unit s" in err and not out.exists()
    assert main(["replay", str(log), "--out", str(out), "--time-unit", "s",
                 "--no-summary"]) == 0
    assert out.read_bytes() == (b'{"source":"A","kind":"insert","start":%d}\n'
                                b'{"kind":"cti","start":%d}\n'
                                % (T0 * NS_PER_S, (T0 + 60 - 300) * NS_PER_S))


def test_time_unit_ns_takes_the_integers_as_they_are(tmp_path):
    log = tmp_path / "ns.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":%d}\n' % T0)
    out = tmp_path / "out.jsonl"
    replay([log], out=out, time_unit="ns")
    assert out.read_bytes() == log.read_bytes()


def test_a_unit_that_overflows_nanoseconds_is_a_bad_record(tmp_path):
    log = tmp_path / "far.jsonl"
    log.write_bytes(b'{"source":"A","kind":"insert","start":%d}\n' % (10**12))
    with pytest.raises(BadRecordError, match=r"far.jsonl:1: field 'start': 1000000000000 "
                                             r"seconds is outside the int64 nanosecond range"):
        replay([log], time_unit="s")


def test_typed_parquet_timestamps_are_not_scaled(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    log = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"source": ["A", "A"], "kind": ["insert", "cti"],
                             "start": pa.array([T0, T0 + 60], pa.timestamp("s", tz="UTC"))}),
                   log)
    want = [T0 * NS_PER_S, (T0 + 60) * NS_PER_S]
    for unit in (None, "ms"):  # a unit is for integers; a timestamp column says its own
        assert [r["start"] for r in read_records([log], time_unit=unit)] == want


# -- more than nine fraction digits (TS §1.4) ---------------------------------------------

FRACTIONS = ["2026-11-22T08:00:00.1234567891Z", "2026-11-22T08:00:00.123456789999Z",
             "2026-11-22T09:00:00.12345678912345+01:00", "2026-11-22T08:00:00,1234567891Z",
             "2026-11-22T08:00:00.1234567Z", "2026-11-22T08:00:00.12345678Z"]


@pytest.mark.parametrize("text", FRACTIONS)
@pytest.mark.parametrize("shape", ["jsonl-flat", "jsonl-spaced", "jsonl-records", "csv",
                                   "parquet-string"])
def test_every_reader_truncates_fraction_digits_past_nine_as_to_ns(tmp_path, text, shape):
    records = [{"source": "A", "kind": "insert", "start": text, "end": text.replace("08:", "10:")
                .replace("09:", "11:")}]
    if shape == "parquet-string":  # a Parquet start column of strings: read by rows
        import pyarrow as pa
        import pyarrow.parquet as pq

        log = tmp_path / "log.parquet"
        pq.write_table(pa.table({k: [v] for k, v in records[0].items()}), log)
    else:
        log = _write(tmp_path / f"log.{SHAPES[shape]}", records, shape)
    (rec,) = read_records([log])
    assert rec["start"] == to_ns(text)
    assert rec["end"] == to_ns(records[0]["end"])
    digits = text.split(":")[2][3:].rstrip("Z").split("+")[0]
    assert str(to_ns(text) % NS_PER_S).zfill(9) == (digits + "000")[:9]  # truncated
