"""The picture of a replay: event time against arrival order, the CTI, late events.

``plot_replay(stats, path)`` draws, from ``ReplayStats.plot`` (``replay(..., plot=True)``):
each input's events as dots (one colour per input) at (arrival index, event start), the
emitted CTI as a step line (time before it is closed), late events as crosses, and each
input's CTIs as small ticks. matplotlib (extra ``plot``) is imported here, lazily, with the
non-interactive Agg backend. Memory: the plotted points; logs above ``max_points`` records are
thinned evenly (late events are always drawn).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from engine.errors import InputError, UsageError
from goldilocks.outputs import AtomicOutput, is_path

__all__ = ["plot_replay", "plot_format"]

_HINT = "needs matplotlib, which is not installed: pip install 'goldilocks[plot]'"


def plot_format(path: str | os.PathLike) -> str:
    """The image format matplotlib writes for ``path``'s suffix (``"png"``, ``"svg"``, …).

    Raises ``UsageError("plot", …)`` if matplotlib is not installed (with the ``pip install``
    hint) or cannot write that suffix (naming the ones it can): the checks of ``--plot``
    before a replay starts.
    """
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as err:
        raise UsageError("plot", _HINT) from err
    known = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(os.fspath(path))[1].lstrip(".").lower()
    if suffix not in known:
        what = f"'.{suffix}' files" if suffix else "a file without a suffix"
        raise UsageError("plot", f"{os.fspath(path)}: matplotlib cannot write {what}; expected "
                         f"one of {', '.join('.' + k for k in sorted(known))}")
    return suffix


def plot_replay(stats: Any, path: str | os.PathLike | Any, *, max_points: int = 200_000,
                title: str | None = None, format: str | None = None) -> Any:
    """Render ``stats.plot`` to ``path`` and return it: a file name (the format from its
    suffix, ``plot_format``; written under a temporary name and renamed into place) or a
    binary file (``format`` says which)."""
    data = getattr(stats, "plot", None)
    if data is None:
        raise InputError("plot_replay: the stats carry no plot data; call replay(..., plot=True)")
    if is_path(path):
        fmt = plot_format(path)
        target = AtomicOutput(path, "plot")
        try:
            plot_replay(stats, target.file, max_points=max_points, title=title, format=fmt)
        except BaseException:
            target.discard()
            raise
        target.commit()
        return os.fspath(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise UsageError("plot", _HINT) from err

    n = len(data.start)
    index = np.arange(n)
    keep = np.ones(n, bool)
    if n > max_points:
        keep[:] = False
        keep[:: max(1, n // max_points)] = True
    keep |= data.late

    def dates(ns: np.ndarray) -> np.ndarray:
        return ns.astype("datetime64[ns]").astype("datetime64[ms]").astype(object)

    fig, ax = plt.subplots(figsize=(12, 6.5), dpi=110)
    palette = plt.get_cmap("tab10")
    colours = [palette(i) for i in (0, 1, 2, 4, 5, 6, 8, 9, 7)]  # no red: red marks late
    codes = sorted(set(data.source.tolist()))
    for j, code in enumerate(codes):
        name = data.names[code] if code >= 0 else "(merged)"
        mine = (data.source == code) & keep
        ins = mine & ~data.is_cti & ~data.late
        ctis = mine & data.is_cti
        colour = colours[j % len(colours)]
        ax.scatter(index[ins], dates(data.start[ins]), s=9, color=colour, label=f"{name}",
                   zorder=3)
        if ctis.any():
            ax.scatter(index[ctis], dates(data.start[ctis]), s=22, marker="|", color=colour,
                       alpha=0.6, zorder=2)
    late = data.late & ~data.is_cti
    if late.any():
        ax.scatter(index[late], dates(data.start[late]), s=42, marker="x", color="crimson",
                   linewidths=1.6, label=f"late ({int(late.sum())})", zorder=4)
    if len(data.cti_rows):
        xs = np.append(data.cti_rows, n - 1)
        ys = np.append(data.cti_values, data.cti_values[-1])
        ax.step(xs, dates(ys), where="post", color="black", linewidth=1.8,
                label="emitted CTI", zorder=5)
    ax.yaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    first = data.start[~data.is_cti].min() if (~data.is_cti).any() else None
    day = str(np.datetime64(int(first), "ns").astype("datetime64[D]")) if first is not None else ""
    ax.set_xlabel("arrival order (record number in the merged log)")
    ax.set_ylabel(f"event time (UTC{', ' + day if day else ''})")
    ax.set_title(title or f"replay: {stats.policy}, delay {_duration(stats.delay)}, "
                          f"on late {stats.on_late} — {stats.records} records, "
                          f"{stats.late} late")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=9, markerscale=1.5, framealpha=0.9)
    fig.tight_layout()
    try:
        fig.savefig(path, format=format)
    finally:
        plt.close(fig)
    return path


def _duration(ns: int) -> str:
    from engine.times import format_duration_ns

    return format_duration_ns(ns)
