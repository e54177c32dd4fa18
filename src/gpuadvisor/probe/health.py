"""Health findings: likely hardware degradations in a probe report, and in measured bandwidth.

Each finding is one sentence naming the problem and the likely fix. The inventory checks read the
ProbeReport only; the bandwidth check compares the collective probe's bus bandwidth with what the
link should give: the Cluster's DeviceLink / Network rates when a cluster is passed, otherwise the
link catalog (knowledge/links.yaml) for the path nvidia-smi reports, or shared memory for CPU ranks.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from ..errors import UserError
from ..schemas.hardware import Cluster, Nic, Node
from ..schemas.measure import CollectiveCurve, MeasureReport
from ..schemas.probe import GpuInfo, ProbeReport

DEGRADED_RATIO = 0.5  # measured busbw below this fraction of the expectation is flagged
FAST_ETHERNET_GBIT = 25.0  # from here on, MTU 1500 costs noticeable CPU and throughput
VIRTUAL_DRIVERS = {"bridge", "veth", "tun", "dummy", "vxlan", "macvlan", "ipvlan", "wireguard", "openvswitch"}
VIRTUAL_PREFIXES = ("docker", "br-", "virbr", "cni", "flannel", "cali", "kube", "tailscale", "wg", "veth")


def _gpu_label(g: GpuInfo) -> str:
    """GPU3 (NVIDIA A40)."""
    return f"GPU{g.index}" + (f" ({g.name})" if g.name else "")


def _pcie(report: ProbeReport) -> list[str]:
    """Links running narrower or slower than the card and slot allow."""
    out = []
    for g in report.gpus:
        if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
            out.append(
                f"{_gpu_label(g)} runs its PCIe link at x{g.pcie_width} although it supports "
                f"x{g.pcie_width_max}, cutting host and peer bandwidth to {g.pcie_width / g.pcie_width_max:.0%}: "
                "move it to a full-width slot, reseat it or its riser, and check the BIOS lane bifurcation."
            )
        if g.pcie_gen and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max:
            out.append(
                f"{_gpu_label(g)} links at PCIe Gen{g.pcie_gen} below its Gen{g.pcie_gen_max} maximum: "
                "idle GPUs downshift to save power, so recheck under load (nvidia-smi -q -d PCIE), and if "
                "it stays low set the slot to its top generation in the BIOS and check the riser or cable."
            )
    return out


def _nvlink(report: ProbeReport) -> list[str]:
    """NVLinks that exist but are not up."""
    out = []
    for g in report.gpus:
        if g.nvlinks_total and g.nvlinks_active is not None and g.nvlinks_active < g.nvlinks_total:
            what = "none is active" if g.nvlinks_active == 0 else f"only {g.nvlinks_active} are active"
            out.append(
                f"{_gpu_label(g)} has {g.nvlinks_total} NVLinks but {what}, so its peer traffic falls back "
                "to PCIe: check the NVLink bridge seating, start nvidia-fabricmanager on NVSwitch systems, "
                "and inspect the links with nvidia-smi nvlink -s."
            )
    return out


def _p2p(report: ProbeReport) -> list[str]:
    """GPU pairs without CUDA peer-to-peer (traffic bounces through host memory)."""
    pairs = [p for p in report.p2p if p.read is False or p.write is False]
    if not pairs:
        return []
    names = ", ".join(f"{p.a}-{p.b}" for p in pairs)
    reasons = sorted({p.reason for p in pairs if p.reason})
    why = f" ({'; '.join(reasons)})" if reasons else ""
    return [
        f"GPU pair(s) {names} have no CUDA peer-to-peer access{why}, so NCCL stages their traffic through "
        "host memory at about half the PCIe rate: on datacenter GPUs disable PCIe ACS in the BIOS or set "
        "the IOMMU to passthrough (GeForce cards do not offer P2P at all)."
    ]


def _mig(report: ProbeReport) -> list[str]:
    """GPUs partitioned with MIG."""
    migs = [g for g in report.gpus if g.mig_enabled]
    if not migs:
        return []
    ids = ",".join(str(g.index) for g in migs)
    return [
        f"MIG is enabled on {', '.join(_gpu_label(g) for g in migs)}, so a rank gets one slice of the GPU "
        "and NCCL cannot use NVLink or P2P between instances: for multi-GPU training disable it with "
        f"sudo nvidia-smi -i {ids} -mig 0 and reset the GPU."
    ]


def _is_virtual(nic: Nic) -> bool:
    """Bridges, veths and tunnels: their reported speed means nothing."""
    return (nic.driver or "") in VIRTUAL_DRIVERS or nic.name.startswith(VIRTUAL_PREFIXES)


def _nics(nics: Iterable[Nic]) -> list[str]:
    """NICs below their capability, of unknown speed, or with a small MTU on a fast link."""
    out = []
    for nic in nics:
        if nic.kind == "loopback" or nic.name == "lo" or _is_virtual(nic) or nic.operstate == "down":
            continue
        speed, top = nic.speed_gbit_per_s, nic.speed_max_gbit_per_s
        if speed is not None and top is not None and speed < top:
            out.append(
                f"NIC {nic.name} negotiated {speed:g} Gb/s although it supports {top:g} Gb/s: check the cable "
                "or transceiver and the switch port, and disable speed forcing (ethtool -s "
                f"{nic.name} autoneg on)."
            )
        if speed is None:
            out.append(
                f"NIC {nic.name} reports no link speed (virtual NIC, or a driver without ethtool support), "
                "so gpuadvisor cannot trust its rate: measure it with the collective probe across nodes or "
                "set the network speed in the cluster file."
            )
        fast = nic.kind in ("infiniband", "roce") or (speed or 0) >= FAST_ETHERNET_GBIT
        if nic.mtu is not None and nic.mtu <= 1500 and fast:
            out.append(_mtu_finding(nic))
    return out


def _mtu_finding(nic: Nic) -> str:
    """One MTU sentence, tailored to RoCE, IPoIB or plain Ethernet."""
    rate = f"{nic.speed_gbit_per_s:g} Gb/s " if nic.speed_gbit_per_s else ""
    if nic.kind == "roce":
        fix = (f"raise it to 9000 (ip link set {nic.name} mtu 9000, and on the switch) so RoCE can use "
               "4096-byte frames instead of 1024")
    elif nic.kind == "infiniband":
        fix = (f"NCCL's verbs traffic is unaffected, but TCP over IPoIB (gloo, sockets) is slow: use connected "
               f"mode with a 65520 MTU or at least 4092 on {nic.name}")
    else:
        fix = f"enable jumbo frames (ip link set {nic.name} mtu 9000, matching the switch and every peer)"
    return f"NIC {nic.name} ({rate}{nic.kind}) uses MTU {nic.mtu}, which wastes bandwidth and CPU on a fast link: {fix}."


def _node_for(cluster: Cluster, hostname: str) -> Node:
    """The cluster node measured: the one named like the host, else the first."""
    for node in cluster.nodes:
        if node.name == hostname or node.access.host == hostname:
            return node
    return cluster.nodes[0]


def _expected_from_cluster(curve: CollectiveCurve, cluster: Cluster, hostname: str) -> Optional[tuple[float, str]]:
    """(busbw GB/s, what) the cluster model expects for the curve's group, or None."""
    if curve.nodes > 1:
        net = cluster.network
        if net is None:
            return None
        name = f"{net.nic} " if net.nic else ""
        return net.bandwidth_gb_per_s, f"the {name}{net.protocol} network between nodes"
    node = _node_for(cluster, hostname)
    ids = sorted(d.index for d in node.devices)[: curve.world_size]
    links = [lk for a in ids for b in ids if a < b for lk in [node.link(a, b)] if lk is not None]
    if not links:
        return None
    slowest = min(links, key=lambda lk: lk.bandwidth_gb_per_s)
    token = f"NV{slowest.nvlink_count}" if slowest.link_class.value == "NV" else slowest.link_class.value
    return slowest.bandwidth_gb_per_s, f"the {token} link between devices {slowest.a} and {slowest.b} on {node.name}"


def _expected_from_catalog(curve: CollectiveCurve, report: ProbeReport) -> Optional[tuple[float, str]]:
    """(busbw GB/s, what) from knowledge/links.yaml for the slowest intra-node path, or None."""
    if curve.nodes > 1:
        return None  # the inter-node rate needs the cluster's network section
    try:
        from ..knowledge import link_spec
    except ImportError:  # catalog loader not available in this build
        return None
    try:
        if curve.backend == "gloo":  # the collective probe runs gloo on CPU tensors
            spec = link_spec("shm")
            return spec.bandwidth_gb_per_s, "gloo over shared memory / loopback on one host"
        topo = report.topology
        if topo is None or len(topo.gpus) < curve.world_size:
            return None
        best: Optional[tuple[float, str]] = None
        p2p = {(p.a, p.b): (p.read is not False and p.write is not False) for p in report.p2p}
        for i in range(curve.world_size):
            for j in range(i + 1, curve.world_size):
                link = topo.gpu_link(i, j)
                if link is None:
                    continue
                g = report.gpus[i] if i < len(report.gpus) else None
                spec = link_spec(link.token, pcie_gen=g.pcie_gen_max if g else None,
                                 pcie_width=g.pcie_width_max if g else None, p2p=p2p.get((i, j)),
                                 gpu=g.name if g else None, nvlink_count=link.nvlink_count or None)
                if best is None or spec.bandwidth_gb_per_s < best[0]:
                    best = (spec.bandwidth_gb_per_s, f"the {link.token} path between GPU{i} and GPU{j}")
        return best
    except UserError:  # a token or GPU the catalog does not know: no expectation
        return None


def _achieved(curve: CollectiveCurve) -> Optional[float]:
    """The curve's fitted asymptotic busbw, else its best measured point."""
    if curve.busbw_gb_per_s:
        return curve.busbw_gb_per_s
    return max((p.busbw_gb_per_s for p in curve.points), default=None)


def _bandwidth(report: ProbeReport, measured: MeasureReport, cluster: Optional[Cluster],
               ratio: float) -> list[str]:
    """One finding per rank group whose best collective reaches less than `ratio` of the expectation."""
    groups: dict[tuple[str, int, int], list[CollectiveCurve]] = {}
    for c in measured.collectives:
        if c.backend == "gloo" and c.op == "reduce_scatter":
            continue  # gloo emulates it with an all-reduce: half the busbw by construction
        groups.setdefault((c.backend, c.world_size, c.nodes), []).append(c)
    out = []
    for (backend, n, nodes), curves in groups.items():
        scored = [(bw, c) for c in curves for bw in [_achieved(c)] if bw is not None]
        if not scored:
            continue
        best_bw, best = max(scored, key=lambda s: s[0])
        if cluster is not None:
            expected = _expected_from_cluster(best, cluster, measured.hostname)
        else:
            expected = _expected_from_catalog(best, report)
        if expected is None or expected[0] <= 0 or best_bw >= ratio * expected[0]:
            continue
        want, what = expected
        fix = ("rerun with NCCL_DEBUG=INFO to see the transport NCCL picked, check that NCCL_P2P_DISABLE, "
               "NCCL_IB_DISABLE and NCCL_SOCKET_IFNAME are not forcing a slow path, and look for a "
               "downgraded PCIe link or NIC") if backend == "nccl" else (
               "check for other load on the host and that GLOO_SOCKET_IFNAME names the fast interface")
        where = f"{n} ranks on {nodes} node{'s' if nodes > 1 else ''}"
        out.append(
            f"Measured {best.op.replace('_', '-')} bus bandwidth over {where} ({backend}) is "
            f"{best_bw:.3g} GB/s, {best_bw / want:.0%} of the {want:.3g} GB/s expected for {what}, "
            f"so the link is likely degraded: {fix}."
        )
    return out


def findings(report: ProbeReport, measured: MeasureReport | None = None, cluster: Cluster | None = None,
             *, degraded_ratio: float = DEGRADED_RATIO) -> list[str]:
    """Likely hardware degradations, one sentence each (problem, then likely fix); [] when healthy.

    From the probe report: PCIe width or generation below the maximum, NVLinks present but
    inactive, GPU pairs without peer-to-peer, MIG enabled, NICs negotiated below their capability
    or of unknown speed, MTU 1500 on a >= 25 GbE, RoCE or InfiniBand link. With `measured`: each
    rank group's best collective bus bandwidth below `degraded_ratio` of the expectation, taken
    from `cluster` (DeviceLink / Network bandwidth_gb_per_s) when given, else from the link catalog.
    The NICs checked are the report's plus, when a cluster is given, its nodes' NICs not already seen.
    """
    nics = list(report.nics)
    if cluster is not None:
        seen = {n.name for n in nics}
        node = _node_for(cluster, report.hostname)
        nics += [n for n in node.nics if n.name not in seen]
    out = _pcie(report) + _nvlink(report) + _p2p(report) + _mig(report) + _nics(nics)
    if measured is not None:
        out += _bandwidth(report, measured, cluster, degraded_ratio)
    return out
