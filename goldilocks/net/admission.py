"""Who gets into a server, and how many: the tokens, and the slots of its connections.

A connection takes a slot in setup when it arrives (``max_pending`` of them, apart from the
``max_connections`` set up), and a slot set up once its ``setup`` frame names an accepted
token. When every slot in setup is taken, the oldest connection in setup is let go for the
new one if it has had a tenth of the setup timeout (a device sends its setup at once), so
sockets that never set up cannot keep devices out; in a burst of new connections the newest
is refused instead. Tokens are compared in constant time, every one of them, and never
logged. ``docs/protocol.md``, "Before setup", says what a client sees.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable

from engine.errors import InputError
from goldilocks.net.connection import Connection
from goldilocks.net.protocol import ProtocolError

__all__ = ["Admission", "load_tokens"]

_log = logging.getLogger("goldilocks.net")


def load_tokens(path: str) -> list[str]:
    """Tokens from a file: one per line; blank lines and ``#`` comments are ignored."""
    try:
        with open(path, encoding="utf-8") as f:
            tokens = [line.strip() for line in f
                      if line.strip() and not line.lstrip().startswith("#")]
    except OSError as err:
        raise InputError(f"token file {path!r}: {err.strerror}; expected a readable file "
                         "with one token per line") from err
    if not tokens:
        raise InputError(f"token file {path!r} holds no token; expected one token per line")
    return tokens


class Admission:
    """A server's tokens and connection slots, and what it counted of them (see the module
    doc). Runs on the server's loop only."""

    __slots__ = ("_tokens", "max_connections", "max_pending", "setup_timeout", "pending",
                 "authenticated", "refused", "auth_failures", "evictions", "closing")

    def __init__(self, tokens: Iterable[str], *, max_connections: int, max_pending: int,
                 setup_timeout: float) -> None:
        self._tokens = [t.encode("utf-8") for t in tokens]
        self.max_connections = max_connections
        self.max_pending = max_pending
        self.setup_timeout = setup_timeout
        self.pending: dict[Connection, float] = {}  # in setup: since when, oldest first
        self.authenticated = 0   # connections set up now
        self.refused = 0         # connections refused for want of a slot
        self.auth_failures = 0
        self.evictions = 0       # connections in setup let go for a newer one
        self.closing = False     # the server is closing: nobody new gets in

    def check_token(self, token: str | None) -> bool:
        if token is None:
            return False
        given = token.encode("utf-8", "surrogatepass")
        ok = False
        for accepted in self._tokens:  # every token compared, in constant time each
            ok |= hmac.compare_digest(given, accepted)
        return ok

    def refusal(self, now: float) -> tuple[str, str] | None:
        """Why a connection arriving at ``now`` cannot be taken in — the error message and
        the close reason — or None, when there is a slot in setup for it (made by letting
        the oldest connection in setup go, if need be)."""
        if self.authenticated >= self.max_connections or self.closing:
            self.refused += 1
            return (f"the server has {self.authenticated} connections; at most "
                    f"{self.max_connections} are allowed", "too many connections")
        if len(self.pending) >= self.max_pending:
            oldest, since = next(iter(self.pending.items()))
            if now - since < self.setup_timeout / 10:
                self.refused += 1
                return (f"{len(self.pending)} connections are in setup; try again",
                        "too many connections in setup")
            del self.pending[oldest]
            self.evictions += 1
            _log.info("letting go of %s: still in setup after %.1f s, and %d connections "
                      "are", oldest.transport.peer, now - since, self.max_pending)
            oldest.evict()
        return None

    def arrived(self, conn: Connection, now: float) -> None:
        """``conn`` takes its slot in setup."""
        self.pending[conn] = now

    def set_up(self, conn: Connection, token: str | None) -> None:
        """``conn`` named ``token`` in its setup: it moves to a slot set up, or
        ``ProtocolError`` says why not (``unauthorized``, ``too_many``)."""
        if not self.check_token(token):
            self.auth_failures += 1
            raise ProtocolError("unauthorized", "setup refused: missing or wrong token")
        self.pending.pop(conn, None)
        if self.authenticated >= self.max_connections:
            self.refused += 1
            raise ProtocolError("too_many", f"the server has {self.authenticated} "
                                f"connections; at most {self.max_connections} are allowed")
        self.authenticated += 1

    def left(self, conn: Connection, authenticated: bool) -> None:
        """``conn`` is gone: its slot is free."""
        self.pending.pop(conn, None)
        if authenticated:
            self.authenticated -= 1
