"""What ``Union.stats()`` and ``InputHandle.stats()`` return: frozen values, cheap to take.

TS §3.4 holds in them at all times: per input, ``received = emitted + dropped + buffered``.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.times import readable_repr
from operators.edges import EdgeStats
from operators.late import LateStats
from operators.union.inputs import Input

__all__ = ["InputStats", "UnionStats", "input_stats"]


@dataclass(frozen=True, slots=True, repr=False)
class InputStats:
    """One input's accounting. TS §3.4: ``received = emitted + dropped + buffered`` at all
    times, so ``received = emitted + dropped`` once everything is merged. ``adjusted`` (emitted
    clipped) is counted apart, and so are CTIs (``ctis``): they are neither emitted nor dropped
    as inserts are; a CTI counts in ``received`` and ``buffered`` until it is merged.

    Times are ``int`` nanoseconds (instants since the epoch); the repr shows them as RFC 3339
    text and durations as ``'1m30s'``.

    - ``name``: the input's name; ``state``: ``ACTIVE``, ``COMPLETED``, ``FAILED`` or
      ``REMOVED``.
    - ``received``: inserts arrived (and CTIs not yet merged, see above); ``emitted``,
      ``dropped``, ``adjusted``: what the policy made of its inserts.
    - ``last_cti``: the last CTI it sent (an instant; ``None``: none yet).
    - ``lag``: how far it is behind: the output CTI − its last CTI (a duration; positive:
      behind, negative: ahead); once the output is at +inf, against the CTI before it.
    - ``buffered``: arrived, not yet merged; ``peak_buffered``: the most at once;
      ``prefetch``: the bound on it (its credit).
    - ``error``: why it failed, if it did.
    - ``discarded``: arrived after ``remove()`` cancelled it (RS §2.8), not merged.
    - ``ctis``: its CTIs merged.
    - ``progress``: its latest CTI, or its latest insert start until it sends a CTI (an
      instant; what alignment compares, TS §4.6).
    - ``paused``: credit withheld now for being ahead of the floor (TS §4.6); ``pauses``:
      times it was.
    - ``idle``: quiet for ``idle_after`` while holding credit (TS §4.7); ``idles``: times it
      went idle (each ended by its next arrival).
    - ``ahead``: the policy does not trust its clock now (TS §2.5, §2.6).
    """

    name: str
    state: str
    received: int
    emitted: int
    dropped: int
    adjusted: int
    last_cti: int | None
    lag: int | None
    buffered: int
    peak_buffered: int
    prefetch: int
    error: BaseException | None
    discarded: int
    ctis: int
    progress: int | None = None
    paused: bool = False
    pauses: int = 0
    idle: bool = False
    idles: int = 0
    ahead: bool = False

    def __repr__(self) -> str:
        return readable_repr(self, instants=("last_cti", "progress"), durations=("lag",))


@dataclass(frozen=True, slots=True, repr=False)
class UnionStats:
    """The whole union's accounting: its inputs' lines and the totals over every input it
    has seen, those it let go of included (``forgotten``). Times are ``int`` nanoseconds;
    the repr shows them readably.

    - ``inputs``: the active inputs and the latest that left, oldest first (``input(name)``
      finds one).
    - ``received``, ``emitted`` (inserts emitted, adjusted included), ``dropped``,
      ``adjusted``: totals over every input; ``ctis``: CTIs emitted.
    - ``output_cti``: the last CTI emitted (an instant; ``None``: none yet).
    - ``buffered``: arrived, not yet merged; ``peak_buffered``: the most at once;
      ``max_buffered``: the total bound (TS §4.4).
    - ``late``: the late side output's counts and bound; ``closed``: no more inputs may be
      added; ``done``: the union has ended.
    - ``forgotten``: inputs that left whose own lines were let go (counted in the totals);
      ``keep_departed``: the bound on those kept.
    - ``min_credit``: credit every input holds at least (TS §4.5).
    - ``max_drift``: alignment (TS §4.6) and ``idle_after``: idleness (TS §4.7), durations
      (``None``: off); ``paused``, ``idle``: inputs paused or idle now; ``floor``: the least
      progress of the live, non-idle inputs (an instant, TS §4.6).
    - ``edges``: open and unmatched edges (TS §7), under ``with_edges``.
    """

    inputs: tuple[InputStats, ...]
    received: int
    emitted: int
    ctis: int
    dropped: int
    adjusted: int
    output_cti: int | None
    buffered: int
    peak_buffered: int
    max_buffered: int
    late: LateStats
    closed: bool
    done: bool
    forgotten: int = 0
    keep_departed: int = 0
    min_credit: int = 0
    max_drift: int | None = None
    idle_after: int | None = None
    paused: int = 0
    idle: int = 0
    floor: int | None = None
    edges: EdgeStats | None = None

    def __repr__(self) -> str:
        return readable_repr(self, instants=("output_cti", "floor"),
                             durations=("max_drift", "idle_after"))

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
