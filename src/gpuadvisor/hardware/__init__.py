"""The hardware model: build a Cluster from a cluster file, a bundled preset or a probe report.

Entry points: `load_cluster` / `save_cluster` (cluster files), `load_preset` / `list_presets`,
`cluster_from_probe` (after `gpuadvisor probe`). Rates come from knowledge/gpus.yaml and knowledge/links.yaml.
"""
from __future__ import annotations

from .cluster_file import load_cluster, save_cluster
from .presets import list_presets, load_preset

__all__ = ["load_cluster", "save_cluster", "list_presets", "load_preset", "cluster_from_probe"]


def __getattr__(name: str):
    if name == "cluster_from_probe":  # imported lazily: build.py pulls in the probe schemas
        from .build import cluster_from_probe

        return cluster_from_probe
    raise AttributeError(name)
