"""The operator's view of a running server (``goldilocks serve``): its log on stderr, devices
going idle and falling behind, a status line now and then, and the summary per device.

The server's modules log what happens to connections and streams on ``goldilocks.net`` at
INFO: a connection set up, refused (a wrong token, too many connections, a device name in
use) or closed, a device joining and leaving. ``Watch`` adds what no single frame shows, by
reviewing the server's stats every ``tick`` on its loop (logger ``goldilocks.serve``):

- a device **idle** (TS §4.7: it held credit and sent nothing for ``idle_after``) and
  **active** again;
- a device **lagging**: some of its events went late since the last review, or its last CTI
  is behind the output CTI (so its next events will); and **caught up** once neither has
  been true for ``recover`` seconds;
- every ``status_every`` one status line: devices (idle, lagging), events/s and late events
  over the interval, the output CTI, and the device furthest behind.

Every record carries structured fields (``event``, ``device``, ...), which
``logging_to(fmt="json")`` writes as one JSON object per line. Memory: O(devices).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from engine.times import format_duration_ns, format_instant
from goldilocks.net.transport import WS_LOGGER
from operators.union.inputs import ACTIVE

__all__ = ["Watch", "JsonFormatter", "TextFormatter", "logging_to", "LOG",
           "DeviceCounts", "summarize"]

#: The operator's log: status, idle and lagging devices, stopping, the summary.
LOG = logging.getLogger("goldilocks.serve")

#: Attributes every ``LogRecord`` has; the others are the record's structured fields.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime",
                                                              "taskName"}


def _utc(record: logging.LogRecord) -> str:
    seconds = int(record.created)
    millis = int((record.created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class TextFormatter(logging.Formatter):
    """``2026-11-27T21:57:09.123Z INFO goldilocks.net: message`` (UTC, milliseconds)."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_utc(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (RFC 3339 UTC, milliseconds), ``level``,
    ``logger``, ``message``, then the record's structured fields (``extra=``), and
    ``error`` with the traceback if there is one. Values JSON cannot hold are written as
    their ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": _utc(record), "level": record.levelname,
                               "logger": record.name, "message": record.getMessage()}
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


@contextmanager
def logging_to(level: str = "INFO", fmt: str = "text",
               stream: TextIO | None = None) -> Iterator[logging.Handler]:
    """While in the block, every log record goes to ``stream`` (stderr) in ``fmt``
    (``"text"`` or ``"json"``): Goldilocks' own at ``level`` and up, other libraries'
    (asyncio's included) at WARNING and up, and the ``websockets`` library's INFO lines
    (its own "connection open", which the server says better) only at DEBUG. The handler
    is on the root logger; the block's end removes it and restores the levels, so a
    command run in a process that goes on (a test) leaves nothing behind."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root, ours = logging.getLogger(), logging.getLogger("goldilocks")
    before = [(logger, logger.level) for logger in (root, ours, WS_LOGGER)]
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    number = logging.getLevelName(level.upper())
    ours.setLevel(number)
    WS_LOGGER.setLevel(number if number <= logging.DEBUG else max(number, logging.WARNING))
    try:
        yield handler
    finally:
        handler.flush()
        root.removeHandler(handler)
        for logger, was in before:
            logger.setLevel(was)


def _late(line: Any) -> int:
    return line.dropped + line.adjusted


@dataclass
class _Device:
    """What the watch remembers of one active device between reviews."""

    late: int
    idle: bool = False
    lagging: bool = False
    calm_since: float = 0.0   # loop time since when it has had no late event


@dataclass
class DeviceCounts:
    """One device's counts over every input of that name (it may have come and gone):
    ``received`` inserts, ``emitted``, ``dropped`` and ``adjusted`` (late), CTIs, its last
    state and last CTI, its lag (the last known)."""

    name: str
    received: int = 0
    emitted: int = 0
    dropped: int = 0
    adjusted: int = 0
    ctis: int = 0
    state: str = ""
    last_cti: int | None = None
    lag: int | None = None
    inputs: int = 0

    def minus(self, other: DeviceCounts | None) -> DeviceCounts:
        """These counts less ``other``'s (what a checkpoint carried)."""
        if other is None:
            return self
        return DeviceCounts(self.name, self.received - other.received,
                            self.emitted - other.emitted, self.dropped - other.dropped,
                            self.adjusted - other.adjusted, self.ctis - other.ctis,
                            self.state, self.last_cti, self.lag, self.inputs)


def summarize(inputs: Any) -> dict[str, DeviceCounts]:
    """The union's input lines (``UnionStats.inputs``), added up by device name."""
    out: dict[str, DeviceCounts] = {}
    for line in inputs:
        d = out.setdefault(line.name, DeviceCounts(line.name))
        d.received += line.received
        d.emitted += line.emitted
        d.dropped += line.dropped
        d.adjusted += line.adjusted
        d.ctis += line.ctis
        d.state = line.state
        d.inputs += 1
        if line.last_cti is not None:
            d.last_cti = line.last_cti if d.last_cti is None else max(d.last_cti,
                                                                    line.last_cti)
        if line.lag is not None:
            d.lag = line.lag
    return out


class Watch:
    """Reviews ``server`` (started) every ``tick`` seconds on its loop and logs what changed
    (see the module doc); a status line every ``status_every`` seconds (``None``: none).
    ``carried``: the per-device counts the server started with (restored from a checkpoint),
    so that the summary can tell this run's apart."""

    def __init__(self, server: Any, *, status_every: float | None, tick: float = 1.0,
                 recover: float = 10.0) -> None:
        self.server = server
        self.status_every = status_every
        self.tick = tick if status_every is None else min(tick, status_every)
        self.recover = recover
        union = server.union
        assert union is not None, "the server is started"
        start = union.stats()
        self.carried = summarize(start.inputs) if server.restored else {}
        self.carried_totals = start
        self._devices: dict[str, _Device] = {}
        self._last: tuple[float, int, int] | None = None  # status: loop time, received, late
        self.statuses = 0

    async def run(self) -> None:
        """Review every tick until cancelled."""
        loop = asyncio.get_running_loop()
        self._last = (loop.time(), self._received(), self._late_total())
        next_status = None if self.status_every is None else loop.time() + self.status_every
        while True:
            await asyncio.sleep(self.tick)
            now = loop.time()
            self.review(now)
            if next_status is not None and now >= next_status:
                self.status(now)
                next_status = now + self.status_every  # type: ignore[operator]

    def _received(self) -> int:
        return self.server.stats().events_received

    def _late_total(self) -> int:
        union = self.server.union
        u = union.stats()
        return u.dropped + u.adjusted

    def review(self, now: float) -> None:
        """Log the devices that went idle or active, lagging or caught up, since the last."""
        u = self.server.union.stats()
        seen: set[str] = set()
        for line in u.inputs:
            if line.state != ACTIVE:
                continue
            name = line.name
            seen.add(name)
            late = _late(line)
            d = self._devices.get(name)
            if d is None:
                d = self._devices[name] = _Device(late, calm_since=now)
            if line.idle != d.idle:
                d.idle = line.idle
                if line.idle:
                    LOG.info("device %r idle: it sent nothing for %s while holding credit; "
                             "it holds no one back until it sends again", name,
                             format_duration_ns(u.idle_after or 0),
                             extra={"event": "idle", "device": name})
                else:
                    LOG.info("device %r active again", name,
                             extra={"event": "active", "device": name})
            fresh = late - d.late
            d.late = late
            behind = line.lag is not None and line.lag > 0
            if fresh > 0:
                d.calm_since = now
            if not d.lagging and (fresh > 0 or behind):
                d.lagging = True
                d.calm_since = now
                lag = ("" if line.lag is None else f"; its last CTI is "
                       f"{format_duration_ns(abs(line.lag))} "
                       f"{'behind' if line.lag > 0 else 'ahead of'} the output CTI")
                LOG.info("device %r is lagging: %d of its events late so far (%d dropped, %d "
                         "adjusted)%s", name, late, line.dropped, line.adjusted, lag,
                         extra={"event": "lagging", "device": name, "late": late,
                                "lag": line.lag})
            elif d.lagging and not behind and now - d.calm_since >= self.recover:
                d.lagging = False
                LOG.info("device %r caught up: no late event for %s (%d late in all)", name,
                         format_duration_ns(round(self.recover * 1000) * 1_000_000), late,
                         extra={"event": "caught_up", "device": name, "late": late})
        for name in [n for n in self._devices if n not in seen]:
            del self._devices[name]  # it left (logged where it did)

    def status(self, now: float) -> str:
        """Log (and return) one status line about the interval since the last."""
        stats = self.server.stats()
        u = stats.union
        active = [line for line in u.inputs if line.state == ACTIVE]
        received, late = stats.events_received, u.dropped + u.adjusted
        since, was_received, was_late = self._last or (now, received, late)
        self._last = (now, received, late)
        seconds = max(now - since, 1e-9)
        rate = (received - was_received) / seconds
        idle = sum(1 for line in active if line.idle)
        lagging = sum(1 for d in self._devices.values() if d.lagging)
        behind = max((line for line in active if line.lag is not None),
                     key=lambda line: line.lag, default=None)
        if behind is not None and behind.lag > 0:
            worst = (f"most behind: {behind.name!r}, {format_duration_ns(behind.lag)} behind "
                     f"the output CTI, {_late(behind)} late")
            worst_name: str | None = behind.name
        else:
            worst, worst_name = "no device behind the output CTI", None
        cti = "none yet" if u.output_cti is None else format_instant(u.output_cti)
        interval = format_duration_ns(round(seconds * 1000) * 1_000_000)  # to the ms
        self.statuses += 1
        line = (f"status: {len(active)} devices ({idle} idle, {lagging} lagging), "
                f"{len(stats.connections)} connections; {rate:,.0f} events/s and "
                f"{late - was_late} late over the last {interval} ({late} late in all); "
                f"output CTI {cti}; {worst}")
        LOG.info("%s", line, extra={"event": "status", "devices": len(active),
                                    "idle": idle, "lagging": lagging,
                                    "events_per_s": round(rate, 1),
                                    "late": late - was_late, "late_total": late,
                                    "output_cti": u.output_cti, "most_behind": worst_name})
        return line
