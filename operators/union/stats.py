"""What ``Union.stats()`` and ``InputHandle.stats()`` return: frozen values, cheap to take.

TS §3.4 holds in them at all times: per input, ``received = emitted + dropped + buffered``.
"""

from __future__ import annotations

from dataclasses import dataclass

from operators.edges import EdgeStats
from operators.late import LateStats
from operators.union.inputs import Input

__all__ = ["InputStats", "UnionStats", "input_stats"]


@dataclass(frozen=True, slots=True)
class InputStats:
    """One input's accounting. TS §3.4: ``received = emitted + dropped + buffered`` at all
    times, so ``received = emitted + dropped`` once everything is merged. ``adjusted`` (emitted
    clipped) is counted apart, and so are CTIs (``ctis``): they are neither emitted nor dropped
    as inserts are; a CTI counts in ``received`` and ``buffered`` until it is merged."""

    name: str
    state: str               # ACTIVE, COMPLETED, FAILED or REMOVED
    received: int            # inserts arrived (and CTIs not yet merged, see above)
    emitted: int
    dropped: int
    adjusted: int
    last_cti: int | None
    lag: int | None          # output CTI − this input's last CTI, in ns (positive: behind);
                             # once the output is at +inf, against the CTI before it
    buffered: int            # arrived, not yet merged
    peak_buffered: int
    prefetch: int            # the per-input bound
    error: BaseException | None
    discarded: int           # arrived after remove() cancelled the input (RS §2.8)
    ctis: int                # CTIs from this input merged
    progress: int | None = None  # latest CTI, or latest insert start until a CTI (TS §4.6)
    paused: bool = False     # withheld credit for being ahead of the floor (TS §4.6)
    pauses: int = 0          # times it was paused
    idle: bool = False       # quiet for idle_after while holding credit (TS §4.7)
    idles: int = 0           # times it went idle (each ended by its next arrival)
    ahead: bool = False      # the policy does not trust its clock now (TS §2.5, §2.6)


@dataclass(frozen=True, slots=True)
class UnionStats:
    """The whole union's accounting: its inputs' lines and the totals over every input it
    has seen, those it let go of included (``forgotten``)."""

    inputs: tuple[InputStats, ...]   # active inputs and the latest that left, oldest first
    received: int
    emitted: int                     # inserts emitted (adjusted included)
    ctis: int                        # CTIs emitted
    dropped: int
    adjusted: int
    output_cti: int | None
    buffered: int
    peak_buffered: int
    max_buffered: int                # the total bound
    late: LateStats
    closed: bool
    done: bool
    forgotten: int = 0               # inputs that left whose own stats were let go (counted
    keep_departed: int = 0           # in the totals above); the bound on those kept
    min_credit: int = 0              # credit every input holds at least (TS §4.5)
    max_drift: int | None = None     # alignment (TS §4.6), ns; None: off
    idle_after: int | None = None    # idleness (TS §4.7), ns; None: off
    paused: int = 0                  # inputs paused now for being ahead
    idle: int = 0                    # inputs idle now
    floor: int | None = None         # least progress of the live, non-idle inputs (TS §4.6)
    edges: EdgeStats | None = None   # open and unmatched edges (TS §7), under with_edges

    def input(self, name: str) -> InputStats:
        """The line of the input named ``name`` (the latest, if the name was reused)."""
        for stats in reversed(self.inputs):
            if stats.name == name:
                return stats
        raise KeyError(name)


def input_stats(inp: Input, against: int | None, ahead: frozenset = frozenset()) -> InputStats:
    """``inp``'s line, its lag measured against the output CTI ``against``; ``ahead``: the
    inputs the policy flags ahead."""
    last = inp.last_cti
    received = inp.received
    ctis = inp.ctis
    return InputStats(inp.name, inp.state, received - ctis, inp.emitted, inp.dropped,
                      inp.adjusted, last, None if against is None or last is None
                      else against - last, received - inp.processed, inp.peak, inp.prefetch,
                      inp.error, inp.discarded, ctis, inp.progress, inp.paused, inp.pauses,
                      inp.idle, inp.idles, inp.name in ahead)
