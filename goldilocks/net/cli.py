"""``goldilocks serve``: run a union behind the network protocol until interrupted.

A built-in subcommand (``goldilocks.cli`` registers it). This module imports no network code
at import time: the server and the ``websockets`` library (the ``net`` extra) are imported
only when ``serve`` runs, so the command line works without the extra.
"""

from __future__ import annotations

import argparse
import asyncio
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
removed, the last parts published (with --checkpoint: after the last checkpoint). Prints 'listening on URL' per
transport on stdout, and a summary on stderr at the end. Exit status: 0 after a stop in
order; 1 if the output had not ended within --shutdown-timeout (remote subscribers still
behind were cut off; the last file part may lack events) or on a token file it cannot use;
2 on a usage error (a bad address, duration, delay or policy) or without the 'net' extra.
Protocol: docs/protocol.md.

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

    ws = _address(args.listen, "--listen")
    tcp = _address(args.tcp, "--tcp") if args.tcp else None
    shutdown = _seconds(args.shutdown_timeout, "--shutdown-timeout")
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
    await server.start(ws=ws, tcp=tcp)
    if server.restored:
        union = server.union
        assert union is not None
        print(f"serve: restored from {args.checkpoint}: {len(union.detached())} devices to "
              f"re-attach, output CTI {_instant(union.stats().output_cti)}, merged stream "
              f"at position {server.stats().position}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before saying it listens: a signal
        loop.add_signal_handler(sig, stop.set)   # sent as soon as it does stops it in order
    for url in (server.ws_url, server.tcp_url):
        if url:
            print(f"listening on {url}", flush=True)
    await stop.wait()
    ended = await server.close(timeout=shutdown)
    s = server.stats()
    u = s.union
    assert u is not None  # the server was started
    print(f"serve: {s.connections_total} connections ({s.auth_failures} refused at setup, "
          f"{sum(n for _, n in s.protocol_errors)} protocol errors); "
          f"{s.events_received} events received, {s.events_refused} refused; "
          f"{u.emitted} emitted, {u.dropped} late dropped, {u.adjusted} adjusted, "
          f"{s.output_ctis} CTIs; {len(u.inputs)} inputs"
          + (f"; edges: {u.edges.opened} opened, {u.edges.closed} closed "
             f"({u.edges.moved} moved), {u.edges.unmatched} unmatched"
             if u.edges is not None and (u.edges.opened or u.edges.unmatched) else "")
          + (f"; {s.duplicates} resent events skipped" if s.duplicates else "")
          + (f"; {s.subscribers_cut} subscribers cut off (too slow)"
             if s.subscribers_cut else "")
          + (f"; {s.checkpoints} checkpoints written to {args.checkpoint}"
             + (f" ({s.checkpoint_misses} missed)" if s.checkpoint_misses else "")
             if args.checkpoint else ""), file=sys.stderr, flush=True)
    if not ended:
        print(f"serve: the output had not ended {args.shutdown_timeout} after the signal; "
              "subscribers still behind were cut off and the last file part may lack "
              "events", file=sys.stderr, flush=True)
        return 1
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        import websockets  # noqa: F401  (the 'net' extra)
    except ImportError:
        # one line and status 2, as --plot without matplotlib, instead of a traceback from
        # deep inside start(); no argument is at fault, so not a UsageError
        print("goldilocks serve: error: needs websockets, which is not installed: "
              "pip install 'goldilocks[net]'", file=sys.stderr)
        return 2
    return asyncio.run(_serve(args))


SERVE = Command("serve", "merge device streams published over WebSocket/TCP", _configure,
                _run, description=_HELP)
