"""A log read in spans of bytes (``eventlog.spans``) reads as the whole file does: the same
records and line numbers, and the same first error (TS §5.2, §5.3)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import BadRecordError
from eventlog import BadRecords, Span, read_columns
from eventlog.spans import order_after, split_spans


def _rows(path, span=Span(), bad="skip"):
    out = []
    for c in read_columns(path, bad=BadRecords(bad), span=span):
        out += zip(c.key.tolist(), c.line.tolist(), c.kind.tolist(), c.start.tolist(),
                   c.end.tolist())
    return out


def _in_spans(path, spans, bad):
    """The spans read as Spark's tasks read them, each followed by the check across its end:
    ``(rows, errors)``, the first error of every task that fails."""
    rows, errors = [], []
    for span, after in zip(spans, [*spans[1:], None]):
        states: list = []
        try:
            for c in read_columns(path, bad=BadRecords(bad), span=span, modes=states):
                rows += zip(c.key.tolist(), c.line.tolist(), c.kind.tolist(),
                            c.start.tolist(), c.end.tolist())
            if after is not None and states[0].mode is not None:
                err = order_after(path, span.stop, after.first_line, states[0].mode,
                                  states[0].last_key)
                if err is not None:
                    raise err
        except BadRecordError as err:
            errors.append(err)
    return rows, errors


_KINDS = ["insert", "insert", "insert", "cti", "join", "leave"]


@st.composite
def _log(draw):
    """Lines of one file: arrival keys mostly rising, some out of order, some bad records,
    blank lines; JSON Lines or CSV, LF or CRLF, with or without a final newline."""
    fmt = draw(st.sampled_from(["jsonl", "csv"]))
    key = "arrival" if draw(st.booleans()) else "seq"
    n = draw(st.integers(1, 60))
    at = 1000
    lines = []
    for _ in range(n):
        at += draw(st.integers(-30, 40))  # sometimes back in time: out of order
        kind = draw(st.sampled_from(_KINDS + ["insrt"]))  # sometimes a bad kind
        start = at - draw(st.integers(0, 50))
        if fmt == "jsonl":
            rec = {key: at, "source": "A", "kind": kind}
            if kind in ("insert", "cti", "insrt"):
                rec["start"] = start
            text = orjson.dumps(rec).decode()
        else:
            text = f"{at},A,{kind},{start if kind in ('insert', 'cti') else ''}"
        lines.append(text)
        if draw(st.integers(0, 9)) == 0:
            lines.append("")
    if fmt == "csv":
        lines.insert(0, f"{key},source,kind,start")
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join(lines) + (newline if draw(st.booleans()) else "")
    return fmt, text, draw(st.integers(1, 400))


@settings(max_examples=150, deadline=None)
@given(log=_log())
def test_spans_read_as_the_whole_file(tmp_path_factory, log):
    fmt, text, split = log
    path = str(tmp_path_factory.mktemp("spans") / f"log.{fmt}")
    with open(path, "w", newline="") as f:
        f.write(text)
    spans = split_spans(path, split)
    assert [s.start for s in spans[1:]] == [s.stop for s in spans[:-1]]
    assert spans[-1].stop is None
    try:
        whole, whole_error = _rows(path, bad="fail"), None
    except BadRecordError as err:
        whole_error = err
    got, errors = _in_spans(path, spans, "fail")
    if whole_error is None:
        assert not errors and got == whole
    else:  # every failing task names a bad record; the first of them is the engine's error
        assert errors and str(min(errors, key=lambda e: e.line)) == str(whole_error)
    skipped, errors = _in_spans(path, spans, "skip")
    if errors:  # only an out-of-order record after a cut: the next span kept it
        assert all("arrival order" in str(e) for e in errors)
    else:
        assert skipped == _rows(path)


def test_a_parquet_log_is_one_span(tmp_path):
    from eventlog import write_log

    path = tmp_path / "log.parquet"
    write_log(path, [{"seq": 1, "source": "A", "kind": "insert", "start": 1}])
    assert split_spans(str(path), 1) == [Span()]
    with pytest.raises(Exception, match="read whole"):
        list(read_columns(path, span=Span(0, 10)))
