"""The TS conformance kit: every implementation of a temporal decision, held to the golden
vectors (``tests/tskit/vectors.json``, made from the reference models).

A plug-in is a small class: its ``name``, the features it ``implements`` (``FEATURES``), a
reason for each feature it does not (``skips``: no silent skips — the kit refuses a plug-in
that leaves a feature unexplained), and ``run(vector) -> (emitted, late)``, the events and late
records the implementation gives for the vector's arrivals under its policy. ``run_many``
takes many vectors at once (the Spark plug-ins batch them into few jobs). The kit compares
what it returns with the vector, rows for rows, reasons included.

Plug-ins for the engine are in ``tests/tskit/plugins.py``, for Spark in
``tests/spark/ts_plugins.py``; ``tests/tskit/report.py`` writes the table of which plug-in
passes which TS rule into ``docs/conformance.md``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable, Sequence

from engine.event import Event, LateRecord
from engine.times import Nanoseconds
from tests.tskit.vectors import event_row, late_row, load_vectors, row_arrival

__all__ = ["FEATURES", "TSPlugin", "build_policy", "arrivals_of", "skip_reason", "mismatch",
           "vectors_for"]

#: what a vector may need of an implementation (``vectors.features_of``)
FEATURES = {
    "policy:goldilocks": "the Goldilocks policy, goldilocks(delay)",
    "policy:max": "max_policy()",
    "policy:min": "min_policy()",
    "policy:quantile": "quantile_policy(k, delay) (TS §2.5)",
    "policy:max_ahead": "goldilocks(delay, max_ahead=...) (TS §2.6)",
    "adjust": 'on_late="adjust" (TS §3.2)',
    "joins": "inputs joining and leaving (join and leave rows)",
    "edges": "start and end edges, with_edges(policy) (TS §7)",
    "range-ends": "times near the ends of the int64 range (MIN_TIME, MAX_TIME)",
}


class TSPlugin:
    """One implementation of the temporal decision, as the kit runs it."""

    #: how docs/conformance.md names it
    name: ClassVar[str] = ""
    #: the code it holds to the vectors
    where: ClassVar[str] = ""
    #: the features it implements; every other one needs a reason in ``skips``
    implements: ClassVar[frozenset[str]] = frozenset()
    skips: ClassVar[dict[str, str]] = {}
    #: needs the shared SparkSession (its tests are marked ``spark``)
    spark: ClassVar[bool] = False

    def run(self, vector: dict[str, Any]) -> tuple[list[Event], list[LateRecord]]:
        raise NotImplementedError

    def run_many(self, vectors: Sequence[dict[str, Any]]
                 ) -> dict[str, tuple[list[Event], list[LateRecord]]]:
        return {v["name"]: self.run(v) for v in vectors}


def check_declaration(plugin: type[TSPlugin]) -> None:
    """A plug-in declares every feature: implemented, or skipped with a reason."""
    unknown = (plugin.implements | set(plugin.skips)) - set(FEATURES)
    assert not unknown, f"{plugin.__name__}: unknown features {sorted(unknown)}"
    both = plugin.implements & set(plugin.skips)
    assert not both, f"{plugin.__name__}: both implemented and skipped: {sorted(both)}"
    silent = set(FEATURES) - plugin.implements - set(plugin.skips)
    assert not silent, f"{plugin.__name__}: no reason given for skipping {sorted(silent)}"
    assert all(why.strip() for why in plugin.skips.values()), plugin.__name__


def skip_reason(plugin: type[TSPlugin] | TSPlugin, vector: dict[str, Any]) -> str | None:
    """Why ``plugin`` does not run ``vector`` (``None``: it runs it)."""
    missing = [f for f in vector["features"] if f not in plugin.implements]
    if not missing:
        return None
    return "; ".join(f"{f}: {plugin.skips[f]}" for f in missing)


def vectors_for(plugin: type[TSPlugin] | TSPlugin,
                vectors: Iterable[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The vectors ``plugin`` runs."""
    return [v for v in (load_vectors() if vectors is None else vectors)
            if skip_reason(plugin, v) is None]


def build_policy(vector: dict[str, Any]) -> Any:
    """The engine's policy object for ``vector``."""
    from operators import goldilocks, max_policy, min_policy, quantile_policy, with_edges

    delay, on_late, name = Nanoseconds(vector["delay"]), vector["on_late"], vector["policy"]
    if name == "goldilocks":
        policy: Any = goldilocks(delay, on_late)
    elif name == "max":
        policy = max_policy(on_late)
    elif name == "min":
        policy = min_policy(on_late)
    elif name == "quantile":
        policy = quantile_policy(vector["k"], delay, on_late)
    elif name == "max_ahead":
        policy = goldilocks(delay, on_late, max_ahead=Nanoseconds(vector["max_ahead"]))
    else:
        raise ValueError(f"unknown policy {name!r} in vector {vector['name']}")
    return with_edges(policy) if vector["edges"] else policy


def arrivals_of(vector: dict[str, Any]) -> list[Any]:
    """The vector's arrivals: ``Event``s and ``("join" | "leave", name)`` markers."""
    return [row_arrival(row) for row in vector["arrivals"]]


def mismatch(vector: dict[str, Any], emitted: Sequence[Event],
             late: Sequence[LateRecord]) -> str | None:
    """What differs between an implementation's result and the vector (``None``: nothing)."""
    got_emitted = [event_row(e) for e in emitted]
    got_late = [late_row(r) for r in late]
    problems = []
    for what, got, want in (("emitted", got_emitted, vector["emitted"]),
                            ("late", got_late, vector["late"])):
        if got == want:
            continue
        at = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w),
                  min(len(got), len(want)))
        problems.append(f"{what} differs at {at} (got {len(got)}, want {len(want)}): "
                        f"got {got[at] if at < len(got) else '(nothing)'}, "
                        f"want {want[at] if at < len(want) else '(nothing)'}")
    return "; ".join(problems) or None
