"""Project-level promises: the README's commands are what CI runs; the layers stay layered."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
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


#: design.md §2: each package's floor; an import may point to its own package or to a lower floor
FLOORS = {"engine": 0, "operators": 1, "eventlog": 1, "goldilocks": 2, "spark_adapter": 2}
#: the only run-time look-ups allowed: entry points for third-party policies and commands,
#: and spark_adapter's lazy import of its own modules (PEP 562, so pyspark loads on use)
RUN_TIME_LOOKUPS = {
    ("operators.policies", "entry_points"),
    ("goldilocks.commands", "entry_points"),
    ("spark_adapter", "import_module"),
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in FLOORS:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports_of(module: str, path: Path) -> list[tuple[int, str]]:
    """Every import in the module, at any depth (lazy ones included), as absolute names;
    ``from a import b`` counts as ``a`` and as ``a.b`` (``b`` may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for _, name in _imports_of(module, path):
            target = _resolve(name, modules)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def test_every_import_points_down_or_stays_on_its_floor():
    """design.md §2: an import points to the module's own package or to a lower floor — at any
    depth, lazily or not; only spark_adapter imports pyspark; nothing imports benchmarks."""
    bad = []
    for module, path in _modules().items():
        top = module.split(".")[0]
        for line, name in _imports_of(module, path):
            target = name.split(".")[0]
            where = f"{path.relative_to(ROOT)}:{line}: {module} imports {name}"
            if target in FLOORS and target != top and FLOORS[target] >= FLOORS[top]:
                bad.append(where)
            elif target == "pyspark" and top != "spark_adapter":
                bad.append(where)
            elif target in ("benchmarks", "tests", "examples"):
                bad.append(where)
    assert not bad, "\n".join(bad)


def test_no_import_cycle_between_modules():
    """No module reaches itself through imports (a package's ``__init__`` re-exporting its own
    modules aside): Tarjan's strongly connected components over the whole import graph."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            component.sort()
            head = component[0]
            if len(component) > 1 and not all(m == head or m.startswith(head + ".")
                                               for m in component):
                cycles.append(" <-> ".join(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert not cycles, "\n".join(cycles)


def test_built_ins_are_imported_not_looked_up_at_run_time():
    """design.md §2: no ``importlib.import_module``, ``__import__`` or ``entry_points`` to reach
    our own code; entry points only where third-party policies and commands come in."""
    bad = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if (fn in ("entry_points", "import_module", "__import__")
                        and (module, fn) not in RUN_TIME_LOOKUPS):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {fn}")
    assert not bad, "\n".join(bad)


def test_spark_adapter_looks_up_only_its_own_modules():
    import spark_adapter

    assert all(home.startswith("spark_adapter.") for home in spark_adapter._HOME.values())


def test_the_checkout_runs_without_being_installed(tmp_path):
    """``PYTHONPATH=. python -m goldilocks replay …`` in a checkout that was never installed
    (no entry points, no metadata: only the dependencies on the path) writes the same bytes as
    the installed ``goldilocks`` command."""
    checkout = tmp_path / "checkout"
    for package in FLOORS:
        shutil.copytree(ROOT / package, checkout / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    deps = tmp_path / "deps"
    deps.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():  # the dependencies, without our own distribution
        if not entry.name.startswith(("goldilocks", "__editable__", "_virtualenv")) \
                and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    log = ROOT / "examples" / "data" / "fleet.jsonl"
    args = ["replay", str(log), "--delay", "5m", "--no-summary"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    uninstalled = subprocess.run(
        [sys.executable, "-S", "-m", "goldilocks", *args, "--out", str(tmp_path / "a.jsonl")],
        cwd=checkout, env={**env, "PYTHONPATH": f"{checkout}{os.pathsep}{deps}"},
        capture_output=True, text=True, timeout=120)
    assert uninstalled.returncode == 0, uninstalled.stderr
    probe = subprocess.run(
        [sys.executable, "-S", "-c", "import goldilocks, importlib.metadata as m; "
         "print(goldilocks.__file__); print(list(m.entry_points(group='goldilocks.policies')))"],
        cwd=checkout, env={**env, "PYTHONPATH": f"{checkout}{os.pathsep}{deps}"},
        capture_output=True, text=True, timeout=60)
    assert probe.stdout.splitlines() == [str(checkout / "goldilocks" / "__init__.py"), "[]"]
    script = Path(sys.executable).with_name("goldilocks")
    installed = subprocess.run([str(script), *args, "--out", str(tmp_path / "b.jsonl")],
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (tmp_path / "a.jsonl").stat().st_size > 0


def test_the_packages_type_check():
    """The types are checked with the tests: mypy over every package, as configured in
    pyproject.toml (``[tool.mypy]``)."""
    from mypy import api

    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                "--cache-dir", str(ROOT / ".mypy_cache")])
    assert status == 0, out + err


def test_docstring_examples_run_with_the_tests():
    """``>>>`` examples in the packages are doctests the suite collects (``--doctest-modules``
    over every package), so a docstring cannot promise what the code does not do."""
    from tomllib import loads

    options = loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]
    assert "--doctest-modules" in options["ini_options"]["addopts"]
    assert set(FLOORS) <= set(options["ini_options"]["testpaths"])


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_every_module_declares_its_surface(package):
    missing = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {t.id for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        names |= {node.target.id for node in tree.body if isinstance(node, ast.AnnAssign)
                  and isinstance(node.target, ast.Name)}
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
    lines = out.splitlines()
    assert lines == [
        "Event.point('2026-11-22T08:05:00Z', payload=1.0, source='A')",
        "Event.point('2026-11-22T08:00:00Z', payload=2.0, source='B')",
        "Event.cti('2026-11-22T08:00:00Z')",  # the comment's "CTI 08:00", readably
        "late: LateRecord(input='B', event=Event.point('2026-11-22T07:59:00Z', source='B'), "
        "cti='2026-11-22T08:00:00Z', action='dropped')",
        "Event.cti_infinity()",  # the final CTI at +infinity
    ]
    # what the text under the example says it prints
    (said,) = re.findall(r"\nIt prints (.+?)\n\n", text, flags=re.S)
    shown = re.findall(r"`(Event\.[^`]+)`", said)
    assert len(shown) == 3 and all(s in out for s in shown), shown


# -- the docs cite only what the repository holds ---------------------------------------------

#: citations of documents that are not in the repository: the team's own design notes and the
#: source material by file name; sources are cited by title instead (the Reactive Streams
#: specification, the StreamInsight CTI synchronizing subject, reactive-streams-io, the
#: async-semaphore backpressure article)
_FOREIGN = re.compile(r"\b(?:DESIGN|STYLE)(?:\.md)?\s*(?:§|:)"
                      r"|(?i:\bseeds?[\s`]*0\d\d|\bseeds/|\bthe seed's\b)")
_DESIGN_CITE = re.compile(r"design\.md,? §(\d+(?:\.\d+)*)((?:,? (?:and )?§\d+(?:\.\d+)*)*)")
_TS_CITE = re.compile(r"TS §(\d+(?:\.\d+)?)((?:\s*(?:,|–|-|and|or|to)\s*§?\d+\.\d+)*)")
_SUFFIXES = {".py", ".md", ".java", ".toml", ".txt", ".cfg", ".ini"}
_SKIP_DIRS = {".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".pytest_cache",
              "node_modules"}


def _repository_texts() -> list[tuple[str, str]]:
    """Every text file of the repository that code, docs or tests are written in."""
    texts = []
    for path in sorted(ROOT.rglob("*")):
        parts = path.relative_to(ROOT).parts
        if (path.suffix in _SUFFIXES and path.is_file() and not _SKIP_DIRS & set(parts)
                and not any(p.endswith(".egg-info") for p in parts)):
            texts.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
    return texts


def _where(name: str, text: str, at: int) -> str:
    return f"{name}:{text.count(chr(10), 0, at) + 1}"


def test_citations_name_only_what_the_repository_holds():
    """No citation of notes the repository does not hold (the design or style notes by
    section, the source material by file number): the repository explains itself, and
    cites its sources by title."""
    bad = [f"{_where(name, text, m.start())}: {m.group(0)!r}"
           for name, text in _repository_texts() for m in _FOREIGN.finditer(text)]
    assert not bad, "\n".join(bad)


def test_every_design_section_cited_exists():
    """``design.md §4.2`` anywhere names a numbered section of docs/design.md."""
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", design, flags=re.M))
    assert {"1", "2", "4.2", "7.5"} <= sections, sorted(sections)
    bad, seen = [], 0
    for name, text in _repository_texts():
        for m in _DESIGN_CITE.finditer(text):
            for number in [m.group(1), *re.findall(r"§(\d+(?:\.\d+)*)", m.group(2))]:
                seen += 1
                if number not in sections:
                    bad.append(f"{_where(name, text, m.start())}: design.md §{number}")
    assert seen >= 10, "the pattern no longer finds the citations"
    assert not bad, "\n".join(bad)


def test_every_ts_rule_cited_exists():
    """``TS §x.y`` anywhere names a rule of docs/spec.md (``TS §n``: a group of rules)."""
    spec = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    rules = set(re.findall(r"\*\*TS §(\d+\.\d+)\*\*", spec))
    groups = set(re.findall(r"^### TS §(\d+) ", spec, flags=re.M))
    assert {"2.4", "8.3"} <= rules and {"1", "7"} <= groups
    bad = []
    for name, text in _repository_texts():
        for m in _TS_CITE.finditer(text):
            for number in [m.group(1), *re.findall(r"\d+\.\d+", m.group(2))]:
                if number not in (rules if "." in number else groups):
                    bad.append(f"{_where(name, text, m.start())}: TS §{number}")
    assert not bad, "\n".join(bad)


def _anchor(heading: str) -> str:
    """The anchor a Markdown heading gets (GitHub's rule): lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_between_the_docs_resolve():
    """Every relative link in README.md and docs/ names a file that exists and, with
    ``#anchor``, a heading of that file."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)  # code holds no links
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            if not file.exists():
                bad.append(f"{where}: no such file")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", file.read_text(
                    encoding="utf-8"), flags=re.S), flags=re.M)
                if anchor not in {_anchor(h) for h in headings}:
                    bad.append(f"{where}: no such heading")
    assert not bad, "\n".join(bad)
