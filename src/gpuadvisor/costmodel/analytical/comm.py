"""Collectives under the α–β model, and the slowest hop of a process group placed on a cluster.

Formulas: Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication operations
in MPICH" (ring all-reduce 2(n−1)/n·S/B + 2(n−1)·α; reduce-scatter and all-gather (n−1)/n·S/B +
(n−1)·α); NCCL's busbw convention (nccl-tests PERFORMANCE.md). B is the slowest hop of the ring.

Across nodes each GPU sends over its rail, the NIC closest to it (DGX/HGX: one NIC per GPU on the GPU's PCIe
switch). NCCL spreads a ring's channels over the NICs of the ranks it has on a node (NCCL User Guide,
NCCL_CROSS_NIC / NCCL_IB_HCA; ncclTopoCompute picks each channel's NIC by GPU proximity), so a group crossing
nodes uses the rails of its members there, and groups whose members share a rail share that NIC.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...schemas import Cluster, LinkClass
from ...schemas.hardware import Nic, Node

GB = 1e9


def ring_allreduce_s(size_bytes: float, n: int, bw_gb_per_s: float, latency_us: float) -> float:
    """Ring all-reduce: 2(n−1)/n · S/B + 2(n−1)·α (Thakur et al. 2005 §4.2; nccl-tests busbw)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return 2.0 * (n - 1) / n * size_bytes / (bw_gb_per_s * GB) + 2.0 * (n - 1) * latency_us * 1e-6


def reduce_scatter_s(size_bytes: float, n: int, bw_gb_per_s: float, latency_us: float) -> float:
    """Ring reduce-scatter (or all-gather) of a full buffer S: (n−1)/n · S/B + (n−1)·α."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return (n - 1) / n * size_bytes / (bw_gb_per_s * GB) + (n - 1) * latency_us * 1e-6


all_gather_s = reduce_scatter_s


def p2p_s(size_bytes: float, bw_gb_per_s: float, latency_us: float) -> float:
    """One point-to-point message: α + S/B."""
    return latency_us * 1e-6 + size_bytes / (bw_gb_per_s * GB)


def link_kind(link_class: LinkClass) -> str:
    """Coarse link kind used as breakdown key: nvlink, pcie, shm."""
    if link_class == LinkClass.NVLINK:
        return "nvlink"
    if link_class == LinkClass.SHM:
        return "shm"
    return "pcie"


@dataclass(frozen=True)
class Group:
    """How one kind of process group (tp, dp or pp) sits on the cluster."""

    n: int                 # ranks in the group
    nodes: int             # nodes one group spans
    per_node: int          # ranks of one group on one node (max)
    bw_gb_per_s: float     # slowest hop of the flat ring (NIC share included)
    latency_us: float      # largest α on the ring
    kind: str              # link kind of the slowest hop: nvlink/pcie/shm/network
    intra_bw: float        # slowest intra-node hop among members (inf if none)
    intra_lat: float
    intra_kind: str
    net_bw_per_flow: float  # NIC bandwidth per concurrent flow of this group kind (inf if intra)
    flows_per_nic: int     # ring hops leaving a node through the busiest NIC (groups sharing it)
    shared_chain: int = 0  # chain hops (i -> i+1, no wrap) over shared PCIe uplinks on the busiest node
    flows_per_node: int = 0  # ring hops leaving the busiest node over all its NICs (= flows_per_nic with one NIC)
    rails: int = 0         # NICs one group uses on a node (most over groups; 0 if intra-node)

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes > 1


# PCIe paths that leave a switch (several bridges, host bridge, SMP link): concurrent transfers of a
# group share the upstream ports. Seed 001 Appendix D blames these bridges for the 4-GPU collapse;
# a ring's transfers in one direction split an x16 uplink (full duplex: two opposite flows fit).
SHARED_PCIE = (LinkClass.PXB, LinkClass.PHB, LinkClass.NODE, LinkClass.SYS, LinkClass.UNKNOWN)


class Topology:
    """Per-cluster link matrices and a cache of group placements (the hot path's lookup table)."""

    def __init__(self, cluster: Cluster, default_intra_gb_per_s: float = 8.0, default_intra_us: float = 10.0,
                 net_efficiency: float = 1.0):
        self.cluster = cluster
        self.mats: list[list[list[tuple[float, float, str]]]] = []
        for node in cluster.nodes:
            devs = [d.index for d in node.devices]
            known = [lk for lk in node.links]
            fallback = (min((lk.bandwidth_gb_per_s for lk in known), default=default_intra_gb_per_s),
                        max((lk.latency_us for lk in known), default=default_intra_us), "pcie", True)
            mat = []
            for a in devs:
                row = []
                for b in devs:
                    lk = node.link(a, b) if a != b else None
                    row.append((lk.bandwidth_gb_per_s, lk.latency_us, link_kind(lk.link_class),
                                lk.link_class in SHARED_PCIE) if lk else fallback)
                mat.append(row)
            self.mats.append(mat)
        net = cluster.network
        self.net_bw = (net.bandwidth_gb_per_s * net_efficiency) if net else float("inf")
        self.net_lat = net.latency_us if net else 0.0
        # per node: the NICs inter-node traffic uses as (GB/s, us), and each device position's rails (NIC indices)
        self.nics: list[list[tuple[float, float]]] = []
        self.gpu_rails: list[list[tuple[int, ...]]] = []
        for node in cluster.nodes:
            rates, owned = node_rails(node, cluster, net_efficiency)
            self.nics.append(rates)
            self.gpu_rails.append(owned)
        self._cache: dict[tuple, Group] = {}

    def group(self, kind: str, dp: int, tp: int, pp: int, nodes: int, gpn: int, order: str) -> Group:
        """Placement of the `kind` groups ('tp', 'dp', 'pp') of a plan, cached by its degrees."""
        key = (kind, dp, tp, pp, nodes, gpn, order)
        g = self._cache.get(key)
        if g is None:
            g = self._cache[key] = self._place(kind, dp, tp, pp, nodes, gpn, order)
        return g

    def _place(self, kind: str, dp: int, tp: int, pp: int, nodes: int, gpn: int, order: str) -> Group:
        """Enumerate every group of `kind`; ring hops -> slowest link, NIC flows per node."""
        inf = float("inf")
        # rank = tp_i + tp*(dp_i + dp*pp_i) for tp-dp-pp; rank = tp_i + tp*(pp_i + pp*dp_i) for tp-pp-dp
        def rank(t: int, d: int, p: int) -> int:
            return t + tp * (d + dp * p) if order == "tp-dp-pp" else t + tp * (p + pp * d)
        groups = []
        if kind == "tp":
            groups = [[rank(t, d, p) for t in range(tp)] for d in range(dp) for p in range(pp)]
        elif kind == "dp":
            groups = [[rank(t, d, p) for d in range(dp)] for t in range(tp) for p in range(pp)]
        else:
            groups = [[rank(t, d, p) for p in range(pp)] for t in range(tp) for d in range(dp)]
        n = len(groups[0])
        if n == 1:
            return Group(1, 1, 1, inf, 0.0, "none", inf, 0.0, "none", inf, 0)
        flows = [0] * nodes
        shared = [0] * nodes
        chain = [0] * nodes  # pipeline boundaries (no wrap-around hop) over shared uplinks
        for members in groups:  # concurrent in-node transfers over shared PCIe uplinks, per node
            for i, r in enumerate(members):
                s = members[(i + 1) % n]
                if r // gpn == s // gpn:
                    mat = self.mats[min(r // gpn, len(self.mats) - 1)]
                    if r % gpn < len(mat) and s % gpn < len(mat) and mat[r % gpn][s % gpn][3]:
                        shared[r // gpn] += 1
                        if i + 1 < n:
                            chain[r // gpn] += 1
        intra_bw, intra_lat, intra_kind = inf, 0.0, "none"
        span, per_node, rails = 1, 1, 0
        load: dict[tuple[int, int], float] = {}  # (node, NIC) -> hops through it, each split over its group's rails
        hops: dict[tuple[int, int], int] = {}    # (node, NIC) -> hops that put traffic on it
        for members in groups:
            nodes_of = [r // gpn for r in members]
            span = max(span, len(set(nodes_of)))
            per_node = max(per_node, max(nodes_of.count(x) for x in set(nodes_of)))
            used: dict[int, set[int]] = {}  # node -> the group's rails there
            for r in members:
                used.setdefault(r // gpn, set()).update(self._rails_of(r // gpn, r % gpn))
            for i, r in enumerate(members):
                na = r // gpn
                if members[(i + 1) % n] // gpn != na:
                    share = used[na]
                    rails = max(rails, len(share))
                    for j in share:
                        load[(na, j)] = load.get((na, j), 0.0) + 1.0 / len(share)
                        hops[(na, j)] = hops.get((na, j), 0) + 1
            for i, r in enumerate(members):
                s = members[(i + 1) % n]
                na, nb = r // gpn, s // gpn
                if na == nb:
                    mat = self.mats[min(na, len(self.mats) - 1)]
                    la, lb = r % gpn, s % gpn
                    if la < len(mat) and lb < len(mat):
                        bw, lat, k, sh = mat[la][lb]
                        if sh:
                            bw = bw / max(1.0, shared[na] / 2.0)
                        if bw < intra_bw:
                            intra_bw, intra_kind = bw, k
                        intra_lat = max(intra_lat, lat)
                else:
                    flows[na] += 1
        busiest = max(flows) if flows else 0
        if busiest:
            # every group moves at the rate its busiest NIC allows: NIC j carries load_j ring flows
            per_flow, net_lat = inf, 0.0
            for (na, j), lj in load.items():
                bw_j, lat_j = self._nic(na, j)
                per_flow = min(per_flow, bw_j / lj)
                net_lat = max(net_lat, lat_j)
            bw = min(per_flow, intra_bw)
            kind_s = "network" if per_flow <= intra_bw else intra_kind
            lat = max(net_lat, intra_lat)
            nic_flows = max(hops.values())
        else:
            per_flow, bw, kind_s, lat, nic_flows, rails = inf, intra_bw, intra_kind, intra_lat, 0, 0
        return Group(n, span, per_node, bw, lat, kind_s, intra_bw, intra_lat, intra_kind, per_flow, nic_flows,
                     max(chain) if chain else 0, busiest, rails)

    def _rails_of(self, node: int, pos: int) -> tuple[int, ...]:
        """NIC indices device position `pos` of `node` sends over (nodes past the list repeat the last)."""
        owned = self.gpu_rails[min(node, len(self.gpu_rails) - 1)]
        return owned[pos] if pos < len(owned) else (0,)

    def _nic(self, node: int, j: int) -> tuple[float, float]:
        """(GB/s, us) of NIC j of `node`."""
        rates = self.nics[min(node, len(self.nics) - 1)]
        return rates[j] if j < len(rates) else (self.net_bw, self.net_lat)


# Nic.kind -> Network.protocol of the transport NCCL runs over the port (RDMA verbs, or TCP sockets)
_NIC_PROTOCOL = {"infiniband": "ib", "roce": "roce", "ethernet": "tcp"}


def rail_nics(node: Node, cluster: Cluster) -> list[Nic]:
    """The NICs of `node` that carry the job's inter-node traffic as rails, or [] for one shared NIC.

    Rails are the node's rated NICs (Nic.bandwidth_gb_per_s) of the network's protocol and speed. The
    network alone (one NIC per node at `cluster.network`'s rate, as before rails) applies when the network
    names its interface (`network.nic`: NCCL_SOCKET_IFNAME / NCCL_IB_HCA pin the job to it), when no NIC
    matches, and on single-node clusters.
    """
    net = cluster.network
    if net is None or net.nic:
        return []
    out = []
    for nic in node.nics:
        if nic.bandwidth_gb_per_s is None or _NIC_PROTOCOL.get(nic.kind) != net.protocol:
            continue
        if net.link_speed_gbit_per_s and nic.speed_gbit_per_s and nic.speed_gbit_per_s != net.link_speed_gbit_per_s:
            continue
        out.append(nic)
    return out


def node_rails(node: Node, cluster: Cluster, net_efficiency: float = 1.0
               ) -> tuple[list[tuple[float, float]], list[tuple[int, ...]]]:
    """(each NIC's (GB/s, us), each device position's NIC indices) for inter-node traffic from `node`.

    A device uses the NICs that list it in `closest_devices`; NICs that list none are spread round-robin over
    the devices that have no NIC yet (then over all); a device left without a NIC of its own shares NIC
    position % NICs. Without rails every device shares one NIC at the network's rate.
    """
    net = cluster.network
    rails = rail_nics(node, cluster)
    n_dev = len(node.devices)
    if not rails or not n_dev:
        bw = net.bandwidth_gb_per_s * net_efficiency if net else float("inf")
        return [(bw, net.latency_us if net else 0.0)], [(0,)] * n_dev
    lat0 = net.latency_us if net else 0.0
    rates = [(float(nic.bandwidth_gb_per_s or 0.0) * net_efficiency,
              nic.latency_us if nic.latency_us is not None else lat0) for nic in rails]
    pos = {d.index: i for i, d in enumerate(node.devices)}
    owned: list[list[int]] = [[] for _ in range(n_dev)]
    loose = []
    for j, nic in enumerate(rails):
        mine = [pos[d] for d in nic.closest_devices if d in pos]
        for p in mine:
            owned[p].append(j)
        if not mine:
            loose.append(j)
    for u, j in enumerate(loose):
        empty = [p for p in range(n_dev) if not owned[p]]
        owned[empty[0] if empty else u % n_dev].append(j)
    return rates, [tuple(o) if o else (p % len(rails),) for p, o in enumerate(owned)]


def group_allreduce_s(size_bytes: float, g: Group, hier_min_nodes: int = 3) -> float:
    """All-reduce on a placed group: min of the flat ring and the hierarchical (2D) algorithm.

    Hierarchical: intra-node reduce-scatter, inter-node all-reduce of S/g by each local rank in
    parallel (the g flows share the NIC), intra-node all-gather — NCCL's tree/CollNet-style split
    (Jeaugey, "Massively scale your deep learning training with NCCL 2.4", NVIDIA blog 2019).
    """
    if g.n <= 1:
        return 0.0
    flat = ring_allreduce_s(size_bytes, g.n, g.bw_gb_per_s, g.latency_us)
    if g.nodes >= hier_min_nodes and g.per_node > 1 and g.intra_bw != float("inf"):
        k, m = g.nodes, g.per_node
        inter_bw = g.net_bw_per_flow / m if g.flows_per_nic else g.bw_gb_per_s
        hier = (reduce_scatter_s(size_bytes, m, g.intra_bw, g.intra_lat)
                + ring_allreduce_s(size_bytes / m, k, inter_bw, g.latency_us)
                + all_gather_s(size_bytes, m, g.intra_bw, g.intra_lat))
        return min(flat, hier)
    return flat


def overlapped_exposed_s(comm_s: float, last_bucket_s: float, window_s: float, contention: float) -> float:
    """Exposed time of communication that runs beside `window_s` of compute.

    PyTorch DDP (Li et al. 2020 VLDB §3.2.3): buckets are all-reduced while backward continues;
    the last bucket is always exposed and what exceeds the window is exposed. The hidden part still
    slows compute by `contention` (NCCL kernels share SMs/HBM; Jangda et al. 2022 §2).
    """
    if comm_s <= 0:
        return 0.0
    hidden = max(0.0, min(comm_s - last_bucket_s, window_s))
    return comm_s - hidden + contention * hidden


def powersgd_ratio(rank: int, d_model: int) -> float:
    """PowerSGD rank-r compression of an h×h-ish matrix: r·(n+m)/(n·m) (Vogels et al. 2019 §3)."""
    return min(1.0, rank * 2.0 / max(d_model, 1))


def pick(value: Optional[float], default: float) -> float:
    """`value` unless None."""
    return default if value is None else value
