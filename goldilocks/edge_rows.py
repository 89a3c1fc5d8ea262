"""Replay's rows through a policy's step, written once for both of replay's paths (TS §7.7).

- ``row_event``: the ``Event`` of a log row (an insert or an edge) as the element path and
  this module build it;
- ``event_line``: the canonical output line of an emitted insert or edge;
- ``step_chunk``: a whole chunk through ``policy.step`` with the columnar path's results —
  a decision code and the CTI in force per row, the output and late bytes — for the blocks
  the columnar path hands over because they hold edges (its kernels know no edges);
- ``finish_lines``: the reports of the start edges still open at the end (TS §7.5).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.codes import Decision
from engine.event import ADJUSTED, CTI as CTI_KIND, END as END_KIND, INTERVAL, POINT
from engine.event import START as START_KIND
from engine.event import Event, LateRecord
from engine.policy import CTI_EMIT, CTI_SUPPRESS, DROP_LATE, EMIT, EMIT_ADJUSTED, Policy
from engine.times import MAX_TIME, MIN_TIME
from eventlog import CTI, INSERT, JOIN, LEAVE, Columns, cti_line, cti_line_iso, encode_late
from eventlog.format import START, edge_line, insert_line, insert_line_iso, insert_prefix
from operators.edges import EdgePolicy

__all__ = ["row_event", "event_line", "step_chunk", "finish_lines", "NO_ACTION"]

#: join/leave rows in a decision column
NO_ACTION = int(Decision.NONE)  # join and leave rows: no decision


def row_event(k: int, start: int, end: int, has_end: bool, payload: Any, name: str | None,
              id: Any) -> Event:
    """The event of an insert (``k == INSERT``) or edge row."""
    if k == INSERT:
        return Event(INTERVAL if has_end else POINT, start, end, payload, name)
    if k == START:
        return Event(START_KIND, start, MAX_TIME, payload, name, id)
    return Event(END_KIND, start, end, payload, name, id)


def event_line(o: Event, prefixes: dict[str | None, bytes], iso: bool) -> bytes:
    """The canonical line of an emitted insert or edge (``prefixes``: insert prefixes by
    source, filled as met)."""
    kind = o.kind
    if kind == START_KIND or kind == END_KIND:
        return edge_line(o.source, kind, o.start, o.end if kind == END_KIND else None, o.id,
                         o.payload, iso)
    src = o.source
    pre = prefixes.get(src)
    if pre is None:
        pre = prefixes[src] = insert_prefix(src)
    return (insert_line_iso if iso else insert_line)(pre, o.start,
                                                     o.end if kind == INTERVAL else None,
                                                     o.payload)


def step_chunk(policy: Policy, chunk: Columns, state: Any, names: list[str], iso: bool,
               late_on: bool) -> tuple[np.ndarray, np.ndarray, Any, bytes, bytes]:
    """``policy.step`` over every row of ``chunk``: ``(action, cti, state, out, late)`` —
    per row the decision (``EMIT``, ``EMIT_ADJUSTED``, ``DROP_LATE`` for an insert or edge
    that left a record and nothing emitted, ``CTI_EMIT``/``CTI_SUPPRESS``, ``NO_ACTION``
    for join and leave) and the CTI in force after it (``MIN_TIME`` before any; for an
    adjusted row, the start it went out with, as ``run_columns`` gives it), the new
    state, and the output and late bytes in order. ``state`` ``None`` is ``initial()``."""
    if state is None:
        state = policy.initial()
    step = policy.step
    n = len(chunk)
    action = np.full(n, NO_ACTION, np.int8)
    cti = np.empty(n, np.int64)
    high = policy.cti_in_force(state) if isinstance(policy, EdgePolicy) else MIN_TIME
    prefixes: dict[str | None, bytes] = {}
    out: list[bytes] = []
    late: list[bytes] = []
    time_format = "iso" if iso else "ns"
    ids = chunk.ids or [None] * n
    for r, (k, s, st, en, he, pl, id_) in enumerate(zip(
            chunk.kind.tolist(), chunk.source.tolist(), chunk.start.tolist(),
            chunk.end.tolist(), chunk.has_end.tolist(), chunk.payload, ids)):
        name = names[s] if s >= 0 else None
        if k == CTI:
            state, outs = step(state, Event(CTI_KIND, st, None, None, name))
            code = CTI_SUPPRESS
        elif k == JOIN:
            state, outs = policy.join(state, name)  # type: ignore[arg-type]
            code = NO_ACTION
        elif k == LEAVE:
            state, outs = policy.leave(state, name)  # type: ignore[arg-type]
            code = NO_ACTION
        else:
            state, outs = step(state, row_event(k, st, en, he, pl, name, id_))
            code = DROP_LATE
        emitted: int | None = None
        adjusted = False
        for o in outs:
            if isinstance(o, LateRecord):
                adjusted = adjusted or o.action == ADJUSTED
                if late_on:
                    late.append(encode_late(o, time_format))
            elif o.kind == CTI_KIND:
                high = o.start
                out.append(cti_line_iso(high) if iso else cti_line(high))
                code = CTI_EMIT
            else:
                emitted = o.start  # an adjusted insert's is the CTI it was clipped to
                out.append(event_line(o, prefixes, iso))
        if code == DROP_LATE and emitted is not None:
            code = EMIT_ADJUSTED if adjusted else EMIT
        action[r] = code
        cti[r] = emitted if code == EMIT_ADJUSTED and emitted is not None else high
    return action, cti, state, b"".join(out), b"".join(late)


def finish_lines(policy: Policy, state: Any, iso: bool) -> tuple[Any, bytes, int]:
    """The end of the logs: ``(state, late bytes, records)`` of the start edges still open
    (TS §7.5), for a policy that decides edges (else nothing)."""
    if not isinstance(policy, EdgePolicy) or state is None:
        return state, b"", 0
    state, records = policy.finish(state)
    time_format = "iso" if iso else "ns"
    return state, b"".join(encode_late(r, time_format) for r in records), len(records)
