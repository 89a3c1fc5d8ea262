"""Device streams over the network: the wire protocol, a server running a ``Union`` behind it,
and a client (``docs/protocol.md``).

::

    from goldilocks.net import Server, connect
    server = await Server(goldilocks("5m"), tokens=["s3cret"]).start(ws=("127.0.0.1", 0))
    client = await connect(server.ws_url, token="s3cret")
    await client.publish(from_iterable(events), device="thermo-1").wait()
"""

from goldilocks.net.client import Client, ClientStats, Publication, RemoteOutput, connect
from goldilocks.net.protocol import (
    DEFAULT_MAX_FRAME,
    VERSION,
    ConnectionLost,
    ProtocolError,
    RemoteError,
    decode_events,
    decode_frame,
)
from goldilocks.net.admission import load_tokens
from goldilocks.net.connection import ConnectionStats
from goldilocks.net.server import Server, ServerStats

__all__ = [
    "Server",
    "ServerStats",
    "ConnectionStats",
    "load_tokens",
    "connect",
    "Client",
    "ClientStats",
    "Publication",
    "RemoteOutput",
    "ProtocolError",
    "RemoteError",
    "ConnectionLost",
    "decode_frame",
    "decode_events",
    "VERSION",
    "DEFAULT_MAX_FRAME",
]
