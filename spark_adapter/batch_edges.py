"""Edge events (TS §7) in Spark's batch replay: the scan and range plans decide them exactly
as the engine's replay does.

An edge's fate depends on two things: the CTI in force when it arrives, and — for an end edge
— what became of its start edge. The first is what pass 2 of the plans already computes for
every row, so the plans decide the log with each edge row shown to them as an insert (the
policies of the batch form keep no state of inserts: the row changes nothing, and the CTI in
force before it comes out as its ``CTI_AFTER``). The second is a matter of the edge rows
alone, which are few beside the log, and of each ``(source, id)`` alone::

    probe   one small job over the log: per clock group, its edge rows, its start edges,
            and its last CTI (the one in force at the end, for the edges never closed)
    pass 2  the plan as without edges, edge rows masked as inserts (their kind kept aside)
    edges   the edge rows, by (group, source, id) -- a shuffle of the edge rows only --
            each key's rows in arrival order through the engine's own ``with_edges`` step,
            its policy state set to the CTI in force at each row, then its ``finish``

Running the engine's step keeps every rule of TS §7 in one place: a late start edge dropped
or clipped (TS §7.2), an end edge moved to the CTI and never orphaned (TS §7.3), dropped with
its start edge (TS §7.4), reported when unmatched (TS §7.5), an id reused after its close.
The only rule that is not a matter of one key is the bound on the open edges (TS §7.6):
when no more than ``max_open`` edges of a group can be open at once (counted from above:
each start edge open until the next end edge of its key) the bound is never reached, and
the keys are decided apart exactly; otherwise the replay is refused with the count (pass a
policy ``with_edges(…, max_open=…)`` with room for them, or replay with ``goldilocks
replay``). Memory per task: one key's edge rows.
"""

from __future__ import annotations

from typing import Any, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from engine.errors import InputError
from engine.event import END as END_KIND, START as START_KIND, Event, LateRecord
from engine.policy import Policy
from operators.edges import DEFAULT_MAX_OPEN, EdgePolicy, EdgeState, with_edges
from operators.policies import HighState
from spark_adapter.batch_plan import ACTION, CTI_AFTER, delayed_cti
from spark_adapter.schema import KIND_END, KIND_INSERT, KIND_START

__all__ = ["EDGE_KIND", "EDGE_LATE_COLUMNS", "EdgePlan", "edge_plan", "mask_edges",
           "decide_edges", "refuse_edges", "inner_policy", "SIDE"]

#: The original kind of an edge row while the plans see it as an insert (null on other rows).
EDGE_KIND = "_gl_edge_kind"
#: Columns the late frame has beside ``LATE_COLUMNS`` when the frame can hold edges (an
#: ``id`` column): what an end edge's move changed, and the record's reason (TS §7.5).
EDGE_LATE_COLUMNS = ("adjusted_end", "reason")
#: Which frame a decided edge row goes to: 0 the events, 1 the late rows.
SIDE = "_gl_side"



def _is_edge() -> Column:
    return F.col("kind").isin(KIND_START, KIND_END)


def inner_policy(policy: Policy) -> tuple[Policy, int]:
    """``(the policy of the batch form, max_open)``: a policy built ``with_edges`` is
    unwrapped (the plans' kernels run the policy it wraps)."""
    if isinstance(policy, EdgePolicy):
        return policy.policy, policy.max_open
    return policy, DEFAULT_MAX_OPEN


def refuse_edges(df: DataFrame, why: str) -> DataFrame:
    """``df`` whose edge rows fail the job with ``why`` when it runs (TS §7.9): never lost,
    never taken for another kind."""
    return df.withColumn("kind", F.when(_is_edge(), F.raise_error(F.lit(why)))
                         .otherwise(F.col("kind")))


class EdgePlan:
    """What the probe found: per clock group (a tuple of its values), the CTI in force at the
    end of the log (``None``: none); ``edges`` the edge rows in all."""

    def __init__(self, edges: int, finals: dict[tuple, int | None]) -> None:
        self.edges = edges
        self.finals = finals


def edge_plan(df: DataFrame, policy: Policy, max_open: int, groups: list[str],
              order: Sequence[str]) -> EdgePlan:
    """The probe (one job over the log, on the driver): the edge rows and every group's last
    CTI; refuses a group in which more than ``max_open`` edges can be open at once (TS §7.6:
    the keys are decided apart only while the bound cannot be reached)."""
    summary = df.groupBy(*groups).agg(
        F.count(F.when(_is_edge(), 1)).alias("edges"),
        F.count(F.when(F.col("kind") == F.lit(KIND_START), 1)).alias("starts"),
        F.max(delayed_cti(policy.delay)).alias("final")).collect()
    edges = 0
    finals: dict[tuple, int | None] = {}
    peaks = (_peak_open(df, groups, order)
             if any(row["starts"] > max_open for row in summary) else {})
    for row in summary:
        group = tuple(row[g] for g in groups)
        peak = peaks.get(group, 0)
        if peak > max_open:
            where = f" in group {dict(zip(groups, group))}" if groups else ""
            raise NotImplementedError(
                f"replay: up to {peak} edges open at once{where}, more than "
                f"max_open={max_open}. Spark decides each (source, id) apart, exact while the "
                "bound on the open edges cannot be reached (TS §7.6); pass "
                f"policy=with_edges(<policy>, max_open={peak}) or more, or replay the log "
                "with goldilocks replay")
        edges += row["edges"]
        if row["edges"]:
            finals[group] = row["final"]
    return EdgePlan(edges, finals)


def _peak_open(df: DataFrame, groups: list[str], order: Sequence[str]) -> dict[tuple, int]:
    """Per clock group, the most edges that can be open at once (TS §7.6), counted from
    above: each start edge open from its row to the next end edge of its (source, id), or to
    the end of the log. A start edge on a key already open counts again and an end edge
    without a start closes nothing, so ``with_edges``' table never holds more; a group whose
    count stays within ``max_open`` never fills it, and its keys are decided apart exactly.
    One job over the edge rows alone, run only when a group has more start edges than the
    bound."""
    from pyspark.sql import Window

    at = F.struct(*[F.col(c) for c in order])
    edges = df.where(_is_edge()).select(*groups, "source", "id", "kind", at.alias("_at"))
    later = (Window.partitionBy(*groups, "source", "id").orderBy("_at")
             .rowsBetween(1, Window.unboundedFollowing))
    starts = edges.withColumn("_close", F.min(F.when(F.col("kind") == F.lit(KIND_END),
                                                     F.col("_at"))).over(later)
                              ).where(F.col("kind") == F.lit(KIND_START))
    steps = starts.select(*groups, "_at", F.lit(1).alias("_d")).unionByName(
        starts.where(F.col("_close").isNotNull())
        .select(*groups, F.col("_close").alias("_at"), F.lit(-1).alias("_d")))
    running = (Window.partitionBy(*([F.col(g) for g in groups] or [F.lit(0)]))
               .orderBy("_at", "_d").rowsBetween(Window.unboundedPreceding, 0))
    peaks = (steps.withColumn("_open", F.sum("_d").over(running))
             .groupBy(*groups).agg(F.max("_open").alias("peak")).collect())
    return {tuple(row[g] for g in groups): int(row["peak"]) for row in peaks}


def _place(order: Sequence[str]) -> Column:
    """``"c1=v1, c2=v2"`` of a row's order columns, for its error message."""
    return F.concat_ws(", ", *[F.concat(F.lit(f"{c}="),
                                        F.coalesce(F.col(c).cast("string"), F.lit("null")))
                               for c in order])


def mask_edges(df: DataFrame, order: Sequence[str]) -> DataFrame:
    """``df`` with ``EDGE_KIND`` and every edge row shown to the plans as an insert at its
    start; an edge row without ``start``, ``id`` (or an end edge without ``end``) fails the
    job naming it by its order columns."""
    where = _place(order)
    kind = F.col("kind")

    def bad(what: str) -> Column:
        return F.raise_error(F.concat(F.lit("replay: a row of kind '"), kind,
                                      F.lit(f"' has no {what} ("), where, F.lit(")")))

    checked = (F.when(_is_edge() & F.col("start").isNull(), bad("start"))
               .when(_is_edge() & F.col("id").isNull(), bad("id (TS §7.1)"))
               .when((kind == F.lit(KIND_END)) & F.col("end").isNull(), bad("end"))
               .when(_is_edge(), F.lit(KIND_INSERT)).otherwise(kind))
    return df.withColumn(EDGE_KIND, F.when(_is_edge(), kind)).withColumn("kind", checked)


def decide_edges(decided: DataFrame, policy: Policy, max_open: int, groups: list[str],
                 order: list[str], columns: list[str], plan: EdgePlan) -> DataFrame:
    """The decided edge rows (``EDGE_KIND`` set), each key's through ``with_edges``: rows of
    ``columns`` (as emitted, or as the record has them) with ``cti``, ``action``,
    ``adjusted_start``, ``adjusted_end``, ``reason`` and ``SIDE``."""
    from pyspark.sql.types import ByteType, LongType, StringType, StructField, StructType

    edges = decided.where(F.col(EDGE_KIND).isNotNull()).withColumn("kind", F.col(EDGE_KIND))
    edges = edges.select(*columns, ACTION, CTI_AFTER)
    schema = StructType([decided.schema[c] for c in columns] + [
        StructField("cti", LongType()), StructField("action", StringType()),
        StructField("adjusted_start", LongType()), StructField("adjusted_end", LongType()),
        StructField("reason", StringType()), StructField(SIDE, ByteType())])
    keys = [*groups, "source", "id"]
    # one key's rows together and in arrival order; one Python call per Arrow batch (a
    # grouped map's call per key cost 0.4 ms: most keys hold two rows)
    edges = edges.repartition(*keys).sortWithinPartitions(*keys, *order)
    return edges.mapInArrow(_KeyDecide(policy, max_open, keys, groups, order, plan.finals,
                                       schema), schema)


class _KeyDecide:
    """A task's edge rows on an executor, sorted by ``(group, source, id)`` then arrival:
    each key's through ``with_edges(policy).step`` from the CTI in force at each row, then
    ``finish`` from its group's last CTI. Picklable: the policy, the names, the last CTIs,
    the schema."""

    def __init__(self, policy: Policy, max_open: int, keys: list[str], groups: list[str],
                 order: list[str], finals: dict[tuple, int | None], schema: Any) -> None:
        self.policy = policy
        self.max_open = max_open
        self.keys = keys
        self.groups = groups
        self.order = order  # to name a bad row
        self.finals = finals
        self.schema = schema

    def __call__(self, batches: Any) -> Any:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(self.schema)
        policy = with_edges(self.policy, max_open=self.max_open)
        key: tuple | None = None
        state = policy.initial()
        opened: dict | None = None  # the row whose start edge is open (one per key)
        first: dict | None = None
        for batch in batches:
            out: list[dict] = []
            for row in batch.to_pylist():
                k = tuple(row[c] for c in self.keys)
                if k != key:  # a new (group, source, id): the last one's end
                    if first is not None:
                        out.extend(self._finish(policy, state, first, opened))
                    key, state, opened, first = k, policy.initial(), None, row
                state = EdgeState(HighState(row[CTI_AFTER]), state.open, state.counts)
                state, outputs = policy.step(state, self._event(row))
                for o in outputs:
                    if o.__class__ is LateRecord:
                        out.append(self._late(row, o))
                    elif o.kind == START_KIND or o.kind == END_KIND:
                        out.append(self._emitted(row, o))
                        opened = row if o.kind == START_KIND else None
            yield pa.RecordBatch.from_pylist(out, schema=schema)
        if first is not None:
            yield pa.RecordBatch.from_pylist(list(self._finish(policy, state, first, opened)),
                                             schema=schema)

    def _finish(self, policy: EdgePolicy, state: EdgeState, first: dict,
                opened: dict | None) -> Any:
        """TS §7.5: the key's start edge never closed, reported as the engine's finish does,
        from the CTI in force at the end of its group's log."""
        final = self.finals.get(tuple(first[g] for g in self.groups))
        _, records = policy.finish(EdgeState(HighState(final), state.open, state.counts))
        for r in records:
            assert opened is not None  # only an emitted start edge stays open
            yield self._late(opened, r)

    def _event(self, row: dict) -> Event:
        try:
            if row["kind"] == KIND_START:
                return Event.start_edge(row["start"], row["id"], row["payload"], row["source"])
            return Event.end_edge(row["start"], row["end"], row["id"], row["payload"],
                                  row["source"])
        except InputError as err:
            place = ", ".join(f"{c}={row[c]}" for c in self.order)
            raise InputError(f"replay: the {row['kind']} edge at {place}: {err}") from None

    def _emitted(self, row: dict, o: Event) -> dict:
        """An emitted edge: the row as it went out, with the CTI in force after it."""
        return {**row, "start": o.start, "end": o.end if o.kind == END_KIND else None,
                "cti": row[CTI_AFTER], "action": None, "adjusted_start": None,
                "adjusted_end": None, "reason": None, SIDE: 0}

    def _late(self, row: dict, r: LateRecord) -> dict:
        """A record: the edge as the record has it (the late file's line, TS §7.5)."""
        ev, adj = r.event, r.adjusted
        moved_start = adj.start if adj is not None and adj.start != ev.start else None
        moved_end = (adj.end if adj is not None and ev.kind == END_KIND and adj.end != ev.end
                     else None)
        return {**row, "start": ev.start, "end": ev.end if ev.kind == END_KIND else None,
                "cti": r.cti, "action": r.action, "adjusted_start": moved_start,
                "adjusted_end": moved_end, "reason": r.reason, SIDE: 1}
