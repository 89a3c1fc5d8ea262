"""The ways in for recorded arrivals: ``feed``, ``feed_columns`` and ``feed_events`` (the
bodies of the ``Union`` methods of those names).

A block of up to ``chunk`` arrivals, one input or many, is checked once — credit per input,
every element an ``Event`` already named after its input — and queued as **one** ``Batch``
(one queue item, one wake-up, the policy run over it in one ``step_many`` call). A block that
fails the check is halved, then sent arrival by arrival, which stamps names and stops at the
first arrival without credit. An input's arrivals come from one producer at a time (RS §1.3):
that is what makes checking its credit before queueing sound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from operator import attrgetter

from engine.errors import InputError
from engine.event import Event
from operators.union.handles import Emitter, input_of
from operators.union.inputs import Batch, Input, Intake

__all__ = ["feed", "feed_columns", "feed_events"]

_SOURCE = attrgetter("source")


def feed(intake: Intake, arrivals: Iterable[tuple[Emitter, Event]], chunk: int) -> int:
    """``Union.feed``: arrivals ``(emitter, event)`` in their order, as credit allows."""
    _check_chunk(intake, "feed", chunk)
    it = iter(arrivals)
    sent = 0
    while True:
        block = list(islice(it, chunk))
        if not block:
            return sent
        emitters, events = zip(*block)
        n = _feed_block(intake, emitters, events)
        sent += n
        if n < len(block):
            return sent


def feed_columns(intake: Intake, inputs: Sequence[Emitter], events: Sequence[Event],
                 chunk: int) -> int:
    """``Union.feed_columns``: ``events[i]`` arrived from ``inputs[i]``."""
    _check_chunk(intake, "feed_columns", chunk)
    if len(inputs) != len(events):
        raise InputError(f"{intake.name}.feed_columns(): {len(inputs)} inputs for "
                         f"{len(events)} events; expected one input per event")
    return _in_blocks(events, chunk,
                      lambda lo, block: _feed_block(intake, inputs[lo:lo + chunk], block))


def feed_events(intake: Intake, events: Sequence[Event], chunk: int) -> int:
    """``Union.feed_events``: ``events[i]`` arrived from the input opened under the name
    ``events[i].source``."""
    _check_chunk(intake, "feed_events", chunk)
    return _in_blocks(events, chunk, lambda lo, block: _feed_named(intake, block, lo))


def _in_blocks(events: Sequence[Event], chunk: int,
               send: Callable[[int, Sequence[Event]], int]) -> int:
    """``send(offset, block)`` block after block, until one is not sent whole."""
    sent = 0
    for lo in range(0, len(events), chunk):
        block = events[lo:lo + chunk]
        n = send(lo, block)
        sent += n
        if n < len(block):
            break
    return sent


def _check_chunk(intake: Intake, who: str, chunk: object) -> None:
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk <= 0:
        raise ValueError(f"{intake.name}.{who}(): chunk must be a positive int, got {chunk!r}")


def _some(names: Iterable[str], most: int = 10) -> str:
    """Up to ``most`` names for an error message, sorted, with how many more there are."""
    names = sorted(names)
    shown = ", ".join(map(repr, names[:most])) or "none"
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def _feed_block(intake: Intake, emitters: Sequence[Emitter], events: Sequence[Event]) -> int:
    """One batch if every input in the block has the credit for it and every event is an
    ``Event`` already named after its input; otherwise halves, then arrival by arrival."""
    counts = []
    of: dict[Emitter, Input] = {}
    names: dict[Emitter, str] = {}
    for emitter, n in Counter(emitters).items():
        inp = input_of(emitter)
        if inp is None or inp.intake is not intake:
            raise InputError(f"{intake.name}.feed(): {emitter!r} is not an input of "
                             f"this union")
        counts.append((inp, n))
        of[emitter] = inp
        names[emitter] = inp.name
    fits = all(inp.requested - inp.received >= n for inp, n in counts)
    if not fits and len(events) > 16:
        half = len(events) // 2
        sent = _feed_block(intake, emitters[:half], events[:half])
        if sent < half:
            return sent
        return sent + _feed_block(intake, emitters[half:], events[half:])
    # each event named after its input (an equal string is enough: equal strings built
    # apart compare as fast as one string with itself, and hash alike in the merge)
    if (not fits or list(map(type, events)).count(Event) != len(events)
            or list(map(_SOURCE, events)) != list(map(names.__getitem__, emitters))):
        return _feed_each(intake, list(map(of.__getitem__, emitters)), events)
    return _enqueue(intake, counts, events, lambda: list(map(of.__getitem__, emitters)))


def _feed_named(intake: Intake, events: Sequence[Event], offset: int) -> int:
    """``_feed_block`` for ``feed_events``: the inputs are found by the events' sources."""
    if list(map(type, events)).count(Event) != len(events):
        for i, event in enumerate(events):
            if event.__class__ is not Event:
                raise TypeError(f"{intake.name}.feed_events(): arrival {offset + i} is "
                                f"{type(event).__name__} {event!r}; expected an "
                                "engine.Event")
    sources = list(map(_SOURCE, events))
    try:
        tally = Counter(sources)
    except TypeError:  # an unhashable source: not a name
        tally = Counter()
    counts = []
    by_name: dict[str, Input] = {}
    for name, n in tally.items():
        inp = intake.opened(name)
        if inp is None:
            tally = Counter()
            break
        counts.append((inp, n))
        by_name[name] = inp
    if not tally:  # name the first arrival that has no input to go to
        for i, name in enumerate(sources):
            if intake.opened(name) is None:
                raise InputError(
                    f"{intake.name}.feed_events(): arrival {offset + i} names input "
                    f"{name!r}, which is not open here; expected the name of an input "
                    f"opened with open_input (open now: {_some(intake.active)})")

    def column() -> list[Input]:
        return list(map(by_name.__getitem__, sources))

    if not all(inp.requested - inp.received >= n for inp, n in counts):
        if len(events) > 16:
            half = len(events) // 2
            sent = _feed_named(intake, events[:half], offset)
            if sent < half:
                return sent
            return sent + _feed_named(intake, events[half:], offset + half)
        return _feed_each(intake, column(), events)
    return _enqueue(intake, counts, events, column)


def _enqueue(intake: Intake, counts: list[tuple[Input, int]], events: Sequence[Event],
             column: Callable[[], Sequence[Input]]) -> int:
    """Queue a checked block as one batch, under the gates of all its inputs (see
    ``Input.gate``); if one of them has left meanwhile, arrival by arrival instead, which
    names it. ``column()``: the block's inputs, one per arrival, built only for that."""
    counts.sort(key=lambda pair: id(pair[0]))  # one lock order for every feeder
    gates = [inp.gate for inp, _ in counts]
    for gate in gates:
        gate.acquire()
    try:
        if any(inp.left for inp, _ in counts):
            return _feed_each(intake, column(), events, locked=True)
        for inp, n in counts:
            inp.arrived(n)
        if intake.align is not None:  # TS §4.6, §4.7: progress and idleness, per input
            by_name: dict[str | None, Input] = {inp.name: inp for inp, _ in counts}
            for event in events:
                by_name[event.source].saw(event)
        intake.queue.append((None, Batch(events, counts)))
    finally:
        for gate in gates:
            gate.release()
    intake.wake()
    return len(events)


def _feed_each(intake: Intake, inputs: Sequence[Input], events: Sequence[Event],
               locked: bool = False) -> int:
    """Arrival by arrival: stamps names, stops at the first without credit, and raises
    ClosedError at the first whose input has left (checked under its gate)."""
    if locked:  # called with the gates held: the closed input is named before any is sent
        for inp in set(inputs):
            if inp.left:
                inp.check_open()  # raises: nothing of the block is sent
    sent = 0
    for inp, event in zip(inputs, events):
        if event is None:
            raise TypeError(f"{intake.name}.feed(): arrival {sent} has no event")
        if inp.requested - inp.received <= 0:
            intake.wake()  # merge what was sent; credit may come back
            if inp.requested - inp.received <= 0:
                return sent
        with inp.gate:  # see Input.gate: never queued after the input's leave marker
            if inp.left:
                inp.check_open()
            intake.queue.append((inp, inp.accept(event)))
        sent += 1
    intake.wake()
    return sent
