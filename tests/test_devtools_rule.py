"""The product never imports developer tooling: no module outside ``devtools/`` imports ``elrwatch.devtools``
(at its top or inside a function, or by name through importlib). Read from the sources with ast, over every package
pyproject.toml maps, so a new package is covered without editing this test."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVTOOLS = "elrwatch.devtools"
MODULE_NAME = re.compile(r"elrwatch\.devtools(\.\w+)*")


def _product_modules() -> dict[str, Path]:
    """Module name → source file of every module outside elrwatch.devtools."""
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    out: dict[str, Path] = {}
    for package, folder in package_dirs.items():
        if package == DEVTOOLS or package.startswith(DEVTOOLS + "."):
            continue
        for path in (ROOT / folder).glob("*.py"):
            out[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return out


def devtools_imports(source: str, filename: str = "<source>") -> list[str]:
    """The ``elrwatch.devtools`` modules a source imports (statements, or a module name given to importlib)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value):
            names = [node.value]  # importlib.import_module("elrwatch.devtools...") and the like
        found += [n for n in names if n == DEVTOOLS or n.startswith(DEVTOOLS + ".")]
    return sorted(set(found))


def test_the_walk_sees_every_kind_of_import() -> None:
    source = (
        "import elrwatch.devtools.tls\n"
        "def f():\n    from elrwatch.devtools.kafka_cluster import free_port\n"
        "def g():\n    from elrwatch import devtools\n"
        "importlib.import_module('elrwatch.devtools.demo')\n"
        "from elrwatch.state import eventgen\n"
    )
    assert devtools_imports(source) == [
        "elrwatch.devtools",
        "elrwatch.devtools.demo",
        "elrwatch.devtools.kafka_cluster",
        "elrwatch.devtools.kafka_cluster.free_port",
        "elrwatch.devtools.tls",
    ]


def test_no_product_module_imports_devtools() -> None:
    modules = _product_modules()
    for package in (
        "elrwatch",
        "elrwatch.state",
        "elrwatch.streaming",
        "elrwatch.store",
        "elrwatch.api",
        "elrwatch.bridge",
        "elrwatch.kafkaio",
    ):
        assert package in modules, package  # every product package is walked (its __init__)
    assert "elrwatch.cli" in modules and "elrwatch.options" in modules
    offenders = {
        name: imported for name, path in modules.items() if (imported := devtools_imports(path.read_text(), str(path)))
    }
    assert offenders == {}


def test_the_demo_is_a_devtools_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "elrwatch.devtools.demo", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    for option in ("--simulated", "--kafka", "--duration", "--metrics-port", "--api-port", "--faults", "--keep"):
        assert option in done.stdout, option
    done = subprocess.run(
        [sys.executable, "-m", "elrwatch.cli", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 2 and "No such command 'demo'" in done.stdout + done.stderr
