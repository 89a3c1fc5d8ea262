"""``Union``: merge a changing set of input publishers into one stream on one clock.

::

    union = Union(policy=goldilocks("5m"), final_cti=True)
    a = union.add(device_a, name="A")          # any thread, any time
    b = union.open_input("B")                  # an emitter for imperative producers
    union.subscribe(subscriber)                # one subscriber at a time (see broadcast)
    union.late.subscribe(late_sink)            # dropped / adjusted events (TS §3.3)
    b.try_send(Event.point(t)); await b.send(e); b.send_blocking(e, timeout=1.0)
    a.remove(); b.complete(); union.close()    # completes when closed and all inputs left

    # the batch path: arrivals in, lists out (same events, same order, less per event)
    data = union.checkpoint()                  # bytes: the state at a cut (docs/checkpoint.md)
    again = Union.restore(data, policy=goldilocks("5m")); again.open_input("B")  # re-attached

    b.try_send_many(events); b.send_many_blocking(events, timeout=1.0)
    union.feed_columns(emitters, events)
    union.feed_events(named)                   # each event's source names its input
    union.batches(max_batch=1024).subscribe(list_subscriber)

    # alignment through demand: an input more than 2 s ahead of the slowest waits for credit
    Union(policy=goldilocks("5m"), max_drift="2s", idle_after="10s")

Marble timeline (delay 5, goldilocks)::

    A:      5 ---- |5 ---------- 7 -- |8 --------
    B:      -- 0 ------- |0 ------------------ 1
    out:    5 -0 - |0 ---------- 7 -- |3 ------   (B's 1 < CTI 3: late, to union.late)

How it works. Every arrival — an event, an input joining, an input leaving — goes into one
queue in arrival order (TS §4.1). One drain loop (the output subscription's) takes arrivals
from it, runs the policy's pure step (``engine.policy``), and emits while downstream demand
lasts (RS §1.1); late records go to the side output. Inputs get credit: each at most
``prefetch`` events requested-or-queued, and all together at most ``max_buffered`` (TS §4.4),
so producer churn cannot exhaust memory; credit is replenished as events leave the queue.
A batch of arrivals (``try_send_many``, ``feed``, ``feed_columns``, ``feed_events``) is one
queue item that the policy runs over in one call (``step_many``); ``batches()`` hands the
output on as lists. A single event from an emitter skips the queue when the sending thread
can itself be the drain (``executor=None``, no drain running, demand): it is merged and
handed on inside its ``try_send`` / ``send`` / ``send_blocking``, with the same result.

The union is hot: it keeps merging (within its bounds) while no one is subscribed, and a new
subscriber continues where the previous one cancelled. After the union ends, a subscriber gets
the terminal signal at once. ``stats()`` is cheap and frozen.

One job per module, each importing only those before it:

- ``inputs``: each input's inner subscriber and accounting (``Input``), the queue every
  arrival goes into, the set of inputs and the credit they are granted (``Intake``);
- ``stats``: ``InputStats``, ``UnionStats``;
- ``merge``: the merge loop, written once for every shape of output (``Output``), and the
  state that outlives a subscriber (``Merge``);
- ``handles``: what producers hold, ``InputHandle`` and ``Emitter``;
- ``align``: alignment through demand and idleness (``max_drift``, ``idle_after``, TS §4.6,
  §4.7): which inputs get no new credit for being ahead, which are idle;
- ``ways_in``: recorded arrivals in blocks (``feed``, ``feed_columns``, ``feed_events``);
- ``checkpoint``: ``checkpoint()`` and ``restore()`` (TS §8.1, §8.2, ``docs/checkpoint.md``);
- ``publisher``: ``Union`` itself (lifecycle, subscribe) and ``UnionBatches``.
"""

from operators.union.handles import SEND_TURN, Emitter, InputHandle
from operators.union.inputs import ACTIVE, COMPLETED, FAILED, REMOVED
from operators.union.publisher import Union, UnionBatches
from operators.union.stats import InputStats, UnionStats

__all__ = ["Union", "InputHandle", "Emitter", "InputStats", "UnionStats", "UnionBatches",
           "ACTIVE", "COMPLETED", "FAILED", "REMOVED", "SEND_TURN"]
