"""Where the tests find the shared reference data: beside the repository if present, else the copy in tests/data."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = ROOT.parent / "shared" / "reference"


def conformance_cases_file() -> Path:
    """The conformance corpus: $ELRWATCH_CONFORMANCE_CASES, ../shared/reference/…, or tests/data's copy."""
    override = os.environ.get("ELRWATCH_CONFORMANCE_CASES")
    if override:
        return Path(override)
    shared = SHARED_REFERENCE / "conformance" / "cases.jsonl"
    return shared if shared.exists() else Path(__file__).parent / "data" / "conformance" / "cases.jsonl"
