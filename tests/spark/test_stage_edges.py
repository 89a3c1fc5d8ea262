"""Edge records through the watermarking stage (TS §7.9): the stage has no edge form, so a
row of kind "start"/"end" goes to the late side, rejected with a reason that says so and
where to decide it — never lost, never taken for an insert — and the other rows are decided
as without it."""

from __future__ import annotations

import pytest

from test_streaming import S, _run_available_now, _stage, _stream, _write_parts

pytestmark = pytest.mark.spark


def test_edge_rows_are_rejected_by_the_stage_with_the_reason(spark, tmp_path):
    parts = [[{"source": "A", "kind": "insert", "start": 5 * S},
              {"source": "A", "kind": "start", "start": 6 * S, "id": "front"},
              {"source": "A", "kind": "cti", "start": 10 * S}],
             [{"source": "A", "kind": "end", "start": 6 * S, "end": 20 * S, "id": "front"},
              {"source": "A", "kind": "insert", "start": 12 * S}]]
    _write_parts(tmp_path / "parts", parts)
    staged = _stage(_stream(spark, tmp_path / "parts", maxFilesPerTrigger=1), tmp_path,
                    delay=0)
    _run_available_now(staged, "stage_edges", tmp_path / "ck")
    rows = sorted(spark.table("stage_edges").collect(), key=lambda r: r["order_key"])
    got = [(r["kind"], r["start"] // S, r["late_action"], r["late_reason"]) for r in rows]
    assert got[0] == ("insert", 5, None, None) and got[-1] == ("insert", 12, None, None)
    edges = [g for g in got if g[0] in ("start", "end")]
    assert [g[:3] for g in edges] == [("start", 6, "rejected"), ("end", 6, "rejected")]
    assert all("an edge row (kind" in g[3] and "has no form in the watermark stage" in g[3]
               for g in edges)
    assert [r["id"] for r in rows if r["kind"] in ("start", "end")] == ['"front"', '"front"']
