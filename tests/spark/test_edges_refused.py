"""Edge records in Spark (TS §7): the batch adapter has no form for them yet, so it refuses
them with the reason, naming the file and line (read_event_log) or the frame (replay) —
never losing them silently; logs without edges read as before."""

from __future__ import annotations

import pytest

from eventlog import write_log
from spark_adapter.source import EDGES_REFUSED

pytestmark = pytest.mark.spark


def test_read_event_log_refuses_an_edge_record_naming_file_and_line(spark, tmp_path):
    from spark_adapter import read_event_log

    path = tmp_path / "doors.jsonl"
    write_log(path, [{"source": "A", "kind": "insert", "start": 1},
                     {"source": "A", "kind": "start", "start": 2, "id": "front"}])
    frame = read_event_log(spark, str(path))
    with pytest.raises(Exception) as err:
        frame.collect()
    assert f"{path}:2: {EDGES_REFUSED}" in str(err.value)


@pytest.mark.parametrize("strategy", ["bucketed", "scan", "ranges", "global"])
def test_replay_of_a_users_frame_with_edge_rows_fails_with_the_reason(spark, strategy):
    from spark_adapter import replay

    frame = spark.createDataFrame(
        [(0, "A", "insert", 1, None, None), (1, "A", "end", 1, 5, None),
         (2, "A", "cti", 9, None, None)],
        "seq long, source string, kind string, start long, end long, payload string")
    with pytest.raises(Exception) as err:  # the scan's first jobs run within replay itself
        events, _ = replay(frame, delay=0, strategy=strategy, order_by=["seq"])
        events.collect()
    assert EDGES_REFUSED in str(err.value)
    plain = frame.where("kind != 'end'")
    events, late = replay(plain, delay=0, strategy=strategy, order_by=["seq"])
    assert sorted(r.kind for r in events.collect()) == ["cti", "insert"]
