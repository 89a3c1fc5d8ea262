"""The picture of a replay: event time against arrival order, the CTI, late events.

``plot_replay(stats, path)`` draws, from ``ReplayStats.plot`` (``replay(..., plot=True)``):
each input's events as dots (one colour per input) at (arrival index, event start), intervals
as the spans they cover, the emitted CTI as a step line (time before it is closed), each
input's CTIs as small ticks, and late events in their input's colour, a cross for dropped and a
triangle for adjusted. The event-time axis shows dates where they change (a
log that runs past midnight), in UTC or the zone given. Below, how far ahead of the CTI in
force each record arrived (negative: late): it stays readable where a long log's time axis
is one diagonal line. matplotlib (extra ``plot``) is imported here, lazily, with the
non-interactive Agg backend. Memory: the plotted points; logs above ``max_points`` records are
thinned evenly (late events are always drawn), and the title says so.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from engine.errors import InputError, UsageError
from engine.times import MAX_TIME
from goldilocks.outputs import AtomicOutput, is_path

__all__ = ["plot_replay", "plot_format", "time_zone"]

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
                title: str | None = None, format: str | None = None,
                tz: str | None = None) -> Any:
    """Render ``stats.plot`` to ``path`` and return it: a file name (the format from its
    suffix, ``plot_format``; written under a temporary name and renamed into place) or a
    binary file (``format`` says which). ``tz``: the time zone the event times are shown in
    (``"Europe/Paris"``; ``None``: UTC)."""
    data = getattr(stats, "plot", None)
    if data is None:
        raise InputError("plot_replay: the stats carry no plot data; call replay(..., plot=True)")
    if is_path(path):
        fmt = plot_format(path)
        target = AtomicOutput(path, "plot")
        try:
            plot_replay(stats, target.file, max_points=max_points, title=title, format=fmt,
                        tz=tz)
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
    if n > max_points:  # thinned evenly; late events are always drawn
        keep[:] = False
        keep[:: max(1, n // max_points)] = True
    keep |= data.late
    zone = time_zone(tz)
    adjusted = data.adjusted if data.adjusted is not None else np.zeros(n, bool)
    ends = data.end if data.end is not None else data.start + 1

    def dates(ns: np.ndarray) -> np.ndarray:
        return ns.astype("datetime64[ns]").astype("datetime64[ms]").astype(object)

    fig, (ax, lag_ax) = plt.subplots(2, 1, figsize=(12, 8.5), dpi=110, sharex=True,
                                     gridspec_kw={"height_ratios": [3, 1.2]})
    palette = plt.get_cmap("tab10")
    colours = [palette(i) for i in (0, 1, 2, 4, 5, 6, 8, 9, 7)]  # no red: red marks late
    codes = sorted(set(data.source.tolist()))
    # the CTI in force when each record arrived (the last emitted before its row)
    if len(data.cti_rows):
        at = np.searchsorted(data.cti_rows, index, side="left") - 1
        in_force = np.where(at >= 0, data.cti_values[np.maximum(at, 0)], np.iinfo(np.int64).min)
    else:
        in_force = np.full(n, np.iinfo(np.int64).min, np.int64)
    for j, code in enumerate(codes):
        name = data.names[code] if code >= 0 else "(merged)"
        mine = (data.source == code) & keep
        ins = mine & ~data.is_cti & ~data.late
        ctis = mine & data.is_cti
        colour = colours[j % len(colours)]
        ax.scatter(index[ins], dates(data.start[ins]), s=9, color=colour, label=f"{name}",
                   zorder=3)
        spans = mine & ~data.is_cti & (ends > data.start + 1) & (ends < MAX_TIME)
        if spans.any():  # intervals as the spans they are, at their arrival
            ax.vlines(index[spans], dates(data.start[spans]), dates(ends[spans]),
                      color=colour, linewidth=1.2, alpha=0.7, zorder=3)
        if ctis.any():
            ax.scatter(index[ctis], dates(data.start[ctis]), s=22, marker="|", color=colour,
                       alpha=0.6, zorder=2)
        for action, marker, label in (("dropped", "x", "late, dropped"),
                                      ("adjusted", "v", "late, adjusted")):
            late = mine & data.late & ~data.is_cti & (adjusted if action == "adjusted"
                                                       else ~adjusted)
            if late.any():  # each device's late events in its colour, the action by shape
                ax.scatter(index[late], dates(data.start[late]), s=52, marker=marker,
                           color=colour, linewidths=1.6, zorder=4)
        # how far ahead of the CTI in force each record was (negative: late), in seconds
        points = mine & ~data.is_cti & (in_force > np.iinfo(np.int64).min)
        if points.any():
            lag_ax.scatter(index[points], (data.start[points] - in_force[points]) / 1e9, s=5,
                           color=colour, zorder=3)
    for action, marker in (("dropped", "x"), ("adjusted", "v")):
        count = int((data.late & ~data.is_cti & (adjusted if action == "adjusted"
                                                  else ~adjusted)).sum())
        if count:  # one legend entry per action (the marks take their input's colour)
            ax.scatter([], [], s=52, marker=marker, color="dimgray", linewidths=1.6,
                       label=f"late, {action} ({count})")
    if len(data.cti_rows):
        xs = np.append(data.cti_rows, n - 1)
        ys = np.append(data.cti_values, data.cti_values[-1])
        ax.step(xs, dates(ys), where="post", color="black", linewidth=1.8,
                label="emitted CTI", zorder=5)
    locator = mdates.AutoDateLocator(tz=zone)
    ax.yaxis.set_major_locator(locator)
    # dates shown where they change: a log that runs past midnight says so on the axis
    ax.yaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=zone))
    timed = data.start[~data.is_cti]
    days = _days(timed, zone)
    where = "UTC" if zone is None else str(tz)
    ax.set_ylabel(f"event time ({where}{', ' + days if days else ''})")
    lag_ax.axhline(0, color="black", linewidth=1.0)
    lag_ax.set_ylabel("ahead of the CTI (s)\nbelow 0: late")
    lag_ax.set_xlabel("arrival order (record number in the merged log)")
    lag_ax.grid(True, alpha=0.3)
    ax.set_title(title or f"replay: {stats.policy}, delay {_duration(stats.delay)}, "
                          f"on late {stats.on_late} — {stats.records} records, "
                          f"{stats.late} late" + (f" (every {n // max_points}th drawn)"
                                                  if n > max_points else ""))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=9, markerscale=1.5, framealpha=0.9)
    fig.tight_layout()
    try:
        fig.savefig(path, format=format)
    finally:
        plt.close(fig)
    return path


def time_zone(tz: str | None) -> Any:
    """The time zone the axis shows (``None``: UTC), or ``UsageError`` naming it."""
    if tz is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError("plot_tz", f"{tz!r} is not a time zone; expected a name such as "
                         "'Europe/Paris' or 'UTC'") from None


def _days(starts: np.ndarray, zone: Any) -> str:
    """The day, or the first and last day, the events fall on, in ``zone``."""
    if not len(starts):
        return ""
    import datetime as dt

    def day(ns: int) -> str:
        t = dt.datetime.fromtimestamp(ns / 1e9, zone or dt.timezone.utc)
        return t.strftime("%Y-%m-%d")

    first, last = day(int(starts.min())), day(int(starts.max()))
    return first if first == last else f"{first} to {last}"


def _duration(ns: int) -> str:
    from engine.times import format_duration_ns

    return format_duration_ns(ns)
