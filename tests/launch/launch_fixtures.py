"""Builders of test clusters from the schema classes (imported by the launch tests)."""
from __future__ import annotations

from typing import Optional

from gpuadvisor.schemas import CpuInfo, Device, DeviceLink, LinkClass, Nic, Node, NodeAccess

GiB = 2**30


def gpu(i: int, numa: Optional[int] = 0) -> Device:
    return Device(index=i, name="NVIDIA A40", spec_key="a40", memory_bytes=48 * GiB, peak_tflops_bf16=149.7,
                  peak_tflops_fp32=37.4, memory_bandwidth_gb_per_s=696, numa_node=numa)


def node(name: str, n_gpus: int = 2, *, p2p: Optional[bool] = True, nics=None, numa=(0, 0, 0, 0),
         access: Optional[NodeAccess] = None, cores: int = 32) -> Node:
    devices = [gpu(i, numa[i]) for i in range(n_gpus)]
    links = [DeviceLink(a=a, b=b, link_class=LinkClass.PXB, p2p_supported=p2p, bandwidth_gb_per_s=20,
                        latency_us=10) for a in range(n_gpus) for b in range(a + 1, n_gpus)]
    if nics is None:
        nics = [Nic(name="lo", kind="loopback"), Nic(name="eno1", speed_gbit_per_s=1, operstate="up")]
    return Node(name=name, devices=devices, links=links, nics=nics, access=access or NodeAccess(),
                cpu=CpuInfo(cores=cores, threads=2 * cores, numa_nodes=max(numa) + 1))
