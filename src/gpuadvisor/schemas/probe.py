"""What the inventory probe found on one host, before it becomes a Node of the Cluster model."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from ._base import Frozen
from .hardware import CpuInfo, LinkClass, Nic


class Missing(Frozen):
    """A field the probe could not read, and why (NotSupported, MIG, no permission, no library...)."""

    field: str
    reason: str


class GpuInfo(Frozen):
    """One GPU as NVML reports it; every field optional, with reasons in `missing`."""

    index: int
    name: Optional[str] = None
    uuid: Optional[str] = None
    memory_total_bytes: Optional[int] = None
    memory_free_bytes: Optional[int] = None
    compute_capability: Optional[str] = None
    pcie_gen: Optional[int] = None
    pcie_width: Optional[int] = None
    pcie_gen_max: Optional[int] = None
    pcie_width_max: Optional[int] = None
    nvlinks_active: Optional[int] = Field(None, description="NVLink links in state active")
    nvlinks_total: Optional[int] = None
    mig_enabled: Optional[bool] = None
    numa_node: Optional[int] = None
    missing: list[Missing] = Field(default_factory=list)


class P2PStatus(Frozen):
    """NVML peer-to-peer capability between GPUs a<b."""

    a: int
    b: int
    read: Optional[bool] = None
    write: Optional[bool] = None
    reason: Optional[str] = None


class TopoLink(Frozen):
    """One cell of the `nvidia-smi topo -m` matrix between two devices (GPU or NIC)."""

    a: str = Field(description="Row device label, e.g. GPU0 or NIC1 / mlx5_0")
    b: str
    token: str = Field(description="Raw token as printed (NV4, PIX, SOC...)")
    link_class: LinkClass
    nvlink_count: int = 0


class TopoMatrix(Frozen):
    """A parsed `nvidia-smi topo -m` capture."""

    gpus: list[str] = Field(description="GPU labels in order (GPU0, GPU1, ...)")
    nics: list[str] = Field(default_factory=list, description="NIC labels as columns show them")
    nic_names: dict[str, str] = Field(default_factory=dict, description="NIC legend: NIC0 -> mlx5_0")
    links: list[TopoLink] = Field(default_factory=list)
    cpu_affinity: dict[str, str] = Field(default_factory=dict)
    numa_affinity: dict[str, Optional[int]] = Field(default_factory=dict)
    gpu_numa_id: dict[str, Optional[int]] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)

    def gpu_link(self, i: int, j: int) -> Optional[TopoLink]:
        """The link between GPU i and GPU j (indices into `gpus`)."""
        a, b = self.gpus[i], self.gpus[j]
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        return None


class ProbeReport(Frozen):
    """Everything the inventory probe found on one host."""

    hostname: str
    gpus: list[GpuInfo] = Field(default_factory=list)
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    nvml_error: Optional[str] = Field(None, description="Why NVML gave nothing (no library, no GPU...)")
    p2p: list[P2PStatus] = Field(default_factory=list)
    topology: Optional[TopoMatrix] = None
    topology_error: Optional[str] = None
    nics: list[Nic] = Field(default_factory=list)
    cpu: CpuInfo = Field(default_factory=CpuInfo)
    warnings: list[str] = Field(default_factory=list)
