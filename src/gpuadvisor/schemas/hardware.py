"""The hardware model: a Cluster of Nodes of devices (GPUs or CPU ranks), their links and NICs.

Units are in field names. Rates carry where they came from (`catalog`, `measured`, `preset`, `user`).
"""
from __future__ import annotations

from enum import Enum
from typing import Iterable, Literal, Optional

from pydantic import Field, model_validator

from ._base import Frozen
from .bounds import (MAX_DEVICES, MAX_DEVICES_PER_NODE, MAX_NODES, Count, Index, Latency, LinkBandwidth, LinkSpeed,
                     MemBandwidth, MemoryBytes, PcieGen, PcieWidth, TFlops)

RateSource = Literal["catalog", "measured", "preset", "user", "assumed"]


class LinkClass(str, Enum):
    """How two devices in one node talk, as `nvidia-smi topo -m` names it (plus CPU shared memory)."""

    SELF = "X"
    NVLINK = "NV"  # any NV#; the count lives in DeviceLink.nvlink_count
    PIX = "PIX"  # at most one PCIe bridge
    PXB = "PXB"  # several PCIe bridges, no host bridge
    PHB = "PHB"  # through a PCIe host bridge (the CPU)
    NODE = "NODE"  # between host bridges within one NUMA node
    SYS = "SYS"  # across the SMP interconnect between NUMA nodes (old name SOC)
    SHM = "SHM"  # CPU ranks in one host: shared memory (gloo)
    UNKNOWN = "unknown"


# devices that meet through PCIe switches only, below the host bridge: they share the switch tree's uplink to the host
SWITCHED = (LinkClass.PIX, LinkClass.PXB)


def joined(items: Iterable[int], pairs: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Each item's group when `pairs` join items (pairs naming others are skipped), named by its lowest item."""
    parent = {i: i for i in items}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for a, b in pairs:
        if a in parent and b in parent:
            ra, rb = root(a), root(b)
            parent[max(ra, rb)] = min(ra, rb)
    return {i: root(i) for i in parent}


class Device(Frozen):
    """One compute device a rank runs on: a GPU, or a CPU rank (gloo) on a GPU-less node."""

    index: Index = Field(description="Device index within its node (nvidia-smi order for GPUs)")
    kind: Literal["gpu", "cpu"] = Field("gpu", description="gpu, or cpu for a gloo CPU rank")
    name: str = Field(description="Marketing name, e.g. 'NVIDIA A40' or 'cpu'")
    spec_key: Optional[str] = Field(None, description="Key into knowledge/gpus.yaml, None if unknown")
    uuid: Optional[str] = None
    memory_bytes: MemoryBytes = Field(description="Usable device memory in bytes (host RAM share for CPU ranks)")
    memory_free_bytes: Optional[int] = None
    compute_capability: Optional[str] = None
    peak_tflops_bf16: TFlops = Field(description="Dense bf16/fp16 tensor peak, TFLOP/s")
    peak_tflops_fp32: TFlops = Field(description="Dense fp32 (non-tensor) peak, TFLOP/s")
    peak_tflops_fp8: float = Field(0.0, ge=0.0, description="Dense FP8 tensor peak, TFLOP/s; 0: no FP8 tensor cores")
    memory_bandwidth_gb_per_s: MemBandwidth = Field(description="Device memory bandwidth, GB/s")
    achieved_tflops: Optional[TFlops] = Field(None, description="Measured large-GEMM rate, TFLOP/s (matmul probe)")
    rate_source: RateSource = "catalog"
    pcie_gen: Optional[PcieGen] = None
    pcie_width: Optional[PcieWidth] = None
    pcie_gen_max: Optional[PcieGen] = None
    pcie_width_max: Optional[PcieWidth] = None
    numa_node: Optional[int] = None
    mig_enabled: Optional[bool] = None
    host_copy_gb_per_s: Optional[LinkBandwidth] = Field(
        None, description="Pinned host<->device copy rate of the device alone, GB/s, the slower direction: measured "
                          "(probes/hostcopy.py), or the catalog's for a GPU whose host link is not PCIe (GH200's "
                          "NVLink-C2C); None: priced from the PCIe generation and width")
    pcie_switch: Optional[Index] = Field(
        None, description="The PCIe switch tree the device sits behind: devices of a node with the same id share its "
                          "uplink to the host (None: its own root port, or unknown)")

    @property
    def cc_major(self) -> Optional[int]:
        """A GPU's compute capability major version (8 for '8.6'); None for a CPU rank or when unknown."""
        major = str(self.compute_capability or "").split(".")[0]
        return int(major) if self.kind == "gpu" and major.isdecimal() else None


class DeviceLink(Frozen):
    """The path between two devices of one node (unordered pair a<b)."""

    a: int
    b: int
    link_class: LinkClass
    nvlink_count: int = Field(0, description="Number of NVLinks for NV#, else 0")
    p2p_supported: Optional[bool] = Field(None, description="CUDA peer-to-peer read/write possible; None if unknown")
    bandwidth_gb_per_s: LinkBandwidth = Field(
        description="Effective unidirectional bus bandwidth for collectives, GB/s")
    latency_us: Latency = Field(description="Per-message latency (alpha), microseconds")
    rate_source: RateSource = "catalog"


class Nic(Frozen):
    """A network interface (Ethernet, RoCE or InfiniBand port, or an AWS Elastic Fabric Adapter)."""

    name: str
    kind: Literal["ethernet", "infiniband", "roce", "efa", "loopback", "unknown"] = "ethernet"
    speed_gbit_per_s: Optional[LinkSpeed] = Field(None, description="Negotiated link speed, None if unknown/sentinel")
    speed_max_gbit_per_s: Optional[LinkSpeed] = Field(
        None, description="Fastest speed the port supports (ethtool supported link modes), None if unknown"
    )
    mtu: Optional[int] = None
    driver: Optional[str] = None
    operstate: Optional[str] = None
    numa_node: Optional[int] = None
    closest_devices: list[int] = Field(default_factory=list, description="Device indices with the closest path")
    link: Optional[str] = Field(None, description="knowledge/links.yaml network class of the port, e.g. 'ib-hdr-rail'")
    bandwidth_gb_per_s: Optional[LinkBandwidth] = Field(
        None, description="Achievable all-reduce bus bandwidth through this port as one rail, GB/s (None: unknown, "
                          "the port is not modelled as a rail)")
    latency_us: Optional[Latency] = Field(None, description="Per-message latency (alpha) through this port, us")
    rate_source: RateSource = "catalog"


class CpuInfo(Frozen):
    """Host CPU and memory facts (offload advice, CPU ranks, NUMA binding)."""

    model: Optional[str] = None
    sockets: Count = 1
    cores: Count = Field(1, description="Physical cores in total")
    threads: Count = Field(1, description="Logical CPUs")
    numa_nodes: Count = 1
    ram_bytes: int = Field(0, ge=0, description="Total host RAM in bytes")
    ram_available_bytes: Optional[int] = Field(None, ge=0)


class NodeAccess(Frozen):
    """How gpuadvisor reaches a node to probe, launch and run trials."""

    method: Literal["local", "ssh", "slurm", "prefix"] = "local"
    host: Optional[str] = None
    user: Optional[str] = None
    port: Optional[int] = None
    identity_file: Optional[str] = None
    prefix: list[str] = Field(default_factory=list, description="Command prefix (method=prefix), e.g. ip netns exec n0")
    address: Optional[str] = Field(None, description="Address other nodes use to reach this one (rendezvous)")
    ifname: Optional[str] = Field(None, description="Interface to use for NCCL/GLOO_SOCKET_IFNAME")


class Node(Frozen):
    """One machine: its devices, the links between them, NICs, CPU/RAM."""

    name: str
    devices: list[Device]
    links: list[DeviceLink] = Field(default_factory=list)
    nics: list[Nic] = Field(default_factory=list)
    cpu: CpuInfo = Field(default_factory=CpuInfo)
    access: NodeAccess = Field(default_factory=NodeAccess)

    @model_validator(mode="after")
    def _check_links(self) -> "Node":
        n = len(self.devices)
        idx = {d.index for d in self.devices}
        for link in self.links:
            if link.a not in idx or link.b not in idx or link.a == link.b:
                raise ValueError(
                    f"node {self.name}: link {link.a}-{link.b} names a device that is not in the node "
                    f"(devices {sorted(idx)})"
                )
        if n and len(idx) != n:
            raise ValueError(f"node {self.name}: duplicate device indices")
        if n > MAX_DEVICES_PER_NODE:
            raise ValueError(f"node {self.name}: {n} devices is above {MAX_DEVICES_PER_NODE} per node; "
                             "split it into several nodes")
        return self

    def link(self, a: int, b: int) -> Optional[DeviceLink]:
        """The link between devices a and b (either order), or None."""
        lo, hi = min(a, b), max(a, b)
        for link in self.links:
            if (link.a, link.b) == (lo, hi) or (link.b, link.a) == (lo, hi):
                return link
        return None


class Network(Frozen):
    """The inter-node network as the training job sees it (one NIC per node shared by its ranks)."""

    bandwidth_gb_per_s: LinkBandwidth = Field(description="Achievable per-node bandwidth for collectives, GB/s")
    latency_us: Latency = Field(description="Per-message latency (alpha), microseconds")
    protocol: Literal["tcp", "roce", "ib", "efa", "unknown"] = "tcp"
    link_speed_gbit_per_s: Optional[LinkSpeed] = Field(None, description="Nominal wire speed, Gbit/s")
    nic: Optional[str] = Field(None, description="Interface name used between nodes")
    rate_source: RateSource = "catalog"


class Cluster(Frozen):
    """The whole hardware model the advisor ranks plans on."""

    name: str
    nodes: list[Node]
    network: Optional[Network] = Field(None, description="Inter-node network; required when nodes > 1")
    source: str = Field("unknown", description="Where this came from: probe, preset:<name>, file:<path>")
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> "Cluster":
        if not self.nodes:
            raise ValueError("cluster has no nodes; add at least one node with one device")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"cluster node names must be unique, got {names}")
        if len(self.nodes) > MAX_NODES:
            raise ValueError(f"cluster has {len(self.nodes)} nodes, above the {MAX_NODES} gpuadvisor models")
        if self.num_devices > MAX_DEVICES:
            raise ValueError(f"cluster has {self.num_devices} devices, above the {MAX_DEVICES} gpuadvisor models")
        if len(self.nodes) > 1 and self.network is None:
            raise ValueError("a multi-node cluster needs a 'network' section (bandwidth_gb_per_s, latency_us)")
        return self

    @property
    def num_devices(self) -> int:
        return sum(len(n.devices) for n in self.nodes)

    @property
    def devices_per_node(self) -> list[int]:
        return [len(n.devices) for n in self.nodes]
