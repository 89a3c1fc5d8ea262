"""A point at the latest instant cannot hold its one-tick lifetime: a clear error, not a wrap."""

from __future__ import annotations

import pytest

from engine import Event, InputError
from engine.errors import BadRecordError
from goldilocks.replay import replay
from engine.times import MAX_TIME


def test_event_point_at_max_time_is_refused():
    with pytest.raises(InputError, match="one-tick lifetime"):
        Event.point(MAX_TIME)


def test_a_log_with_a_point_at_max_time_names_file_and_line(tmp_path):
    log = tmp_path / "edge.jsonl"
    log.write_text(
        '{"source":"a","kind":"insert","start":1}\n'
        f'{{"source":"a","kind":"insert","start":{MAX_TIME}}}\n',
        encoding="utf-8")
    with pytest.raises(BadRecordError) as caught:
        replay([log], delay=0, out=tmp_path / "out.jsonl")
    assert caught.value.line == 2
    assert str(log) in str(caught.value) and "one-tick lifetime" in str(caught.value)
