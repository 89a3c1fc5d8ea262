"""The picture of a replay (``--plot``): a date axis that says when a log runs past midnight,
in the zone asked for; late events in their device's colour, dropped and adjusted told
apart; intervals drawn as the spans they are; below, how far ahead of the CTI each record
arrived, which stays readable on a long log. Drawn as SVG with its text kept as text, so the
test reads what a reader would."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest

from goldilocks.cli import main
from goldilocks.plot import plot_replay
from goldilocks.replay import replay

S = 10**9
T0 = 1_795_334_400 * S + (14 * 3600 + 30 * 60) * S  # 2026-11-22T22:30:00Z


@pytest.fixture
def log(tmp_path):
    """Two devices for 200 minutes from 22:30 UTC, one 40 s behind, with intervals that
    arrive late (adjusted under on_late='adjust') and points that arrive late (dropped)."""
    lines, seq = [], 0
    for i in range(400):
        for dev, skew in (("thermo-1", 0), ("door-2", -40)):
            t = T0 + i * 30 * S + skew * S
            if dev == "door-2" and i % 25 == 0:
                rec = {"source": dev, "kind": "insert", "start": t - 200 * S,
                       "end": t + 300 * S}
            elif dev == "door-2" and i % 25 == 12:
                rec = {"source": dev, "kind": "insert", "start": t - 200 * S}
            else:
                rec = {"source": dev, "kind": "insert", "start": t, "payload": {"v": i}}
            lines.append({"seq": seq, **rec})
            seq += 1
            if i % 4 == 3:
                lines.append({"seq": seq, "source": dev, "kind": "cti", "start": t})
                seq += 1
    path = tmp_path / "twodays.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    return path


def _svg(stats, **options) -> str:
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text
        plot_replay(stats, buf, format="svg", **options)
    return buf.getvalue().decode()


def test_the_plot_data_is_the_same_on_both_paths_with_ends_and_actions(log):
    a = replay([log], delay="1m", on_late="adjust", plot=True, columnar=True)
    b = replay([log], delay="1m", on_late="adjust", plot=True, out=io.BytesIO())
    assert (a.path, b.path) == ("columnar", "element")
    for name in ("source", "start", "is_cti", "late", "cti_rows", "cti_values", "adjusted",
                 "end"):
        assert np.array_equal(getattr(a.plot, name), getattr(b.plot, name)), name
    assert int(a.plot.adjusted.sum()) == a.adjusted == 15  # the first, before any CTI, is not late
    assert int((a.plot.late & ~a.plot.adjusted).sum()) == a.late - a.adjusted == 16
    intervals = a.plot.end > a.plot.start + 1
    assert int(intervals.sum()) == 16 and (a.plot.end[intervals] - a.plot.start[intervals]
                                           == 500 * S).all()


def test_the_picture_says_the_days_the_zone_and_the_actions(log):
    stats = replay([log], delay="1m", on_late="adjust", plot=True)
    svg = _svg(stats)
    assert "event time (UTC, 2026-11-22 to 2026-11-23)" in svg  # past midnight
    assert "late, adjusted (15)" in svg and "late, dropped (16)" in svg
    assert "ahead of the CTI (s)" in svg
    paris = _svg(stats, tz="Europe/Paris")
    assert "event time (Europe/Paris, 2026-11-22 to 2026-11-23)" in paris
    # the late marks take their device's colour: door-2's (tab10's second) and no red fill
    assert svg.count("#ff7f0e") > 16


def test_a_long_log_is_thinned_and_says_so(log):
    stats = replay([log], delay="1m", plot=True)
    assert "every 5th drawn" in _svg(stats, max_points=200)


def test_the_command_line_takes_a_zone_and_refuses_one_that_is_not(log, tmp_path, capsys):
    png = tmp_path / "p.png"
    assert main(["replay", str(log), "--plot", str(png), "--plot-tz", "Europe/Paris",
                 "--out", str(tmp_path / "o"), "--no-summary"]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["replay", str(log), "--plot", str(tmp_path / "q.png"), "--plot-tz",
                 "Mars/Olympus", "--out", str(tmp_path / "o2")]) == 2
    assert "argument --plot-tz: 'Mars/Olympus' is not a time zone" in capsys.readouterr().err
    assert not (tmp_path / "q.png").exists()
