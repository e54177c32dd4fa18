"""Bundled machine presets: knowledge/presets/<name>.yaml, in the cluster-file format, each with a source."""
from __future__ import annotations

import functools
from pathlib import Path

from ..errors import UserError
from ..paths import knowledge_dir
from ..schemas.hardware import Cluster
from ..schemas.measurement import MeasurementRow
from ..safe_yaml import load_bundled_yaml


def presets_dir() -> Path:
    """The folder holding the preset files."""
    return knowledge_dir() / "presets"


@functools.lru_cache(maxsize=None)
def list_presets() -> tuple[str, ...]:
    """Names of the bundled presets, sorted."""
    return tuple(sorted(p.stem for p in presets_dir().glob("*.yaml")))


def preset_path(name: str) -> Path:
    """The file of preset `name`; UserError listing the names when unknown."""
    names = list_presets()
    if name not in names:
        raise UserError(f"unknown preset '{name}': use one of {', '.join(names)} (gpuadvisor presets lists them)")
    return presets_dir() / f"{name}.yaml"


@functools.lru_cache(maxsize=None)
def preset_citation(name: str) -> str:
    """The `source:` text of a preset file (where its hardware facts come from)."""
    with open(preset_path(name), encoding="utf-8") as fh:
        data = load_bundled_yaml(fh) or {}
    return " ".join(str(data.get("source", "")).split())


@functools.lru_cache(maxsize=None)
def load_preset(name: str) -> Cluster:
    """The Cluster of a bundled preset (source 'preset:<name>', the file's citation first in notes)."""
    from .cluster_file import load_cluster

    cluster = load_cluster(preset_path(name))
    return cluster.model_copy(update={
        "source": f"preset:{name}",
        "notes": [f"source: {preset_citation(name)}", *cluster.notes],
    })


def row_cluster(row: MeasurementRow) -> Cluster:
    """The cluster a measurement row was measured on: embedded in the row, or its preset."""
    if row.cluster is not None:
        return row.cluster
    if row.preset:
        return load_preset(row.preset)
    raise UserError(f"measurement row {row.id} names neither a preset nor a cluster; add one")
