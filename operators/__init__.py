"""Goldilocks operators: processors over temporal streams (DESIGN.md §3).

The dynamic ``Union`` and its policies, the single-stream ``cti_sync``, CTI generation,
reordering, fan-out, and the per-element basics.
"""

from operators.basic import filter, map, scan
from operators.late import LateOutput, LateStats
from operators.policies import goldilocks, max_policy, min_policy
from operators.temporal import TemporalOperator, advance_time, broadcast, cti_sync, reorder
from operators.union import Emitter, InputHandle, InputStats, Union, UnionStats

__all__ = [
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
    "cti_sync",
    "advance_time",
    "reorder",
    "broadcast",
    "TemporalOperator",
    "map",
    "filter",
    "scan",
]
