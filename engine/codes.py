"""The one table of codes: row kinds, decisions, late actions and reasons.

Every form of a temporal decision — the policies' steps, the numpy kernels, replay's columns,
Spark SQL, the watermark stage's Python and Java plans — speaks these codes. Each is an
``IntEnum`` defined here once, with its text name (``.text``: the word a record, a log line or
a late file carries); the other packages import them, and the Java constants are checked
against them (``tests/engine/test_codes.py``). A code never changes meaning: new ones are
added, never renumbered, because codes are stored (state, late files, Spark columns).

>>> Kind.CTI, Kind.CTI.text, Kind.of("cti")
(<Kind.CTI: 1>, 'cti', <Kind.CTI: 1>)
>>> Action.ADJUSTED.text, int(Action.ADJUSTED)
('adjusted', 1)
>>> Reason.of(None), Reason.of("max_ahead"), REASON_TEXTS[Reason.QUANTILE]
(<Reason.NONE: 0>, <Reason.MAX_AHEAD: 24>, 'quantile')
"""

from __future__ import annotations

from enum import IntEnum
from typing import Self

__all__ = ["Kind", "Decision", "Action", "Reason", "REASON_TEXTS", "texts"]


class _Coded(IntEnum):
    """An ``IntEnum`` whose members have a text name: the member's name in lower case."""

    @property
    def text(self) -> str:
        """The member's name as records write it (``Kind.CTI.text == "cti"``)."""
        return self.name.lower()

    @classmethod
    def of(cls, text: str) -> Self:
        """The member whose ``text`` is ``text``; ``ValueError`` naming the known ones else."""
        try:
            return cls[text.upper()]
        except KeyError:
            known = ", ".join(repr(m.text) for m in cls)
            raise ValueError(f"{text!r} is not a {cls.__name__.lower()}; expected one of "
                             f"{known}") from None


class Kind(_Coded):
    """A row's kind in the column form of a log (``eventlog``, Spark's ``kind`` codes).

    An event's own ``Event.kind`` is text (``"point"``, ``"interval"``, ``"cti"``, ``"start"``,
    ``"end"``); in a row, points and intervals are both ``INSERT`` and the union's joins and
    leaves are rows too.
    """

    INSERT = 0
    CTI = 1
    JOIN = 2   # an input joins the merge
    LEAVE = 3  # an input leaves the merge
    START = 4  # a start edge (TS §7.1)
    END = 5    # an end edge (TS §7.1)


class Decision(_Coded):
    """What the columnar form decided for a row (``policy.run_columns``; int8 per row)."""

    EMIT = 0           # an insert emitted unchanged
    EMIT_ADJUSTED = 1  # a late interval emitted with its start clipped to the CTI (TS §3.2)
    DROP_LATE = 2      # a late insert dropped (TS §3.1)
    CTI_EMIT = 3       # a CTI that advanced time: emitted at its delayed value (TS §2.1, §2.2)
    CTI_SUPPRESS = 4   # a CTI that did not advance time: not emitted
    NONE = 9           # no decision: a join or leave row


class Action(_Coded):
    """What happened to a row on the late side (``LateRecord.action`` is its ``text``; the
    watermark stage's ``late_action`` column its code)."""

    ON_TIME = 0        # not late (no late record)
    ADJUSTED = 1       # emitted with its start (or an end edge's end) moved (TS §3.2, §7.3)
    DROPPED = 2        # not emitted (TS §3.1)
    REJECTED = 3       # unusable data, refused by the watermark stage
    UNMATCHED = 4      # an edge without its partner (TS §7.5)
    WINDOW_CLOSED = 5  # an insert for a window already closed (TS §6.2)


class Reason(_Coded):
    """Why a row is late or rejected (``LateRecord.reason`` is its ``text``; ``NONE`` is no
    reason). Codes 1–9 reject a row's data, 20 and up name the CTI a late row broke or the
    rule that set it, 30 and up are the edges' (TS §7)."""

    NONE = 0
    NULL_TIME = 1
    TIME_RANGE = 2
    UNSCALED_S = 3     # an integer time that looks like epoch seconds (TS §1.6)
    UNSCALED_MS = 4
    UNSCALED_US = 5
    NULL_SOURCE = 6
    NULL_KIND = 7
    UNKNOWN_KIND = 8
    BAD_END = 9        # an end not after its start (TS §1.3)
    SOURCE_CTI = 20    # before its source's own CTI (the watermark stage)
    MERGED_CTI = 21    # before the merged CTI
    PUBLISHED = 22     # before the watermark already published
    QUANTILE = 23      # the CTI was set by the quantile rule (TS §2.5)
    MAX_AHEAD = 24     # the CTI was held back by max_ahead (TS §2.6)
    GOLDILOCKS = 25    # the guarded goldilocks CTI, not held back (TS §2.6)
    IDLE_SOURCE = 26   # its source was idle in event time (TS §4.8)
    RESUMED = 27       # its input had gone idle on the union's clock (TS §4.7)
    END_EDGE = 30      # an end edge's end moved to the CTI (TS §7.3)
    START_DROPPED = 31  # the end edge of a dropped start edge (TS §7.4)
    NO_START = 32      # an end edge with no open start edge (TS §7.5)
    DUPLICATE = 33     # a start edge whose (source, id) is open already (TS §7.5)
    NOT_CLOSED = 34    # a start edge still open at the end (TS §7.5)
    FULL = 35          # a start edge refused: max_open edges are open (TS §7.6)

    @classmethod
    def of(cls, text: str | None) -> Self:
        """The member of a ``LateRecord.reason`` (``None`` is ``NONE``)."""
        return cls.NONE if text is None else super().of(text)


def texts(enum: type[_Coded], none: int | None = None) -> tuple[str | None, ...]:
    """``enum``'s text names indexed by code (``None`` where no member has the code, and at
    ``none``): a table a numpy or Arrow kernel can ``take`` from."""
    table: list[str | None] = [None] * (max(enum) + 1)
    for member in enum:
        if member != none:
            table[member] = member.text
    return tuple(table)


#: ``LateRecord.reason`` by code (``None`` for ``Reason.NONE`` and unused codes)
REASON_TEXTS = texts(Reason, none=Reason.NONE)
