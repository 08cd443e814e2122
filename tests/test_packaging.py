"""The one build: pyproject.toml declares every folder of the package, so that an installed copy (a wheel, `pip
install .`, the Docker image) holds every module an editable install imports."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_folder_of_python_modules_is_a_declared_package() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = setuptools["package-dir"]
    assert set(setuptools["packages"]) == set(folders), "every package has its folder in package-dir"
    declared = {ROOT / folder for folder in folders.values()}
    for folder in sorted(declared):
        assert (folder / "__init__.py").is_file(), folder
        for module in folder.rglob("*.py"):
            assert module.parent in declared, (
                f"{module.relative_to(ROOT)}: its folder is not a package of pyproject.toml"
            )
