"""Doors as edge events: an opening is known when it starts, its length only when it ends.

Two door sensors report a *start edge* when a door opens and an *end edge* (same ``id``)
when it closes; their clocks disagree, and the union delays every CTI by 30 s
(``with_edges(goldilocks("30s"))``, TS §7). What happens to each edge:

- door-1's back door closes late (its close is older than the CTI): the close still goes
  out, moved to the CTI — its opening went out, so its closing is never dropped;
- door-2's side door opens too late: under ``drop`` the opening is dropped, and its close
  is dropped with it;
- door-2 sends a close it never opened (``no_start``), and door-1's front door is still
  open at the end (``not_closed``): both are reported on the late side output.

Run: ``python examples/door_edges.py``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import Event, collect, format_ns, from_iterable, to_ns  # noqa: E402
from operators import Union, goldilocks, with_edges  # noqa: E402

BASE = to_ns("2024-06-01T12:00:00Z")
S = 10**9


def at(seconds: int) -> int:
    return BASE + seconds * S


DOOR_1 = [Event.start_edge(at(0), "front", payload="open"),
          Event.start_edge(at(10), "back", payload="open"),
          Event.cti(at(100)),
          Event.end_edge(at(10), at(40), "back"),     # ends before the CTI at 12:01:10
          Event.cti(at(160))]
DOOR_2 = [Event.cti(at(90)),
          Event.start_edge(at(20), "side", payload="open"),  # starts before the CTI: late
          Event.end_edge(at(20), at(95), "side"),
          Event.end_edge(at(5), at(6), "garage")]     # never opened


def main() -> None:
    union = Union(with_edges(goldilocks("30s")), final_cti=True)
    union.add(from_iterable(DOOR_1), name="door-1")
    union.add(from_iterable(DOOR_2), name="door-2")
    union.close()
    for e in collect(union, timeout=10):
        when = "+inf" if e.kind == "cti" and e.start >= at(10**6) else format_ns(e.start)
        if e.kind == "cti":
            print(f"CTI    {when}")
        else:
            end = f" .. {format_ns(e.end)}" if e.kind == "end" else ""
            print(f"{e.kind:<6} {e.source} {e.id:<6} {when}{end}")
    for r in union.late.drain():
        moved = f", end moved to {format_ns(r.adjusted.end)}" if r.adjusted else ""
        print(f"late   {r.input} {r.event.kind} {r.event.id}: {r.action}"
              f" ({r.reason or 'before the CTI'}){moved}")
    e = union.stats().edges
    print(f"edges: {e.opened} opened, {e.closed} closed, {e.unmatched} unmatched")


if __name__ == "__main__":
    main()
