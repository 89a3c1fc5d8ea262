"""A bounded reorder buffer: inserts held until a CTI covers them, then released in time order.

The logic behind the ``reorder`` operator. ``push`` buffers inserts; a CTI at ``t`` releases
every buffered insert with ``start < t`` in ``(start, arrival)`` order, followed by the CTI —
so the output is sorted by start between CTIs and no released insert starts before a CTI
released earlier (TS §2.3). An insert that arrives starting before the last CTI is late
(TS §2.4): it is not buffered but handed back for the caller to record (TS §3.3). Marble
timeline (``|t`` a CTI)::

    in:   7  3  5 |6  9  2 |10
    out:          3  5 |6      7  9 |10      (2 is late: before CTI 6)

Memory: at most ``capacity`` events — the inserts not yet covered by a CTI, i.e. O(events
within the delay) for a stream whose CTIs trail its events by a delay. ``push`` is
O(log b) for b buffered events; ``release`` is O(r + log b) for r released.

Backpressure: ``push`` returns ``False`` when ``capacity`` events are already held (buffered
plus late ones not yet handed back); the event is then *not* taken and the caller keeps it,
stops requesting upstream, and retries after the next ``release`` (or ``take_late``) frees
room. A CTI is never refused.

>>> buf = ReorderBuffer(capacity=8)
>>> [buf.push(Event.point(t)) for t in (7, 3, 5)]     # times in nanoseconds
[True, True, True]
>>> out, late = buf.release(6)
>>> [(e.kind, e.start) for e in out], late
([('point', 3), ('point', 5), ('cti', 6)], [])
>>> buf.push(Event.point(2))
True
>>> out, late = buf.release(10)
>>> [(e.kind, e.start) for e in out], [e.start for e in late]
([('point', 7), ('cti', 10)], [2])
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import Any

from sortedcontainers import SortedKeyList

from engine.errors import InputError
from engine.event import CTI, Event
from operators.checkpoint import CheckpointError, decode_event, encode_event

__all__ = ["ReorderBuffer", "ReorderStats"]


def _key(item: tuple[int, int, Event]) -> tuple[int, int]:
    return item[0], item[1]


@dataclass(frozen=True, slots=True)
class ReorderStats:
    """A ``ReorderBuffer``'s accounting: ``buffered + late_pending <= capacity`` always."""

    buffered: int              # inserts held, waiting for a CTI to pass them
    late_pending: int          # late inserts held apart until taken
    peak: int                  # most ever held
    capacity: int              # the bound
    released: int              # inserts released in all
    late: int                  # late inserts in all
    last_cti: int | None       # the last CTI seen


class ReorderBuffer:
    """Holds inserts until a CTI releases them in ``(start, arrival)`` order.

    ``capacity``: the most events held at once (int >= 1). One buffer serves one
    subscription. Not thread-safe: the caller serialises ``push`` and ``release``.
    """

    __slots__ = ("capacity", "_items", "_seq", "_late", "_last_cti", "_peak", "_released",
                 "_late_total")

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise InputError(f"reorder buffer: capacity={capacity!r}; expected an int >= 1")
        self.capacity = capacity
        self._items: SortedKeyList = SortedKeyList(key=_key)
        self._seq = count()
        self._late: list[Event] = []
        self._last_cti: int | None = None
        self._peak = 0
        self._released = 0
        self._late_total = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def last_cti(self) -> int | None:
        """The last CTI released (``None`` before the first)."""
        return self._last_cti

    def push(self, event: Event) -> bool:
        """Take one insert; ``False`` (and nothing taken) when the buffer is full.

        An insert starting before the last released CTI is late (TS §2.4): it is held apart
        and returned by the next ``release`` or ``take_late``; it counts against ``capacity``.
        """
        if event.kind == CTI:
            raise InputError(
                f"reorder buffer: push got a CTI at {event.start}; expected an insert "
                "(CTIs go to release(t))"
            )
        held = len(self._items) + len(self._late)
        if held >= self.capacity:
            return False  # full: the caller keeps the event and applies backpressure
        last = self._last_cti
        if last is not None and event.start < last:  # TS §2.4: late
            self._late.append(event)
            self._late_total += 1
        else:
            self._items.add((event.start, next(self._seq), event))
        if held + 1 > self._peak:
            self._peak = held + 1
        return True

    def release(self, t: int) -> tuple[list[Event], list[Event]]:
        """A CTI at ``t`` arrived: return ``(out, late)``.

        ``out``: every buffered insert with ``start < t``, in ``(start, arrival)`` order,
        followed by ``Event.cti(t)`` — or ``[]`` if ``t`` does not advance past the last CTI
        (TS §2.1: such a CTI is swallowed). ``late``: the late inserts pushed since the last
        call, in arrival order, for the caller's late side output (TS §3.3).
        """
        late = self.take_late()
        last = self._last_cti
        if last is not None and t <= last:  # TS §2.1
            return [], late
        items = self._items
        cut = items.bisect_key_left((t, -1))  # first buffered item with start >= t (TS §2.4)
        out = [item[2] for item in items.islice(0, cut)]
        del items[:cut]
        self._released += len(out)
        self._last_cti = t
        out.append(Event(CTI, t, None, None, None))
        return out, late

    def take_late(self) -> list[Event]:
        """The late inserts pushed since the last call, in arrival order; frees their room."""
        late = self._late
        if late:
            self._late = []
        else:
            late = []
        return late

    def flush(self) -> tuple[list[Event], list[Event]]:
        """At completion: every buffered insert in ``(start, arrival)`` order, and the late."""
        out = [item[2] for item in self._items]
        self._items.clear()
        self._released += len(out)
        return out, self.take_late()

    def snapshot(self) -> dict[str, Any]:
        """The buffer as JSON values, for a checkpoint (TS §8.1): the held inserts in
        release order, the late ones not yet taken, the last CTI and the accounting."""
        return {"capacity": self.capacity, "items": [encode_event(i[2]) for i in self._items],
                "late": [encode_event(e) for e in self._late], "last_cti": self._last_cti,
                "counts": [self._peak, self._released, self._late_total]}

    def load(self, obj: Any, where: str = "checkpoint: reorder buffer") -> None:
        """Take the state ``snapshot`` wrote (into a buffer at least as large);
        ``CheckpointError``, and nothing changed, otherwise."""
        try:
            items = [decode_event(a, where) for a in obj["items"]]
            late = [decode_event(a, where) for a in obj["late"]]
            last = obj["last_cti"]
            peak, released, late_total = (int(c) for c in obj["counts"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{where}: malformed: {err!r}") from None
        if len(items) + len(late) > self.capacity:
            raise CheckpointError(f"{where}: {len(items) + len(late)} events restored into a "
                                  f"buffer of capacity {self.capacity}; expected one at least "
                                  f"as large as the checkpoint's ({obj.get('capacity')})")
        if not isinstance(last, (int, type(None))):
            raise CheckpointError(f"{where}: malformed last_cti {last!r}")
        seq = count()
        self._items = SortedKeyList(((e.start, next(seq), e) for e in items), key=_key)
        self._seq = seq  # the held ones keep their order; later arrivals sort after them
        self._late = late
        self._last_cti = last
        self._peak, self._released, self._late_total = peak, released, late_total

    def stats(self) -> ReorderStats:
        """What is held now against the bound, the most ever held, and the totals."""
        return ReorderStats(len(self._items), len(self._late), self._peak, self.capacity,
                            self._released, self._late_total, self._last_cti)

    def _check(self) -> None:
        """Invariants: sorted by (start, arrival); bounded by ``capacity``; nothing buffered
        starts before the last CTI; every held-apart late insert does."""
        keys = [_key(item) for item in self._items]
        assert keys == sorted(keys), keys
        assert len(self._items) + len(self._late) <= self.capacity
        assert self._peak <= self.capacity
        last = self._last_cti
        if last is not None:
            assert all(k[0] >= last for k in keys), (last, keys[:3])
            assert all(e.start < last for e in self._late)
