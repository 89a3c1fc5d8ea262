"""Goldilocks operators: processors over temporal streams (design.md §3).

The dynamic ``Union`` and its policies, the single-stream ``cti_sync``, CTI generation,
reordering, windows closed by CTIs, fan-out, and the per-element basics.
"""

from operators.basic import filter, map, scan
from operators.columnar import goldilocks_columns
from operators.edges import EdgePolicy, EdgeStats, with_edges
from operators.late import LateOutput, LateStats
from operators.policies import (
    GoldilocksPolicy,
    HighState,
    MinPolicy,
    MinState,
    goldilocks,
    max_policy,
    min_policy,
    quantile_policy,
)
from operators.reorder_buffer import ReorderBuffer
from operators.timegen import AdvanceTime
from operators.temporal import TemporalOperator, advance_time, broadcast, cti_sync, reorder
from operators.union import Emitter, InputHandle, InputStats, Union, UnionStats
from operators.windows import (
    WINDOW_CLOSED,
    Fold,
    WindowOperator,
    WindowResult,
    Windows,
    WindowStats,
    fold,
    hopping,
    tumbling,
)

__all__ = [
    "with_edges",
    "EdgePolicy",
    "EdgeStats",
    "Union",
    "InputHandle",
    "Emitter",
    "InputStats",
    "UnionStats",
    "LateOutput",
    "LateStats",
    "goldilocks",
    "min_policy",
    "max_policy",
    "quantile_policy",
    "GoldilocksPolicy",
    "MinPolicy",
    "HighState",
    "MinState",
    "goldilocks_columns",
    "AdvanceTime",
    "ReorderBuffer",
    "cti_sync",
    "advance_time",
    "reorder",
    "broadcast",
    "TemporalOperator",
    "map",
    "filter",
    "scan",
    "tumbling",
    "hopping",
    "fold",
    "Fold",
    "Windows",
    "WindowOperator",
    "WindowResult",
    "WindowStats",
    "WINDOW_CLOSED",
]
