"""Packaging: declared dependencies match the imports, every extra an error names exists, the version is written
once, and the sdist (and a wheel built from it) carries knowledge/ and probes/."""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import gpuadvisor

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "gpuadvisor"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

#: import name -> distribution name, where they differ
DIST_OF = {"yaml": "pyyaml", "sklearn": "scikit-learn", "pynvml": "nvidia-ml-py", "psycopg2": "psycopg2-binary"}


def _dist(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def third_party_imports() -> dict[str, set[str]]:
    """Top-level modules imported anywhere in src/gpuadvisor that are neither stdlib nor our own files."""
    found: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        siblings = {p.stem for p in path.parent.glob("*.py")}  # standalone scripts import their neighbours
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "gpuadvisor" and top not in siblings:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_import_is_declared():
    project = PYPROJECT["project"]
    core = {_dist(r) for r in project["dependencies"]}
    extras = {_dist(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    imports = third_party_imports()
    assert "rich" in imports and "rich" in core  # imported directly, so declared directly
    undeclared = {m: sorted(f)[:3] for m, f in imports.items() if DIST_OF.get(m, m) not in core | extras}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_every_extra_named_in_a_message_exists():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    assert {"train", "plots", "postgres", "dev"} <= extras
    texts = [p for p in [*SRC.rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md",
                         *(ROOT / "examples").rglob("*")] if p.is_file()]
    named = {(m, p.name) for p in texts for m in re.findall(r"gpuadvisor\[([\w,-]+)\]", p.read_text(errors="ignore"))}
    assert any(m == "postgres" for m, _ in named) and any(m == "plots" for m, _ in named)
    missing = [(m, f) for m, f in named if not set(m.split(",")) <= extras]
    assert not missing, f"messages name extras that pyproject.toml lacks: {missing}"


def test_version_written_once():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gpuadvisor.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+|rc\d+|\.dev\d+)?", gpuadvisor.__version__)


def test_licence_metadata_is_pep639():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639: the expression only
    assert any(r.startswith("setuptools>=77") for r in PYPROJECT["build-system"]["requires"])
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


@pytest.mark.slow
def test_sdist_then_wheel_from_it_carry_the_data(tmp_path):
    """`python -m build` (sdist, then a wheel from the unpacked sdist) with the installed setuptools, offline."""
    pytest.importorskip("build")
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} < 77 cannot read PEP 639 metadata")
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache",
        "tmp"))
    dist = tmp_path / "dist"
    res = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(tree)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    version = gpuadvisor.__version__
    assert sdist.name == f"gpuadvisor-{version}.tar.gz" and wheel.name.startswith(f"gpuadvisor-{version}-")
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for must in ("LICENSE", "MANIFEST.in", "setup.py", "knowledge/gpus.yaml", "knowledge/cluster.schema.json",
                 "probes/matmul.py", "examples/README.md", "src/gpuadvisor/py.typed"):
        assert must in in_sdist, must
    assert not [n for n in in_sdist if "__pycache__" in n or n.endswith(".pyc")]
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        meta = whl.read(f"gpuadvisor-{version}.dist-info/METADATA").decode()
    knowledge = sorted(p.relative_to(ROOT / "knowledge").as_posix() for p in (ROOT / "knowledge").rglob("*")
                       if p.is_file())
    assert {f"gpuadvisor/_data/knowledge/{k}" for k in knowledge} <= names
    assert {f"gpuadvisor/_data/probes/{p.name}" for p in (ROOT / "probes").glob("*.py")} <= names
    shipped = {"gpuadvisor/py.typed", "gpuadvisor/tui/app.tcss", f"gpuadvisor-{version}.dist-info/licenses/LICENSE"}
    assert shipped <= names
    assert "License-Expression: Apache-2.0" in meta and f"Version: {version}" in meta
    assert "Provides-Extra: postgres" in meta and re.search(r"Requires-Dist: rich>=", meta)
