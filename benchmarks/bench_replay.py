"""Replay throughput, end to end: JSON Lines and Parquet logs, columnar vs element path, output
times as integer nanoseconds or RFC 3339 text (``time_format="iso"``), the hand-written JSON
Lines scanner and RFC 3339 writer against well-kept libraries in their place
(``benchmarks.replay_peers``: msgspec with ``Raw`` payloads, orjson, pyarrow), the same events
with ISO-8601 start times (JSON Lines and CSV; each device's clock at its own offset, nine
fraction digits) next to ``pyarrow.json`` reading that log alone with an explicit timestamp
schema, the columnar policy kernel next to a bare numpy implementation of the same policy,
and the logs users have (``benchmarks.user_logs``: written by ``json.dumps`` with its default
spacing and the same records compact, with and without an ISO ``arrival``, ``+01:00`` times,
keys in another order; at most 600,000 records each, ``--user-events``), each next to an
``orjson.loads`` loop over the same file, summed up as replay's rate over the loop's and the
spaced log's rate over the compact one's (medians of per-round ratios).

    python -m benchmarks.bench_replay            # 10 million events (several minutes)
    python -m benchmarks.bench_replay --quick    # 500 thousand events

Each measurement: one warm-up round, then ``--repeat`` (>= 5) rounds; every round runs every
row once, in turn, so that a change of load touches all rows alike. The table prints events/s
for the median, best and worst run, the median by CPU time (user + system, all threads),
which other load on the machine disturbs less, and for a library's row the median of its
per-round ratios to the product's row above it, by wall-clock and by CPU time (above 1: the
library is faster). The warm-up
round checks that every row writes the same bytes. End to end means: parse the file,
merge, run the policy, write the output (to a file) and the late file. Each replay run is
paired with a baseline run in the same process, just before it: copying the JSON Lines log
(reading it in 4 MB blocks, writing the bytes to a file: about the I/O a replay of it
needs); the ratio of the medians says how far replay is from that floor, on any machine. The load average is printed with each
measurement. The generated logs are kept in ``--dir`` (default: a temporary directory) and
reused if present.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.user_logs import SHAPES, SPELLINGS, make_user_logs, orjson_loop
from operators.policies import resolve_policy
from goldilocks.replay import replay
from engine.times import MIN_TIME

__all__ = ["make_log", "main"]

T0 = 1_795_334_400_000_000_000


def make_log(path: Path, n: int, *, devices: int = 8, seed: int = 7) -> None:
    """A JSON Lines log of ``n`` records: ``seq``, 8 devices, a CTI every 10th record, small
    payloads, some skew so that a few percent arrive late."""
    rng = np.random.default_rng(seed)
    skew = rng.integers(-3_000_000_000, 3_000_000_000, devices)
    with open(path, "wb") as f:
        step = 1_000_000
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            i = np.arange(lo, hi)
            dev = rng.integers(0, devices, hi - lo)
            start = T0 + i * 1_000_000 + skew[dev] + rng.integers(-2_000_000_000, 0, hi - lo)
            lines = [
                (b'{"seq":%d,"source":"dev-%d","kind":"cti","start":%d}\n' % (s, d, t)
                 if s % 10 == 9 else
                 b'{"seq":%d,"source":"dev-%d","kind":"insert","start":%d,"payload":{"v":%d}}\n'
                 % (s, d, t, s % 100))
                for s, d, t in zip(i.tolist(), dev.tolist(), start.tolist())]
            f.write(b"".join(lines))


#: the clocks of the ISO-time log: device ``d`` writes its times at offset ``_OFFSETS[d % 4]``
#: (seconds; 0 as ``Z``), all with nine fraction digits, so the log holds the same instants
_OFFSETS = (0, 3600, -5 * 3600, 5 * 3600 + 1800)


def _iso_texts(ns: np.ndarray, device: np.ndarray) -> np.ndarray:
    """ISO-8601 text of each instant as device ``device`` writes it (local time and offset)."""
    offset = np.array(_OFFSETS, np.int64)[device % 4]
    local = np.datetime_as_string((ns + offset * 1_000_000_000).astype("datetime64[ns]"),
                                  unit="ns")
    zone = np.array(["Z" if o == 0 else "%s%02d:%02d" % ("+" if o > 0 else "-",
                                                           abs(o) // 3600, abs(o) % 3600 // 60)
                     for o in _OFFSETS])[device % 4]
    return np.char.add(local, zone)


def make_iso_logs(src: Path, jsonl: Path, csv: Path) -> None:
    """The events of ``src`` (``make_log``'s) again, their start times written as ISO-8601
    text by each device's clock (``_OFFSETS``), as JSON Lines and as CSV."""
    import pyarrow.json as pj

    table = pj.read_json(src)
    seq = table.column("seq").to_numpy()
    device = np.char.lstrip(table.column("source").to_numpy(zero_copy_only=False).astype(str),
                            "dev-").astype(np.int64)
    start = _iso_texts(table.column("start").to_numpy(), device).tolist()
    kinds = table.column("kind").to_pylist()
    values = [None if v is None else v["v"] for v in table.column("payload").to_pylist()]
    with open(jsonl, "wb") as f, open(csv, "wb") as g:
        g.write(b"seq,source,kind,start,payload\n")
        step = 1_000_000
        for lo in range(0, len(seq), step):
            rows = range(lo, min(len(seq), lo + step))
            f.write(b"".join(
                (b'{"seq":%d,"source":"dev-%d","kind":"cti","start":"%s"}\n'
                 % (seq[i], device[i], start[i].encode()) if kinds[i] == "cti" else
                 b'{"seq":%d,"source":"dev-%d","kind":"insert","start":"%s","payload":{"v":%d}}\n'
                 % (seq[i], device[i], start[i].encode(), values[i])) for i in rows))
            g.write(b"".join(
                (b"%d,dev-%d,cti,%s,\n" % (seq[i], device[i], start[i].encode())
                 if kinds[i] == "cti" else
                 b'%d,dev-%d,insert,%s,"{""v"":%d}"\n' % (seq[i], device[i], start[i].encode(),
                                                         values[i])) for i in rows))


def read_with_pyarrow_json(path: Path) -> int:
    """``pyarrow.json.read_json`` of the ISO-time log with an explicit schema (times parsed as
    timestamps), as a reference for reading alone: no policy, nothing written."""
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("seq", pa.int64()), ("source", pa.string()), ("kind", pa.string()),
                        ("start", pa.timestamp("ns", "UTC")),
                        ("payload", pa.struct([("v", pa.int64())]))])
    return pj.read_json(path, parse_options=pj.ParseOptions(explicit_schema=schema)).num_rows


def to_parquet(src: Path, dst: Path) -> None:
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    import pyarrow as pa

    table = pj.read_json(src)
    payload = table.column("payload")
    text = pa.array([None if v is None else '{"v":%d}' % v["v"] for v in payload.to_pylist()],
                    pa.string())
    table = table.set_column(table.schema.get_field_index("payload"), "payload", text)
    pq.write_table(table, dst, row_group_size=1 << 20)


def bare_numpy(is_cti: np.ndarray, start: np.ndarray, delay: int):
    """The goldilocks decision in plain numpy (drop), as a baseline for the kernel."""
    delayed = np.where(is_cti, np.maximum(start - delay, MIN_TIME), MIN_TIME)
    cti = np.maximum.accumulate(delayed)
    before = np.concatenate(([MIN_TIME], cti[:-1]))
    late = (start < before) & ~is_cti
    advance = is_cti & (delayed > before)
    action = np.where(is_cti, np.where(advance, 3, 4), np.where(late, 2, 0)).astype(np.int8)
    return action, cti


def timed(fn, repeat: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        out.append(time.perf_counter() - began)
    return out


def cpu_seconds() -> float:
    """The process's CPU time (user + system, all threads) at the clock's full resolution:
    ``os.times`` counts in ticks of 10 ms, so a short run could measure 0 and divide by it."""
    return time.process_time()


def copy_log(src: Path, dst: Path) -> None:
    """The baseline: read ``src`` in 4 MB blocks and write them to ``dst``."""
    with open(src, "rb", buffering=0) as f, open(dst, "wb", buffering=1 << 20) as g:
        while True:
            block = f.read(4 << 20)
            if not block:
                return
            g.write(block)


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


#: the end-to-end rows: label, log ("jsonl"/"parquet"; "jsonl-iso"/"csv-iso": the same
#: events with ISO-8601 start times), columnar, time format, the part replaced by a library
#: (``None``: none; "pyarrow.json": not a replay, the log read by pyarrow.json alone)
VARIANTS = [
    ("JSON Lines, columnar path", "jsonl", True, "ns", None),
    ("JSON Lines, ISO times in", "jsonl-iso", True, "ns", None),
    ("  pyarrow.json read alone", "jsonl-iso", True, "ns", "pyarrow.json"),
    ("CSV, ISO times in", "csv-iso", True, "ns", None),
    ("  scanner: msgspec (Raw payloads)", "jsonl", True, "ns", "msgspec"),
    ("  scanner: orjson (the object path)", "jsonl", True, "ns", "orjson"),
    ("JSON Lines, columnar path, ISO out", "jsonl", True, "iso", None),
    ("  RFC 3339 text: pyarrow strftime", "jsonl", True, "iso", "strftime"),
    ("Parquet, columnar path", "parquet", True, "ns", None),
    ("JSON Lines, element path", "jsonl", False, "ns", None),
    ("JSON Lines, element path, ISO out", "jsonl", False, "iso", None),
    ("Parquet, element path", "parquet", False, "ns", None),
] + [row for shape in SHAPES for spelling in SPELLINGS for row in (
    (f"users' log: {shape}, {spelling}", f"user-{shape}-{spelling}", True, "ns", None),
    ("  orjson.loads per line (decode only)", f"user-{shape}-{spelling}", True, "ns",
     "orjson-loop"))]


def users_summary(variants: list[tuple], times: list[list[float]],
                  events: dict[str, int]) -> None:
    """The users' logs against their floors, as medians of per-round ratios: replay's rate
    over the orjson loop's on the same file, and the spaced log's replay rate over the
    compact one's (the same records)."""
    med = statistics.median
    at = {(v[1], v[4]): i for i, v in enumerate(variants)}
    lines = []
    for shape in SHAPES:
        rate = {}
        for spelling in SPELLINGS:
            log = f"user-{shape}-{spelling}"
            if (log, None) not in at:
                continue
            t = times[at[log, None]]
            rate[spelling] = t
            text = f"  {shape:<8} {spelling:<8} {events[log] / med(t):>12,.0f} ev/s"
            if (log, "orjson-loop") in at:
                loop = times[at[log, "orjson-loop"]]
                text += f"   x orjson loop {med([a / b for a, b in zip(loop, t)]):5.2f}"
            lines.append(text)
        if len(rate) == 2:
            lines.append(f"  {shape:<8} spaced/compact rate "
                         f"{med([c / s for s, c in zip(rate['spaced'], rate['compact'])]):.2f}")
    if lines:
        print("\nusers' logs (targets: >= 1M ev/s, >= 0.4x the orjson loop, spaced >= 0.8x "
              "compact)")
        print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    from benchmarks.replay_peers import arrow_iso_times, iso_writer, msgspec_scanner, scanners

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="500k events instead of 10M")
    ap.add_argument("--events", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--user-events", type=int, default=None,
                    help="records in each users' log (default: the events, at most 600k)")
    ap.add_argument("--skip-element", action="store_true", help="skip the slow element path")
    ap.add_argument("--only", nargs="*", default=None, metavar="N",
                    help="only these rows (numbers from 0, in the table's order)")
    args = ap.parse_args(argv)
    n = args.events or (500_000 if args.quick else 10_000_000)
    repeat = max(5, args.repeat)
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-replay-"))
    work.mkdir(parents=True, exist_ok=True)
    jsonl, parquet = work / f"log-{n}.jsonl", work / f"log-{n}.parquet"
    iso_jsonl, iso_csv = work / f"log-{n}-iso.jsonl", work / f"log-{n}-iso.csv"
    if not jsonl.exists():
        print(f"generating {n:,} events -> {jsonl}", flush=True)
        make_log(jsonl, n)
    if not parquet.exists():
        to_parquet(jsonl, parquet)
    if not (iso_jsonl.exists() and iso_csv.exists()):
        make_iso_logs(jsonl, iso_jsonl, iso_csv)
    logs = {"jsonl": jsonl, "parquet": parquet, "jsonl-iso": iso_jsonl, "csv-iso": iso_csv}
    user_n = args.user_events or min(n, 600_000)
    variants = [v for i, v in enumerate(VARIANTS)
                if (args.only is None or str(i) in args.only)
                and not (args.skip_element and not v[2])]
    if any(v[1].startswith("user-") for v in variants):
        logs.update({f"user-{shape}-{spelling}": path for (shape, spelling), path
                     in make_user_logs(work, user_n).items()})
    events = {log: user_n if log.startswith("user-") else n for log in logs}
    out, late = work / "out.jsonl", work / "late.jsonl"
    size = os.path.getsize(jsonl)
    print(f"{n:,} events; JSON Lines {size / 1e6:.0f} MB, Parquet "
          f"{os.path.getsize(parquet) / 1e6:.0f} MB, with ISO times JSON Lines "
          f"{os.path.getsize(iso_jsonl) / 1e6:.0f} MB, CSV {os.path.getsize(iso_csv) / 1e6:.0f} "
          f"MB; {repeat} rounds after a warm-up, each "
          f"running every row once, in turn\n", flush=True)
    peers: dict[Any, Any] = {None: contextlib.nullcontext,
                             "msgspec": lambda: scanners(jsonl=[msgspec_scanner]),
                             "orjson": lambda: scanners(jsonl=[]),
                             "strftime": lambda: iso_writer(arrow_iso_times),
                             "pyarrow.json": contextlib.nullcontext,
                             "orjson-loop": contextlib.nullcontext}
    copy = work / "copy.jsonl"
    times: list[list[float]] = [[] for _ in variants]
    cpu: list[list[float]] = [[] for _ in variants]
    base: list[list[float]] = [[] for _ in variants]
    counts: dict[str, tuple[int, bytes, bytes]] = {}
    for round_ in range(repeat + 1):  # the first is the warm-up
        print(f"  round {round_}: {load()}", flush=True)
        for i, (label, log, columnar, time_format, peer) in enumerate(variants):
            began = time.perf_counter()
            copy_log(logs[log] if log != "parquet" else jsonl, copy)  # the row's own text
            copied = time.perf_counter() - began
            with peers[peer]():
                before, began = cpu_seconds(), time.perf_counter()
                if peer == "pyarrow.json":
                    assert read_with_pyarrow_json(logs[log]) == n
                elif peer == "orjson-loop":
                    assert orjson_loop(logs[log]) == events[log]
                else:
                    stats = replay([logs[log]], delay="5s", out=out, late=late,
                                   columnar=columnar, time_format=time_format)
                wall = time.perf_counter() - began
                used = cpu_seconds() - before
            if round_:
                times[i].append(wall)
                cpu[i].append(used)
                base[i].append(copied)
            elif peer not in ("pyarrow.json", "orjson-loop"):  # the same bytes, whoever
                # parsed and wrote them, whichever log of the same events was read (a users'
                # log: the same records, spaced or compact)
                key = (log.rsplit("-", 1)[0] if log.startswith("user-") else "", time_format)
                seen = counts.setdefault(key, (stats.records, out.read_bytes(),
                                               late.read_bytes()))
                assert seen == (stats.records, out.read_bytes(), late.read_bytes()), label
    counts.clear()

    # the columnar kernel against bare numpy, same columns, same run
    rng = np.random.default_rng(3)
    is_cti = rng.random(n) < 0.1
    start = T0 + np.arange(n, dtype=np.int64) * 1_000_000 + rng.integers(-3 * 10**9, 0, n)
    policy = resolve_policy("goldilocks", delay="5s", on_late="drop")
    kernel = timed(lambda: policy.run_columns(is_cti, start, start + 1), repeat)
    bare = timed(lambda: bare_numpy(is_cti, start, 5 * 10**9), repeat)
    a1, c1, _ = policy.run_columns(is_cti, start, start + 1)
    a2, c2 = bare_numpy(is_cti, start, 5 * 10**9)
    assert (a1 == a2).all() and (c1 == c2).all(), "kernel and bare numpy disagree"

    med = statistics.median
    print(f"\n{'end to end':<38} {'median ev/s':>12} {'best ev/s':>12} {'worst ev/s':>12} "
          f"{'CPU ev/s':>12} {'replay/copy':>11} {'x row above':>11} {'(by CPU)':>9}")
    head = 0
    for i, (label, log, *_) in enumerate(variants):
        t, c, b = times[i], cpu[i], base[i]
        n = events[log]
        if not label.startswith(" "):
            head = i
        # per-round ratio to the product's row above it (1 for the product's rows)
        ratio = med([x / y for x, y in zip(times[head], t)])
        by_cpu = med([x / y for x, y in zip(cpu[head], c)])
        print(f"{label:<38} {n / med(t):>12,.0f} {n / min(t):>12,.0f} {n / max(t):>12,.0f} "
              f"{n / med(c):>12,.0f} {med(t) / med(b):>11.2f} {ratio:>11.2f} {by_cpu:>9.2f}")
    users_summary(variants, times, events)
    n = events["jsonl"]
    print(f"\n{'columnar kernel (goldilocks)':<38} {n / med(kernel):>12,.0f}")
    print(f"{'bare numpy, same policy':<38} {n / med(bare):>12,.0f}")
    print(f"kernel rate / bare numpy rate: {med(bare) / med(kernel):.2f} (target >= 0.5)")
    print(f"\n{load()}")


if __name__ == "__main__":
    main()
