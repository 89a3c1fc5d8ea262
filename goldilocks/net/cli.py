"""``goldilocks serve``: run a union behind the network protocol until interrupted.

A built-in subcommand (``goldilocks.cli`` registers it). This module imports no network code
at import time: the server and the ``websockets`` library (the ``net`` extra) are imported
only when ``serve`` runs, so the command line works without the extra.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from goldilocks.commands import Command
from engine.errors import InputError, UsageError
from engine.times import NS_PER_S, Nanoseconds, format_instant, to_duration_ns

__all__ = ["SERVE"]

_HELP = """\
Merge device streams published over the network (WebSocket, and plain TCP with --tcp) with a
CTI policy. Each device stream becomes a union input named after the device; devices are
granted credit from the union's demand, so a slow consumer slows them. Devices may send edge
events (start and end edges with their ids), decided under the policy as TS §7 says; late
and unmatched ones are late records with their reasons. The merged output is
written first, with --out-dir, as rolling event-log parts (events-NNNNNN.jsonl,
late-NNNNNN.jsonl) for Spark, and can be subscribed to remotely; a subscriber more than
--subscriber-lag events behind is cut off (it never slows the devices) and may come back
from its position. With --checkpoint, every event a device sends is in the parts exactly
once across a crash: devices are told as their events become durable, and resend from their
position after a restart (docs/checkpoint.md). Stops on SIGINT or SIGTERM: inputs are
removed, the last parts published (with --checkpoint: after the last checkpoint); a second
signal exits at once, as a crash would. Prints 'listening on URL' per transport on stdout.
Logs on stderr (--log-level, --log-format text|json): connections, refusals, devices joining,
leaving, going idle and lagging, a status line every --status-every; at the end a summary
per device. Exit status: 0 after a stop in order; 1 if the output had not ended within
--shutdown-timeout (remote subscribers still behind were cut off; the last file part may
lack events), on a token file it cannot use or an address it cannot listen on; 2 on a usage
error (a bad address, duration, delay or policy, an --out-dir it cannot create) or without
the 'net' extra; 130 (SIGINT) or 143 (SIGTERM) after a forced exit. Protocol and what is
logged: docs/protocol.md, "Server".

example:
  goldilocks serve --listen 127.0.0.1:8765 --tcp 127.0.0.1:8766 --token-file tokens.txt \\
      --delay 5m --out-dir out/
"""


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", required=True, metavar="HOST:PORT",
                   help="WebSocket address (port 0: any free port)")
    p.add_argument("--tcp", default=None, metavar="HOST:PORT",
                   help="also accept plain TCP (length-prefixed frames) here")
    p.add_argument("--token-file", required=True, metavar="FILE",
                   help="accepted tokens, one per line ('#' comments); never logged")
    p.add_argument("--delay", default=None, metavar="D",
                   help="CTI delay, with its unit: 5m, 90s, PT5M, 300ns (default: 5m for "
                        "goldilocks, 0 otherwise)")
    p.add_argument("--policy", default="goldilocks", help="goldilocks | min | max | quantile")
    p.add_argument("--on-late", choices=("drop", "adjust"), default="drop",
                   help="what happens to late inserts (default drop)")
    p.add_argument("--out-dir", default=None, metavar="DIR",
                   help="write the merged output and late records as rolling event-log parts")
    p.add_argument("--part-events", type=int, default=100_000, metavar="N",
                   help="events per part (default 100000)")
    p.add_argument("--part-seconds", default="60s", metavar="DURATION",
                   help="close a part after this long (default 60s)")
    p.add_argument("--idle-timeout", default="30s", metavar="DURATION",
                   help="close a connection silent this long, or taking nothing sent to it "
                        "this long (default 30s)")
    p.add_argument("--setup-timeout", default="5s", metavar="DURATION",
                   help="close a connection not set up (token) this long after connecting "
                        "(default 5s)")
    p.add_argument("--shutdown-timeout", default="10s", metavar="DURATION",
                   help="on SIGINT/SIGTERM, wait this long for every output to end "
                        "(default 10s; the server exits at most 3 s after it)")
    p.add_argument("--max-frame", type=int, default=1 << 20, metavar="BYTES",
                   help="largest frame accepted (default 1048576)")
    p.add_argument("--max-connections", type=int, default=1024, metavar="N")
    p.add_argument("--prefetch", type=int, default=4096, metavar="N",
                   help="credit per device (default 4096: several frames in flight)")
    p.add_argument("--subscriber-lag", type=int, default=65_536, metavar="EVENTS",
                   help="cut off a subscriber more than this many events behind the merged "
                        "stream (default 65536); subscribers never slow the devices or "
                        "the files")
    p.add_argument("--max-drift", default=None, metavar="DURATION",
                   help="align devices through credit: one whose time is more than this "
                        "ahead of the slowest gets credit later (default: off)")
    p.add_argument("--idle-after", default=None, metavar="DURATION",
                   help="a device quiet this long while holding credit is idle and holds "
                        "no one back (default: 1s with --max-drift, else off)")
    p.add_argument("--checkpoint", default=None, metavar="FILE",
                   help="restore the union from FILE at start if it exists (its --out-dir "
                        "checked first); write it every --checkpoint-every and at "
                        "shutdown, publishing the parts it covers; the output then ends "
                        "without the CTI at +inf: time continues at the next start "
                        "(docs/checkpoint.md)")
    p.add_argument("--checkpoint-every", default=None, metavar="DURATION",
                   help="how often to write the checkpoint (default 30s): devices keep "
                        "their events until a checkpoint covers them")
    p.add_argument("--log-level", default="info", type=str.lower,
                   choices=("debug", "info", "warning", "error"),
                   help="log on stderr from this level up (default info: connections, "
                        "refusals, devices joining, leaving, idle and lagging, status)")
    p.add_argument("--log-format", default="text", choices=("text", "json"),
                   help="text lines, or one JSON object per line (default text)")
    p.add_argument("--status-every", default="60s", metavar="DURATION",
                   help="log a status line this often (default 60s; 0s: never): devices, "
                        "events/s, late events, the device furthest behind")


def _seconds(text: str, what: str) -> float:
    try:
        ns = to_duration_ns(text)
    except ValueError as err:
        raise UsageError(what, f"{text!r}: {err}") from None
    if ns <= 0:
        raise UsageError(what, f"{text!r}; expected a positive duration such as 30s")
    return ns / NS_PER_S


def _duration_or_none(text: str | None, what: str, zero: bool = False) -> Nanoseconds | None:
    """``text`` as ns (``None`` stays ``None``); a usage error naming ``what`` otherwise."""
    if text is None:
        return None
    try:
        ns = to_duration_ns(text)
    except ValueError as err:
        raise UsageError(what, f"{text!r}: {err}") from None
    if ns < 0 or (ns == 0 and not zero):
        raise UsageError(what, f"{text!r}; expected a {'' if zero else 'positive '}duration "
                         "such as 2s")
    return Nanoseconds(ns)


def _instant(t: int | None) -> str:
    return "none yet" if t is None else format_instant(t)


def _positive(n: int, what: str) -> int:
    if n < 1:
        raise UsageError(what, f"{n}; expected a number of events >= 1")
    return n


def _policy(args: argparse.Namespace):
    from operators.policies import resolve_policy

    delay = args.delay if args.delay is not None else ("5m" if args.policy == "goldilocks"
                                                       else 0)
    try:
        return resolve_policy(args.policy, delay=delay, on_late=args.on_late)
    except ValueError as err:
        raise UsageError("delay" if args.delay is not None else "policy", str(err)) from None


def _address(text: str, what: str) -> tuple[str, int]:
    from goldilocks.net.transport import parse_address

    try:
        return parse_address(text, what)
    except InputError as err:
        raise UsageError(what, str(err)) from None


async def _serve(args: argparse.Namespace) -> int:
    from goldilocks.net import Server, load_tokens
    from goldilocks.net.server import StartError
    from goldilocks.net.watch import LOG, Watch

    ws = _address(args.listen, "--listen")
    tcp = _address(args.tcp, "--tcp") if args.tcp else None
    shutdown = _seconds(args.shutdown_timeout, "--shutdown-timeout")
    status_every = _duration_or_none(args.status_every, "--status-every", zero=True)
    every = None
    if args.checkpoint_every is not None:
        if args.checkpoint is None:
            raise UsageError("--checkpoint-every", "goes with --checkpoint FILE")
        every = _seconds(args.checkpoint_every, "--checkpoint-every")
    if args.checkpoint is not None:
        from goldilocks.outputs import check_outputs

        check_outputs([args.token_file], {"--checkpoint": args.checkpoint})
    server = Server(_policy(args), tokens=load_tokens(args.token_file),
                    idle_timeout=_seconds(args.idle_timeout, "--idle-timeout"),
                    setup_timeout=_seconds(args.setup_timeout, "--setup-timeout"),
                    max_frame=args.max_frame, max_connections=args.max_connections,
                    prefetch=args.prefetch, out_dir=args.out_dir,
                    subscriber_lag=_positive(args.subscriber_lag, "--subscriber-lag"),
                    part_events=args.part_events,
                    part_seconds=_seconds(args.part_seconds, "--part-seconds"),
                    max_drift=_duration_or_none(args.max_drift, "--max-drift", zero=True),
                    idle_after=_duration_or_none(args.idle_after, "--idle-after"),
                    checkpoint=args.checkpoint, checkpoint_every=every)
    try:
        await server.start(ws=ws, tcp=tcp)
    except StartError as err:  # one line naming the option, not a traceback
        if err.what == "out_dir":  # an output it cannot write: checked before any work
            raise UsageError("--out-dir", f"{err.target}: {err.reason}") from None
        option = "--listen" if err.what == "ws" else "--tcp"
        raise InputError(f"{option} {err.target}: {err.reason}") from None
    if server.restored:
        union = server.union
        assert union is not None
        LOG.info("restored from %s: %d devices to re-attach, output CTI %s, merged stream "
                 "at position %d", args.checkpoint, len(union.detached()),
                 _instant(union.stats().output_cti), server.stats().position,
                 extra={"event": "restored", "checkpoint": args.checkpoint})
    watch = Watch(server, status_every=None if not status_every else status_every / NS_PER_S)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals: list[int] = []

    def on_signal(sig: int) -> None:
        signals.append(sig)
        if len(signals) == 1:
            stop.set()
        else:
            _force(sig, args)

    for sig in (signal.SIGINT, signal.SIGTERM):  # before saying it listens: a signal sent
        loop.add_signal_handler(sig, on_signal, sig)  # as soon as it does stops it in order
    watching = asyncio.create_task(watch.run())
    for url in (server.ws_url, server.tcp_url):
        if url:
            print(f"listening on {url}", flush=True)
    await stop.wait()
    watching.cancel()
    s = server.stats()
    LOG.info("stopping on %s: %d connections, %d subscribers; waiting up to %s for the "
             "output to end (%s again to force the exit)",
             signal.Signals(signals[0]).name, len(s.connections),
             server.output.stats().subscribers if server.output is not None else 0,
             args.shutdown_timeout, "Ctrl-C" if signals[0] == signal.SIGINT else "a signal",
             extra={"event": "stopping", "signal": signal.Signals(signals[0]).name})
    ended = await server.close(timeout=shutdown)
    _summary(server, watch, args)
    if not ended:
        LOG.warning("the output had not ended %s after the signal; subscribers still behind "
                    "were cut off and the last file part may lack events",
                    args.shutdown_timeout, extra={"event": "shutdown_timeout"})
        return 1
    return 0


def _force(sig: int, args: argparse.Namespace) -> None:
    """A second signal: exit now, as a crash would (the files stay as a crash leaves them:
    the next start goes on from them, or from the checkpoint)."""
    from goldilocks.net.watch import LOG

    after = (f"the next start resumes from the last checkpoint in {args.checkpoint}"
             if args.checkpoint else "the last parts are published at the next start"
             if args.out_dir else "nothing was kept")
    LOG.warning("forced exit on a second %s: the output was not ended in order; %s",
                signal.Signals(sig).name, after, extra={"event": "forced"})
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    os._exit(128 + sig)


#: Rows of the summary table at most (the devices with the most late events first).
_TABLE_ROWS = 50


def _summary(server, watch, args: argparse.Namespace) -> None:
    """The summary at the end: one line of totals, then one row per device — this run's
    counts; after a restore, what the checkpoint carried is said apart. Text: the line and a
    table on stderr (at most ``_TABLE_ROWS`` rows: those with the most late events). JSON:
    one ``summary`` record and one ``device`` record per device."""
    from engine.times import MAX_TIME, format_duration_ns
    from goldilocks.net.watch import LOG, summarize

    s = server.stats()
    u = s.union
    assert u is not None  # the server was started
    c = watch.carried_totals if server.restored else None
    emitted, dropped, adjusted = (u.emitted - (c.emitted if c else 0),
                                  u.dropped - (c.dropped if c else 0),
                                  u.adjusted - (c.adjusted if c else 0))
    devices = summarize(u.inputs)
    end = " (the last at +inf: the end of the stream)" if s.output_ctis and \
        u.output_cti == MAX_TIME else ""
    line = (f"serve: {s.connections_total} connections ({s.auth_failures} refused at setup, "
            f"{sum(n for _, n in s.protocol_errors)} protocol errors); "
            f"{s.events_received} events received, {s.events_refused} refused; "
            f"{emitted} emitted, {dropped} late dropped, {adjusted} adjusted, "
            f"{s.output_ctis} CTIs{end}; {len(devices)} devices"
            + (f"; edges: {u.edges.opened} opened, {u.edges.closed} closed "
               f"({u.edges.moved} moved), {u.edges.unmatched} unmatched"
               if u.edges is not None and (u.edges.opened or u.edges.unmatched) else "")
            + (f"; {s.duplicates} resent events skipped" if s.duplicates else "")
            + (f"; {s.subscribers_cut} subscribers cut off (too slow)"
               if s.subscribers_cut else "")
            + (f"; {s.checkpoints} checkpoints written to {args.checkpoint}"
               + (f" ({s.checkpoint_misses} missed)" if s.checkpoint_misses else "")
               if args.checkpoint else "")
            + (f"; counts of this run: the checkpoint carried {c.received} received, "
               f"{c.emitted} emitted, {c.dropped} late dropped, {c.adjusted} adjusted"
               if c is not None else ""))
    rows = [(d, d.minus(watch.carried.get(name))) for name, d in devices.items()]
    if args.log_format == "json":  # the summary is shown whatever the level
        LOG.handle(LOG.makeRecord(LOG.name, logging.INFO, __file__, 0, "%s", (line,), None,
                                  extra={"event": "summary", "received": s.events_received,
                                         "emitted": emitted, "dropped": dropped,
                                         "adjusted": adjusted, "devices": len(devices)}))
        for total, run in rows:
            LOG.handle(LOG.makeRecord(
                LOG.name, logging.INFO, __file__, 0, "device %r: %d received, %d emitted, "
                "%d late dropped, %d adjusted", (run.name, run.received, run.emitted,
                                                 run.dropped, run.adjusted), None,
                extra={"event": "device", "device": run.name, "state": run.state,
                       "received": run.received, "emitted": run.emitted,
                       "dropped": run.dropped, "adjusted": run.adjusted, "ctis": run.ctis,
                       "carried": total.received - run.received,
                       "last_cti": run.last_cti, "lag": run.lag}))
        return
    print(line, file=sys.stderr, flush=True)
    if not rows:
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    columns = ["device", "state", "received", "emitted", "dropped", "adjusted", "CTIs",
               "last CTI", "lag"] + (["carried"] if c is not None else [])
    for col in columns:
        table.add_column(col, justify="left" if col in ("device", "state", "last CTI")
                         else "right")
    shown = sorted(rows, key=lambda r: -(r[1].dropped + r[1].adjusted))[:_TABLE_ROWS] \
        if len(rows) > _TABLE_ROWS else rows
    for total, run in shown:
        table.add_row(run.name, run.state, str(run.received), str(run.emitted),
                      str(run.dropped), str(run.adjusted), str(run.ctis),
                      "—" if run.last_cti is None else _instant(run.last_cti),
                      "—" if run.lag is None else format_duration_ns(run.lag),
                      *([str(total.received - run.received)] if c is not None else []))
    console = Console(file=sys.stderr, width=None if sys.stderr.isatty() else 160)
    console.print(table)
    if len(shown) < len(rows):
        console.print(f"{len(rows) - len(shown)} more devices, none with more late events "
                      "(--log-format json lists every device)", highlight=False)


def _run(args: argparse.Namespace) -> int:
    try:
        import websockets  # noqa: F401  (the 'net' extra)
    except ImportError:
        # one line and status 2, as --plot without matplotlib, instead of a traceback from
        # deep inside start(); no argument is at fault, so not a UsageError
        print("goldilocks serve: error: needs websockets, which is not installed: "
              "pip install 'goldilocks[net]'", file=sys.stderr)
        return 2
    from goldilocks.net.watch import logging_to

    with logging_to(args.log_level, args.log_format):
        return asyncio.run(_serve(args))


SERVE = Command("serve", "merge device streams published over WebSocket/TCP", _configure,
                _run, description=_HELP)
