"""The one code table (``engine.codes``): every other form of a code — the packages' constants,
the numpy kernels' tables, Spark's and the Java plan's — takes it from there or matches it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine import event, policy
from engine.codes import REASON_TEXTS, Action, Decision, Kind, Reason, texts

ROOT = Path(__file__).resolve().parents[2]
JAVA = ROOT / "spark_adapter" / "java" / "goldilocks" / "spark"

#: Java names that differ from the table's: the stage's task returns 0 for a row on time
JAVA_ALIASES = {"ON_TIME": Reason.NONE}


def test_codes_are_unique_and_text_names_round_trip():
    for enum in (Kind, Decision, Action, Reason):
        assert len({int(m) for m in enum}) == len(enum), enum  # no alias hides a code
        for member in enum:
            assert enum.of(member.text) is member
            assert member.text == member.name.lower()
    with pytest.raises(ValueError, match="'cti'"):
        Kind.of("ctl")


def test_text_tables_are_indexed_by_code():
    assert REASON_TEXTS[Reason.NONE] is None
    for member in Reason:
        if member is not Reason.NONE:
            assert REASON_TEXTS[member] == member.text
    assert texts(Action, none=Action.ON_TIME)[:4] == (None, "adjusted", "dropped", "rejected")


def test_every_package_takes_its_codes_from_the_table():
    from eventlog import format as log_format
    from operators import edges, robust_columns, windows
    from operators.union import merge
    from goldilocks import edge_rows

    assert (event.CTI, event.START, event.END) == (Kind.CTI.text, Kind.START.text, Kind.END.text)
    assert (event.DROPPED, event.ADJUSTED, event.UNMATCHED) == (
        Action.DROPPED.text, Action.ADJUSTED.text, Action.UNMATCHED.text)
    assert (policy.EMIT, policy.EMIT_ADJUSTED, policy.DROP_LATE, policy.CTI_EMIT,
            policy.CTI_SUPPRESS) == tuple(Decision)[:5]
    assert {name: log_format.ALL_KIND_CODES[name] for name in log_format.ALL_KIND_CODES} == {
        k.text: int(k) for k in Kind}
    assert robust_columns.REASONS == REASON_TEXTS
    assert windows.WINDOW_CLOSED == Action.WINDOW_CLOSED.text
    assert merge.RESUMED == Reason.RESUMED.text
    assert edge_rows.NO_ACTION == Decision.NONE
    for name in ("NO_START", "DUPLICATE", "NOT_CLOSED", "FULL", "START_DROPPED", "END_EDGE"):
        assert getattr(edges, name) == Reason[name].text


def test_the_stage_spec_takes_its_codes_from_the_table():
    from spark_adapter import stage_spec as spec  # no pyspark import

    assert (spec.ON_TIME, spec.ADJUSTED, spec.DROPPED, spec.REJECTED) == tuple(Action)[:4]
    for name in ("NULL_TIME", "TIME_RANGE", "UNSCALED_S", "UNSCALED_MS", "UNSCALED_US",
                 "NULL_SOURCE", "NULL_KIND", "UNKNOWN_KIND", "BAD_END", "SOURCE_CTI",
                 "MERGED_CTI", "PUBLISHED", "IDLE_SOURCE"):
        assert getattr(spec, name) == Reason[name], name
    assert (spec.RULE_QUANTILE, spec.RULE_MAX_AHEAD, spec.RULE_GOLDILOCKS) == (
        Reason.QUANTILE, Reason.MAX_AHEAD, Reason.GOLDILOCKS)
    assert spec.KIND_CTI == Kind.CTI


def java_int_constants(path: Path) -> dict[str, int]:
    """``static final int NAME = N;`` of a Java source."""
    found = re.findall(r"static\s+final\s+int\s+([A-Z_][A-Z0-9_]*)\s*=\s*(-?\d+)\s*;",
                       path.read_text(encoding="utf-8"))
    return {name: int(value) for name, value in found}


def test_java_reason_codes_match_the_table():
    """The Java plan's reason codes (``StageTask``) are hand-written: any difference from
    ``engine.codes.Reason`` fails here, naming the constant."""
    constants = java_int_constants(JAVA / "StageTask.java")
    codes = {name: value for name, value in constants.items()
             if name in JAVA_ALIASES or name in Reason.__members__}
    assert {"ON_TIME", "NULL_TIME", "TIME_RANGE", "NULL_SOURCE", "SOURCE_CTI",
            "MERGED_CTI"} <= set(codes), constants
    table = {name: int(JAVA_ALIASES[name] if name in JAVA_ALIASES else Reason[name])
             for name in codes}
    wrong = {name: (value, table[name]) for name, value in codes.items() if value != table[name]}
    assert not wrong, f"StageTask.java (java value, engine.codes value): {wrong}"


def test_java_sources_hold_no_other_code_table():
    """Only ``StageTask`` holds codes; a new int constant named like a code in another Java
    source must be added to the check above."""
    for path in sorted(JAVA.glob("*.java")):
        if path.name == "StageTask.java":
            continue
        named = set(java_int_constants(path)) & (set(Reason.__members__) | set(JAVA_ALIASES)
                                                 | set(Action.__members__)
                                                 | set(Kind.__members__))
        assert not named, f"{path.name} defines codes {sorted(named)}: check them here"
