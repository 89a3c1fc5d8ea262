"""The TS conformance kit's golden decision vectors, made from the brute-force reference models.

A vector is one arrival list under one policy, with what the reference (``tests/reference.py``)
decides for it: the emitted stream and the late records, reasons included. Hand-written cases
pin the rules' corners (the StreamInsight example, ties at the CTI, shape-aware adjust, inputs
joining and leaving, a runaway clock, every edge case, times at the ends of the range);
seeded random cases cover their interleavings. Every policy runs under ``drop`` and
``adjust``.

The vectors are stored as data beside this file (``vectors.json``), so an implementation is
held to the data, not to a model it could share a bug with; ``tests/tskit/test_ts_kit.py``
regenerates them and fails when the stored file is out of date. Regenerate with::

    python -m tests.tskit.vectors --write
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.event import CTI, END, INTERVAL, POINT, START, Event, LateRecord
from engine.times import MAX_TIME, MIN_TIME
from tests.reference import (guarded_rule, quantile_rule, reference_edges, reference_goldilocks,
                             reference_live, reference_min)

__all__ = ["PATH", "CONFIGS", "build_vectors", "load_vectors", "event_row", "row_event",
           "late_row", "features_of", "rules_of", "rule_key"]

PATH = Path(__file__).with_name("vectors.json")

#: the policies the kit holds every implementation to: name -> (policy options, reference)
CONFIGS: dict[str, dict[str, Any]] = {
    "goldilocks": {"policy": "goldilocks", "delay": 5},
    "max": {"policy": "max", "delay": 0},
    "min": {"policy": "min", "delay": 0},
    "quantile": {"policy": "quantile", "delay": 3, "k": 2},
    "max_ahead": {"policy": "max_ahead", "delay": 3, "max_ahead": 10},
    "edges": {"policy": "goldilocks", "delay": 5, "edges": True},
}
ON_LATE = ("drop", "adjust")
#: the rules over the live inputs: their vectors end with every input leaving
LIVE_RULES = ("min", "quantile", "max_ahead")
RANDOM_PER_CONFIG = 8

# -- the data form of events and late records ----------------------------------------------


def event_row(e: Event) -> list:
    """``[kind, source, start, end, id, payload]`` of an event."""
    return [e.kind, e.source, e.start, e.end, e.id, e.payload]


def row_event(row: Sequence) -> Event:
    return Event(row[0], row[2], row[3], row[5], row[1], row[4])


def late_row(r: LateRecord) -> list:
    """``[input, event, cti, action, adjusted, reason]`` of a late record (events as rows)."""
    return [r.input, event_row(r.event), r.cti, r.action,
            None if r.adjusted is None else event_row(r.adjusted), r.reason]


def arrival_row(a: Any) -> list:
    return list(a) if isinstance(a, tuple) else event_row(a)


def row_arrival(row: Sequence) -> Any:
    return (row[0], row[1]) if row[0] in ("join", "leave") else row_event(row)


# -- cases -----------------------------------------------------------------------------------


def _numbered(arrivals: list) -> list:
    """The arrivals with each insert's payload set to its position (so every implementation's
    output names the arrival it came from)."""
    out = []
    for i, a in enumerate(arrivals):
        if isinstance(a, Event) and a.kind != CTI:
            a = Event(a.kind, a.start, a.end, i, a.source, a.id)
        out.append(a)
    return out


def p(t: int, s: str) -> Event:
    return Event(POINT, t, t + 1, None, s)


def iv(t: int, e: int, s: str) -> Event:
    return Event(INTERVAL, t, e, None, s)


def c(t: int, s: str) -> Event:
    return Event(CTI, t, None, None, s)


def se(t: int, s: str, i: Any) -> Event:
    return Event(START, t, MAX_TIME, None, s, i)


def ee(t: int, e: int, s: str, i: Any) -> Event:
    return Event(END, t, e, None, s, i)


def _hand_cases(config: str) -> dict[str, list]:
    """The hand-written arrival lists for a config, by name."""
    cases: dict[str, list] = {
        # the StreamInsight example (minutes as ns): A:5, B:0, A:CTI5, B:CTI0, A:7, A:CTI8, B:1
        "streaminsight-example": [p(5, "A"), p(0, "B"), c(5, "A"), c(0, "B"), p(7, "A"),
                                  c(8, "A"), p(1, "B")],
        # TS §2.1, §2.4: equal and lower CTIs change nothing; a start at the CTI is on time,
        # one tick before is late
        "ties-at-the-cti": [c(20, "A"), c(20, "B"), c(19, "A"), c(20, "B"), p(15, "A"),
                            p(14, "B"), iv(15, 16, "A"), iv(14, 15, "B"), c(21, "B"),
                            p(16, "A"), p(15, "B")],
        # TS §3.2: under adjust a point is dropped, an overlapping interval clipped, one
        # ending at the CTI (or before) dropped
        "late-shapes": [c(30, "A"), c(30, "B"), p(10, "A"), iv(10, 40, "B"),
                        iv(10, 25, "A"), iv(24, 25, "B"), iv(0, 26, "A"), iv(25, 26, "B"),
                        c(40, "A"), c(40, "B"), iv(30, 36, "A"), iv(34, 50, "B")],
    }
    if config in LIVE_RULES:
        # inputs joining and leaving change which CTIs count (TS §2.5, §2.6)
        cases["joins-and-leaves"] = [
            ("join", "A"), ("join", "B"), c(10, "A"), c(12, "B"), p(9, "A"), ("join", "C"),
            p(8, "C"), c(30, "A"), c(40, "C"), p(11, "B"), ("leave", "B"), p(12, "A"),
            c(50, "A"), ("leave", "C"), p(20, "C"), ("join", "B"), p(25, "B"), c(60, "B"),
            p(30, "A"), ("leave", "A"), ("leave", "B")]
        # one clock an hour ahead: the robust rules hold it (TS §2.5, §2.6)
        cases["runaway-clock"] = [
            c(10, "A"), c(10, "B"), c(10, "C"), c(1000, "R"), p(9, "A"), p(12, "B"),
            c(20, "A"), c(21, "B"), c(22, "C"), c(1010, "R"), p(15, "C"), p(19, "A"),
            c(40, "A"), c(40, "B"), p(25, "C"), c(40, "C"), p(36, "R"), p(41, "A")]
    if config == "edges":
        cases["edge-cases"] = [
            se(10, "A", "x"), c(20, "A"), ee(10, 30, "A", "x"),   # closed on time
            se(12, "A", "y"), ee(12, 13, "A", "y"),               # late start, then its end
            se(25, "B", 1), se(26, "B", 1),                       # a duplicate id
            ee(5, 6, "B", 2),                                     # no start edge
            c(40, "B"), ee(25, 30, "B", 1),                       # ended before the CTI
            se(36, "A", "x"), ee(36, 60, "A", "x"),               # an id reopened
            se(50, "A", "z"), p(40, "A"), iv(30, 60, "B"),        # z stays open
            se(44, "B", "w")]                                     # open at the end too
    if config == "goldilocks":
        # the ends of the time range: a delayed CTI floors at MIN_TIME (TS §2.2); a CTI at
        # MAX_TIME closes time
        cases["range-ends"] = [c(MIN_TIME + 3, "A"), p(MIN_TIME, "A"), c(MIN_TIME + 7, "B"),
                               p(MIN_TIME + 1, "B"), p(0, "A"), c(MAX_TIME, "A"),
                               iv(MAX_TIME - 10, MAX_TIME - 1, "B"), c(MAX_TIME - 1, "B"),
                               p(MAX_TIME - 2, "A")]
    return cases


def _random_case(rng: random.Random, config: str) -> list:
    """Random arrivals at small times: 2–4 inputs, points, intervals and CTIs; with joins and
    leaves for the rules over live inputs, and edges over three ids for ``edges``."""
    names = "ABCD"[:rng.randint(2, 4)]
    arrivals: list = []
    for _ in range(rng.randint(8, 30)):
        s = rng.choice(names)
        t = rng.randint(-10, 50)
        kinds = ["point", "interval", "cti", "cti"]
        if config in LIVE_RULES:
            kinds += ["join", "leave"]
        if config == "edges":
            kinds += ["start", "end", "end"]
        kind = rng.choice(kinds)
        if kind == "point":
            arrivals.append(p(t, s))
        elif kind == "interval":
            arrivals.append(iv(t, t + rng.randint(1, 25), s))
        elif kind == "cti":
            arrivals.append(c(t, s))
        elif kind in ("join", "leave"):
            arrivals.append((kind, s))
        elif kind == "start":
            arrivals.append(se(t, s, rng.choice([0, 1, "x"])))
        else:
            arrivals.append(ee(t, t + rng.randint(1, 25), s, rng.choice([0, 1, "x"])))
    return arrivals


# -- the reference's decisions ---------------------------------------------------------------


def reference(config: dict[str, Any], on_late: str
              ) -> Callable[[list], tuple[list[Event], list[LateRecord]]]:
    policy, delay = config["policy"], config["delay"]
    if config.get("edges"):
        return lambda a: reference_edges(a, delay, on_late, finish=True)
    if policy in ("goldilocks", "max"):
        return lambda a: reference_goldilocks(a, delay, on_late)
    if policy == "min":
        return lambda a: reference_min(a, on_late)
    rule = quantile_rule(config["k"]) if policy == "quantile" else guarded_rule(config["max_ahead"])
    return lambda a: reference_live(a, delay, rule, on_late)


def features_of(vector: dict[str, Any]) -> list[str]:
    """What an implementation needs to run ``vector``: ``policy:<name>``, ``adjust``,
    ``joins`` (join/leave rows), ``edges``, ``range-ends`` (times within 2**62 of the ends of
    the int64 range)."""
    found = [f"policy:{vector['policy']}"]
    if vector["on_late"] == "adjust":
        found.append("adjust")
    arrivals = vector["arrivals"]
    if any(a[0] in ("join", "leave") for a in arrivals):
        found.append("joins")
    if vector["edges"]:
        found.append("edges")
    if any(a[0] not in ("join", "leave") and abs(a[2]) > 2**62 for a in arrivals):
        found.append("range-ends")
    return found


def rule_key(rule: str) -> list[int]:
    """Rules sort by number: section, then rule (a tenth rule after the ninth)."""
    return [int(x) for x in rule.split("§")[1].split(".")]


def rules_of(vector: dict[str, Any]) -> list[str]:
    """The TS rules ``vector`` exercises: those whose outcome it shows."""
    arrivals, emitted, late = vector["arrivals"], vector["emitted"], vector["late"]
    rules = {"TS §2.3"}  # every emitted insert is checked against the CTIs before it
    if any(e[0] == CTI for e in emitted):
        rules |= {"TS §2.1", "TS §2.2"}
    starts = [a[2] for a in arrivals if a[0] not in ("join", "leave", CTI)]
    ctis = [e[2] for e in emitted if e[0] == CTI]
    if set(starts) & set(ctis) or late:
        rules.add("TS §2.4")
    if vector["policy"] == "quantile":
        rules.add("TS §2.5")
    if vector["policy"] == "max_ahead":
        rules.add("TS §2.6")
    actions = {(r[3], r[5]) for r in late}
    if any(a == "dropped" for a, _ in actions):
        rules.add("TS §3.1")
    if vector["on_late"] == "adjust" and late:
        rules.add("TS §3.2")
    if late:
        rules.add("TS §3.3")
    if vector["edges"]:
        rules.add("TS §7.1")
        if any(r[1][0] == START and r[3] in ("dropped", "adjusted") for r in late):
            rules.add("TS §7.2")
        if ("adjusted", "end_edge") in actions:
            rules.add("TS §7.3")
        if ("dropped", "start_dropped") in actions:
            rules.add("TS §7.4")
        if any(a == "unmatched" for a, _ in actions):
            rules.add("TS §7.5")
    return sorted(rules, key=rule_key)


def _ended(arrivals: list) -> list:
    """The arrivals, every input still live at the end leaving then, in the order it first
    came: how a union's stream ends (its inputs complete), which a rule over the live inputs
    sees (TS §2.5, §2.6; the min policy)."""
    live: dict[str, None] = {}
    for a in arrivals:
        verb, name = a if isinstance(a, tuple) else ("event", a.source)
        if verb == "leave":
            live.pop(name, None)
        else:
            live.setdefault(name)
    return arrivals + [("leave", name) for name in live]


def _vector(name: str, config_name: str, on_late: str, arrivals: list) -> dict[str, Any]:
    config = CONFIGS[config_name]
    if config["policy"] in LIVE_RULES:
        arrivals = _ended(arrivals)
    arrivals = _numbered(arrivals)
    emitted, late = reference(config, on_late)(arrivals)
    vector = {
        "name": f"{config_name}/{on_late}/{name}",
        "policy": config["policy"], "delay": config["delay"], "k": config.get("k"),
        "max_ahead": config.get("max_ahead"), "edges": bool(config.get("edges")),
        "on_late": on_late,
        "arrivals": [arrival_row(a) for a in arrivals],
        "emitted": [event_row(e) for e in emitted],
        "late": [late_row(r) for r in late],
    }
    vector["features"] = features_of(vector)
    vector["rules"] = rules_of(vector)
    return vector


def build_vectors() -> list[dict[str, Any]]:
    """Every vector, in a fixed order, from the reference models (deterministic)."""
    vectors = []
    for config_name in CONFIGS:
        for on_late in ON_LATE:
            for name, arrivals in _hand_cases(config_name).items():
                vectors.append(_vector(name, config_name, on_late, arrivals))
            for i in range(RANDOM_PER_CONFIG):
                rng = random.Random(f"{config_name}-{on_late}-{i}")
                vectors.append(_vector(f"random-{i}", config_name, on_late,
                                       _random_case(rng, config_name)))
    return vectors


def dumps(vectors: list[dict[str, Any]]) -> str:
    """The stored form: one vector per line, so a change shows as a readable diff."""
    return "[\n" + ",\n".join(json.dumps(v, separators=(",", ":")) for v in vectors) + "\n]\n"


def load_vectors() -> list[dict[str, Any]]:
    """The stored vectors (``vectors.json``)."""
    return json.loads(PATH.read_text(encoding="utf-8"))


def main(argv: Sequence[str]) -> int:
    text = dumps(build_vectors())
    if "--write" in argv:
        PATH.write_text(text, encoding="utf-8")
        print(f"wrote {PATH} ({text.count(chr(10)) - 2} vectors)")
        return 0
    current = PATH.exists() and PATH.read_text(encoding="utf-8") == text
    print("vectors.json is current" if current else "vectors.json is out of date: --write")
    return 0 if current else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
