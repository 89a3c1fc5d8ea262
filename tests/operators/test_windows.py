"""Windows closed by CTIs (TS §6): the element path and the columnar kernel against the
brute-force reference, each window emitted once, per-key clocks, eviction, bounds, the
operator in a pipeline and in the conformance kit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Event, collect, from_iterable, pipe
from engine.errors import InputError
from engine.event import CTI, LateRecord
from engine.times import Nanoseconds
from operators import cti_sync, goldilocks
from operators.window_columns import WindowColumns
from operators.windows import (WINDOW_CLOSED, WindowResult, Windows, WindowSpec, fold,
                               hopping, number, parse_fold, tumbling)
from tests.reference import REFERENCE_FOLDS, reference_windows

FOLDS = tuple(parse_fold(k if f is None else f"{k}:{f}") for k, f in REFERENCE_FOLDS)


def run(windows: Windows, stream):
    emitted, late = [], []
    for e in stream:
        for o in windows.step(e):
            (late if isinstance(o, LateRecord) else emitted).append(o)
        windows._check()
    return emitted, late


def as_reference(emitted):
    """Results as the reference spells them: payload ``(start, end, key, count, values)``."""
    out = []
    for e in emitted:
        if e.kind == CTI:
            out.append(e)
        else:
            r: WindowResult = e.payload
            out.append(Event(e.kind, e.start, e.end, (r.start, r.end, r.key, r.count, r.values),
                             e.source))
    return out


payloads = st.one_of(st.none(), st.just("text"),
                     st.fixed_dictionaries({}, optional={"x": st.one_of(
                         st.integers(-5, 5), st.floats(-100, 100, allow_nan=False),
                         st.just(-0.0), st.text(max_size=1))}))


@st.composite
def streams(draw, ctis_have_sources=True):
    source = st.sampled_from("ABC")
    point = st.builds(lambda s, t, p: Event.point(t, p, s), source, st.integers(-30, 90),
                      payloads)
    interval = st.builds(lambda s, t, n, p: Event.interval(t, t + n, p, s), source,
                         st.integers(-30, 90), st.integers(1, 20), payloads)
    cti = st.builds(lambda s, t: Event.cti(t, source=s),
                    source if ctis_have_sources else st.sampled_from(["A", "B", None]),
                    st.integers(-40, 120))
    return draw(st.lists(st.one_of(point, interval, cti, cti), max_size=40))


specs = st.one_of(
    st.builds(lambda s, o: WindowSpec(s, s, o), st.integers(1, 25), st.integers(-10, 10)),
    st.builds(lambda h, k, extra, o: WindowSpec(h * k + extra, h, o), st.integers(1, 10),
              st.integers(1, 4), st.integers(0, 9), st.integers(-10, 10)),
).filter(lambda s: s.hop <= s.size)


# -- the element path against the reference -----------------------------------------------

@settings(max_examples=300, deadline=None)
@given(stream=streams(ctis_have_sources=False), spec=specs, keyed=st.booleans())
def test_ts_6_1_windows_by_the_streams_ctis_match_the_reference(stream, spec, keyed):
    windows = Windows(spec, FOLDS, key="source" if keyed else None)
    emitted, late = run(windows, stream)
    want, want_late = reference_windows(stream, spec.size, spec.hop, REFERENCE_FOLDS,
                                        keyed=keyed, offset=spec.offset)
    assert as_reference(emitted) == want
    assert late == want_late
    assert windows.stats().late == len(late)


@settings(max_examples=200, deadline=None)
@given(stream=streams(), spec=specs, keyed=st.booleans(), delay=st.integers(0, 15))
def test_ts_6_3_per_key_clocks_match_the_reference(stream, spec, keyed, delay):
    windows = Windows(spec, FOLDS, key="source" if keyed else None,
                      clocks=goldilocks(Nanoseconds(delay)))
    emitted, late = run(windows, stream)
    want, want_late = reference_windows(stream, spec.size, spec.hop, REFERENCE_FOLDS,
                                        keyed=keyed, offset=spec.offset, clock_delay=delay)
    assert as_reference(emitted) == want
    assert late == want_late


@settings(max_examples=200, deadline=None)
@given(stream=streams(ctis_have_sources=False), spec=specs, keyed=st.booleans())
def test_ts_6_1_each_window_once_and_only_after_the_clock_passed_its_end(stream, spec, keyed):
    emitted, _ = run(Windows(spec, FOLDS, key="source" if keyed else None), stream)
    seen = set()
    for i, e in enumerate(emitted):
        if e.kind == CTI:
            continue
        r = e.payload
        assert (r.key, r.start) not in seen  # never twice
        seen.add((r.key, r.start))
        assert r.end - r.start == spec.size and (r.start - spec.offset) % spec.hop == 0
        # never before: a CTI at or after its end follows, with only results between
        after = next(o for o in emitted[i:] if o.kind == CTI)
        assert after.start >= r.end
    # and every window that the final clock passed was emitted
    ctis = [e.start for e in stream if e.kind == CTI]
    if ctis:
        final = max(ctis)
        for e in stream:
            if e.kind != CTI:
                for ws in spec.starts(e.start):
                    if ws + spec.size <= final:
                        late_for_it = any(ws + spec.size <= c for c in
                                          [x.start for x in stream[:stream.index(e)]
                                           if x.kind == CTI])
                        assert late_for_it or ((e.source if keyed else None), ws) in seen


# -- the columnar kernel against the element path -----------------------------------------

def run_kernel(kernel: WindowColumns, stream, cuts, code, names):
    """``stream`` through ``kernel`` in the chunks ``cuts`` gives; the results as
    ``WindowResult``s and the late inserts. A row's key is ``code[source]`` (-1 without)."""
    spec = kernel.spec
    got = []
    late_rows = []
    for a, b in zip([0] + cuts, cuts + [len(stream)]):
        part = stream[a:b]
        is_cti = np.array([e.kind == CTI for e in part], np.bool_)
        start = np.array([e.start for e in part], np.int64)
        key = np.array([code.get(e.source, -1) for e in part], np.int32)
        values = [np.array([number(e.payload, f.field) if f.field else 0.0 for e in part],
                           dtype=object) for f in FOLDS]
        values = [np.array([v if isinstance(v, float) else np.nan for v in col], np.float64)
                  for col in values]
        closed = kernel.run(is_cti, start, key, values, names)
        late_rows += [part[i] for i in np.flatnonzero(closed.late)]
        for i in range(len(closed.end)):
            vals = {}
            for f, (v, has) in zip(FOLDS, closed.values):
                x = v[i].item() if has[i] else None
                vals[f.label] = int(x) if f.kind == "count" and x is not None else x
            end = int(closed.end[i])
            got.append(WindowResult(end - spec.size, end,
                                    names[closed.key[i]] if kernel.keyed else None,
                                    int(closed.count[i]), vals))
    return got, late_rows


@settings(max_examples=300, deadline=None)
@given(stream=streams(ctis_have_sources=False), spec=specs, keyed=st.booleans(),
       data=st.data())
def test_columnar_kernel_over_any_chunk_split_matches_the_element_path(stream, spec, keyed,
                                                                        data):
    windows = Windows(spec, FOLDS, key="source" if keyed else None)
    emitted, late = run(windows, stream)
    want = [e.payload for e in emitted if e.kind != CTI]
    names = sorted({e.source for e in stream if e.source}, reverse=True)  # codes not in order
    code = {n: i for i, n in enumerate(names)}
    kernel = WindowColumns(spec, FOLDS, keyed)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    got, late_rows = run_kernel(kernel, stream, cuts, code, names)
    assert got == want
    assert late_rows == [r.event for r in late]
    s = windows.stats()
    assert (kernel.open, kernel.peak, kernel.inserts, kernel.late, kernel.emitted) == \
           (s.open, s.peak_open, s.inserts, s.late, s.emitted)


@settings(max_examples=300, deadline=None)
@given(stream=streams(), spec=specs, delay=st.integers(0, 15), data=st.data())
def test_ts_6_3_per_key_clocks_on_columns_over_any_chunk_split_match_the_reference(
        stream, spec, delay, data):
    """The kernel with per-key clocks, fed every insert and the CTIs each key's own policy
    emits (each moving that key's clock only), gives the reference's windows, in its order,
    and its late inserts; the counts are the element path's."""
    policy = goldilocks(Nanoseconds(delay))
    states: dict = {}
    rows = []  # inserts as they arrived, CTIs as each key's policy emitted them
    for e in stream:
        state, outs = policy.step(states.get(e.source, policy.initial()), e)
        states[e.source] = state
        if e.kind != CTI:
            rows.append(e)
        rows += [Event.cti(o.start, source=e.source) for o in outs
                 if isinstance(o, Event) and o.kind == CTI]
    names = sorted({e.source for e in stream}, reverse=True)  # codes not in name order
    code = {n: i for i, n in enumerate(names)}
    kernel = WindowColumns(spec, FOLDS, True, per_key=True)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=4)))
    got, late_rows = run_kernel(kernel, rows, cuts, code, names)
    want, want_late = reference_windows(stream, spec.size, spec.hop, REFERENCE_FOLDS,
                                        keyed=True, offset=spec.offset, clock_delay=delay)
    assert [(r.start, r.end, r.key, r.count, r.values) for r in got] == \
        [e.payload for e in want]
    assert late_rows == [r.event for r in want_late]
    windows = Windows(spec, FOLDS, key="source", clocks=policy)
    run(windows, stream)
    s = windows.stats()
    assert (kernel.open, kernel.peak, kernel.inserts, kernel.late, kernel.emitted) == \
           (s.open, s.peak_open, s.inserts, s.late, s.emitted)


def test_per_key_kernel_refuses_a_key_past_max_keys_and_unkeyed_use():
    with pytest.raises(InputError, match="per-key clocks need keyed windows"):
        WindowColumns(WindowSpec(10, 10), FOLDS[:1], False, per_key=True)
    kernel = WindowColumns(WindowSpec(10, 10), FOLDS[:1], True, per_key=True, max_keys=2)
    one = [np.zeros(1, np.float64)]
    kernel.run(np.array([False]), np.array([1], np.int64), np.array([1], np.int32), one,
               ["a", "b"])
    with pytest.raises(InputError, match=r"3 keys hold a clock \(max_keys 2\).*columnar=False"):
        kernel.run(np.array([False]), np.array([1], np.int64), np.array([2], np.int32), one,
                   ["a", "b", "c"])


# -- concrete behaviour -------------------------------------------------------------------

def test_the_docstring_timeline():
    w = Windows(WindowSpec(10, 10), (parse_fold("count"),))
    out = []
    for e in [Event.point(3), Event.point(7), Event.point(12), Event.cti(10), Event.point(15),
              Event.point(4), Event.cti(25)]:
        out.extend(w.step(e))
    assert [("late", o.event.start) if isinstance(o, LateRecord)
            else (o.payload.start, o.payload.count) if isinstance(o.payload, WindowResult)
            else ("cti", o.start) for o in out] == \
        [(0, 2), ("cti", 10), ("late", 4), (10, 2), ("cti", 25)]
    assert out[2].action == WINDOW_CLOSED and out[2].cti == 10


def test_ts_6_2_a_hopping_insert_joins_the_windows_still_open_and_is_recorded_once():
    w = Windows(WindowSpec(20, 10), (parse_fold("count"),))
    w.step(Event.point(12))
    assert len(w.step(Event.cti(20))) == 2  # window [0, 20) closed, then the CTI
    out = w.step(Event.point(15, source="A"))  # in [0, 20) (closed) and [10, 30) (open)
    assert len(out) == 1 and out[0].action == WINDOW_CLOSED and out[0].cti == 20
    res = [o.payload for o in w.step(Event.cti(30)) if o.kind != CTI]
    assert [(r.start, r.count) for r in res] == [(10, 2)]


def test_user_fold_runs_as_a_pure_step():
    longest = fold("longest", 0, lambda acc, e: max(acc, e.end - e.start), value=lambda e: e)
    w = Windows(WindowSpec(10, 10), (parse_fold("count"), longest))
    w.step(Event.interval(1, 4))
    w.step(Event.interval(2, 9))
    (res, _cti) = w.step(Event.cti(10))
    assert res.payload.values == {"count": 2, "longest": 7}


def test_window_values_are_floats_and_missing_fields_are_skipped():
    w = Windows(WindowSpec(10, 10), tuple(parse_fold(a) for a in
                                          ("mean:t", "min:t", "count:t", "sum:t")))
    for p in ({"t": 1}, {"t": 2.5}, {"u": 9}, {"t": True}, "x", None):
        w.step(Event.point(1, p))
    (res, _) = w.step(Event.cti(10))
    assert res.payload.count == 6
    assert res.payload.values == {"mean_t": 1.75, "min_t": 1.0, "count_t": 2, "sum_t": 3.5}
    w.step(Event.point(11, {"u": 1}))
    (res, _) = w.step(Event.cti(20))
    assert res.payload.values == {"mean_t": None, "min_t": None, "count_t": 0, "sum_t": None}


@pytest.mark.parametrize("bad, message", [
    ("median:t", "unknown kind 'median'"),
    ("mean", "mean needs a payload field"),
    (3, "expected 'KIND:FIELD'"),
])
def test_bad_aggregates_are_named(bad, message):
    with pytest.raises(InputError, match=message):
        parse_fold(bad)


def test_bad_window_arguments_are_named():
    with pytest.raises(InputError, match="hop .* longer than the size"):
        hopping("1m", "2m")
    with pytest.raises(InputError, match="size"):
        tumbling(0)
    with pytest.raises(InputError, match="idle_after needs per-key clocks"):
        tumbling("1m", idle_after="5m")
    with pytest.raises(InputError, match="repeat a label"):
        tumbling("1m", "mean:t", "mean:t")
    w = Windows(WindowSpec(10, 10), FOLDS, key="source")
    with pytest.raises(InputError, match="key of .* is None; expected a str"):
        w.step(Event.point(1))


def test_memory_is_bounded_by_max_open_and_shown_in_stats():
    w = Windows(WindowSpec(10, 10), FOLDS, max_open=3)
    for t in (1, 11, 21):
        w.step(Event.point(t))
    s = w.stats()
    assert (s.open, s.peak_open, s.max_open) == (3, 3, 3)
    with pytest.raises(InputError, match="3 windows are open at once"):
        w.step(Event.point(31))
    w.step(Event.cti(20))
    assert w.stats().open == 1
    w.step(Event.point(31))  # room again


def test_columnar_kernel_refuses_more_than_max_open():
    kernel = WindowColumns(WindowSpec(10, 10), FOLDS[:1], False, max_open=2)
    with pytest.raises(InputError, match="2 windows are open at once"):
        kernel.run(np.zeros(3, np.bool_), np.array([1, 11, 21]), np.full(3, -1, np.int32),
                   [np.zeros(3)], [])


# -- per-key clocks and eviction (TS §6.3, §6.4) -------------------------------------------

def test_ts_6_3_a_device_window_closes_by_its_own_time():
    w = Windows(WindowSpec(60, 60), (parse_fold("count"),), key="source",
                clocks=goldilocks(0))
    w.step(Event.point(10, source="slow"))
    w.step(Event.point(500, source="fast"))
    out = w.step(Event.cti(1000, source="fast"))  # fast's window [480, 540) closes…
    assert [(o.payload.key, o.payload.start) for o in out] == [("fast", 480)]
    assert w.stats().open == 1                     # …but not slow's [0, 60)
    out = w.step(Event.cti(60, source="slow"))
    assert [(o.payload.key, o.payload.start) for o in out] == [("slow", 0)]
    assert all(o.kind != CTI for o in out)  # per-key clocks: no single CTI to pass on


def test_ts_6_4_idle_keys_are_evicted_their_windows_emitted_and_cannot_reopen():
    w = Windows(WindowSpec(60, 60), (parse_fold("count"),), key="source",
                clocks=goldilocks(0), idle_after=Nanoseconds(300))
    w.step(Event.point(10, source="gone"))
    w.step(Event.cti(20, source="gone"))
    w.step(Event.point(30, source="live"))
    out = w.step(Event.cti(400, source="live"))  # gone's latest time 20 < 400 - 300
    res = sorted((o.payload.key, o.payload.start) for o in out)
    assert res == [("gone", 0), ("live", 0)]
    s = w.stats()
    assert (s.evicted, s.closed_by_eviction, s.keys) == (1, 1, 1)
    # gone comes back: its emitted window [0, 60) cannot be emitted again
    late = w.step(Event.point(40, source="gone"))
    assert len(late) == 1 and late[0].action == WINDOW_CLOSED and late[0].cti == 60
    w._check()


@settings(max_examples=300, deadline=None)
@given(stream=streams(), spec=specs, delay=st.integers(0, 15),
       idle_after=st.one_of(st.none(), st.integers(0, 40).map(Nanoseconds)),
       max_keys=st.integers(1, 3))
def test_ts_6_4_evictions_never_emit_a_window_twice_and_lose_nothing(stream, spec, delay,
                                                                      idle_after, max_keys):
    windows = Windows(spec, FOLDS, key="source", clocks=goldilocks(Nanoseconds(delay)),
                      idle_after=idle_after, max_keys=max_keys)
    emitted, late = run(windows, stream)  # run() checks the invariants after every step
    seen = [(e.payload.key, e.payload.start) for e in emitted]
    assert len(seen) == len(set(seen))
    s = windows.stats()
    assert s.keys <= max_keys and s.emitted == len(emitted) and s.late == len(late)
    # every insert is counted: folded into a window still open or emitted, or late
    folded = sum(e.payload.count for e in emitted) + sum(
        accs[0] for g in windows._groups.values() for accs in g.windows.values())
    assigned = 0
    for e in stream:
        if e.kind != CTI:
            assigned += len(spec.starts(e.start))
    missed = assigned - folded
    assert missed >= 0 and (missed == 0) == (not late)


def test_ts_6_4_max_keys_evicts_the_longest_idle_key():
    w = Windows(WindowSpec(60, 60), (parse_fold("count"),), key="source",
                clocks=goldilocks(0), max_keys=2)
    w.step(Event.point(130, source="a"))
    w.step(Event.cti(100, source="a"))
    w.step(Event.cti(200, source="b"))
    out = w.step(Event.cti(300, source="c"))  # a is the longest idle: its window comes out
    assert [(o.payload.key, o.payload.start, o.payload.count) for o in out] == [("a", 120, 1)]
    assert set(w._groups) == {"b", "c"} and w.stats().evicted == 1 and w.stats().keys == 2
    assert w.stats().closed_by_eviction == 1
    w._check()


# -- the operator in a pipeline ------------------------------------------------------------

def test_windows_after_cti_sync_in_a_pipeline():
    events = [Event.point(t, {"t": float(t)}, "A") for t in range(0, 100, 7)]
    events += [Event.cti(200, source="A")]
    op = tumbling(Nanoseconds(30), "mean:t", "max:t")
    out = collect(pipe(from_iterable(events), cti_sync(Nanoseconds(50)), op))
    results = [e.payload for e in out if e.kind != CTI]
    assert [(r.start, r.count) for r in results] == [(0, 5), (30, 4), (60, 4), (90, 2)]
    assert results[0].values == {"mean_t": 14.0, "max_t": 28.0}
    assert op.stats().emitted == 4 and op.stats().open == 0
    assert out[-1] == Event.cti(150)


def test_late_inserts_reach_the_operators_late_output():
    op = tumbling(Nanoseconds(10))
    out = collect(pipe(from_iterable([Event.cti(20), Event.point(5, source="A")]), op))
    assert out == [Event.cti(20)]
    (record,) = op.late.drain()
    assert record.action == WINDOW_CLOSED and record.input == "A"


def test_columnar_kernel_over_the_whole_time_range_matches_the_element_path():
    """Window numbers too far apart to pack into one int64 take the slower pairing."""
    from engine.times import MAX_TIME, MIN_TIME

    stream = [Event.point(MIN_TIME + 10, {"x": 1}, "A"), Event.point(MAX_TIME - 10, {"x": 2}, "B"),
              Event.point(0, {"x": 3}, "A"), Event.cti(MAX_TIME - 5)]
    windows = Windows(WindowSpec(3, 1), FOLDS, key="source")
    want = [e.payload for e in run(windows, stream)[0] if e.kind != CTI]
    kernel = WindowColumns(WindowSpec(3, 1), FOLDS, True)
    closed = kernel.run(np.array([e.kind == CTI for e in stream]),
                        np.array([e.start for e in stream], np.int64),
                        np.array([0, 1, 0, -1], np.int32),
                        [np.array([float(e.payload["x"]) if e.payload else np.nan
                                   for e in stream])] * len(FOLDS), ["A", "B"])
    assert closed.end.tolist() == [r.end for r in want]
    assert closed.count.tolist() == [r.count for r in want] and len(want) == 9


# -- behind a live union ------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_windows_behind_a_union_fed_from_a_thread_pool(seed):
    """Four devices at different speeds on a real pool, a union with its final CTI at +inf,
    then tumbling windows per device: every emitted insert is in exactly one window, each
    window comes out once, in (end, key) order between CTIs, and nothing is left open."""
    import concurrent.futures
    import random

    from operators import Union

    rng = random.Random(seed)
    pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="windows-union")
    try:
        union = Union(goldilocks(Nanoseconds(40)), final_cti=True, prefetch=8, max_buffered=32)
        for d in range(4):
            skew = rng.randint(-30, 30)
            events = []
            for i in range(rng.randint(50, 300)):
                t = i * (d + 1) + skew + rng.randint(-20, 0)
                events.append(Event.point(t, {"v": float(rng.randint(0, 9))}))
                if i % 7 == 6:
                    events.append(Event.cti(t))
            union.add(from_iterable(events, executor=pool), name=f"dev-{d}")
        union.close()
        op = tumbling(Nanoseconds(25), "count", "sum:v", key="source")
        out = collect(pipe(union, op), timeout=60)
    finally:
        pool.shutdown(wait=True)
    results = [e.payload for e in out if e.kind != CTI]
    assert sum(r.count for r in results) == union.stats().emitted
    keys = [(r.key, r.start) for r in results]
    assert len(keys) == len(set(keys))
    run_since_cti: list = []
    for e in out:
        if e.kind == CTI:
            assert all(r.end <= e.start for r in run_since_cti)
            assert [(r.end, r.key) for r in run_since_cti] == \
                   sorted((r.end, r.key) for r in run_since_cti)
            run_since_cti = []
        else:
            run_since_cti.append(e.payload)
    assert run_since_cti == [] and op.stats().open == 0 and op.stats().late == 0
