"""The stage's deciders (``spark_adapter.stage_core``) against the engine, without Spark.

Each micro-batch's rows are split over a random number of simulated tasks in random order and
record batches of random sizes (the parallel plan must not care), or sorted and run in one
task per clock group (the sequential plan); the states fold between micro-batches as the
side files do. Every row's fate and the CTI at every micro-batch boundary must equal the
engine's (``stage_reference.engine_stage``: ``AdvanceTime`` per source and a ``Union``).
"""

from __future__ import annotations

import dataclasses
import random

import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.times import Nanoseconds
from operators import goldilocks, max_policy, min_policy, quantile_policy
from spark_adapter.stage_core import StageState, fold, new_decider
from spark_adapter.stage_rows import read_rows
from spark_adapter.stage_spec import (StageSpec, build_advance, build_policy, choose_plan,
                                      identity_changes, reason_text)
from stage_reference import Outcome, Row, documented_order, engine_stage

S = 10**9
_ACTION = {1: "adjusted", 2: "dropped", 3: "rejected"}
_LEVEL = {20: "source", 21: "merge", 22: "published", 23: "merge", 24: "merge", 25: "merge",
          26: "merge"}


def _spec(policy, advance, *, kinds=False, end=False, groups=(), arrival=False,
          keep_late=True) -> StageSpec:
    adv = build_advance(advance, policy.on_late, "test") if advance is not None else None
    return StageSpec(
        name="t", plan=choose_plan(policy, adv, ("arrival",) if arrival else ()),
        streaming=False, time_col="t", time_is_timestamp=False, time_scale=1,
        end_col="end" if end else None, source_col="device",
        kind_col="kind" if kinds else None,
        kinds=tuple((n, i) for i, n in enumerate(("insert", "cti", "join", "leave"))),
        group_cols=("site",) if groups else (), policy=policy, advance=adv,
        names=(("cti", "cti"), ("late_action", "late_action"), ("late_reason", "late_reason"),
               ("event_time", "event_time")),
        keep_late=keep_late, state_dir=None, late_path=None,
        user_columns=("id", "device", "t", "kind", "end", "site", "arrival"))


def _record_batch(rows: list[Row]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "id": pa.array([r.id for r in rows], pa.int64()),
        "device": pa.array([r.source for r in rows], pa.string()),
        "t": pa.array([r.time for r in rows], pa.int64()),
        "kind": pa.array([r.kind for r in rows], pa.string()),
        "end": pa.array([r.end for r in rows], pa.int64()),
        "site": pa.array([None if r.group == () else r.group[0] for r in rows], pa.string()),
        "arrival": pa.array([r.arrival for r in rows], pa.int64()),
    })


def run_deciders(spec: StageSpec, batches, seed: int, arrival: bool = False, *,
                 state: StageState | None = None, reasons: bool = False):
    """The stage's deciders over the micro-batches, from ``state`` (default: none yet);
    ``(outcomes, state after each batch)``; with ``reasons``, each outcome with its reason
    code."""
    rng = random.Random(seed)
    state = state if state is not None else StageState(spec.fingerprint())
    outcomes: dict = {}
    states = []
    for k, batch in enumerate(batches):
        if spec.plan == "sequential":
            by_group: dict = {}
            for r in documented_order(batch, arrival):
                by_group.setdefault(r.group, []).append(r)
            tasks = list(by_group.values())
            if tasks and rng.random() < 0.5:  # several groups in one task
                tasks = [[r for t in tasks for r in t]]
        else:
            rows = list(batch)
            rng.shuffle(rows)
            cut = sorted(rng.sample(range(len(rows) + 1), min(len(rows) + 1, rng.randint(0, 2))))
            tasks = [rows[a:b] for a, b in zip([0] + cut, cut + [len(rows)])]
        partials = []
        for rows in tasks:
            if not rows:
                continue
            decider = new_decider(spec, state)
            i = 0
            while i < len(rows):
                n = rng.randint(1, 5) if spec.plan == "parallel" else len(rows)
                chunk = rows[i:i + n]
                i += n
                d = decider.decide(read_rows(spec, _record_batch(chunk)))
                for j, r in enumerate(chunk):
                    code = int(d.action[j])
                    if code == 0 and d.keep[j]:
                        outcome = Outcome(None, int(d.start[j]))
                    elif code:
                        outcome = Outcome(
                            _ACTION[code], int(d.start[j]) if code == 1 else None,
                            int(d.late_cti[j]), _LEVEL.get(int(d.reason[j]), "bad"))
                    else:
                        continue
                    outcomes[r.id] = (outcome, int(d.reason[j])) if reasons else outcome
            partials.append(decider.partial())
        state = fold(state, partials, spec, k)
        states.append(state)
    return outcomes, states


def _high(value):
    return getattr(value, "high", value)


@st.composite
def micro_batches(draw, kinds: bool, ends: bool, groups: bool):
    n_batches = draw(st.integers(1, 4))
    batches, next_id = [], 0
    for b in range(n_batches):
        rows = []
        for _ in range(draw(st.integers(0, 10))):
            source = draw(st.sampled_from("ABC"))
            kind = draw(st.sampled_from(["insert"] * 4 + ["cti"] + ["join", "leave"] * kinds)) \
                if kinds else "insert"
            t = draw(st.integers(0, 40)) * S + b * draw(st.sampled_from([0, 5 * S]))
            end = None
            if ends and kind == "insert" and draw(st.booleans()):
                end = t + draw(st.integers(1, 20)) * S
            group = (("north" if source == "A" else "south"),) if groups else ()
            rows.append(Row(next_id, source, None if kind in ("join", "leave") else t, kind,
                            end, group, arrival=next_id))
            next_id += 1
        batches.append(rows)
    return batches


POLICIES = [goldilocks(0), goldilocks(Nanoseconds(3 * S)), goldilocks(Nanoseconds(2 * S), "adjust"),
            max_policy(),
            min_policy(), min_policy("adjust")]
ADVANCES = [{"every_events": 1}, {"every_events": 1, "delay": Nanoseconds(2 * S)},
            {"every_events": 2}, {"every_events": 3, "delay": Nanoseconds(S)},
            {"every": Nanoseconds(4 * S)},
            {"every": Nanoseconds(3 * S), "delay": Nanoseconds(S)}]


def _compare(spec, batches, policy, advance, seed, arrival=False):
    adv = dict(spec.advance) if spec.advance is not None else None
    want = engine_stage(batches, policy=policy, advance=adv, arrival=arrival)
    got, states = run_deciders(spec, batches, seed, arrival)
    inserts = {r.id for b in batches for r in b if r.kind == "insert"}
    assert {i: got.get(i) for i in inserts} == {i: want.outcomes.get(i) for i in inserts}
    for k, state in enumerate(states):
        for g, cti in want.ended[k].items():
            assert _high(state.groups.get(g)) == cti, (k, g)


@pytest.mark.parametrize("kinds", [False, True], ids=["readings", "ctis_joins_leaves"])
@settings(max_examples=150, deadline=None)
@given(data=st.data(), seed=st.integers(0, 10**6))
def test_micro_batches_equal_the_engine_batch_by_batch(kinds, data, seed):
    """Readings without CTIs (every row an insert, points or intervals), or streams with
    their own CTIs, joins and leaves: each policy, each kind of generation (none too, when
    the stream has CTIs); the parallel plan whenever it applies, split over tasks at random."""
    policy = data.draw(st.sampled_from(POLICIES))
    advance = data.draw(st.sampled_from([None, *ADVANCES] if kinds else ADVANCES))
    ends = not kinds and data.draw(st.booleans())
    if not kinds:  # the generator drops or adjusts as the stage does
        advance = {**advance, "on_late": policy.on_late}
    spec = _spec(policy, advance, kinds=kinds, end=ends)
    batches = data.draw(micro_batches(kinds=kinds, ends=ends, groups=False))
    _compare(spec, batches, policy, advance, seed)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), seed=st.integers(0, 10**6))
def test_arrival_order_equals_the_engine_on_the_whole_stream(data, seed):
    """With an arrival column the micro-batches do not matter: the engine over all rows."""
    policy = data.draw(st.sampled_from(POLICIES))
    advance = data.draw(st.sampled_from(ADVANCES))
    spec = _spec(policy, advance, arrival=True)
    batches = data.draw(micro_batches(kinds=False, ends=False, groups=False))
    assert spec.plan == "sequential"
    want = engine_stage([[r for b in batches for r in b]], policy=policy, advance=advance,
                        arrival=True)
    got, _ = run_deciders(spec, batches, seed, arrival=True)
    assert got == {i: o for i, o in want.outcomes.items()}


@settings(max_examples=80, deadline=None)
@given(data=st.data(), seed=st.integers(0, 10**6))
def test_clock_groups_run_apart_and_the_published_watermark_is_safe(data, seed):
    """Each group is its own engine; a row the stage drops only because it is behind what
    Spark was told is on time for its group and behind the published CTI — and a micro-batch
    raises the published CTI never past a group known when it began (a group that appears
    later may find it ahead: its rows behind it are late, with that reason)."""
    policy = data.draw(st.sampled_from(POLICIES))
    advance = data.draw(st.sampled_from(ADVANCES))
    spec = _spec(policy, advance, groups=True)
    batches = data.draw(micro_batches(kinds=False, ends=False, groups=True))
    want = engine_stage(batches, policy=policy, advance=advance)
    got, states = run_deciders(spec, batches, seed)
    known: set = set()
    before = None
    for k, state in enumerate(states):
        if state.published != before:
            for g in known:
                assert want.ended[k][g] is not None and state.published <= want.ended[k][g]
        before = state.published
        known |= set(want.ended[k])
    published = [None] + [s.published for s in states]
    for k, batch in enumerate(batches):
        for r in batch:
            if got[r.id].level == "published":
                assert want.outcomes[r.id].action is None
                assert published[k] is not None and r.time < published[k]
            else:
                assert got[r.id] == want.outcomes[r.id]


def test_the_seed_example_through_the_sequential_plan():
    """design.md §4.2's worked example as CTI-carrying rows in arrival order: B's insert@1 is
    late at 3."""
    m = 60 * S
    rows = [Row(0, "A", 5 * m), Row(1, "B", 0), Row(2, "A", 5 * m, "cti"),
            Row(3, "B", 0, "cti"), Row(4, "A", 7 * m), Row(5, "A", 8 * m, "cti"),
            Row(6, "B", 1 * m)]
    rows = [Row(r.id, r.source, r.time, r.kind, arrival=r.id) for r in rows]
    spec = _spec(goldilocks("5m"), None, kinds=True, arrival=True)
    got, states = run_deciders(spec, [rows], seed=1, arrival=True)
    assert got[6] == Outcome("dropped", None, 3 * m, "merge")
    assert [got[i] for i in (0, 1, 4)] == [Outcome(None, 5 * m), Outcome(None, 0),
                                            Outcome(None, 7 * m)]
    assert _high(states[-1].groups[()]) == 3 * m


def test_bad_rows_are_rejected_with_their_reason():
    spec = _spec(goldilocks(0), None, kinds=True, end=True)
    batch = pa.RecordBatch.from_pydict({
        "id": [0, 1, 2, 3, 4, 5, 6],
        "device": ["A", None, "A", "A", "A", "A", "A"],
        "t": pa.array([None, 5, 5, 5, 1_795_334_400, 5, 5], pa.int64()),
        "kind": ["insert", "insert", "Insert", None, "insert", "insert", "leave"],
        "end": pa.array([None, None, None, None, None, 5, None], pa.int64()),
        "site": pa.array([None] * 7, pa.string()), "arrival": [0] * 7})
    spec = StageSpec(**{**spec.__dict__, "time_scale": None})
    rows = read_rows(spec, batch)
    d = new_decider(spec, StageState(spec.fingerprint())).decide(rows)
    texts = [reason_text(int(c), rows.kind_values[rows.kind_index[i]]
                         if rows.kind_index[i] >= 0 else None, ("insert", "cti"))
             for i, c in enumerate(d.reason)]
    assert texts[:6] == [
        "null time", "null source", "unknown kind 'Insert'; expected one of 'insert', 'cti'",
        "null kind",
        "integer time looks like seconds since the epoch, not nanoseconds: give "
        "time_unit='s' (or 'ns' if they are nanoseconds)",
        "end not after start"]
    assert d.action.tolist() == [3, 3, 3, 3, 3, 3, 0]  # the leave row is a control row
    assert not d.keep.any()


def test_options_are_checked_with_the_engines_messages():
    with pytest.raises(InputError, match="every_events=0"):
        build_advance({"every_events": 0}, "drop", "watermark_stage")
    with pytest.raises(InputError, match="advance has 'final_cti'"):
        build_advance({"every": "1s", "final_cti": True}, "drop", "watermark_stage")
    with pytest.raises(InputError, match="unknown policy 'gold'"):
        build_policy("gold", None, "drop", "watermark_stage")
    with pytest.raises(InputError, match="disagrees"):
        build_policy(goldilocks("5s"), "6s", "drop", "watermark_stage")
    assert build_policy("goldilocks", "5 minutes", "drop", "x").delay == 300 * S
    assert dict(build_advance({"every": "10 seconds"}, "adjust", "x")) == {
        "every_events": None, "every": 10 * S, "delay": 0, "on_late": "adjust"}


@pytest.mark.parametrize("case", ["leave", "group_behind", "merge_adjusted"])
def test_cases_the_properties_found(case):
    """Minimal streams on which the parallel plan once disagreed with the engine."""
    if case == "leave":  # a source that leaves comes back with a fresh generator
        policy, advance, groups = goldilocks(0), {"every_events": 1}, False
        batches = [[Row(0, "A", 0), Row(1, "A", S), Row(2, "A", None, "leave")],
                   [Row(3, "A", 0)]]
    elif case == "group_behind":  # late for its own group: its group's CTI, not Spark's
        policy, advance, groups = goldilocks(0), {"every_events": 1}, True
        batches = [[Row(0, "A", 2 * S, group=("north",)), Row(1, "A", 0, group=("north",))],
                   [Row(2, "B", S, group=("south",))], [Row(3, "C", 0, group=("south",))]]
    else:  # the merge clipped an interval; the generator saw it unclipped
        policy = goldilocks(Nanoseconds(2 * S), "adjust")
        advance, groups = {"every_events": 1}, False
        batches = [[Row(0, "B", 3 * S)], [Row(1, "A", 0), Row(2, "A", 0, end=2 * S)],
                   [Row(3, "A", 0)]]
    spec = _spec(policy, {**advance, "on_late": policy.on_late}, kinds=case == "leave",
                 end=case == "merge_adjusted", groups=groups)
    assert spec.plan == "parallel"
    want = engine_stage(batches, policy=policy, advance=dict(spec.advance))
    got, _ = run_deciders(spec, batches, seed=0)
    assert {r.id: got.get(r.id) for b in batches for r in b if r.kind == "insert"} == {
        r.id: want.outcomes.get(r.id) for b in batches for r in b if r.kind == "insert"}


@settings(max_examples=60, deadline=None)
@given(data=st.data(), seed=st.integers(0, 10**6))
def test_a_task_sorts_its_rows_in_the_documented_order(data, seed):
    """The sequential plan's order inside a task (``stage_task.sorted_batches``) is the one
    the engine is fed in the tests and the docs describe."""
    from spark_adapter.stage_task import sorted_batches

    rows = [r for b in data.draw(micro_batches(kinds=True, ends=True, groups=False)) for r in b]
    random.Random(seed).shuffle(rows)
    for arrival in (False, True):
        spec = _spec(goldilocks(0), None, kinds=True, end=True, arrival=arrival)
        spec = StageSpec(**{**spec.__dict__, "order_by": ("arrival",) if arrival else ()})
        chunks = [_record_batch(rows[i:i + 3]) for i in range(0, len(rows), 3)]
        got = [i for b in sorted_batches(spec, chunks) for i in b.column("id").to_pylist()]
        assert got == [r.id for r in documented_order(rows, arrival)]


@settings(max_examples=120, deadline=None)
@given(data=st.data(), seed=st.integers(0, 10**6))
def test_idle_sources_leave_and_come_back_as_the_engine_takes_them(data, seed):
    """TS §4.8: with ``idle_after``, a source more than that behind the most advanced one of
    its group leaves the policy after the row that showed it, and comes back with its next
    row, as a new input — the engine's union with those inputs completed and reopened. A
    row late at the merge because its source was idle says so."""
    from spark_adapter.stage_spec import IDLE_SOURCE

    policy = data.draw(st.sampled_from([min_policy(), min_policy("adjust"),
                                        goldilocks(Nanoseconds(S)), quantile_policy(2)]))
    advance = data.draw(st.sampled_from(ADVANCES))
    advance = {**advance, "on_late": policy.on_late}
    idle_after = data.draw(st.sampled_from([S, 5 * S, 12 * S]))
    spec = _spec(policy, advance)
    spec = StageSpec(**{**spec.__dict__, "idle_after": idle_after})
    # the parallel plan (a running maximum, a CTI per reading) is never held back by a quiet
    # source, and keeps a returning source's own CTI: TS §4.8 is the sequential plan's
    assume(spec.plan == "sequential")
    batches = data.draw(micro_batches(kinds=False, ends=False, groups=False))
    want = engine_stage(batches, policy=policy, advance=dict(spec.advance),
                        idle_after=idle_after)
    got, states = run_deciders(spec, batches, seed, reasons=True)
    inserts = {r.id for b in batches for r in b}

    def plain(o):  # the rule's name is not what this is about
        return None if o is None else dataclasses.replace(o, reason=None)
    assert {i: plain(got[i][0]) for i in inserts} == {
        i: plain(want.outcomes.get(i)) for i in inserts}
    for k, state in enumerate(states):
        for g, cti in want.ended[k].items():
            assert _high(state.groups.get(g)) == cti, (k, g)
    for k, batch in enumerate(batches):  # which rows say their source was idle
        for r in batch:
            if got[r.id][1] == IDLE_SOURCE:
                assert want.outcomes[r.id].level == "merge"


def test_a_min_clock_goes_on_without_a_device_that_stopped():
    """``policy="min"``: B sends nothing after its first readings; without ``idle_after``
    the clock stops at B's last CTI, with it the CTI follows A once B is ``idle_after``
    behind, and B's reading when it is back is late, saying its source was idle."""
    from spark_adapter.stage_spec import IDLE_SOURCE

    batches = [[Row(0, "A", 0), Row(1, "B", 0), Row(2, "A", 5 * S), Row(3, "B", 5 * S)],
               [Row(4, "A", 10 * S), Row(5, "A", 20 * S)], [Row(6, "A", 30 * S)],
               [Row(7, "B", 12 * S), Row(8, "A", 40 * S)]]
    ids = [r.id for b in batches for r in b]
    for idle_after, highs in ((None, [5 * S, 5 * S, 5 * S, 12 * S]),
                              (10 * S, [5 * S, 20 * S, 30 * S, 40 * S])):
        spec = _spec(min_policy(), {"every_events": 1})
        spec = StageSpec(**{**spec.__dict__, "idle_after": idle_after})
        got, states = run_deciders(spec, batches, seed=3, reasons=True)
        assert [_high(state.groups[()]) for state in states] == highs
        if idle_after is not None:
            assert got[7] == (Outcome("dropped", None, 30 * S, "merge"), IDLE_SOURCE)
            assert all(got[i][0].action is None for i in ids if i != 7)
            assert states[1].groups[()].idle == {"B"}


@settings(max_examples=80, deadline=None)
@given(data=st.data(), seed=st.integers(0, 10**6))
def test_a_restart_with_other_delays_keeps_the_clock_monotone(data, seed):
    """The state of one stage taken on by a stage with other delays (``delay``,
    ``advance``'s delay): every CTI after the change is at or above every CTI before it
    (TS §2.1: the published watermark and each group's clock never go back), and the
    rows after it are judged against at least the CTI the first stage had reached."""
    policy = data.draw(st.sampled_from([goldilocks(0), goldilocks(Nanoseconds(3 * S)),
                                        max_policy(), min_policy()]))
    before = data.draw(st.sampled_from(ADVANCES[:2]))
    after = data.draw(st.sampled_from([{"every_events": 1, "delay": Nanoseconds(5 * S)},
                                       {"every_events": 1, "delay": 0}]))
    name = policy.name
    delay2 = data.draw(st.sampled_from([0, Nanoseconds(8 * S)])) if name == "goldilocks" else 0
    policy2 = goldilocks(delay2) if name == "goldilocks" else policy
    spec1 = _spec(policy, before)
    spec2 = _spec(policy2, after)
    if spec1.plan != spec2.plan:
        return  # every_events and the plan are not what this is about
    assert not identity_changes(spec1.fingerprint(), spec2.fingerprint())  # nor delays
    batches = data.draw(micro_batches(kinds=False, ends=False, groups=False))
    cut = data.draw(st.integers(0, len(batches)))
    _, states1 = run_deciders(spec1, batches[:cut], seed)
    start = states1[-1] if states1 else StageState(spec1.fingerprint())
    reached = _high(start.groups.get(()))
    got, states2 = run_deciders(spec2, batches[cut:], seed, state=start)
    highs = [_high(s.groups.get(())) for s in states2]
    floor = reached
    for h in highs:
        if floor is not None:
            assert h is not None and h >= floor
        floor = h if h is not None else floor
    for r in (r for b in batches[cut:] for r in b):
        if reached is not None and r.time < reached:
            assert got[r.id].action == "dropped"
