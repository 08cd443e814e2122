"""elrwatch's domain core: records, cluster state, replay, derived status, controller model, advice, audit.

Pure Python, no Spark. The modules every record goes through can also be compiled to C with mypyc (setup.py,
``ELRWATCH_COMPILE=1``); both builds behave the same and read each other's pickles.
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES

#: The hot modules (parse, apply, derive; the documents and their advice) a compiled build compiles (setup.py reads it).
COMPILED_MODULES = (
    "records",
    "value_checks",
    "model",
    "merge",
    "status",
    "record_types",
    "routing",
    "cluster",
    "insight",
    "replay",
    "report",
    "controller",
    "advice",
    "metadata_version",
    "validators_generated",
)


def compiled_modules() -> list[str]:
    """Which of `COMPILED_MODULES` this installation imports as compiled extensions (empty: pure Python)."""
    compiled = []
    for name in COMPILED_MODULES:
        path = importlib.import_module(f"{__name__}.{name}").__file__ or ""
        if path.endswith(tuple(EXTENSION_SUFFIXES)):
            compiled.append(name)
    return compiled


def core_build() -> str:
    """``compiled (mypyc)``, ``interpreted``, or ``partly compiled (…)`` for a mixed installation."""
    compiled = compiled_modules()
    if not compiled:
        return "interpreted"
    if len(compiled) == len(COMPILED_MODULES):
        return "compiled (mypyc)"
    return f"partly compiled ({', '.join(compiled)})"
