"""Union.checkpoint() / Union.restore() (TS §8.1, §8.2; docs/checkpoint.md).

The property: checkpoint at any point of any script, restore into a new union, re-attach the
inputs by name and continue — the output, the late records, the window results downstream
and the counts are those of the uninterrupted run; and a restored union's own checkpoint is
the bytes it was restored from. Bad checkpoints are refused with the reason, nothing changed.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from engine import Event
from engine.times import Nanoseconds
from operators import (Union, Windows, goldilocks, max_policy, min_policy, quantile_policy,
                       with_edges)
from operators.checkpoint import HEADER_SIZE, CheckpointError, describe_policy, pack, unpack
from operators.reorder_buffer import ReorderBuffer
from operators.windows import hopping_spec, parse_fold, tumbling_spec
from tests.reference import edge_arrivals_strategy

NAMES = ("A", "B", "C")


class Collect:
    """The union's subscriber: every event, and what windows closed by the merged CTI make
    of it (windows with per-key clocks take the arrivals themselves, beside the union)."""

    def __init__(self, windows: Windows | None, demand: int = 10**9) -> None:
        self.events: list[Event] = []
        self.windows = windows
        self.results: list = []
        self.demand = demand
        self.inside = None

    def on_subscribe(self, s) -> None:
        self.s = s
        if self.demand:
            s.request(self.demand)

    def on_next(self, e) -> None:
        self.events.append(e)
        if self.windows is not None and self.windows.clocks is None:  # by the merged CTI
            self.results.extend(self.windows.step(e))
        if self.inside is not None:
            self.inside()

    def on_error(self, e) -> None:
        raise AssertionError(e)

    def on_complete(self) -> None:
        pass


POLICIES = {
    "goldilocks": lambda on_late: goldilocks(Nanoseconds(3), on_late),
    "max": lambda on_late: max_policy(on_late),
    "min": lambda on_late: min_policy(on_late),
    "quantile": lambda on_late: quantile_policy(2, Nanoseconds(1), on_late),
    "guarded": lambda on_late: goldilocks(Nanoseconds(2), on_late, max_ahead=Nanoseconds(10)),
}


def make_windows(kind: str, keyed: bool, clocks: str | None) -> Windows:
    spec = (tumbling_spec(Nanoseconds(10)) if kind == "tumbling"
            else hopping_spec(Nanoseconds(10), Nanoseconds(5)))
    folds = (parse_fold("count"), parse_fold("sum:v"), parse_fold("min:v"))
    return Windows(spec, folds, key="source" if keyed else None,
                   clocks=None if clocks is None else POLICIES[clocks]("drop"),
                   idle_after=None if clocks is None else Nanoseconds(12), max_open=10_000,
                   max_keys=2)


def run(script, policy, windows_def, cut: int | None):
    """Run ``script``; with ``cut``, checkpoint after that many steps, restore, continue."""
    windows = make_windows(*windows_def) if windows_def else None
    union = Union(POLICIES[policy[0]](policy[1]), late_capacity=10_000)
    sub = Collect(windows)
    union.subscribe(sub)
    events, results = sub.events, sub.results
    emitters: dict = {}
    checkpoint = again = None
    for i, (op, name, event) in enumerate(script):
        if i == cut:
            checkpoint = union.checkpoint(stages={"w": windows} if windows else None)
            windows = make_windows(*windows_def) if windows_def else None
            union = Union.restore(checkpoint, policy=POLICIES[policy[0]](policy[1]),
                                  stages={"w": windows} if windows else None)
            again = union.checkpoint(stages={"w": windows} if windows else None)
            assert set(union.detached()) == set(emitters)
            sub = Collect(windows)
            union.subscribe(sub)
            sub.events, sub.results = events, results
            emitters = {n: union.open_input(n) for n in emitters}
        if op == "open":
            emitters[name] = union.open_input(name)
        elif op == "send":
            assert emitters[name].try_send(event)
            if windows is not None and windows.clocks is not None:
                results.extend(windows.step(event))  # each device's clock, beside the union
        else:
            emitters.pop(name).complete()
    late = union.late.drain()
    stats = union.stats()
    counts = (stats.received, stats.emitted, stats.ctis, stats.dropped, stats.adjusted,
              stats.output_cti, stats.late.records,
              [(s.name, s.state, s.received, s.emitted, s.dropped, s.adjusted, s.last_cti,
                s.ctis) for s in stats.inputs])
    wstats = None if windows is None else windows.stats()
    return events, late, results, counts, wstats, checkpoint, again


@st.composite
def scripts(draw):
    steps = []
    active: list[str] = []
    t = 0
    for _ in range(draw(st.integers(1, 60))):
        choices = ["open"] if not active else ["send"] * 6 + ["complete", "open"]
        op = draw(st.sampled_from(choices))
        if op == "open":
            free = [n for n in NAMES if n not in active]
            if not free:
                op = "send"
            else:
                name = draw(st.sampled_from(free))
                active.append(name)
                steps.append(("open", name, None))
                continue
        name = draw(st.sampled_from(active))
        if op == "complete":
            active.remove(name)
            steps.append(("complete", name, None))
            continue
        t += draw(st.integers(-2, 4))
        s = t + draw(st.integers(-8, 3))
        kind = draw(st.sampled_from(["point", "interval", "cti"]))
        if kind == "cti":
            e = Event.cti(s, source=name)
        elif kind == "point":
            e = Event.point(s, {"v": draw(st.integers(-5, 5))}, source=name)
        else:
            e = Event.interval(s, s + draw(st.integers(1, 12)), {"v": 1.5}, source=name)
        steps.append(("send", name, e))
    return steps


@settings(max_examples=150, deadline=None)
@given(script=scripts(), policy=st.tuples(st.sampled_from(sorted(POLICIES)),
                                          st.sampled_from(["drop", "adjust"])),
       windows_def=st.one_of(st.none(), st.tuples(
           st.sampled_from(["tumbling", "hopping"]), st.booleans(),
           st.one_of(st.none(), st.sampled_from(["goldilocks", "min", "quantile"])))),
       data=st.data())
def test_checkpoint_restore_continue_equals_the_uninterrupted_run(script, policy,
                                                                   windows_def, data):
    cut = data.draw(st.integers(0, len(script)), label="cut")
    whole = run(script, policy, windows_def, None)
    resumed = run(script, policy, windows_def, cut)
    assert resumed[:5] == whole[:5]
    if resumed[5] is not None:  # the cut was inside the script
        assert resumed[6] == resumed[5]  # a restored union's checkpoint is what it came from


def test_the_seeds_example_continues_from_every_cut():
    m = 60 * 10**9
    script = [("open", "A", None), ("open", "B", None),
              ("send", "A", Event.point(5 * m, source="A")),
              ("send", "B", Event.point(0, source="B")),
              ("send", "A", Event.cti(5 * m, source="A")),
              ("send", "B", Event.cti(0, source="B")),
              ("send", "A", Event.point(7 * m, source="A")),
              ("send", "A", Event.cti(8 * m, source="A")),
              ("send", "B", Event.point(1 * m, source="B"))]
    POLICIES["seed"] = lambda on_late: goldilocks("5m", on_late)
    try:
        whole = run(script, ("seed", "drop"), None, None)
        assert [(e.kind, e.start // m) for e in whole[0]] == [
            ("point", 5), ("point", 0), ("cti", 0), ("point", 7), ("cti", 3)]
        assert [r.event.start // m for r in whole[1]] == [1]
        for cut in range(len(script) + 1):
            assert run(script, ("seed", "drop"), None, cut)[:5] == whole[:5], cut
    finally:
        del POLICIES["seed"]


def test_departed_inputs_and_pending_events_are_kept():
    union = Union(goldilocks(0), keep_departed=1)
    sub = Collect(None, demand=1)
    union.subscribe(sub)
    for name in ("A", "B", "C"):
        e = union.open_input(name)
        e.try_send(Event.cti(1, source=name))
        e.complete()
    d = union.open_input("D")
    d.try_send(Event.point(5, source="D"))  # waits for demand, merged: pending
    data = union.checkpoint()
    restored = Union.restore(data, policy=goldilocks(0))
    assert restored.stats().forgotten == union.stats().forgotten == 2
    assert [s.name for s in restored.stats().inputs] == ["C", "D"]
    assert restored.detached() == ("D",)
    later = Collect(None)
    restored.subscribe(later)
    assert later.events == [Event.point(5, source="D")]


def test_queued_arrivals_behind_no_demand_refuse_a_checkpoint():
    union = Union(goldilocks(0))
    sub = Collect(None, demand=1)
    union.subscribe(sub)
    a = union.open_input("A")
    for t in range(3):
        assert a.try_send(Event.point(t, source="A"))
    with pytest.raises(CheckpointError, match="arrivals are queued.*waiting for demand"):
        union.checkpoint()
    sub.s.request(10)
    assert Union.restore(union.checkpoint(), policy=goldilocks(0)).stats().emitted == 3


def test_checkpoint_from_inside_on_next_is_refused_and_changes_nothing():
    union = Union(goldilocks(0))
    sub = Collect(None)
    caught: list = []

    def inside():
        try:
            union.checkpoint()
        except CheckpointError as err:
            caught.append(err)
    sub.inside = inside
    union.subscribe(sub)
    a = union.open_input("A")
    a.try_send(Event.point(1, source="A"))
    assert caught and "on_next" in str(caught[0])
    a.try_send(Event.point(2, source="A"))
    assert len(sub.events) == 2  # the union goes on


def _checkpoint():
    union = Union(goldilocks(Nanoseconds(3)))
    union.subscribe(Collect(None))
    a = union.open_input("A")
    a.try_send(Event.point(5, {"t": 1}, source="A"))
    a.try_send(Event.cti(9, source="A"))
    return union.checkpoint()


def _newer(data: bytes) -> bytes:
    magic, _, flags, length, crc = struct.unpack_from(">8sHHQI", data)
    return struct.pack(">8sHHQI", magic, 2, flags, length, crc) + data[HEADER_SIZE:]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:-5], "truncated: the header announces"),
    (lambda d: d[:10], "truncated: 10 bytes, shorter than the 24-byte header"),
    (lambda d: d[:40] + bytes([d[40] ^ 0x20]) + d[41:], "corrupted: the body's CRC-32"),
    (lambda d: b'{"kind": "union"}', "not a Goldilocks checkpoint"),
    (lambda d: b"PK\x03\x04" + d[4:], "not a Goldilocks checkpoint"),
    (lambda d: b"", r"empty \(0 bytes\)"),
    (_newer, "format 2, newer than this version reads"),
    (lambda d: d + b"\n", "1 bytes after the end"),
    (lambda d: pack("replay", {"x": 1}), "a checkpoint of a 'replay', not of a 'union'"),
])
def test_a_bad_checkpoint_says_what_is_wrong(damage, message):
    with pytest.raises(CheckpointError, match=message):
        Union.restore(damage(_checkpoint()), policy=goldilocks(Nanoseconds(3)))


def test_another_policy_or_stage_is_refused_and_nothing_is_changed():
    data = _checkpoint()
    with pytest.raises(CheckpointError, match=r"taken under the policy goldilocks\(delay='3ns'"
                                              r".*restored with goldilocks\(delay='4ns'"):
        Union.restore(data, policy=goldilocks(Nanoseconds(4)))
    with pytest.raises(CheckpointError, match="holds a HighState, but the policy min.* keeps a MinState"):
        body = unpack(data, "union")
        body["policy"] = describe_policy(min_policy())  # the state is still goldilocks'
        Union.restore(pack("union", {k: v for k, v in body.items() if k != "kind"}),
                      policy=min_policy())
    windows = make_windows("tumbling", True, None)
    windows.step(Event.point(3, {"v": 1}, source="A"))
    before = windows.snapshot()
    with pytest.raises(CheckpointError, match="holds no stage 'w'"):
        Union.restore(data, policy=goldilocks(Nanoseconds(3)), stages={"w": windows})
    union = Union(goldilocks(Nanoseconds(3)))
    other = make_windows("hopping", True, None)
    reorder = ReorderBuffer(4)
    reorder.push(Event.point(1))
    union.subscribe(Collect(None))
    data = union.checkpoint(stages={"r": reorder, "w": other})
    fresh = ReorderBuffer(4)
    with pytest.raises(CheckpointError, match=r"stage 'w'.*spec"):
        Union.restore(data, policy=goldilocks(Nanoseconds(3)), stages={"r": fresh, "w": windows})
    assert windows.snapshot() == before and fresh.stats().buffered == 0  # nothing changed
    with pytest.raises(CheckpointError, match="crc|CRC"):
        body = bytearray(data)
        body[-3] ^= 1
        Union.restore(bytes(body), policy=goldilocks(Nanoseconds(3)))


def test_a_payload_that_is_not_json_is_refused_at_checkpoint():
    union = Union(goldilocks(0))
    sub = Collect(None, demand=0)
    union.subscribe(sub)
    # built by hand: Event.point refuses a set at once (engine.event), a hand-built event is
    # checked where it is written
    union.open_input("A").try_send(Event("point", 1, 2, {1, 2}, "A"))
    with pytest.raises(CheckpointError, match="JSON value"):
        union.checkpoint()


def test_reorder_buffer_state_round_trips():
    buf = ReorderBuffer(8)
    for t in (7, 3, 5, 3):
        buf.push(Event.point(t))
    buf.release(4)
    buf.push(Event.point(2))
    copy = ReorderBuffer(8)
    copy.load(buf.snapshot())
    assert copy.snapshot() == buf.snapshot()
    assert copy.release(10) == buf.release(10)
    small = ReorderBuffer(1)
    with pytest.raises(CheckpointError, match="capacity 1"):
        small.load(buf.snapshot() | {"items": [["p", 1, 2, None, None]] * 2})


def test_checksum_is_crc32_of_the_body():
    data = _checkpoint()
    assert struct.unpack_from(">I", data, 20)[0] == zlib.crc32(data[HEADER_SIZE:])


def test_checkpoints_taken_while_threads_send_are_cuts():
    """Seeded stress: three producer threads send through a union merging on a thread pool
    while the main thread takes checkpoints. Each checkpoint taken is a cut: restored, every
    input's inserts are emitted or dropped (TS §3.4), and what the subscriber had been handed
    when it was taken lies between its counts just before and just after."""
    import concurrent.futures
    import random
    import threading

    class Count:
        def __init__(self) -> None:
            self.inserts = 0
            self.done = threading.Event()

        def on_subscribe(self, s) -> None:
            s.request(2**62)

        def on_next(self, e) -> None:
            if e.kind != "cti":
                self.inserts += 1

        def on_error(self, e) -> None:
            raise AssertionError(e)

        def on_complete(self) -> None:
            self.done.set()

    per, names = 3000, ("A", "B", "C")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        union = Union(goldilocks(Nanoseconds(50)), executor=pool, prefetch=64, max_buffered=128)
        sink = Count()
        union.subscribe(sink)
        emitters = {n: union.open_input(n) for n in names}

        def produce(name: str, seed: int) -> None:
            rng = random.Random(seed)
            t = 0
            for i in range(per):
                t += rng.randint(0, 3)
                e = (Event.cti(t, source=name) if i % 10 == 9
                     else Event.point(t - rng.randint(0, 80), source=name))
                assert emitters[name].send_blocking(e, timeout=30)
            emitters[name].complete()

        threads = [threading.Thread(target=produce, args=(n, 7 + k))
                   for k, n in enumerate(names)]
        for th in threads:
            th.start()
        taken = refused = 0
        while any(th.is_alive() for th in threads) or not taken:
            before = sink.inserts
            try:
                data = union.checkpoint()
            except CheckpointError:
                refused += 1
                continue
            after = sink.inserts
            taken += 1
            restored = Union.restore(data, policy=goldilocks(Nanoseconds(50)))
            stats = restored.stats()
            for s in stats.inputs:
                assert s.received == s.emitted + s.dropped and s.buffered == 0, s  # TS §3.4
            pending = sum(1 for e in restored._merge.pending if e.kind != "cti")
            assert before <= stats.emitted - pending <= after, (before, stats.emitted, after)
        for th in threads:
            th.join()
        union.close()
        assert sink.done.wait(30)
    final = union.stats()
    assert final.received == final.emitted + final.dropped == 3 * (per - per // 10)
    assert taken >= 1, (taken, refused)


def test_a_window_operator_downstream_continues_from_the_checkpoint():
    """union → tumbling(…) as a pipe: the operator's windows are saved with the union, and a
    new pipeline built on the restored union continues them (inline: between sends, the
    operator has taken everything the union handed on)."""
    from engine import CallbackSubscriber, pipe
    from operators import tumbling

    arrivals = [("A", Event.point(t, {"v": float(t)}, source="A")) if t % 3 else
                ("B", Event.cti(t, source="B")) for t in range(1, 40)]

    def pipeline(union, op):
        got: list = []
        pipe(union, op).subscribe(CallbackSubscriber(got.append))
        return got

    union = Union(goldilocks(0))
    op = tumbling(Nanoseconds(5), "sum:v")
    whole = pipeline(union, op)
    ems = {n: union.open_input(n) for n in "AB"}
    for name, e in arrivals:
        ems[name].try_send(e)
    for cut in (1, 10, 25):
        union = Union(goldilocks(0))
        op = tumbling(Nanoseconds(5), "sum:v")
        got = pipeline(union, op)
        ems = {n: union.open_input(n) for n in "AB"}
        for name, e in arrivals[:cut]:
            ems[name].try_send(e)
        data = union.checkpoint(stages={"w": op})
        union = Union.restore(data, policy=goldilocks(0),
                              stages={"w": (op := tumbling(Nanoseconds(5), "sum:v"))})
        more = pipeline(union, op)
        ems = {n: union.open_input(n) for n in "AB"}
        for name, e in arrivals[cut:]:
            ems[name].try_send(e)
        assert got + more == whole, cut


@settings(max_examples=150, deadline=None)
@given(arrivals=edge_arrivals_strategy(),
       policy=st.tuples(st.sampled_from(sorted(POLICIES)), st.sampled_from(["drop", "adjust"])),
       max_open=st.integers(1, 4), data=st.data())
def test_with_edges_state_continues_from_its_checkpoint(arrivals, policy, max_open, data):
    """with_edges' state (TS §7: the policy's own, the open edges, the counts) written as
    JSON and read back continues as the state itself would, to the edges never closed; its
    late records (edges' included) round-trip too."""
    from operators.checkpoint import decode_late, decode_state, encode_late, encode_state
    from operators.edges import with_edges

    name, on_late = policy
    pol = with_edges(POLICIES[name](on_late), max_open=max_open)
    cut = data.draw(st.integers(0, len(arrivals)), label="cut")

    def run(state, events):
        outs = []
        for e in events:
            state, out = pol.step(state, e)
            outs.extend(out)
        state, out = pol.finish(state)
        return state, outs + list(out)

    state = pol.initial()
    for e in arrivals[:cut]:
        state, _ = pol.step(state, e)
    body = unpack(pack("union", {"state": encode_state(pol, state)}), "union")
    restored = decode_state(pol, body["state"], "test")
    assert restored == state
    want_state, want = run(state, arrivals[cut:])
    got_state, got = run(restored, arrivals[cut:])
    assert got == want and got_state == want_state
    assert pol.stats(got_state) == pol.stats(want_state)
    for r in (o for o in want if o.__class__.__name__ == "LateRecord"):
        assert decode_late(unpack(pack("union", {"r": encode_late(r)}), "union")["r"], "t") == r


def test_with_edges_state_is_refused_by_a_policy_without_edges_and_back():
    from operators.checkpoint import decode_state, encode_state
    from operators.edges import with_edges

    wrapped = with_edges(goldilocks(Nanoseconds(3)))
    state, _ = wrapped.step(wrapped.initial(), Event.start_edge(5, "door", source="A"))
    with pytest.raises(CheckpointError, match="with edges"):
        decode_state(goldilocks(Nanoseconds(3)), encode_state(wrapped, state), "c")
    with pytest.raises(CheckpointError, match="without edges"):
        plain = goldilocks(Nanoseconds(3))
        decode_state(wrapped, encode_state(plain, plain.initial()), "c")
    assert describe_policy(wrapped) != describe_policy(goldilocks(Nanoseconds(3)))


@pytest.mark.parametrize("taken, restored, says", [
    (lambda: goldilocks(Nanoseconds(3)), lambda: with_edges(goldilocks(Nanoseconds(3))),
     r"that did not decide edges, restored with one that does \(with_edges\)"),
    (lambda: with_edges(goldilocks(Nanoseconds(3))), lambda: goldilocks(Nanoseconds(3)),
     r"that decided edges \(with_edges\), restored with one that does not"),
    (lambda: with_edges(goldilocks(Nanoseconds(3)), max_open=5),
     lambda: with_edges(goldilocks(Nanoseconds(3))),
     r"deciding edges with \{'max_open': 5\}, restored with \{'max_open': 100000\}"),
])
def test_a_policy_that_decides_edges_or_not_is_named_as_the_difference(taken, restored, says):
    """The same policy with and without with_edges prints alike: the refusal says that the
    edges are the difference (TS §8.2) — a server's checkpoint from before it decided edges."""
    data = Union(taken()).checkpoint()
    with pytest.raises(CheckpointError, match=says):
        Union.restore(data, policy=restored())
