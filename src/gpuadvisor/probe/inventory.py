"""Compose the inventory probe: NVML GPUs, the `nvidia-smi topo -m` matrix, NICs, CPU/RAM -> ProbeReport."""
from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any, Optional

from ..schemas.hardware import CpuInfo, LinkClass, Nic
from ..schemas.probe import ProbeReport, TopoMatrix
from .cpu import read_cpu
from .nvml import read_nvml
from .sysfs import rdma_netdevs, read_nics, virtual_netdevs
from .topo import LINK_RANK, TopoParseError, parse_topo

__all__ = ["probe_host", "run_topo_command", "assign_closest_devices", "TOPO_COMMAND", "TOPO_TIMEOUT_S"]

TOPO_COMMAND = ["nvidia-smi", "topo", "-m"]
TOPO_TIMEOUT_S = 10.0


def run_topo_command(timeout_s: Optional[float] = None) -> tuple[Optional[str], Optional[str]]:
    """Run `nvidia-smi topo -m` (argument list, no shell) and return (stdout, None) or (None, why it failed)."""
    timeout = TOPO_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        done = subprocess.run(TOPO_COMMAND, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return None, "nvidia-smi not found on PATH; save `nvidia-smi topo -m` elsewhere and pass --topo-file"
    except subprocess.TimeoutExpired:
        return None, f"`nvidia-smi topo -m` did not answer within {timeout:g} s"
    except OSError as exc:
        return None, f"could not run nvidia-smi: {exc}"
    if done.returncode != 0:
        detail = next((ln.strip() for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()), "")
        return None, f"`nvidia-smi topo -m` failed (exit {done.returncode}){': ' + detail if detail else ''}"
    return done.stdout, None


def _hostname(root: str | os.PathLike[str]) -> str:
    """The kernel hostname under `root` (fake trees), else this machine's."""
    if Path(root) != Path("/"):
        try:
            name = (Path(root) / "proc" / "sys" / "kernel" / "hostname").read_text().strip()
        except OSError:
            name = ""
        if name:
            return name
    return socket.gethostname() or "localhost"


def _gpu_index(label: str) -> int:
    """'GPU3' -> 3."""
    return int(label[3:])


def _nic_matches(nic: Nic, names: set[str], siblings: dict[str, list[str]]) -> bool:
    """Does this sysfs Nic stand for one of the topo NIC names (mlx5_0, its ports, its netdevs)?"""
    base = nic.name.split(":", 1)[0]
    return base in names or any(nic.name in siblings.get(n, []) for n in names)


def _closest_by_topo(topo: TopoMatrix) -> dict[str, set[int]]:
    """NIC name (legend-resolved) -> GPU indices for which that NIC is among the closest (PIX<PXB<PHB<NODE<SYS)."""
    rank = {(lk.a, lk.b): lk.link_class for lk in topo.links}
    out: dict[str, set[int]] = {}
    for g in topo.gpus:
        classes = {}
        for n in topo.nics:
            klass = rank.get((g, n)) or rank.get((n, g))
            if klass is not None and klass is not LinkClass.UNKNOWN:
                classes[n] = LINK_RANK[klass]
        if not classes:
            continue
        best = min(classes.values())
        for n, r in classes.items():
            if r == best:
                out.setdefault(topo.nic_names.get(n, n), set()).add(_gpu_index(g))
    return out


def assign_closest_devices(
    nics: list[Nic],
    *,
    topology: Optional[TopoMatrix],
    gpu_numa: dict[int, Optional[int]],
    cpu: CpuInfo,
    rdma_siblings: Optional[dict[str, list[str]]] = None,
    virtual: Optional[set[str]] = None,
) -> list[Nic]:
    """Fill `Nic.closest_devices`: the GPUs for which each NIC is (one of) the closest.

    Uses the topo matrix's NIC columns when there are any (best class PIX < PXB < PHB < NODE < SYS, ties
    kept; `NIC#` labels resolved through the NIC legend, RDMA devices matched to their ports and netdevs).
    Without them, a NIC is closest to the GPUs on its NUMA node (on a one-node host, to every GPU).
    Loopback and virtual interfaces are never closest to anything.

    Args:
        nics: NICs from sysfs.
        topology: the parsed matrix, or None.
        gpu_numa: GPU index -> NUMA node (None if unknown).
        cpu: the host CPU facts (its NUMA node count).
        rdma_siblings: RDMA device -> netdev names on the same PCI function.
        virtual: names of loopback/virtual netdevs.

    Returns:
        New Nic objects with `closest_devices` set (sorted GPU indices).
    """
    siblings = rdma_siblings or {}
    skip = virtual or set()
    out: list[Nic] = []
    by_topo = _closest_by_topo(topology) if topology is not None and topology.nics else None
    for nic in nics:
        closest: set[int] = set()
        if nic.kind == "loopback" or nic.name in skip:
            pass
        elif by_topo is not None:
            for name, gpus in by_topo.items():
                if _nic_matches(nic, {name}, siblings):
                    closest |= gpus
        else:
            nic_node = nic.numa_node if nic.numa_node is not None or cpu.numa_nodes > 1 else 0
            for g, node in gpu_numa.items():
                node = node if node is not None or cpu.numa_nodes > 1 else 0
                if node is not None and node == nic_node:
                    closest.add(g)
        out.append(nic.model_copy(update={"closest_devices": sorted(closest)}))
    return out


def _gpu_numa(report_gpus: list[Any], topology: Optional[TopoMatrix]) -> dict[int, Optional[int]]:
    """GPU index -> NUMA node: the topo matrix's NUMA Affinity first, then NVML's numa_node."""
    out: dict[int, Optional[int]] = {g.index: g.numa_node for g in report_gpus}
    for label in topology.gpus if topology is not None else []:
        node = topology.numa_affinity.get(label) if topology is not None else None
        if node is not None:
            out[_gpu_index(label)] = node
        else:
            out.setdefault(_gpu_index(label), None)
    return out


def probe_host(
    *,
    sysfs_root: str | os.PathLike[str] = "/",
    nvml: Any = None,
    topo_text: Optional[str] = None,
    run_nvidia_smi: bool = True,
) -> ProbeReport:
    """Probe this host: GPUs (NVML), their topology, NICs, CPU and RAM. Never raises on odd hardware.

    Args:
        sysfs_root: filesystem root for /sys and /proc (tests pass a fake tree).
        nvml: an object with the pynvml API; None uses the installed `pynvml`.
        topo_text: a saved `nvidia-smi topo -m` capture to use instead of running the command; parsed
            even when NVML found no GPU (a parse failure lands in `topology_error`).
        run_nvidia_smi: run `nvidia-smi topo -m` (10 s timeout) when NVML found GPUs and no topo_text
            is given.

    Returns:
        A ProbeReport. No GPU is a normal report with `nvml_error` saying why; a missing or failing
        nvidia-smi sets `topology_error`.
    """
    warnings: list[str] = []
    reading = read_nvml(nvml)
    for m in reading.missing:
        warnings.append(f"NVML gave no {m.field} ({m.reason})")
    nics = read_nics(sysfs_root, warnings)
    cpu = read_cpu(sysfs_root, warnings)
    topology: Optional[TopoMatrix] = None
    topology_error: Optional[str] = None
    text: Optional[str] = topo_text
    if text is None and reading.gpus and run_nvidia_smi:
        text, topology_error = run_topo_command()
    if text is not None:
        try:
            topology = parse_topo(text)
        except TopoParseError as exc:
            topology_error = f"could not parse nvidia-smi topo -m output: {exc}"
    if topology is not None and reading.gpus and len(topology.gpus) != len(reading.gpus):
        warnings.append(
            f"NVML sees {len(reading.gpus)} GPUs but the topology matrix has {len(topology.gpus)}; "
            "was the capture taken on another machine or with CUDA_VISIBLE_DEVICES set?"
        )
    nics = assign_closest_devices(
        nics,
        topology=topology,
        gpu_numa=_gpu_numa(reading.gpus, topology),
        cpu=cpu,
        rdma_siblings=rdma_netdevs(sysfs_root),
        virtual=virtual_netdevs(sysfs_root),
    )
    return ProbeReport(
        hostname=_hostname(sysfs_root),
        gpus=reading.gpus,
        driver_version=reading.driver_version,
        cuda_version=reading.cuda_version,
        nvml_error=reading.error,
        p2p=reading.p2p,
        topology=topology,
        topology_error=topology_error,
        nics=nics,
        cpu=cpu,
        warnings=warnings,
    )
