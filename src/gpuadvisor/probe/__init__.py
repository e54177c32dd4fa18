"""The inventory probe: what is on this host (NVML GPUs, `nvidia-smi topo -m`, NICs from sysfs, CPU/RAM).

Nothing here imports torch: `probe_host()` must run on any machine, with or without GPUs.
"""
from __future__ import annotations

__all__ = ["probe_host", "parse_topo", "TopoParseError"]


def __getattr__(name: str):
    """Load the public names lazily so `import gpuadvisor.probe.topo` stays light."""
    if name == "probe_host":
        from .inventory import probe_host

        return probe_host
    if name in ("parse_topo", "TopoParseError"):
        from . import topo

        return getattr(topo, name)
    raise AttributeError(f"module 'gpuadvisor.probe' has no attribute {name!r}")
