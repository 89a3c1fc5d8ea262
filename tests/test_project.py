"""Project-level promises: the README's commands are what CI runs; the layers stay layered."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.S)


def test_readme_opens_with_exactly_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    head = text.split("## ", 1)[0]
    blocks = re.findall(r"```bash\n(.+?)\n```", head, flags=re.S)
    assert len(blocks) == 2, blocks
    assert all("\n" not in block for block in blocks), "each command is one line to paste"
    assert "goldilocks replay" in blocks[0]
    assert "pytest" in blocks[1] and "pytest" not in blocks[0]


def test_ci_runs_the_readme_test_command_word_for_word():
    test_command = _readme_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command_lines = [line for line in ci.splitlines() if line and not line.startswith("#")]
    assert test_command in command_lines, (test_command, command_lines)


def _imports(package: str) -> list[tuple[Path, int, str]]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.append((path.relative_to(ROOT), node.lineno, name.split(".")[0]))
    return found


@pytest.mark.parametrize("package, forbidden", [
    ("engine", {"operators", "spark_adapter", "pyspark", "benchmarks"}),
    ("operators", {"spark_adapter", "pyspark", "benchmarks"}),
])
def test_layering(package, forbidden):
    """DESIGN §2: engine imports neither operators nor pyspark; only spark_adapter imports
    pyspark — at any depth, lazily or not."""
    bad = [f"{path}:{line}: imports {name}" for path, line, name in _imports(package)
           if name in forbidden]
    assert not bad, "\n".join(bad)


def test_importlib_is_not_used_to_dodge_the_layering():
    for package in ("engine", "operators"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for name in ("operators", "pyspark", "spark_adapter"):
                if package == name:
                    continue
                assert f'import_module("{name}' not in text, path


@pytest.mark.parametrize("package", ["engine", "operators", "spark_adapter"])
def test_every_module_declares_its_surface(package):
    missing = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {t.id for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        if "__all__" not in names and path.name != "__main__.py":
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"modules without __all__: {missing}"


def test_public_names_of_the_design_exist():
    import engine
    import operators

    for name in ("Publisher", "Subscriber", "Subscription", "Processor", "MAX_DEMAND",
                 "from_iterable", "empty", "failed", "from_async_iterable", "collect",
                 "iterate", "CallbackSubscriber", "pipe", "transform", "Event"):
        assert hasattr(engine, name), name
    assert engine.MAX_DEMAND == 2**63 - 1
    for name in ("Union", "goldilocks", "min_policy", "max_policy", "cti_sync", "map",
                 "filter", "scan", "advance_time", "reorder", "broadcast"):
        assert hasattr(operators, name), name


def test_readme_python_example_runs(capsys):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.+?)\n```", text, flags=re.S)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "late: LateRecord(input='B'" in out
    assert "Event.cti(9223372036854775807)" in out  # the final CTI at +infinity
    assert out.index("Event.point(1795334400000000000") < out.index("Event.cti(17953344")
