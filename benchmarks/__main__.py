"""``python -m benchmarks``: our implementations and the peers on one workload, one table.

    python -m benchmarks                 # 1M records, 1 warm-up + 5 rounds, 10M-event memory run
    python -m benchmarks --quick         # 100k records, 1M-event memory run
    python -m benchmarks --json out.json # also write the results as JSON

Method and workload: ``benchmarks/README.md``; results: ``docs/performance.md``;
what they decided: ``docs/decisions.md``.
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks.harness import (ALL_NAMES, MEMORY, SHORT_RUN, UNORDERED, CountMismatch, Row,
                                check_targets, child_main, machine, rows_to_json, run)
from benchmarks.workload import Workload

__all__ = ["main", "print_table", "markdown_table"]


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _fmt_ratio(xs: list[float]) -> str:
    if not xs:
        return "-"
    import statistics

    m = statistics.median(xs)
    return f"{m:.3g}x"


def _fmt_mib(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def print_table(rows: list[Row], *, n: int, rounds: int, memory_events: int,
                seed: int | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=150)
    info = machine()
    table = Table(title=f"Goldilocks benchmarks: {n:,} records, K=4, delay 100 ns, "
                        f"median of {rounds} rounds (ratios within each round)")
    for col, justify in (("implementation", "left"), ("", "left"), ("events/s median", "right"),
                         ("min", "right"), ("max", "right"), ("× plain loop", "right"),
                         ("× RxPY", "right"), ("peak RSS MiB", "right"),
                         ("RSS growth MiB", "right")):
        table.add_column(col, justify=justify)
    for row in rows:
        table.add_row(row.name, row.group, _fmt_rate(row.median),
                      _fmt_rate(min(row.rates)) if row.rates else "-",
                      _fmt_rate(max(row.rates)) if row.rates else "-",
                      _fmt_ratio(row.ratio_plain), _fmt_ratio(row.ratio_rxpy),
                      _fmt_mib(row.peak_rss_mib), _fmt_mib(row.rss_growth_mib),
                      end_section=row.name == "numpy")
    console.print(table)
    counts = next((row.counts for row in rows if row.name == "plain_loop" and row.counts), None)
    if counts is not None:
        console.print(f"counts (every deterministic implementation agreed): "
                      f"{counts.inserts:,} inserts emitted, {counts.ctis:,} CTIs emitted, "
                      f"{counts.late:,} late")
    scheduled = [row for row in rows if row.counts is not None and row.name in UNORDERED]
    if scheduled:  # arrival order up to the scheduler: how many came out late (TS §4.6)
        truth = (Workload(n) if seed is None else Workload(n, seed)).time_order_counts()
        total = truth.inserts + truth.late
        console.print(f"late inserts, arrival order up to the scheduler (in time order the "
                      f"workload has {truth.late:,}, {truth.late / total:.2%}): " + "; ".join(
                          f"{row.name} {row.counts.late:,} ({row.counts.late / total:.2%})"
                          for row in scheduled if row.counts is not None))
    mem = next((row for row in rows if row.name == MEMORY), None)
    if mem is not None:
        console.print(f"{MEMORY}: {memory_events:,} events, one rate (not rounds)")
    for target, met, measured in check_targets(rows, memory_events):
        mark = {True: "[green]met[/]", False: "[red]missed[/]", None: "[yellow]n/a[/]"}[met]
        console.print(f"target {target}: {mark} — {measured}")
    console.print(f"machine: {info['cpu']}, {info['cores']} cores, {info['python']}, "
                  f"{info['os']}; {info['libraries']}; "
                  f"load average (1, 5, 15 min) {info['load']}")


def markdown_table(rows: list[Row]) -> str:
    """The table as Markdown (what docs/performance.md shows)."""
    lines = ["| implementation | | events/s median | min | max | × plain loop | × RxPY "
             "| peak RSS MiB | RSS growth MiB |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for row in rows:
        cells = [f"`{row.name}`", row.group, _fmt_rate(row.median),
                 _fmt_rate(min(row.rates)) if row.rates else "-",
                 _fmt_rate(max(row.rates)) if row.rates else "-",
                 _fmt_ratio(row.ratio_plain), _fmt_ratio(row.ratio_rxpy),
                 _fmt_mib(row.peak_rss_mib), _fmt_mib(row.rss_growth_mib)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Our implementations and the peers on one fixed workload, in interleaved "
                    "rounds, counts checked every run (see benchmarks/README.md).")
    parser.add_argument("-n", type=int, default=None,
                        help="records in the workload (default 1,000,000; --quick 100,000)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (at least 5)")
    parser.add_argument("--warmup", type=int, default=1, help="discarded rounds first")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: 100k records and a 1M-event memory run")
    parser.add_argument("--memory-events", type=int, default=None,
                        help="events through the slow subscriber (default 10M; --quick 1M)")
    parser.add_argument("--no-rss", action="store_true",
                        help="skip the fresh-process RSS measurements")
    parser.add_argument("--only", nargs="+", choices=ALL_NAMES, metavar="NAME",
                        help=f"run only these (plain_loop and rxpy are added for the ratios); "
                             f"names: {', '.join(ALL_NAMES)}")
    parser.add_argument("--min-time", type=float, default=SHORT_RUN, metavar="SECONDS",
                        help="repeat runs shorter than this within a round and take their "
                             f"median (default {SHORT_RUN}; 0: one run each)")
    parser.add_argument("--seed", type=int, default=None, help="the late draw's seed")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    parser.add_argument("--markdown", metavar="FILE", help="write the table as Markdown to FILE")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    n = args.n if args.n is not None else (100_000 if args.quick else 1_000_000)
    if args.child:
        print(json.dumps(child_main(args.child, n, args.seed)))
        return 0
    if args.rounds < 5:
        parser.error("--rounds must be at least 5 (the method: warm-up, then >= 5 rounds)")
    if n < 4 * 100:
        parser.error("-n must be at least 400 (every input needs a CTI)")
    memory_events = args.memory_events or (1_000_000 if args.quick else 10_000_000)
    names = ALL_NAMES
    if args.only:
        names = tuple(x for x in ALL_NAMES if x in set(args.only) | {"plain_loop", "rxpy"})

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        rows = run(n, args.rounds, warmup=args.warmup, names=names,
                   memory_events=memory_events, rss=not args.no_rss, seed=args.seed,
                   short_run=args.min_time, log=log)
    except CountMismatch as err:
        print(f"FAILED: implementations disagree: {err}", file=sys.stderr)
        return 1
    print_table(rows, n=n, rounds=args.rounds, memory_events=memory_events, seed=args.seed)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows_to_json(rows), f, indent=2)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
