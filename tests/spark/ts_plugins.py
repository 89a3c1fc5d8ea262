"""The TS kit's plug-ins for Spark (``tests/tskit/kit.py``): the batch replay's four plans.

They batch: ``run_many`` puts every vector of one policy into one frame, each vector its own
clock group (``group_col``), so the whole kit costs one replay per policy and plan. The
session is the suite's shared one (``tests/spark/conftest.py``), given to ``SparkPlugin.spark``
by the test module. No pyspark import here at module level: the conformance report reads the
declarations without a session.

What a plug-in reads back from Spark's frames, and how (each a representation, not a
decision): ``payload`` is JSON text and ``id`` JSON text (a string or an integer id), decoded;
a point has no ``end``, a start edge none either (``MAX_TIME`` while open); the frames have no
order, so events are ordered by arrival (``seq``) and late rows by arrival with the
end-of-stream reports (``not_closed``) last, as the engine writes them; an adjusted record's
emitted event is the emitted row of its arrival (the vector numbers every insert by its
payload).
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from engine.event import ADJUSTED, CTI, END, INTERVAL, POINT, START, Event, LateRecord
from engine.times import MAX_TIME, MIN_TIME, Nanoseconds
from tests.tskit.kit import TSPlugin

__all__ = ["SPARK_PLUGINS", "SparkScan", "SparkRanges", "SparkBucketed", "SparkGlobal"]

SCHEMA = ("g INT, seq BIGINT, source STRING, kind STRING, start BIGINT, `end` BIGINT, "
          "payload STRING, id STRING")

_NOT_THE_BATCH_RULES = {
    "policy:min": "no prefix-scan form: replay(policy='min') raises NotImplementedError",
    "policy:quantile": "the batch replay takes running-maximum policies only (goldilocks, max)",
    "policy:max_ahead": "the batch replay takes running-maximum policies only (goldilocks, max)",
}


def _text(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def frame_rows(g: int, vector: dict[str, Any]) -> list[tuple]:
    """The vector's arrivals as rows of ``SCHEMA`` (clock group ``g``)."""
    rows = []
    for seq, row in enumerate(vector["arrivals"]):
        kind, source = row[0], row[1]
        if kind in ("join", "leave"):
            rows.append((g, seq, source, kind, None, None, None, None))
            continue
        _, _, start, end, ident, payload = row
        log_kind = "insert" if kind in (POINT, INTERVAL) else kind
        rows.append((g, seq, source, log_kind, start, end if kind in (INTERVAL, END) else None,
                     _text(payload), _text(ident)))
    return rows


def _event(r: dict[str, Any], start: int | None = None, end: int | None = None) -> Event:
    """The event of a Spark row, its start or end replaced when given."""
    payload = None if r["payload"] is None else orjson.loads(r["payload"])
    s = r["start"] if start is None else start
    e = r["end"] if end is None else end
    kind = r["kind"]
    if kind == START:
        return Event(START, s, MAX_TIME, payload, r["source"], orjson.loads(r["id"]))
    if kind == END:
        return Event(END, s, e, payload, r["source"], orjson.loads(r["id"]))
    if e is None:
        return Event(POINT, s, s + 1, payload, r["source"])
    return Event(INTERVAL, s, e, payload, r["source"])


def _results(events: list[dict[str, Any]], late: list[dict[str, Any]]
             ) -> tuple[list[Event], list[LateRecord]]:
    emitted = [Event(CTI, r["start"], None, None, None) if r["kind"] == CTI else _event(r)
               for r in sorted(events, key=lambda r: r["seq"])]
    by_payload = {e.payload: e for e in emitted if e.kind != CTI}
    records = []
    for r in sorted(late, key=lambda r: (r.get("reason") == "not_closed", r["seq"])):
        event = _event(r)
        adjusted = by_payload.get(event.payload) if r["action"] == ADJUSTED else None
        cti = MIN_TIME if r["cti"] is None else r["cti"]
        records.append(LateRecord(r["source"], event, cti, r["action"], adjusted,
                                  r.get("reason")))
    return emitted, records


class SparkPlugin(TSPlugin):
    """``spark_adapter.replay(df, strategy=...)``, one call per policy over every vector."""

    spark = True
    strategy: ClassVar[str] = "scan"
    #: the shared session, set by the test module
    session: ClassVar[Any] = None

    def run(self, vector):
        return self.run_many([vector])[vector["name"]]

    def run_many(self, vectors):
        from spark_adapter import replay

        groups: dict[tuple, list[dict[str, Any]]] = {}
        for v in vectors:
            groups.setdefault((v["policy"], v["delay"], v["on_late"]), []).append(v)
        out = {}
        for (policy, delay, on_late), mine in groups.items():
            rows = [r for g, v in enumerate(mine) for r in frame_rows(g, v)]
            df = self.session.createDataFrame(rows, SCHEMA)
            events, late = replay(df, delay=Nanoseconds(delay), policy=policy, on_late=on_late,
                                  group_col="g", order_by=["seq"], strategy=self.strategy)
            got_events: list[list[dict[str, Any]]] = [[] for _ in mine]
            got_late: list[list[dict[str, Any]]] = [[] for _ in mine]
            for r in events.collect():
                got_events[r["g"]].append(r.asDict())
            for r in late.collect():
                got_late[r["g"]].append(r.asDict())
            for g, v in enumerate(mine):
                out[v["name"]] = _results(got_events[g], got_late[g])
        return out


class SparkScan(SparkPlugin):
    name = "Spark scan"
    where = "`spark_adapter.replay(strategy=\"scan\")`: splits or scan, the columnar kernel per range"
    strategy = "scan"
    implements = frozenset({"policy:goldilocks", "policy:max", "adjust", "joins", "edges",
                            "range-ends"})
    skips = dict(_NOT_THE_BATCH_RULES)


class SparkRanges(SparkScan):
    name = "Spark ranges"
    where = "`spark_adapter.replay(strategy=\"ranges\")`: key ranges, the columnar kernel"
    strategy = "ranges"


class SparkBucketed(SparkScan):
    name = "Spark bucketed"
    where = "`spark_adapter.replay(strategy=\"bucketed\")`: Spark SQL only"
    strategy = "bucketed"
    implements = SparkScan.implements - {"edges"}
    skips = {**_NOT_THE_BATCH_RULES,
             "edges": "no form for edges: the plan refuses an edge row with the reason (TS §7.9)"}


class SparkGlobal(SparkBucketed):
    name = "Spark global"
    where = "`spark_adapter.replay(strategy=\"global\")`: Spark SQL, one window"
    strategy = "global"


SPARK_PLUGINS: tuple[type[TSPlugin], ...] = (SparkScan, SparkRanges, SparkBucketed, SparkGlobal)
