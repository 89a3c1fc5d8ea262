"""Helpers shared by the Spark tests: logs as rows, engine outputs as comparable tuples."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterable, Iterator, Sequence

import orjson

from engine.event import CTI, POINT, Event, LateRecord

__all__ = ["arrivals_to_rows", "event_key", "late_key", "events_from_rows", "late_from_rows",
           "ROW_SCHEMA", "connect_mode", "classic_mode"]

#: PySpark's process-wide switch between classic and Spark Connect objects (tests/spark/conftest.py)
CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@contextlib.contextmanager
def _mode(on: bool) -> Iterator[None]:
    before = os.environ.get(CONNECT_MODE)
    if on:
        os.environ[CONNECT_MODE] = "1"
    else:
        os.environ.pop(CONNECT_MODE, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CONNECT_MODE, None)
        else:
            os.environ[CONNECT_MODE] = before


def connect_mode() -> Any:
    """PySpark's functions, UDFs and ``Observation`` build Spark Connect objects inside."""
    return _mode(True)


def classic_mode() -> Any:
    """PySpark's functions build classic objects inside (a classic step of a Connect test)."""
    return _mode(False)

#: The event-log DataFrame schema with a group column in front (tests build frames directly).
ROW_SCHEMA = ("g INT, seq BIGINT, source STRING, kind STRING, start BIGINT, `end` BIGINT, "
              "payload STRING, arrival BIGINT, order_key BIGINT, file_index INT, line BIGINT")


def _payload_text(payload: Any) -> str | None:
    return None if payload is None else orjson.dumps(payload).decode()


def arrivals_to_rows(arrivals: Sequence[Any], group: int = 0, *, seq0: int = 0) -> list[tuple]:
    """Rows of ``ROW_SCHEMA`` for an arrival list (``Event`` or ``("join"|"leave", name)``)."""
    rows = []
    for i, item in enumerate(arrivals):
        seq = seq0 + i
        if isinstance(item, tuple):
            verb, name = item
            rows.append((group, seq, name, verb, None, None, None, None, seq, 0, i + 1))
            continue
        kind = "cti" if item.kind == CTI else "insert"
        end = item.end if item.kind not in (CTI, POINT) else None
        rows.append((group, seq, item.source, kind, item.start, end,
                     _payload_text(item.payload), None, seq, 0, i + 1))
    return rows


def event_key(e: Event) -> tuple:
    """An emitted event as ``(kind, start, end, source, payload text)``; CTIs have no source."""
    if e.kind == CTI:
        return ("cti", e.start, None, None, None)
    end = None if e.kind == POINT else e.end
    return ("insert", e.start, end, e.source, _payload_text(e.payload))


def late_key(r: LateRecord) -> tuple:
    """A late record as ``(start, end, source, cti, action, adjusted start)``."""
    e = r.event
    end = None if e.kind == POINT else e.end
    adjusted = r.adjusted.start if r.adjusted is not None else None
    return (e.start, end, e.source, r.cti, r.action, adjusted)


def events_from_rows(rows: Iterable[Any]) -> list[tuple]:
    """Spark event rows (already in arrival order) in ``event_key`` form."""
    return [(r["kind"], r["start"], r["end"], r["source"], r["payload"]) for r in rows]


def late_from_rows(rows: Iterable[Any]) -> list[tuple]:
    """Spark late rows (already in arrival order) in ``late_key`` form."""
    return [(r["start"], r["end"], r["source"], r["cti"], r["action"], r["adjusted_start"])
            for r in rows]


def _fields(r: Any) -> Any:
    return r if isinstance(r, dict) else r.asDict()


def _row_event(r: Any, start: int | None = None, end: int | None = None) -> Event:
    """The event of a Spark row (an insert or an edge; ``id`` as JSON text), its start and
    end replaced when given."""
    from engine.event import END, INTERVAL, MAX_TIME, START

    payload = None if r["payload"] is None else orjson.loads(r["payload"])
    s = r["start"] if start is None else start  # None: as the row has it
    e = r["end"] if end is None else end
    if r["kind"] in ("start", "end"):
        ident = orjson.loads(r["id"])
        if r["kind"] == "start":
            return Event(START, s, MAX_TIME, payload, r["source"], ident)
        return Event(END, s, e, payload, r["source"], ident)
    if r["end"] is None:
        return Event(POINT, s, s + 1, payload, r["source"])
    return Event(INTERVAL, s, e, payload, r["source"])


def canonical_events(rows: Iterable[Any]) -> bytes:
    """Spark event rows (in arrival order) as the engine's canonical replay output."""
    from eventlog import encode_event

    out = []
    for r in rows:
        if r["kind"] == "cti":
            out.append(encode_event(Event(CTI, r["start"], None, None, None)))
            continue
        out.append(encode_event(_row_event(r)))
    return b"".join(out)


def canonical_late(rows: Iterable[Any]) -> bytes:
    """Spark late rows (in arrival order; ``reason`` and ``adjusted_end`` when the frame has
    them) as the engine's canonical late file."""
    from eventlog import encode_late

    out = []
    for r in rows:
        f = _fields(r)
        e = _row_event(f)
        adjusted = None
        if f["action"] == "adjusted":
            adjusted = _row_event(f, f["adjusted_start"], f.get("adjusted_end"))
        out.append(encode_late(LateRecord(e.source, e, f["cti"], f["action"], adjusted,
                                          f.get("reason"))))
    return b"".join(out)


def engine_replay_bytes(paths: Sequence[Any], tmp_path: Any, **options: Any) -> tuple[bytes, bytes]:
    """The engine's replay of ``paths``: (output bytes, late bytes)."""
    from goldilocks.replay import replay as engine_replay

    out, late = tmp_path / "engine-out.jsonl", tmp_path / "engine-late.jsonl"
    engine_replay([str(p) for p in paths], out=out, late=late, **options)
    return out.read_bytes(), late.read_bytes()


# -- a Spark user's readings, for the watermarking stage -----------------------------------------

READINGS_SCHEMA = "device_id string, ts timestamp, temperature double, id bigint, seq bigint"
_EPOCH_2026 = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z in ns


def reading_time(ns: int) -> str:
    """An ISO-8601 UTC instant with microseconds (what a device would send)."""
    from engine.times import format_ns

    text = format_ns(ns)  # ...T00:00:01.500000000Z
    return text[:-4] + "Z"


def write_readings(directory: Any, batches: Sequence[Sequence[Any]], *, seq: bool = False,
                   kind: bool = False, first: int = 0) -> None:
    """One JSON Lines file per micro-batch (``stage_reference.Row`` items), modification times
    in batch order, as Spark's file source picks them (``maxFilesPerTrigger=1``)."""
    import json
    import os
    from pathlib import Path

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for k, rows in enumerate(batches, start=first):
        path = directory / f"readings-{k:04d}.json"
        with open(path, "w") as out:
            for r in rows:
                record = {"device_id": r.source, "temperature": 20.0 + (r.id % 7), "id": r.id}
                if r.time is not None:
                    record["ts"] = reading_time(r.time)
                if seq:
                    record["seq"] = r.arrival
                if kind:
                    record["kind"] = r.kind
                if r.group != ():
                    record["site"] = r.group[0]
                out.write(json.dumps(record) + "\n")
        os.utime(path, (1_700_000_000 + k, 1_700_000_000 + k))


def random_readings(seed: int, batches: int = 4, per_batch: int = 12, devices: str = "ABC",
                    late_share: float = 0.2, step_s: int = 10) -> list[list[Any]]:
    """Readings of a few devices in micro-batches: each device's clock mostly advancing,
    some readings from the past (late for their device or for everyone), all (time, device)
    distinct, microsecond times from 2026-01-01."""
    import random

    from stage_reference import Row

    rng = random.Random(seed)
    out, used, next_id = [], set(), 0
    for b in range(batches):
        rows = []
        for _ in range(per_batch):
            device = rng.choice(devices)
            while True:
                base = b * step_s * 10**9 + rng.randint(0, step_s * 10**6) * 1000
                if rng.random() < late_share:
                    base -= rng.randint(1, 3 * step_s) * 10**9
                t = _EPOCH_2026 + max(base, 0)
                if (t, device) not in used:
                    used.add((t, device))
                    break
            rows.append(Row(next_id, device, t, arrival=next_id))
            next_id += 1
        out.append(rows)
    return out
