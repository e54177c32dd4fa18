"""Per-hardware-class calibration constants, read once from knowledge/calibration.yaml.

Constants are keyed by GPU family (matched on the device name), link class or protocol — never by
a measured row. A measured rate on the Cluster (Device.achieved_tflops) overrides the family default.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from ..errors import UserError
from ..paths import knowledge_dir
from ..safe_yaml import load_bundled_yaml


@dataclass(frozen=True)
class GemmCurve:
    """Saturating efficiency curve e(x) = e_max * x / (x + x_half), times width / (width + w_half) for a layer
    GEMM whose narrower side is `width` (compute.width_efficiency; w_half 0: no width term). The attention core
    (FlashAttention-2 / PyTorch SDPA) runs at `attn_rel` times the GEMM rate of its size, cuDNN's fused attention
    (Transformer Engine) at `attn_rel_cudnn`, FlashAttention-3/4 at `attn_rel_flash3` (cuDNN's where not given)."""

    family: str
    e_max: float
    x_half: float
    w_half: float = 0.0
    attn_rel: float = 1.0
    attn_rel_cudnn: float = 1.0
    attn_rel_flash3: float = 1.0

    def efficiency(self, x: float) -> float:
        """Fraction of peak at GEMM size x (millions of elements, or GFLOP for generic models)."""
        return self.e_max * x / (x + self.x_half) if x > 0 else 0.0


@lru_cache(maxsize=4)
def load_calibration(path: Optional[str] = None) -> dict[str, Any]:
    """The calibration table as a dict (cached). `path` overrides knowledge/calibration.yaml."""
    p = Path(path) if path else knowledge_dir() / "calibration.yaml"
    try:
        with open(p, encoding="utf-8") as fh:
            data = load_bundled_yaml(fh)
    except OSError as exc:
        raise UserError(f"cannot read calibration file {p}: {exc.strerror}; reinstall gpuadvisor") from None
    if not isinstance(data, dict) or "gemm_efficiency" not in data:
        raise UserError(f"calibration file {p} lacks 'gemm_efficiency'; restore it from the repository")
    return data


def gpu_family(device_name: str, spec_key: Optional[str] = None, cal: Optional[dict] = None) -> str:
    """The calibration family whose `match` substrings occur in the device name (or spec key)."""
    cal = cal or load_calibration()
    fams = cal["gemm_efficiency"]["families"]
    text = f"{device_name} {spec_key or ''}".lower()
    for name, fam in fams.items():
        for pat in fam.get("match", []):
            if pat.lower() in text:
                return name
    return "default"


def gemm_curve(device_name: str, spec_key: Optional[str] = None, generic: bool = False,
               cal: Optional[dict] = None) -> GemmCurve:
    """The GEMM efficiency curve of a device's family (or the generic-model curve)."""
    cal = cal or load_calibration()
    ge = cal["gemm_efficiency"]
    if generic:
        g = ge["generic"]
        return GemmCurve("generic", float(g["e_max"]), float(g["x_half"]))
    fam = gpu_family(device_name, spec_key, cal)
    f = ge["families"][fam]
    attn = float(f.get("attn_rel", 1.0))
    cudnn = float(f.get("attn_rel_cudnn", attn))
    return GemmCurve(fam, float(f["e_max"]), float(f["x_half"]), float(f.get("w_half", 0.0)), attn, cudnn,
                     float(f.get("attn_rel_flash3", cudnn)))


def pcie_host_bandwidth(gen: Optional[int], cal: Optional[dict] = None, width: Optional[int] = None) -> float:
    """Pinned host<->device copy bandwidth (GB/s) for a PCIe generation, at x16 or scaled to a narrower link's
    `width` (lanes carry the bytes: an x8 slot moves half)."""
    cal = cal or load_calibration()
    table = cal["offload"]["pcie_host_gb_per_s"]
    x16 = float(table.get(gen, table.get(str(gen), table["default"])) if gen else table["default"])
    return x16 * min(width, 16) / 16 if width else x16
