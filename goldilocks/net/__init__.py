"""Device streams over the network: the wire protocol, a server running a ``Union`` behind it,
and a client (``docs/protocol.md``).

::

    from goldilocks.net import Server, connect
    server = await Server(goldilocks("5m"), tokens=["s3cret"]).start(ws=("127.0.0.1", 0))
    client = await connect(server.ws_url, token="s3cret")
    await client.publish(from_iterable(events), device="thermo-1").wait()

With ``Server(checkpoint=…, out_dir=…)`` every event a device sends is in the files exactly
once across crashes of the server: the client keeps what is not yet durable and resends it
from the position the server gives when it comes back (``docs/protocol.md``, "Exactly
once").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goldilocks.net.admission import load_tokens
    from goldilocks.net.client import (Client, ClientStats, Publication, PublicationStats,
                                       RemoteOutput, connect)
    from goldilocks.net.connection import ConnectionStats
    from goldilocks.net.protocol import (DEFAULT_MAX_FRAME, VERSION, ConnectionLost,
                                         ProtocolError, RemoteError, decode_events,
                                         decode_frame)
    from goldilocks.net.server import Server, ServerStats

#: where each public name lives: the modules are imported on first use of a name, so that
#: importing a light submodule (``goldilocks.net.cli``, which the command line registers)
#: does not import the server, the client and everything under them
_HOME = {
    "Client": "client", "ClientStats": "client", "Publication": "client",
    "PublicationStats": "client", "RemoteOutput": "client", "connect": "client",
    "DEFAULT_MAX_FRAME": "protocol", "VERSION": "protocol", "ConnectionLost": "protocol",
    "ProtocolError": "protocol", "RemoteError": "protocol", "decode_events": "protocol",
    "decode_frame": "protocol", "load_tokens": "admission",
    "ConnectionStats": "connection", "Server": "server", "ServerStats": "server",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'goldilocks.net' has no attribute {name!r}")
    module: Any
    if home == "client":
        from goldilocks.net import client as module
    elif home == "protocol":
        from goldilocks.net import protocol as module
    elif home == "admission":
        from goldilocks.net import admission as module
    elif home == "connection":
        from goldilocks.net import connection as module
    else:
        from goldilocks.net import server as module
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


__all__ = [
    "Server",
    "ServerStats",
    "ConnectionStats",
    "load_tokens",
    "connect",
    "Client",
    "ClientStats",
    "Publication",
    "PublicationStats",
    "RemoteOutput",
    "ProtocolError",
    "RemoteError",
    "ConnectionLost",
    "decode_frame",
    "decode_events",
    "VERSION",
    "DEFAULT_MAX_FRAME",
]
