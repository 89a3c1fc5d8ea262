"""What checkpoints cost (docs/checkpoint.md): a replay with ``--checkpoint`` every 100,000 and
every 10,000 records next to the same replay without, a replay resumed from its middle, the
same for a windowed replay (``--window 1s --agg mean:v --key source``: the windows' state in
every checkpoint), and a union's ``checkpoint()`` / ``restore()`` with many inputs.

    python -m benchmarks.bench_checkpoint              # 1 million events
    python -m benchmarks.bench_checkpoint --events 200000

Each round runs every replay row once, in turn, after one warm-up round that checks that
every row writes the bytes of the plain replay (a windowed row: of the windowed replay
without a checkpoint); the table prints the median, best and worst
wall time of ``--repeat`` rounds and the median of each row's per-round ratio to the plain
replay of the same round (above 1: slower than plain).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.bench_replay import make_log
from engine import Event
from goldilocks.replay import replay
from goldilocks.resume import partial_path
from goldilocks.windowed import replay_windows
from operators import Union, min_policy

__all__ = ["main", "ROWS", "WINDOW_ROWS"]

#: the replay rows: label, records between checkpoints (None: no checkpoint), resumed
ROWS = (("plain replay", None, False),
        ("checkpoint every 100000", 100_000, False),
        ("checkpoint every 10000", 10_000, False),
        ("resumed from the middle", 10_000, True))
#: the windowed replay rows: label, records between checkpoints (None: no checkpoint)
WINDOW_ROWS = (("windowed replay", None),
               ("windowed, checkpoint every 100000", 100_000),
               ("windowed, checkpoint every 10000", 10_000))
#: the windows of those rows
WINDOWS: dict[str, Any] = dict(window="1s", aggregates=["mean:v"], key="source", delay="2s")


def _window_rows(log: Path, folder: Path) -> dict[str, Callable[[], float]]:
    out, late, ckpt = folder / "rows.jsonl", folder / "wlate.jsonl", folder / "w.ckpt"

    def run(every: int | None) -> Callable[[], float]:
        def go() -> float:
            extra: dict[str, Any] = ({} if every is None else
                                     {"checkpoint": ckpt, "checkpoint_every": every})
            began = time.perf_counter()
            replay_windows([log], out=out, late=late, **WINDOWS, **extra)
            return time.perf_counter() - began
        return go
    return {label: run(every) for label, every in WINDOW_ROWS}


def _replay_rows(log: Path, folder: Path, n: int) -> dict[str, Callable[[], float]]:
    out, late, ckpt = folder / "out.jsonl", folder / "late.jsonl", folder / "c.ckpt"
    middle: list[bytes] = []

    def keep_middle(data: bytes) -> None:
        if not middle and n // 2 <= _position(data):
            middle.append(data)
    replay([log], delay="2s", out=out, late=late, checkpoint=ckpt, checkpoint_every=10_000,
           on_checkpoint=keep_middle)
    whole = {name: (folder / name).read_bytes() for name in ("out.jsonl", "late.jsonl")}

    def run(every: int | None, resumed: bool) -> Callable[[], float]:
        def go() -> float:
            """The replay's seconds (a resumed one's checkpoint and partial outputs are put
            in place before the clock starts)."""
            if resumed:
                ckpt.write_bytes(middle[0])
                for name, data in whole.items():
                    Path(partial_path(str(folder / name))).write_bytes(data)
            began = time.perf_counter()
            replay([log], delay="2s", out=out, late=late,
                   **({} if every is None else {"checkpoint": ckpt,
                                                "checkpoint_every": every}))
            return time.perf_counter() - began
        return go
    return {label: run(every, resumed) for label, every, resumed in ROWS}


def _position(data: bytes) -> int:
    from operators.checkpoint import unpack
    return int(unpack(data, "replay")["position"])


def _union_row(inputs: int) -> tuple[float, float, int]:
    """Seconds to take and to restore the checkpoint of a union (min policy) with
    ``inputs`` inputs that each sent a CTI and an insert; and its size in bytes."""
    union = Union(min_policy())
    sink: list[Event] = []

    class Sink:
        def on_subscribe(self, s) -> None:
            s.request(2**62)

        def on_next(self, e) -> None:
            sink.append(e)

        def on_error(self, e) -> None:
            raise e

        def on_complete(self) -> None:
            pass
    union.subscribe(Sink())
    for i in range(inputs):
        name = f"dev-{i}"
        e = union.open_input(name)
        e.try_send(Event.cti(i, source=name))
        e.try_send(Event.point(i, {"v": i}, source=name))
    began = time.perf_counter()
    data = union.checkpoint()
    took = time.perf_counter() - began
    began = time.perf_counter()
    Union.restore(data, policy=min_policy())
    return took, time.perf_counter() - began, len(data)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--inputs", type=int, default=1000)
    p.add_argument("--dir", default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        log = folder / "log.jsonl"
        make_log(log, args.events)
        rows = _replay_rows(log, folder, args.events)

        for title, group, files in (
                ("replay", rows, ("out.jsonl", "late.jsonl")),
                ("windowed replay", _window_rows(log, folder), ("rows.jsonl", "wlate.jsonl"))):
            def written() -> bytes:
                return b"".join((folder / name).read_bytes() for name in files)
            first = next(iter(group))
            group[first]()
            plain = written()
            for label, fn in group.items():  # warm-up: the same bytes
                fn()
                assert written() == plain, label
            times: dict[str, list[float]] = {label: [] for label in group}
            for _ in range(args.repeat):
                for label, fn in group.items():
                    times[label].append(fn())
            base = times[first]
            print(f"{title} of {args.events} events, {args.repeat} rounds "
                  f"(load {os.getloadavg()[0]:.2f}):")
            print(f"{'row':34} {'median s':>9} {'best':>7} {'worst':>7} {'x plain':>8}")
            for label, ts in times.items():
                ratio = statistics.median(t / b for t, b in zip(ts, base))
                print(f"{label:34} {statistics.median(ts):9.3f} {min(ts):7.3f} "
                      f"{max(ts):7.3f} {ratio:8.2f}")
    takes, restores, size = zip(*(_union_row(args.inputs) for _ in range(args.repeat)))
    print(f"union with {args.inputs} inputs (min policy): checkpoint "
          f"{statistics.median(takes) * 1e3:.1f} ms, restore "
          f"{statistics.median(restores) * 1e3:.1f} ms, {size[0]} bytes")


if __name__ == "__main__":
    main()
