"""docs/DEVELOPING.md's layout table and DESIGN.md's data-flow picture name the modules that exist, and every package
has a row in the table."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layout_rows() -> dict[str, str]:
    """Folder → its row of docs/DEVELOPING.md's layout table."""
    text = (ROOT / "docs" / "DEVELOPING.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"^\| `([a-z_]+)/` \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_every_package_has_a_layout_row() -> None:
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top_level = {folder for folder in package_dirs.values() if "/" not in folder}
    assert top_level <= set(_layout_rows()), top_level - set(_layout_rows())


def test_the_layout_names_existing_modules() -> None:
    for folder, row in _layout_rows().items():
        for name in re.findall(r"`([a-z_/]+\.py)`", row):
            found = list((ROOT / folder).rglob(Path(name).name))
            assert found, f"DEVELOPING.md layout: {folder}/ has no {name}"


def test_the_data_flow_picture_names_existing_modules() -> None:
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    picture = design.split("```", 2)[1]
    paths = re.findall(r"\b((?:state|streaming|store|api|bridge|elrwatch|devtools)/[a-z_/]*\.py)\b", picture)
    assert len(paths) >= 10
    for path in paths:
        assert (ROOT / path).exists(), f"DESIGN.md's picture names {path}, which does not exist"
