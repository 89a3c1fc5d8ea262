"""docs/vocabulary.md names only what exists: every parameter, option, column and field in
its table is looked up where it is said to be."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "vocabulary.md"

_PARAM = re.compile(r"^([\w.]+)\((\w+)\)$")            # operators.goldilocks(delay)
_ATTR = re.compile(r"^([\w.]+)\.(\w+)$")               # engine.event.LateRecord.action
_OPTION = re.compile(r"^goldilocks (\w+) (--[\w-]+)$")  # goldilocks replay --delay
_COLUMN = re.compile(r"^column (\w+)$")                # a column of a Spark frame
_FIELD = re.compile(r"^field (\w+)$")                  # a field of a record or a late file
_READER_OPTION = re.compile(r"^([\w.]+)` option `(\w+)$")


def _rows() -> list[list[str]]:
    lines = [line for line in DOC.read_text(encoding="utf-8").splitlines()
             if line.startswith("| ") and not line.startswith("| Concept")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def _names() -> list[tuple[str, str]]:
    """``(concept, name)`` of every backticked name in the engine, CLI and Spark columns."""
    found = []
    for row in _rows():
        for cell in row[1:4]:
            for m in re.finditer(r"`([^`]+)` option `(\w+)`", cell):
                found.append((row[0], f"{m.group(1)}` option `{m.group(2)}"))
            cell = re.sub(r"`[^`]+` option `\w+`", "", cell)
            cell = re.sub(r"\([^()`]*`[^`]*`[^()]*\)", "", cell)  # examples in parentheses
            found.extend((row[0], name) for name in re.findall(r"`([^`]+)`", cell))
    return found


def _resolve(dotted: str):
    """The object at ``dotted``: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _options(command: str) -> set[str]:
    import argparse

    from goldilocks.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices[command]._option_string_actions)


def _literal_in(package: str, name: str) -> bool:
    quoted = (f'"{name}"', f"'{name}'")
    return any(q in path.read_text(encoding="utf-8")
               for path in (ROOT / package).rglob("*.py") for q in quoted)


def test_the_table_lists_names_in_every_column():
    names = _names()
    assert len(_rows()) >= 20 and len(names) >= 60


@pytest.mark.parametrize("concept,name", _names(), ids=lambda x: x if len(x) < 60 else None)
def test_every_name_in_the_vocabulary_exists(concept, name):
    if m := _READER_OPTION.match(name):  # an option of a Spark reader, by its name
        assert callable(_resolve(m.group(1))), f"{concept}: {name}"
        assert _literal_in("spark_adapter", m.group(2)), f"{concept}: {name}"
    elif m := _PARAM.match(name):
        target = _resolve(m.group(1))
        assert m.group(2) in inspect.signature(target).parameters, f"{concept}: {name}"
    elif m := _OPTION.match(name):
        assert m.group(2) in _options(m.group(1)), f"{concept}: {name}"
    elif m := _COLUMN.match(name):
        assert _literal_in("spark_adapter", m.group(1)), f"{concept}: {name}"
    elif m := _FIELD.match(name):
        assert _literal_in("eventlog", m.group(1)), f"{concept}: {name}"
    elif m := _ATTR.match(name):
        assert hasattr(_resolve(m.group(1)), m.group(2)), f"{concept}: {name}"
    else:
        pytest.fail(f"{concept}: {name!r} is none of the forms the table uses")
