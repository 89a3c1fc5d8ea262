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

from goldilocks.net.client import (
    Client,
    ClientStats,
    Publication,
    PublicationStats,
    RemoteOutput,
    connect,
)
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
