"""The robust rules on replay's two paths: ``quantile_policy`` and ``goldilocks(max_ahead=…)``
decided by their columnar form (``run_source_columns``) against their steps, in one run.

    python -m benchmarks.bench_robust              # 2 million records
    python -m benchmarks.bench_robust --events 200000 --repeat 3

The log is like ``bench_replay``'s (8 devices, a CTI every 10th record, payloads, clocks
skewed by up to 3 s, readings up to 2 s late) with a ninth device whose clock runs an hour
ahead. Two pairs of rows per rule:

- **end to end**: ``replay`` of the JSON Lines log, output and late file written to disk,
  on the columnar path and on the element path (the same bytes: checked in the warm-up);
- **decisions alone**: the columnar form over the log's columns in memory, against the
  step driven row by row over the same rows as ``Event`` objects (built before timing).

Each measurement: a warm-up, then ``--repeat`` rounds, the rows of a pair run in turn in
every round; the table gives events/s at the median, and each pair's ratio of medians
(columnar over element: above 1, the columnar form is faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_replay import T0, load
from goldilocks.replay import replay
from operators import goldilocks, quantile_policy

__all__ = ["make_runaway_log", "main"]

HOUR = 3_600 * 10**9


def make_runaway_log(path: Path, n: int, *, devices: int = 8, seed: int = 7) -> None:
    """A log of ``n`` records in position order: ``devices`` devices as in
    ``bench_replay.make_log`` (a CTI every 10th record, payloads, clocks skewed by up to 3 s,
    readings up to 2 s late) and one more, ``runaway``, whose clock is an hour ahead."""
    rng = np.random.default_rng(seed)
    skew = np.append(rng.integers(-3_000_000_000, 3_000_000_000, devices), HOUR)
    with open(path, "wb") as f:
        step = 1_000_000
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            i = np.arange(lo, hi)
            dev = rng.integers(0, devices + 1, hi - lo)
            start = T0 + i * 1_000_000 + skew[dev] + rng.integers(-2_000_000_000, 0, hi - lo)
            names = [b"runaway" if d == devices else b"dev-%d" % d for d in dev.tolist()]
            f.write(b"".join(
                b'{"source":"%b","kind":"cti","start":%d}\n' % (d, t) if s % 10 == 9 else
                b'{"source":"%b","kind":"insert","start":%d,"payload":{"v":%d}}\n'
                % (d, t, s % 100)
                for s, d, t in zip(i.tolist(), names, start.tolist())))


def _columns(path: Path):
    """The merged log as the columns ``run_source_columns`` reads, and as arrivals."""
    from engine.event import CTI as CTI_KIND, INTERVAL, POINT, Event
    from eventlog import CTI, JOIN, LEAVE, BadRecords, Columns, SourceTable, merge_columns

    table = SourceTable()
    chunks = [c for c in merge_columns([str(path)], table=table, bad=BadRecords()) if len(c)]
    whole = Columns.concat(chunks)
    names = list(table.names)
    is_cti = whole.kind == CTI
    change = (whole.kind == JOIN).astype(np.int8) - (whole.kind == LEAVE).astype(np.int8)
    events = [Event(CTI_KIND, s, None, None, names[c]) if k == CTI
              else Event(INTERVAL if h else POINT, s, e, p, names[c])
              for k, c, s, e, h, p in zip(whole.kind.tolist(), whole.source.tolist(),
                                          whole.start.tolist(), whole.end.tolist(),
                                          whole.has_end.tolist(), whole.payload)]
    return (is_cti, change, whole.source, whole.start, whole.end, names), events


def _rounds(pair: dict, repeat: int) -> dict[str, list[float]]:
    """Run every row of ``pair`` once per round, in turn; seconds per row and round."""
    for fn in pair.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in pair}
    for _ in range(repeat):
        for name, fn in pair.items():
            began = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - began)
    return times


def main(argv: list[str] | None = None) -> list[tuple[str, float, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-robust-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"runaway-{args.events}.jsonl"
    if not log.exists():
        make_runaway_log(log, args.events)
    n = sum(1 for _ in open(log, "rb"))
    rules = (("quantile(2, 2s)", quantile_policy(2, "2s")),
             ("goldilocks(2s, max_ahead=1s)", goldilocks("2s", max_ahead="1s")))
    columns, events = _columns(log)
    rows: list[tuple[str, float, float]] = []
    print(f"{n:,} records, {args.repeat} rounds after a warm-up; {load()}")
    print(f"{'row':58} {'events/s':>12} {'ratio':>7}")
    for label, policy in rules:
        outs = {p: (work / f"{p}.out", work / f"{p}.late") for p in ("columnar", "element")}

        def run_path(path: str, policy=policy, outs=outs) -> None:
            out, late = outs[path]
            stats = replay([log], policy=policy, out=out, late=late,
                           columnar=path == "columnar")
            assert stats.path == path

        def step_all(policy=policy) -> None:
            step, state = policy.step, policy.initial()
            for e in events:
                state, _ = step(state, e)

        def columns_all(policy=policy) -> None:
            policy.run_source_columns(*columns, None)

        run_path("columnar")
        run_path("element")
        for k in (0, 1):  # the warm-up's check: the same bytes on both paths
            assert outs["columnar"][k].read_bytes() == outs["element"][k].read_bytes()
        for kind, pair in (("end to end", {"columnar": lambda: run_path("columnar"),
                                           "element": lambda: run_path("element")}),
                           ("decisions alone", {"columnar": columns_all,
                                                "element": step_all})):
            times = _rounds(pair, args.repeat)
            med = {name: statistics.median(ts) for name, ts in times.items()}
            ratio = med["element"] / med["columnar"]
            for name in ("columnar", "element"):
                row = f"{label}, {kind}, {name}"
                print(f"{row:58} {n / med[name]:>12,.0f} "
                      f"{(f'{ratio:.2f}x' if name == 'columnar' else ''):>7}")
                rows.append((row, n / med[name], ratio))
    if args.dir is None:
        for p in work.iterdir():
            p.unlink()
        os.rmdir(work)
    return rows


if __name__ == "__main__":
    main()
