"""The repository files a wheel of elrwatch copies: every module of the packages pyproject.toml declares
([tool.setuptools] packages, in their package-dir), their package data and the readme.

Run from the repository root: ``python tools/wheel_sources.py`` prints them one a line; with ``--make-rule TARGET``
it prints a make rule making TARGET depend on them (the Makefile's compiled build writes one next to the build and
includes it, so that a change to any of them rebuilds it). Standard library only.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def package_dir(name: str, dirs: dict[str, str]) -> Path:
    """The directory of package ``name``: its package-dir entry, else its parent's directory + its last part."""
    if name in dirs:
        return Path(dirs[name])
    parent, _, last = name.rpartition(".")
    return package_dir(parent, dirs) / last if parent else Path(dirs.get("", ".")) / name


def wheel_sources(root: Path) -> list[str]:
    """The files (relative to ``root``) that a wheel built from ``root`` copies, sorted."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    dirs: dict[str, str] = setuptools.get("package-dir", {})
    out: set[Path] = set()
    for package in setuptools["packages"]:
        out.update((root / package_dir(package, dirs)).glob("*.py"))
    for package, patterns in setuptools.get("package-data", {}).items():
        for pattern in patterns:
            out.update(p for p in (root / package_dir(package, dirs)).glob(pattern) if p.is_file())
    readme = project["project"].get("readme")
    if isinstance(readme, str):
        out.add(root / readme)
    return sorted(str(p.relative_to(root)) for p in out)


def make_rule(target: str, sources: list[str]) -> str:
    """A make rule: ``target`` depends on ``sources``, each with an empty rule of its own (a source deleted since
    is then no error, as with a C compiler's ``-MP``)."""
    lines = [f"{target}: \\", *(f"  {s} \\" for s in sources), "", *(f"{s}:" for s in sources)]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """``wheel_sources.py``: the files, one a line; ``wheel_sources.py --make-rule TARGET``: a make rule."""
    try:
        sources = wheel_sources(Path.cwd())
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(f"wheel_sources: cannot read pyproject.toml's packages: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if argv[:1] == ["--make-rule"] and len(argv) == 2:
        sys.stdout.write(make_rule(argv[1], sources))
    elif not argv:
        print("\n".join(sources))
    else:
        print("usage: wheel_sources.py [--make-rule TARGET]", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
