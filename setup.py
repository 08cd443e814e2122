"""Build hook: with ``ELRWATCH_COMPILE=1`` the domain core's hot modules are compiled to C with mypyc.

Everything else about the package is declared in pyproject.toml. Without the variable (the default, and every
editable install) elrwatch is pure Python. A compiled build needs mypy, a C compiler and Python's headers, and is
run without build isolation so that it uses the mypy installed next to it:

    pip install 'mypy>=2.0' 'setuptools>=68' wheel orjson
    ELRWATCH_COMPILE=1 pip wheel --no-deps --no-build-isolation -w dist .

mypyc names a compiled module after its path, so the modules are staged as ``elrwatch/state/*.py`` under
build/mypyc-src first (the repository keeps the core in ``state/``, installed as ``elrwatch.state``). The wheel
holds both: a compiled module and, next to it, its Python source, which Python imports only when the compiled
one is absent.
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
STAGE = ROOT / "build" / "mypyc-src"


def _compiled_module_names() -> tuple[str, ...]:
    """`COMPILED_MODULES` of state/__init__.py (read, not imported: the build has none of elrwatch's dependencies)."""
    tree = ast.parse((ROOT / "state" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMPILED_MODULES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit("elrwatch: state/__init__.py has no COMPILED_MODULES")


TRUE_VALUES = {"1", "true", "yes", "on"}


def _compiled_extensions() -> list:
    if os.environ.get("ELRWATCH_COMPILE", "").strip().lower() not in TRUE_VALUES:
        return []
    if any("editable" in arg for arg in sys.argv):
        sys.exit(
            "elrwatch: ELRWATCH_COMPILE=1 is for wheels and regular installs, not editable ones: compiled modules "
            "in state/ would shadow later edits of its .py files (unset the variable, or build a wheel)"
        )
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.exit(
            "elrwatch: ELRWATCH_COMPILE=1 needs mypy in the build environment: pip install 'mypy>=2.0', then "
            "build with --no-build-isolation"
        )
    try:
        import orjson  # noqa: F401  (mypyc type-checks the modules, which import it)
    except ImportError:
        sys.exit(
            "elrwatch: ELRWATCH_COMPILE=1 needs orjson installed before the build (mypyc type-checks the core, "
            "which imports it): pip install orjson"
        )
    # setuptools reuses build/lib.*: a module compiled by an earlier build (one since dropped from the list, or of
    # another mypyc group) would otherwise end up in the wheel next to the new ones
    for stale in (STAGE, *(ROOT / "build").glob("lib.*"), *(ROOT / "build").glob("temp.*")):
        shutil.rmtree(stale, ignore_errors=True)
    package = STAGE / "elrwatch"
    shutil.copytree(ROOT / "state", package / "state", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy2(ROOT / "elrwatch" / "__init__.py", package / "__init__.py")
    paths = [str((package / "state" / f"{name}.py").relative_to(ROOT)) for name in _compiled_module_names()]
    return mypycify(paths, opt_level="3", target_dir=str(ROOT / "build" / "mypyc-c"))


setup(ext_modules=_compiled_extensions())
