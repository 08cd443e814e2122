"""tools/wheel_sources.py (the compiled build's prerequisites in the Makefile): it lists exactly the files a wheel
built from the repository copies, and its make rule names them."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "wheel_sources.py"
#: Not part of the package: left out of the copy the test builds a wheel from (the build reads none of them).
NOT_COPIED = (".git", ".tools", ".make", "build", "dist", "tests", "helm", "docs", "bench", "var", "artifacts")


def _module():
    spec = importlib.util.spec_from_file_location("wheel_sources", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_listing_names_modules_of_every_package_and_their_data() -> None:
    sources = _module().wheel_sources(ROOT)
    for path in ("elrwatch/cli.py", "state/cluster.py", "streaming/bucket.py", "streaming/memory.py"):
        assert path in sources
    for folder in ("api/routers", "store", "kafkaio", "bridge", "devtools"):
        assert any(s.startswith(f"{folder}/") and s.endswith(".py") for s in sources), folder
    assert any(s.startswith("state/kafka_schemas/") and s.endswith(".json") for s in sources)
    assert any(s.startswith("api/static/") for s in sources)
    assert "README.md" in sources
    assert not any("__pycache__" in s or s.endswith("PROVENANCE.md") for s in sources)


def test_the_make_rule_names_every_source_with_an_empty_rule_of_its_own() -> None:
    rule = _module().make_rule("build/compiled/.built", ["a.py", "b/c.json"])
    assert rule == "build/compiled/.built: \\\n  a.py \\\n  b/c.json \\\n\na.py:\nb/c.json:\n"


@pytest.mark.slow
def test_the_listing_is_what_a_wheel_copies(tmp_path: Path) -> None:
    """A pure-Python wheel of a copy of the repository holds exactly the listed files (the readme as metadata)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(*NOT_COPIED, "__pycache__", "*.so"))
    module = _module()
    sources = module.wheel_sources(src)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), "."],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = tmp_path.glob("elrwatch-*.whl")
    project = module.tomllib.loads((src / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = project["package-dir"]
    packages = sorted(project["packages"], key=len, reverse=True)  # the deepest package first
    copied = []
    for name in zipfile.ZipFile(wheel).namelist():
        if ".dist-info/" in name:
            continue
        folder, _, file_name = name.rpartition("/")
        package = next(
            p for p in packages if folder == p.replace(".", "/") or folder.startswith(p.replace(".", "/") + "/")
        )
        rest = folder[len(package.replace(".", "/")) :].lstrip("/")
        copied.append(str(module.package_dir(package, dirs) / rest / file_name))
    assert sorted(copied) == [s for s in sources if s != "README.md"]
