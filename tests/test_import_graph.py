"""The import graph of elrwatch has no cycles: a module never imports (at the top or inside a function) a module
that imports it back, directly or through others. Read from the sources with ast, over the packages pyproject.toml
maps."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    """Module name → source file of every module of the packages pyproject.toml maps."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    out: dict[str, Path] = {}
    for package, folder in config["package-dir"].items():
        for path in (ROOT / folder).glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module → the elrwatch modules it imports (anywhere in its source)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_covers_every_package() -> None:
    graph = import_graph()
    for package in ("elrwatch.state", "elrwatch.store", "elrwatch.streaming", "elrwatch.api.routers"):
        assert any(name.startswith(package) for name in graph), package
    assert "elrwatch.store" in graph["elrwatch.api.dependencies"]
    assert "elrwatch.streaming.warm" in graph["elrwatch.streaming.accelerators"]


def test_spark_s_session_starts_without_the_job_s_heavy_modules() -> None:
    """`streaming.session` (Spark's JVM started while the rest of the job is imported) reaches neither the status
    store (SQLAlchemy) nor the buckets (pandas, the core): importing those is what the JVM's start overlaps."""
    graph = import_graph()
    reached, todo = set(), ["elrwatch.streaming.session"]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    heavy = {n for n in reached if n.startswith(("elrwatch.store", "elrwatch.state", "elrwatch.streaming.bucket"))}
    assert heavy == {"elrwatch.store.urls"}, sorted(heavy)  # the store URLs' masking: no SQLAlchemy
    code = (
        "import sys, elrwatch.streaming.session; print(sorted({'sqlalchemy', 'pandas', 'pyarrow'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_elrwatch_has_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_job_config_is_a_leaf_of_streaming() -> None:
    """The stages read the job's configuration; it reads none of them (the command line imports it to build the
    job's options without loading a stage)."""
    graph = import_graph()
    assert {"elrwatch.streaming.bucket", "elrwatch.streaming.snapshots"} <= {
        name for name, targets in graph.items() if "elrwatch.streaming.config" in targets
    }
    assert {t for t in graph["elrwatch.streaming.config"] if t.startswith("elrwatch.streaming")} == set()


def test_streaming_has_no_subpackage_reached_from_outside() -> None:
    """The job's modules are one level, so each stage imports what it uses (memory hygiene, the local-mode
    accelerators) without climbing into another's folder."""
    streaming = {name for name in import_graph() if name.startswith("elrwatch.streaming.")}
    assert "elrwatch.streaming.memory" in streaming
    assert all(name.count(".") == 2 for name in streaming), sorted(streaming)
