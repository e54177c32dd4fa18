"""Fingerprints of what a study's answers depend on, and only that.

A probed cluster carries readings that change from one run to the next without changing any answer
(free RAM, free device memory, a NIC's operstate) and labels (cluster name, source, notes, GPU UUIDs).
Hashing them made re-running the same `study --cpu-ranks 2` command look like "a different cluster".
`stable_cluster` keeps what ranking and trials use: devices and their rates, links, network, nodes.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from ..schemas import Cluster

#: Keys dropped anywhere in the cluster's JSON form: volatile readings and labels.
VOLATILE = frozenset({"ram_available_bytes", "memory_free_bytes", "operstate", "uuid", "notes", "source"})
#: Keys dropped at the top level only (the cluster's display name; node names stay: launches use them).
LABELS = frozenset({"name"})


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def stable_cluster(cluster: Cluster) -> dict:
    """The cluster's JSON form without volatile readings and labels."""
    data = _strip(cluster.model_dump(mode="json"))
    return {k: v for k, v in data.items() if k not in LABELS}


def digest(obj: Any) -> str:
    """sha256 of the canonical JSON of `obj` (hex)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def cluster_digest(cluster: Cluster) -> str:
    """Hex digest of `stable_cluster`."""
    return digest(stable_cluster(cluster))


__all__ = ["stable_cluster", "cluster_digest", "digest", "VOLATILE"]
