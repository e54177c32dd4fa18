"""Where gpuadvisor's shipped data lives: knowledge/ and probes/, installed or in a checkout."""
from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent
_REPO = _PKG.parent.parent  # src/gpuadvisor -> repo root in a source checkout


def _find(name: str) -> Path:
    """Return the shipped folder `name`, preferring the installed copy, else the repo root."""
    for cand in (_PKG / "_data" / name, _REPO / name):
        if cand.is_dir():
            return cand
    raise FileNotFoundError(
        f"gpuadvisor data folder '{name}' not found (looked in {_PKG / '_data'} and {_REPO}); "
        "reinstall with 'pip install .'"
    )


def knowledge_dir() -> Path:
    """The knowledge/ folder (catalogs, presets, rules, measurements)."""
    return _find("knowledge")


def probes_dir() -> Path:
    """The probes/ folder (standalone measuring programs, torch only)."""
    return _find("probes")


def user_data_dir() -> Path:
    """Per-user state (studies, local measurement store): $GPUADVISOR_HOME or XDG data home."""
    env = os.environ.get("GPUADVISOR_HOME")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpuadvisor"
