"""Logs in the shapes users have, for ``bench_replay``: what Python's ``json.dumps`` writes
by default (``", "`` and ``": "`` between tokens) and the same records compact, with no order
key or an ``arrival`` time first, the keys in the engine's order or another, nested payloads (``{"v": 17}``), ISO-8601 times as
``datetime.isoformat`` writes them in UTC (``...T08:00:01.250000Z``) or at ``+01:00`` with
0, 3, 6 or 9 fraction digits. Three devices, a CTI every tenth record, device clocks up to
2 s apart, readings up to 3 s old, and 1% ten minutes behind: late at any delay below that.

And the floor the issue measures against: ``orjson.loads`` of every line of the same file
(``orjson_loop``), decoding only.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson

__all__ = ["SHAPES", "SPELLINGS", "make_user_logs", "orjson_loop"]

#: the record shapes: no order key and UTC times; an ISO arrival time first; +01:00 times;
#: the keys in another order (kind, start, payload, source)
SHAPES = ("plain", "arrival", "offset", "reorder")
#: json.dumps' default separators, and compact
SPELLINGS = ("spaced", "compact")

_T0 = np.datetime64("2026-11-22T08:00:00", "us")


def _iso_utc(us: np.ndarray) -> list[str]:
    text = np.datetime_as_string(_T0 + us.astype("timedelta64[us]"), unit="us")
    return [t + "Z" for t in text.tolist()]


def _iso_offset(us: np.ndarray, digits: np.ndarray, extra_ns: np.ndarray) -> list[str]:
    local = np.datetime_as_string(_T0 + (us + 3_600_000_000).astype("timedelta64[us]"),
                                  unit="us")
    out = []
    for t, d, x in zip(local.tolist(), digits.tolist(), extra_ns.tolist()):
        whole, frac = t.split(".")
        frac = (frac + "%03d" % x)[:d]
        out.append(f"{whole}.{frac}+01:00" if d else f"{whole}+01:00")
    return out


def _records(shape: str, n: int, seed: int = 30) -> list[dict]:
    rng = np.random.default_rng(seed)
    dev = rng.integers(0, 3, n)
    skew = np.array([0, 1_500_000, -2_000_000])[dev]
    late = rng.random(n) < 0.01
    us = (np.arange(n) * 1000 + skew + rng.integers(-3_000_000, 0, n)
          - np.where(late, 600_000_000, 0))
    if shape == "offset":
        start = _iso_offset(us, rng.choice([0, 3, 6, 9], n), rng.integers(0, 1000, n))
    else:
        start = _iso_utc(us)
    arrival = _iso_utc(np.arange(n) * 1000) if shape == "arrival" else None
    recs = []
    for i in range(n):
        rec: dict = {} if arrival is None else {"arrival": arrival[i]}
        if shape != "reorder":
            rec["source"] = f"dev-{dev[i]}"
        if i % 10 == 9:
            rec["kind"] = "cti"
            rec["start"] = start[i]
        else:
            rec["kind"] = "insert"
            rec["start"] = start[i]
            rec["payload"] = {"v": i % 100}
        if shape == "reorder":
            rec["source"] = f"dev-{dev[i]}"
        recs.append(rec)
    return recs


def make_user_logs(work: Path, n: int) -> dict[tuple[str, str], Path]:
    """The logs of every shape and spelling, ``n`` records each, written to ``work`` if not
    there already: ``{(shape, spelling): path}``."""
    logs = {}
    for shape in SHAPES:
        paths = {s: work / f"user-{shape}-{s}-{n}.jsonl" for s in SPELLINGS}
        if not all(p.exists() for p in paths.values()):
            recs = _records(shape, n)
            paths["spaced"].write_bytes(
                "".join(json.dumps(r) + "\n" for r in recs).encode())
            paths["compact"].write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
        logs.update({(shape, s): p for s, p in paths.items()})
    return logs


def orjson_loop(path: Path) -> int:
    """The floor: ``orjson.loads`` of every line of ``path``; the records decoded."""
    loads = orjson.loads
    count = 0
    with open(path, "rb") as f:
        for line in f:
            loads(line)
            count += 1
    return count
