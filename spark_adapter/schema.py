"""Column names, schemas and the exact CTI <-> Spark watermark relation. No pyspark import.

The event-log DataFrame (``read_event_log``, the ``"goldilocks"`` source) has the Parquet
columns of ``docs/event-log.md`` followed by three that fix the arrival order across files:

==============  ========  ===================================================================
column          type      meaning
==============  ========  ===================================================================
``seq``         bigint    the record's ``seq`` field (null when absent)
``source``      string    the input (device); null only on a merged-stream CTI
``kind``        string    ``insert``, ``cti``, ``join``, ``leave``, or an edge: ``start``, ``end``
``start``       bigint    ns since the epoch, UTC (null on ``join``/``leave``)
``end``         bigint    ns; null for a point, a start edge and for non-inserts
``payload``     string    the payload as compact JSON text; null when absent or ``null``
``id``          string    an edge's ``id`` as compact JSON text (``"front"``, ``7``): a string
                          and an integer stay apart, as the engine keeps them; null elsewhere
``arrival``     bigint    the record's ``arrival`` field in ns (null when absent)
``order_key``   bigint    the file's order key: ``arrival``, else ``seq``, else the position
``file_index``  int       the file's position in the list of paths (the merge tie-break)
``line``        bigint    the record's line in its file (1-based; CSV header is line 1)
==============  ========  ===================================================================

Replay order is ``ORDER_COLUMNS = (order_key, file_index, line)``, exactly the engine's merge
key (``docs/event-log.md``, "Arrival order and the merge").

CTI and Spark watermark. Spark keeps its watermark in milliseconds, computes it between
micro-batches as ``max(event time) - threshold`` and counts an event *at* the watermark as
late, while a CTI ``c`` keeps an event at ``c``. The watermarking stage therefore publishes
``c`` with a threshold of one millisecond, and Spark reports ``cti_to_watermark_ms(c)`` from
the micro-batch after the one that made it:

>>> cti_to_watermark_ms(1_795_334_400_000_000_000)       # 2026-11-22T08:00:00Z
1795334399999
>>> cti_to_watermark_ms(1_500_000)                          # sub-millisecond digits drop
0
>>> watermark_ms_to_cti(1795334399999)
1795334400000000000
"""

from __future__ import annotations

from engine.codes import Kind

__all__ = [
    "SOURCE_NAME",
    "EVENT_LOG_COLUMNS",
    "EVENT_LOG_SCHEMA",
    "ORDER_COLUMNS",
    "KIND_INSERT",
    "KIND_CTI",
    "KIND_JOIN",
    "KIND_LEAVE",
    "KIND_START",
    "KIND_END",
    "WATERMARK_THRESHOLD",
    "cti_to_watermark_ms",
    "watermark_ms_to_cti",
]

#: The short name the streaming (and batch) data source is registered under.
SOURCE_NAME = "goldilocks"

KIND_INSERT = Kind.INSERT.text  # the text names of engine.codes.Kind
KIND_CTI = Kind.CTI.text
KIND_JOIN = Kind.JOIN.text
KIND_LEAVE = Kind.LEAVE.text
KIND_START = Kind.START.text  # edges (TS §7): matched by (source, id)
KIND_END = Kind.END.text

#: (name, Spark SQL type) of the event-log DataFrame, in order.
EVENT_LOG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("seq", "BIGINT"),
    ("source", "STRING"),
    ("kind", "STRING"),
    ("start", "BIGINT"),
    ("end", "BIGINT"),
    ("payload", "STRING"),
    ("id", "STRING"),
    ("arrival", "BIGINT"),
    ("order_key", "BIGINT"),
    ("file_index", "INT"),
    ("line", "BIGINT"),
)
#: The same as a DDL string (names back-quoted: ``end`` is an SQL keyword).
EVENT_LOG_SCHEMA = ", ".join(f"`{name}` {sql}" for name, sql in EVENT_LOG_COLUMNS)

#: The replay order: the engine's merge key (order key, file index, line).
ORDER_COLUMNS = ("order_key", "file_index", "line")

#: The delay given to Spark's ``withWatermark`` on the stage's CTI column: an event exactly at
#: a CTI is on time for the engine but "late" for Spark at its watermark, hence one millisecond.
WATERMARK_THRESHOLD = "1 millisecond"

_NS_PER_US = 1_000
_US_PER_MS = 1_000


def _trunc_div(a: int, b: int) -> int:
    """Java's ``long / long`` (rounds toward zero), which Spark uses for micros -> millis."""
    q = abs(a) // b
    return q if a >= 0 else -q


def cti_to_watermark_ms(cti: int) -> int:
    """The watermark (ms since the epoch) Spark reports once the stage has emitted CTI ``cti``.

    ``cti`` is in ns. The stage stores it as a timestamp (floor to microseconds); Spark takes
    whole milliseconds of it (rounding toward zero) and subtracts the 1 ms threshold. Spark
    never reports a watermark below 0 (its initial value), so CTIs up to the first millisecond
    after the epoch map to 0.
    """
    micros = cti // _NS_PER_US
    return max(0, _trunc_div(micros, _US_PER_MS) - 1)


def watermark_ms_to_cti(watermark_ms: int) -> int:
    """The CTI (ns) of a reported watermark, exact for CTIs on whole milliseconds."""
    return (watermark_ms + 1) * _US_PER_MS * _NS_PER_US
