"""The checkpoint format, and the codecs of the state it holds (``docs/checkpoint.md``).

A checkpoint is bytes: a fixed header, then one JSON document (orjson)::

    offset  size  field
    0       8     magic  b"GLDLCKPT"
    8       2     format version, big-endian (``VERSION``)
    10      2     flags, 0
    12      8     length of the body in bytes, big-endian
    20      4     CRC-32 of the body (``zlib.crc32``), big-endian
    24      …     the body: a JSON object whose ``"kind"`` says what it holds ("union",
                  "replay")

Nothing is pickled: every value in the body is JSON — ints, strings, lists, objects, and
events' payloads as the JSON values they are. ``unpack`` checks everything it can before a
caller uses any of it (TS §8.2): a foreign file, a newer format, a truncated or corrupted
body each raise a ``CheckpointError`` that says which, so a bad checkpoint changes nothing.

The codecs: events and late records as JSON arrays (``encode_event``/``decode_event``…),
a policy's description (``describe_policy``, compared on restore) and its state
(``encode_state``/``decode_state``: the built-in states by name; a policy of another package
gives its own with ``encode_state``/``decode_state`` methods). ``Windows`` and
``ReorderBuffer`` keep their own state through these (``snapshot``/``load``).

>>> data = pack("union", {"answer": 42})
>>> data[:8], unpack(data, "union")["answer"]
(b'GLDLCKPT', 42)
>>> unpack(data[:-1], "union")
Traceback (most recent call last):
...
operators.checkpoint.CheckpointError: checkpoint: truncated: the header announces 28 bytes of body, 27 are there
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson

from engine.errors import GoldilocksError, InputError
from engine.event import CTI, END, INTERVAL, KINDS, POINT, START, Event, LateRecord
from engine.policy import Policy
from operators.edges import EdgeCounts, EdgePolicy, EdgeState
from operators.policies import HighState, MinState
from operators.robust import LiveState

__all__ = ["MAGIC", "VERSION", "HEADER_SIZE", "CheckpointError", "RestoredError", "pack",
           "unpack", "encode_event", "decode_event", "encode_late", "decode_late",
           "describe_policy", "check_policy", "encode_state", "decode_state", "field"]

MAGIC = b"GLDLCKPT"
#: the format this version writes, and the newest it reads
VERSION = 1
_HEADER = struct.Struct(">8sHHQI")
HEADER_SIZE = _HEADER.size


class CheckpointError(InputError):
    """A checkpoint that cannot be used: not one, of a newer format, truncated, corrupted,
    of another kind, or made for another configuration. Raised before anything changed."""


class RestoredError(GoldilocksError):
    """An input's error as a checkpoint recorded it (its text: exceptions are not pickled)."""


# -- the envelope --------------------------------------------------------------------------

def pack(kind: str, body: dict[str, Any]) -> bytes:
    """The checkpoint bytes of ``body`` (a JSON object), marked as ``kind``."""
    try:
        text = orjson.dumps({"kind": kind, **body})
    except TypeError as err:  # a value that is not JSON: say so rather than pickle it
        raise CheckpointError(f"checkpoint: cannot write the {kind}'s state: {err}; every "
                              "payload and accumulator must be a JSON value") from None
    return _HEADER.pack(MAGIC, VERSION, 0, len(text), zlib.crc32(text)) + text


def unpack(data: bytes | bytearray | memoryview, kind: str, where: str = "checkpoint",
           ) -> dict[str, Any]:
    """The body of checkpoint ``data``, checked: magic, version, length, checksum, JSON, and
    that it holds a ``kind``. ``where`` names it in errors (a file name)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CheckpointError(f"{where}: expected checkpoint bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise CheckpointError(f"{where}: empty (0 bytes); expected a checkpoint")
    if len(data) < HEADER_SIZE or not data.startswith(MAGIC):
        if MAGIC.startswith(data[:8]) and len(data) < HEADER_SIZE:
            raise CheckpointError(f"{where}: truncated: {len(data)} bytes, shorter than the "
                                  f"{HEADER_SIZE}-byte header")
        raise CheckpointError(f"{where}: not a Goldilocks checkpoint (it begins with "
                              f"{data[:8]!r}; expected {MAGIC!r})")
    _, version, flags, length, crc = _HEADER.unpack_from(data)
    if version > VERSION:
        raise CheckpointError(f"{where}: written in checkpoint format {version}, newer than "
                              f"this version reads (format {VERSION}); restore it with the "
                              "version that wrote it, or newer")
    if version < 1 or flags:
        raise CheckpointError(f"{where}: corrupted header (format {version}, flags {flags}); "
                              f"expected format 1..{VERSION} and flags 0")
    body = data[HEADER_SIZE:]
    if len(body) < length:
        raise CheckpointError(f"{where}: truncated: the header announces {length} bytes of "
                              f"body, {len(body)} are there")
    if len(body) > length:
        raise CheckpointError(f"{where}: {len(body) - length} bytes after the end of the "
                              f"checkpoint (the header announces {length} bytes of body)")
    if zlib.crc32(body) != crc:
        raise CheckpointError(f"{where}: corrupted: the body's CRC-32 is "
                              f"{zlib.crc32(body):08x}, the header says {crc:08x}")
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as err:  # a matching checksum over bad JSON: a defect
        raise CheckpointError(f"{where}: corrupted: the body is not JSON ({err})") from None
    if not isinstance(obj, dict) or "kind" not in obj:
        raise CheckpointError(f"{where}: malformed: the body is not an object with a 'kind'")
    if obj["kind"] != kind:
        raise CheckpointError(f"{where}: a checkpoint of a {obj['kind']!r}, not of a "
                              f"{kind!r}")
    return obj


def field(obj: Any, name: str, types: type | tuple[type, ...], where: str) -> Any:
    """``obj[name]``, checked to be of ``types`` (``CheckpointError`` naming it otherwise)."""
    if not isinstance(obj, dict) or name not in obj:
        raise CheckpointError(f"{where}: malformed: no field {name!r}")
    value = obj[name]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in
                                        (types if isinstance(types, tuple) else (types,))):
        raise CheckpointError(f"{where}: malformed: field {name!r} is {value!r}")
    return value


# -- events and late records ---------------------------------------------------------------

_KIND_CODE = {POINT: "p", INTERVAL: "i", CTI: "c", START: "s", END: "e"}
_EDGE_CODES = ("s", "e")
_CODE_KIND = {v: k for k, v in _KIND_CODE.items()}
_INT = int
_OPT_INT = (int, type(None))


def encode_event(e: Event) -> list[Any]:
    """``[kind, start, end, payload, source]`` (kind ``p``, ``i`` or ``c``); an edge (kind
    ``s`` or ``e``, TS §7.1) has its ``id`` after them."""
    code = _KIND_CODE[e.kind]
    if code in _EDGE_CODES:
        return [code, e.start, e.end, e.payload, e.source, e.id]
    return [code, e.start, e.end, e.payload, e.source]


def decode_event(a: Any, where: str) -> Event:
    if (not isinstance(a, list) or len(a) != 5 + (a[0] in _EDGE_CODES)
            or a[0] not in _CODE_KIND
            or not isinstance(a[1], int) or not isinstance(a[2], _OPT_INT)
            or not isinstance(a[4], (str, type(None)))
            or (len(a) == 6 and (not isinstance(a[5], (str, int)) or isinstance(a[5], bool)))):
        raise CheckpointError(f"{where}: malformed event {a!r}")
    kind = _CODE_KIND[a[0]]
    assert kind in KINDS
    return Event(kind, a[1], a[2], a[3], a[4], a[5] if len(a) == 6 else None)


def encode_late(r: LateRecord) -> list[Any]:
    return [r.input, encode_event(r.event), r.cti, r.action,
            None if r.adjusted is None else encode_event(r.adjusted), r.reason]


def decode_late(a: Any, where: str) -> LateRecord:
    if (not isinstance(a, list) or len(a) != 6 or not isinstance(a[2], int)
            or not isinstance(a[3], str) or not a[3]):
        raise CheckpointError(f"{where}: malformed late record {a!r}")
    return LateRecord(a[0], decode_event(a[1], where), a[2], a[3],
                      None if a[4] is None else decode_event(a[4], where), a[5])


# -- policies ------------------------------------------------------------------------------

def describe_policy(policy: Policy) -> dict[str, Any]:
    """What a checkpoint records of a policy, to check that it is restored under the same.
    A policy that decides edges (``with_edges``, TS §7) is its policy's description (the
    policy its user chose, named as chosen in errors) with ``edges``, its bound."""
    if isinstance(policy, EdgePolicy):
        return {**describe_policy(policy.policy), "edges": {"max_open": policy.max_open}}
    return {"type": type(policy).__qualname__, "name": policy.name, "delay": policy.delay,
            "on_late": policy.on_late, "repr": repr(policy)}


def check_policy(policy: Policy, recorded: Any, where: str) -> None:
    """``CheckpointError`` unless ``policy`` is described as ``recorded`` (its repr too,
    unless that names an object's address)."""
    now = describe_policy(policy)
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{where}: malformed policy description {recorded!r}")
    keys = [k for k in now if k != "repr" or " at 0x" not in now["repr"]]
    if "edges" not in keys:
        keys.append("edges")  # TS §7: deciding edges or not is part of the policy
    if all(recorded.get(k) == now.get(k) for k in keys):
        return
    was, is_ = recorded.get("edges"), now.get("edges")
    if was != is_ and all(recorded.get(k) == now.get(k) for k in keys if k != "edges"):
        change = (f"deciding edges with {was}, restored with {is_}" if was and is_ else
                  "that decided edges (with_edges), restored with one that does not" if was
                  else "that did not decide edges, restored with one that does (with_edges)")
        raise CheckpointError(f"{where}: taken under the policy {recorded.get('repr')} "
                              f"{change}; expected the same policy (its state means nothing "
                              "to another)")
    raise CheckpointError(f"{where}: taken under the policy {recorded.get('repr')}, "
                          f"restored with {now['repr']}; expected the same policy "
                          "(its state means nothing to another)")


def encode_state(policy: Policy, state: Any) -> dict[str, Any]:
    """A policy state as JSON: the built-in states by name; any other through the policy's
    own ``encode_state(state)`` (a JSON value)."""
    cls = state.__class__
    if cls is EdgeState and isinstance(policy, EdgePolicy):  # TS §7: the policy's state
        return {"type": "edges", "inner": encode_state(policy.policy, state.inner),
                "open": [[None if emitted is None else encode_event(emitted),
                          encode_event(arrived)] for emitted, arrived in state.open.values()],
                "counts": list(state.counts)}
    if cls is HighState:
        return {"type": "high", "high": state.high}
    if cls is MinState:
        return {"type": "min", "high": state.high, "ctis": [list(p) for p in state.ctis]}
    if cls is LiveState:
        return {"type": "live", "high": state.high, "ctis": [list(p) for p in state.ctis],
                "reason": state.reason}
    own = getattr(policy, "encode_state", None)
    if own is None:
        raise CheckpointError(f"checkpoint: the policy {policy!r} keeps a "
                              f"{cls.__qualname__}, which has no checkpoint form; give the "
                              "policy encode_state(state) and decode_state(value) methods")
    return {"type": "custom", "value": own(state)}


def _pairs(value: Any, where: str) -> tuple[tuple[Any, int], ...]:
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[1], int) for p in value):
        raise CheckpointError(f"{where}: malformed policy state: ctis {value!r}")
    return tuple((name, t) for name, t in value)


def decode_state(policy: Policy, obj: Any, where: str) -> Any:
    """The state ``encode_state`` wrote, as ``policy`` keeps it (checked to be its kind)."""
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where}: malformed policy state {obj!r}")
    kind = obj.get("type")
    if isinstance(policy, EdgePolicy) or kind == "edges":
        return _decode_edges(policy, obj, where)
    expected = policy.initial().__class__
    if kind == "custom":
        own = getattr(policy, "decode_state", None)
        if own is None:
            raise CheckpointError(f"{where}: the policy state was written by the policy's "
                                  f"own encode_state, but {policy!r} has no decode_state")
        return own(obj.get("value"))
    classes = {"high": HighState, "min": MinState, "live": LiveState}
    cls = classes.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise CheckpointError(f"{where}: malformed policy state of type {kind!r}")
    if cls is not expected:
        raise CheckpointError(f"{where}: the checkpoint holds a {cls.__name__}, but the "
                              f"policy {policy!r} keeps a {expected.__name__}")
    high = obj.get("high")
    if not isinstance(high, _OPT_INT):
        raise CheckpointError(f"{where}: malformed policy state: high {high!r}")
    if cls is HighState:
        return HighState(high)
    ctis = _pairs(obj.get("ctis"), where)
    if cls is MinState:
        if high is None:
            raise CheckpointError(f"{where}: malformed policy state: high is null")
        return MinState(high, ctis, frozenset(name for name, _ in ctis))
    return LiveState(high, ctis, obj.get("reason"))


def _decode_edges(policy: Policy, obj: dict[str, Any], where: str) -> EdgeState:
    """``with_edges``'s state (``encode_state``): the policy's own state by its codec, the
    open edges in the order they opened, the counts."""
    if not isinstance(policy, EdgePolicy) or obj.get("type") != "edges":
        held = "with" if obj.get("type") == "edges" else "without"
        raise CheckpointError(f"{where}: the checkpoint holds a policy state {held} edges, "
                              f"which the policy {policy!r} does not keep")
    inner = decode_state(policy.policy, obj.get("inner"), where)
    entries = obj.get("open")
    counts = obj.get("counts")
    if not isinstance(entries, list) or len(entries) > policy.max_open:
        raise CheckpointError(f"{where}: malformed policy state: open edges {entries!r}")
    if (not isinstance(counts, list) or len(counts) != len(EdgeCounts._fields)
            or not all(isinstance(c, int) and not isinstance(c, bool) for c in counts)):
        raise CheckpointError(f"{where}: malformed policy state: edge counts {counts!r}")
    table: dict[tuple[Any, Any], tuple[Event | None, Event]] = {}
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 2:
            raise CheckpointError(f"{where}: malformed open edge {entry!r}")
        emitted = None if entry[0] is None else decode_event(entry[0], where)
        arrived = decode_event(entry[1], where)
        if arrived.kind != START or (emitted is not None and emitted.kind != START):
            raise CheckpointError(f"{where}: malformed open edge {entry!r}: expected start "
                                  "edges")
        table[(arrived.source, arrived.id)] = (emitted, arrived)
    return EdgeState(inner, table, EdgeCounts(*counts))
