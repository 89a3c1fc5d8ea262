"""The time-policy protocol: what every policy provides, and the batch form of its step.

A policy is a pure scan step over a small frozen state (design.md §4)::

    state = policy.initial()
    state, outputs = policy.step(state, event)     # one arrival; event.source is the input
    state, outputs = policy.leave(state, source)   # an input left the merge

``outputs`` is a tuple whose items are either ``Event`` (to emit downstream: the event itself,
an adjusted copy, or a new CTI) or ``LateRecord`` (to the late side output). The same policy
object is run element by element (the union, ``cti_sync``, replay), over columns (the columnar
path) and inside Spark; all three must agree.

The policies themselves, and finding one by name, are in ``operators.policies``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

from engine.codes import Decision
from engine.event import CTI, Event, LateRecord

__all__ = [
    "Policy",
    "on_time_at_high",
    "Outputs",
    "LateEntry",
    "step_many",
    "EMIT",
    "EMIT_ADJUSTED",
    "DROP_LATE",
    "CTI_EMIT",
    "CTI_SUPPRESS",
]

# Per-row decisions of the columnar path (``policy.run_columns``), as int8 codes: the values
# of ``engine.codes.Decision``, as plain ints for the hot loops.
EMIT = int(Decision.EMIT)                    # an insert emitted unchanged
EMIT_ADJUSTED = int(Decision.EMIT_ADJUSTED)  # a late interval clipped to the CTI (TS §3.2)
DROP_LATE = int(Decision.DROP_LATE)          # a late insert dropped (TS §3.1)
CTI_EMIT = int(Decision.CTI_EMIT)            # a CTI that advanced time (TS §2.1, §2.2)
CTI_SUPPRESS = int(Decision.CTI_SUPPRESS)    # a CTI that did not advance time: not emitted

#: what a step returns: events to emit and late records, in order
Outputs = tuple[Event | LateRecord, ...]


class LateEntry(NamedTuple):
    """A late decision of ``step_many``: the fields of the ``LateRecord`` it stands for
    (``LateRecord(*entry)``), which is built only if the late side output keeps it.

    Build one with ``tuple.__new__(LateEntry, (input, event, cti, action, adjusted))`` on a
    hot path: a third of the cost of calling the class, whose ``__new__`` is Python.
    """

    input: str | None       # the input (device) name
    event: Event            # the event as it arrived
    cti: int                # the CTI it violated
    action: str             # "dropped" or "adjusted"
    adjusted: Event | None  # the clipped event emitted instead, for "adjusted"
    # why, when a rule says more (``LateRecord.reason``); a hot path may build the entry
    # without it (five fields), which ``LateRecord(*entry)`` reads as ``None``
    reason: str | None = None


@runtime_checkable
class Policy(Protocol):
    """What every time policy provides. ``name``, ``delay`` (ns) and ``on_late`` describe it."""

    name: str
    delay: int
    on_late: str

    def initial(self) -> Any: ...

    def step(self, state: Any, event: Event) -> tuple[Any, Outputs]: ...

    def join(self, state: Any, source: str) -> tuple[Any, Outputs]: ...

    def leave(self, state: Any, source: str) -> tuple[Any, Outputs]: ...

    # Optional: ``step_many(state, events) -> (state, emitted, late, ctis)`` runs ``step``
    # over consecutive arrivals in one call: ``emitted`` lists every Event the steps output,
    # in order, ``late`` the ``LateEntry`` of every LateRecord, in order (the record's
    # fields, ``LateRecord(*entry)``: records are built only for entries that are kept),
    # ``ctis`` the arrivals that were CTIs. It must decide exactly as ``step`` does
    # event by event; ``step_many`` (the function below) falls back to that loop for
    # policies without one.
    #
    # Optional: ``on_time_at_high = step`` in the class promises that an insert starting at
    # or after ``state.high`` (any insert while ``high`` is ``None``) steps to
    # ``(state, (event,))``; the union's single-event fast path then decides that case
    # without calling ``step`` (``on_time_at_high`` below checks the promise).
    #
    # Optional: ``run_columns(is_cti, start, end, state=None) -> (action, cti, state) | None``
    # runs the policy over numpy columns of consecutive arrivals (inserts and CTIs only).
    # ``state`` is the same frozen state ``step`` uses, ``None`` meaning ``initial()``; the
    # returned state is the one ``step`` would hold after these rows, so a log can be run
    # chunk by chunk in O(chunk) memory and any split of it gives the same decisions.
    # ``action`` is int8 per row (the codes above); ``cti`` is int64 per row, the CTI in force
    # after that row (``MIN_TIME`` while none was ever emitted). ``None`` means "this policy
    # has no columnar form" (its decisions depend on the source or on join/leave).
    #
    # Optional: ``run_source_columns(is_cti, change, source, start, end, names, state=None)
    # -> (action, cti, reason, state)``: the columnar form of a rule that depends on which
    # input sent each row (``operators.robust_columns``): every row, joins (``change`` 1) and
    # leaves (-1) included, ``source`` a code into ``names``; ``reason`` a code per row into
    # ``operators.robust_columns.REASONS`` (a late row's ``LateRecord.reason``). Replay's
    # columnar path runs it when a policy has it.


def on_time_at_high(policy: Any) -> bool:
    """Whether ``policy`` promises that an insert starting at or after ``state.high`` (any
    insert while ``high`` is ``None``) steps to ``(state, (event,))`` — the same state, the
    event emitted as is — so a caller may decide that case without calling ``step``.

    A policy class makes the promise by naming the step it holds for:
    ``on_time_at_high = step``. A subclass that overrides ``step`` without renewing it
    breaks the identity checked here, and so makes no promise.
    """
    cls = type(policy)
    promised = getattr(cls, "on_time_at_high", None)
    return promised is not None and promised is getattr(cls, "step", None)


def step_many(policy: Policy, state: Any, events: Any,
              ) -> tuple[Any, list[Event], list[LateEntry], list[Event]]:
    """``policy.step_many`` if the policy has one, else ``step`` event by event, sorted into
    ``(state, emitted events, late entries, arrived CTIs)``; a ``LateEntry`` holds a
    record's fields (``LateRecord(*entry)``)."""
    fast = getattr(policy, "step_many", None)
    if fast is not None:
        return fast(state, events)
    step = policy.step
    emitted: list[Event] = []
    late: list[LateEntry] = []
    ctis: list[Event] = []
    for event in events:
        if event.kind == CTI:
            ctis.append(event)
        state, outputs = step(state, event)
        for out in outputs:
            if isinstance(out, LateRecord):
                late.append(LateEntry(out.input, out.event, out.cti, out.action, out.adjusted,
                                      out.reason))
            else:
                emitted.append(out)
    return state, emitted, late, ctis

