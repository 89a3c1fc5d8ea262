"""The server's output: the union's one subscriber, writing the files first and sharing what it
writes with remote and local subscribers, none of whom can hold the devices back.

``ServerOutput`` takes the union's output as lists (``Union.batches``), asking for all of it
(RS §3.17: effectively unbounded demand). Each list is first written to the event-log parts
(``goldilocks.parts.PartWriter``, when the server has an ``out_dir``): the files are the
durable output and come first. Then it goes to the subscribers, through a live multicast of
**bounded lag** (``engine.multicast``, ``max_lag``): it keeps the last ``subscriber_lag``
events some subscriber has not taken, and a subscriber that falls further behind is cut off
(``TooSlowError``; on the wire ``error(stream, "too_slow")`` with its position) rather than
slowing the union — as a Kafka consumer never slows its producers. Before, one subscriber that
never read held every device and the files for as long as it liked.

Every event of the merged stream has a **position**: its index in the merged stream since the
first start (it continues across restarts), which is its ``seq`` in the files. A subscriber
may start from a position (``subscribe`` with ``from``): from the memory the multicast keeps,
or, further back, from the files, read in a thread, until it reaches what the memory keeps.

Members: each ``subscribe`` stream (``OutputStream``, taking lists and sending what its remote
subscriber has credit for as ``next`` frames, each saying the position of its first event)
and local subscribers of single events (``Server.subscribe``). Their drains run on the
server's loop.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from typing import Any

from engine.contracts import MAX_DEMAND
from engine.errors import TooSlowError
from engine.event import CTI, Event
from engine.multicast import Multicast
from goldilocks.net.connection import Connection
from goldilocks.net.protocol import (
    CANCELLED,
    COMPLETED,
    FAILED,
    OPEN,
    encode_complete,
    encode_durable,
    encode_error,
    encode_next,
)
from goldilocks.parts import PartWriter, read_part

__all__ = ["ServerOutput", "OutputStream", "BATCH"]

_log = logging.getLogger("goldilocks.net")
_KIND = operator.attrgetter("kind")
#: Events per list from the union (and at most per list to a subscriber).
BATCH = 1024
#: Events read from the files at a time for a subscriber catching up.
READ_STEP = 4096


class ServerOutput(Multicast):
    """The union's one subscriber (see the module doc): files first, then the members, whom
    it keeps at most ``lag`` events (``subscriber_lag``) ahead of the slowest. Counts what
    leaves the union (``events``: inserts; ``ctis``). ``position``: the merged stream's
    position of the next event. Memory: O(``lag``) events."""

    def __init__(self, lag: int, *, executor: object = None, name: str = "server",
                 writer: PartWriter | None = None, position: int = 0) -> None:
        super().__init__(lag, batch=min(BATCH, lag), live=True, max_lag=True,
                         executor=executor, name=f"{name} output", start=position)
        self.writer = writer
        self.events = 0  # inserts that left the union
        self.ctis = 0
        self.position = position
        self.failed = False  # the files could not be written: the union is no longer taken

    def on_next(self, item: Any) -> None:
        if item is not None and not self.failed:
            writer = self.writer
            if writer is not None:
                writer.write_events(item)  # the files first: the durable output
                if writer.error is not None:
                    self._files_failed(writer)
            ctis = list(map(_KIND, item)).count(CTI)
            self.ctis += ctis
            self.events += len(item) - ctis
            self.position += len(item)
        super().on_next(item)

    @property
    def ended(self) -> bool:
        """The output has ended (the union completed or failed, or ``end``)."""
        return self._completed or self._error is not None

    def end(self) -> None:
        """End the output without the union completing (a server stopping with a
        checkpoint: the union's time continues at the next start): the union's subscription
        is cancelled, every member completes after what it holds (RS §1.5)."""
        upstream = self._upstream
        if upstream is not None:
            upstream.cancel()
        if not self.ended:
            self.on_complete()

    def _files_failed(self, writer: PartWriter) -> None:
        """Writing the parts failed (a full disk): stop taking the union's output, so that
        the devices are held back by credit instead of having events merged that no file
        holds; checkpoints are refused from now on (a restart continues from the last)."""
        self.failed = True
        _log.error("cannot write %s parts in %s: %s; the server takes nothing more from the "
                   "devices (restart it once the files can be written)", writer.prefix,
                   writer.directory, writer.error)
        upstream = self._upstream
        if upstream is not None:
            upstream.cancel()


class OutputStream:
    """A ``subscribe`` stream: a member of the server's output that sends what its remote
    subscriber has credit for (``request`` frames, RS §3.8) as ``next`` frames, each with the
    position of its first event (``from``), while its connection's outgoing queue has room.

    It asks the output for one list at a time, and only with credit, room and nothing held:
    a list it could not send whole is all it holds. A subscriber that does not read stops
    taking lists; once it is more than the output's bound behind, the output cuts it off
    (``too_slow``, with the position to come back from). Started ``from`` a position older
    than the output holds, it first reads the files (``catch_up``)."""

    __slots__ = ("conn", "id", "credit", "state", "sent", "subscription", "held", "asked",
                 "ended", "error", "position", "output", "durable", "_ready", "_reader")

    kind = "subscribe"

    def __init__(self, conn: Connection, stream_id: int, output: ServerOutput) -> None:
        self.conn = conn
        self.id = stream_id
        self.output = output
        self.credit = 0           # requested by the remote subscriber, not yet sent
        self.state = OPEN
        self.sent = 0
        self.subscription: Any = None
        self.held: list[Event] = []  # taken from the output, not yet sent
        self.asked = False        # a list requested of the output, not yet received
        self.ended = False        # the output ended (with ``error``, if it failed)
        self.error: BaseException | None = None
        self.position = 0         # the position of the next event to send
        self.durable = 0          # the durable position last sent (protocol 2)
        self._ready: asyncio.Event | None = None  # catching up: credit and room to send
        self._reader: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- joining
    def start(self, position: int | None) -> str | None:
        """Join the output at ``position`` (``None``: what comes next): from its memory if it
        holds it, from the files otherwise. Returns why it cannot (the error's message), or
        ``None``."""
        output = self.output
        first, end = output.held()
        if position is None:
            position = end
        if position > end:
            return (f"position {position} is beyond the end of the merged stream ({end}); "
                    f"after a restart the positions from the last durable one on are given "
                    f"again: subscribe from at most {end}")
        self.position = position
        if position >= first:
            output.join_at(self, position)
            return None
        writer = output.writer
        paths = writer.paths_from(position) if writer is not None else []
        if writer is None or not paths or paths[0][0] > position:
            oldest = paths[0][0] if paths else first
            where = "in its files" if writer is not None else \
                "in its memory (it writes no files)"
            return (f"position {position} is no longer held: the oldest position {where} is "
                    f"{oldest}; subscribe from it or later")
        self._ready = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._catch_up(writer))
        return None

    async def _catch_up(self, writer: PartWriter) -> None:
        """Send from the files, as credit and room allow, until the output's memory holds
        the position reached; then join the output there."""
        output = self.output
        ready = self._ready
        assert ready is not None
        try:
            while self.state == OPEN:
                first, _ = output.held()
                if self.position >= first:
                    self._ready = None
                    output.join_at(self, self.position)
                    return
                await ready.wait()
                if self.state != OPEN:
                    return
                paths = writer.paths_from(self.position)
                if not paths or paths[0][0] > self.position:
                    self._refuse("bad_position", f"position {self.position} is no longer in "
                                 "the files (a part was removed while it was read)")
                    return
                limit = min(self.credit, READ_STEP)
                events: list[Event] = []
                nxt = self.position
                for _, path in paths:
                    try:
                        got, nxt, _end = await asyncio.to_thread(read_part, path, nxt,
                                                                 limit - len(events))
                    except FileNotFoundError:
                        break  # published meanwhile: listed again on the next turn
                    events += got
                    if len(events) >= limit:
                        break
                if self.state != OPEN:
                    return
                if not events:
                    await asyncio.sleep(0.01)  # the files have not caught up with memory
                    continue
                self.held = events
                ready.clear()
                self.flush()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a file that cannot be read: this stream ends, saying why
            self._refuse("bad_position", f"cannot read the files from position "
                         f"{self.position}: {err}")

    # ---------------------------------------------------------------- member of the output
    def on_subscribe(self, subscription: Any) -> None:
        if subscription is None:
            raise TypeError("RS §2.13: on_subscribe() requires a subscription, got None")
        if self.subscription is None and self.state == OPEN:
            self.subscription = subscription
            self.flush()
        else:
            subscription.cancel()  # RS §2.5 (or the stream ended before it began)

    def on_next(self, events: list[Event]) -> None:
        self.asked = False
        if self.state == OPEN:  # RS §2.8: after cancel, what was in flight is dropped
            self.held = events
            self.flush()

    def on_error(self, error: BaseException) -> None:
        if error is None:
            raise TypeError("RS §2.13: on_error() requires an exception, got None")
        self._ended(error)

    def on_complete(self) -> None:
        self._ended(None)

    def _ended(self, error: BaseException | None) -> None:
        """The output ended (failed with ``error``): say so once what is held is sent, or at
        once for an error."""
        self.ended = True
        self.error = error
        self.flush()

    def flush(self) -> None:
        """Send what credit and room allow; then end the stream, or ask for the next list."""
        if self.state != OPEN:
            return
        held = self.held
        if held and self.credit > 0:
            sent = self._send(held if len(held) <= self.credit else held[:self.credit])
            self.held = held[sent:] if sent < len(held) else []
            self.credit -= sent
            self.sent += sent
            self.conn.events_out += sent
            if self.state != OPEN:
                return
        error = self.error
        if isinstance(error, TooSlowError):
            # its own position: what it holds (taken from the output, not sent) counts
            self._refuse("too_slow", f"this subscriber fell more than {error.bound} events "
                         f"behind the merged stream (the server's subscriber lag, "
                         f"--subscriber-lag {error.bound}) and was cut off at position "
                         f"{self.position}; subscribe again from it", self.position)
        elif error is not None:  # RS §1.4, §4.2: at once, whatever is held
            self.conn.write(encode_error(self.id, "upstream_error",
                                         f"the union's output failed: {error}"))
            self._finish(FAILED)
        elif self.ended:
            if not self.held:
                self.conn.write(encode_complete(self.id))  # RS §1.5: after its last events
                self._finish(COMPLETED)
        elif self._ready is not None:  # catching up from the files
            if not self.held and self.credit > 0:
                if self.conn.has_room():
                    self._ready.set()
                else:
                    self.conn.wait_for_room()
        elif not self.held and not self.asked and self.credit > 0 \
                and self.subscription is not None:
            if self.conn.has_room():
                self.asked = True
                self.subscription.request(1)  # one list (RS §1.1: demand counts lists)
            else:
                self.conn.wait_for_room()

    def _send(self, events: list[Event]) -> int:
        """``next`` frames for a prefix of ``events``, each frame within ``max_frame``, while
        the outgoing queue has room (``outbox_bytes``; it may go over by one frame). Returns
        how many events were written; when not all, ``flush`` runs again once the queue has
        room."""
        conn = self.conn
        max_frame = conn.limits.max_frame
        total = len(events)
        done = 0
        step = total
        while done < total:
            if not conn.has_room():
                conn.wait_for_room()
                break
            end = min(total, done + step)
            data = encode_next(self.id, events[done:end], with_source=True,
                               first=self.position)
            while len(data) > max_frame and end - done > 1:
                step = max(1, (end - done) // 2)
                end = done + step
                data = encode_next(self.id, events[done:end], with_source=True,
                                   first=self.position)
            if len(data) > max_frame:
                # Devices' events are measured on input (too_large), so only a local
                # publisher could get here; the subscriber is told and this stream ends.
                conn.write(encode_error(self.id, "oversized",
                                        f"an event of {len(data)} bytes does not fit in a "
                                        f"frame of at most {max_frame} bytes"))
                self.close()
                break
            conn.write(data)
            self.position += end - done
            done = end
        return done

    def on_durable(self, position: int) -> None:
        """The merged stream is durable below ``position`` (protocol 2): say so."""
        if self.state == OPEN and position > self.durable and self.conn.version >= 2:
            self.durable = position
            self.conn.write(encode_durable(self.id, position))

    # ---------------------------------------------------------------- frames in
    def on_request_frame(self, n: int) -> None:
        self.credit = min(self.credit + n, MAX_DEMAND)  # RS §3.8, §3.17
        self.flush()

    def on_cancel_frame(self) -> None:
        self.close()

    def close(self) -> None:
        """The remote side cancelled, or is gone: leave the output (RS §3.12)."""
        if self.state != OPEN:
            return
        subscription = self.subscription
        self._finish(CANCELLED)
        if subscription is not None:
            subscription.cancel()

    def on_lost(self, reason: BaseException | None) -> None:
        self.close()

    def _refuse(self, code: str, message: str, position: int | None = None) -> None:
        """End this stream from the server's side with ``error(stream, code)``."""
        if self.state != OPEN:
            return
        self.conn.tally.error(code)
        _log.info("ending subscribe stream %d of %s: %s (%s)", self.id, self.conn.transport.peer,
                  code, message)
        self.conn.write(encode_error(self.id, code, message, position=position))
        subscription = self.subscription
        self._finish(FAILED)
        if subscription is not None:
            subscription.cancel()

    def _finish(self, state: str) -> None:
        self.state = state
        self.held = []
        self.subscription = None  # RS §3.13: drop the reference
        if self._ready is not None:
            self._ready.set()  # a reader waiting for credit sees the stream ended
        self.conn.stream_ended(self)

    def __repr__(self) -> str:
        return f"<subscribe stream {self.id} {self.state} at {self.position}>"
