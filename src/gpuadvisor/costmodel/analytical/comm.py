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

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ...hardware.catalog import NIC_PROTOCOL
from ...schemas import Cluster, LinkClass
from ...schemas.hardware import SWITCHED, Nic, Node, joined

GB = 1e9


def _out(t, n, size):
    """0 where the group is one rank or the buffer is empty; a float for scalar inputs, else an array."""
    t = np.where((np.asarray(n) <= 1) | (np.asarray(size) <= 0), 0.0, t)
    return float(t) if np.ndim(t) == 0 else t


def ring_steps_latency_s(n, latency_us, nodes=None, intra_lat_us=None):
    """Latency of one pass around a ring of n ranks (n − 1 steps), seconds; scalars or arrays.

    NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel): a ring step that stays inside a
    node costs the intra-node hop latency and only the nNodes − 1 steps that cross nodes cost the network's,
    (nRanks − nNodes)·α_intra + (nNodes − 1)·α_net. Without `nodes` (or on one node) every step costs α."""
    n = np.asarray(n, dtype=float)
    if nodes is None or intra_lat_us is None:
        return (n - 1) * np.asarray(latency_us, dtype=float) * 1e-6
    k = np.clip(np.asarray(nodes, dtype=float), 1.0, np.maximum(n, 1.0))
    intra = np.where(np.isfinite(intra_lat_us), intra_lat_us, 0.0)
    across = (k - 1) * latency_us + (n - k) * intra
    return np.where(k > 1, across, (n - 1) * latency_us) * 1e-6


def ring_allreduce_s(size_bytes, n, bw_gb_per_s, latency_us, nodes=None, intra_lat_us=None):
    """Ring all-reduce: 2(n−1)/n · S/B + twice the ring's step latency (Thakur et al. 2005 §4.2; nccl-tests
    busbw; ring_steps_latency_s). Scalars or NumPy arrays (the engine prices every candidate at once)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (2.0 * (n - 1) / n * size_bytes / (bw_gb_per_s * GB)
             + 2.0 * ring_steps_latency_s(n, latency_us, nodes, intra_lat_us))
    return _out(t, n, size_bytes)


def reduce_scatter_s(size_bytes, n, bw_gb_per_s, latency_us, nodes=None, intra_lat_us=None, steps_latency_s=None):
    """Ring reduce-scatter (or all-gather) of a full buffer S: (n−1)/n · S/B + the ring's step latency.

    `steps_latency_s`: ring_steps_latency_s of this group when the caller already has it (the engine prices many
    buffers on the same groups), instead of recomputing it from latency_us, nodes and intra_lat_us."""
    if steps_latency_s is None:
        steps_latency_s = ring_steps_latency_s(n, latency_us, nodes, intra_lat_us)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (n - 1) / n * size_bytes / (bw_gb_per_s * GB) + steps_latency_s
    return _out(t, n, size_bytes)


all_gather_s = reduce_scatter_s


def p2p_s(size_bytes: float, bw_gb_per_s: float, latency_us: float) -> float:
    """One point-to-point message: α + S/B."""
    return latency_us * 1e-6 + size_bytes / (bw_gb_per_s * GB)


def ring_attention_exchange_s(chunk_bytes, cp, bw_gb_per_s, latency_us, call_s):
    """Seconds of one pass of context parallelism's key/value exchange over a group of `cp` ranks.

    Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers", §3; Megatron-Core's
    context-parallel attention in Transformer Engine, which sends K and V peer to peer) takes cp - 1 steps: each
    rank sends its current K/V chunk (`chunk_bytes`) to the next rank and receives one from the previous one
    while it computes the block it holds, so every rank sends cp - 1 chunks per pass over the group's slowest hop.
    The backward sends the chunks again beside their gradients (two passes). torchtitan's all-gather rotation
    moves the same (cp - 1) chunks per rank in one collective. Each step pays the hop's latency and a call."""
    steps = cp - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        t = steps * (latency_us * 1e-6 + chunk_bytes / (bw_gb_per_s * GB) + call_s)
    return np.where(steps > 0, t, 0.0)


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
# ... except a pair without P2P across host bridges or sockets: NCCL bounces its data through host memory, each GPU
# over its own root port (GPU -> host buffer -> GPU), so the ring's flows do not meet on a bridge; what they share is
# the hosts' memory, which the no-P2P rate (knowledge/links.yaml no_p2p) already is. NVIDIA/nccl #1639: 8 RTX 5090s
# on two Xeon 8480+ sockets reach 28 GB/s of bus bandwidth, 4 reach 35 ("8 flows at 28GB/s in both directions"),
# where splitting the uplinks gave 6.8 and 13.5 (benchmarks/nccl_accuracy.py). Behind one switch (PIX, PXB) the
# bounce does climb a shared uplink, and those keep the rule.
OWN_ROOT_PORT = (LinkClass.PHB, LinkClass.NODE, LinkClass.SYS)


def shares_uplink(link_class: LinkClass, p2p: Optional[bool]) -> bool:
    """Whether a ring's hops over this class of link share PCIe uplinks with the group's other hops (SHARED_PCIE,
    OWN_ROOT_PORT); a link whose P2P is unknown (None) shares, as before."""
    return link_class in SHARED_PCIE and (p2p is not False or link_class not in OWN_ROOT_PORT)


_KINDS = ("nvlink", "pcie", "shm")  # link_kind() values, indexed by the kind arrays below


def _node_matrix(node: Node, default_bw: float, default_us: float) -> list[list[tuple[float, float, str, bool]]]:
    """(GB/s, us, link kind, over shared PCIe) for each ordered device pair of `node`, by device position.

    Pairs without a link (and the diagonal) get the fallback: the node's slowest link rate and largest latency.
    One dict of the links (first link of a pair wins, as in Node.link) makes this O(devices² + links).
    """
    known = node.links
    fallback = (min((lk.bandwidth_gb_per_s for lk in known), default=default_bw),
                max((lk.latency_us for lk in known), default=default_us), "pcie", True)
    by_pair: dict[tuple[int, int], tuple[float, float, str, bool]] = {}
    for lk in known:
        key = (lk.a, lk.b) if lk.a < lk.b else (lk.b, lk.a)
        if key not in by_pair:
            by_pair[key] = (lk.bandwidth_gb_per_s, lk.latency_us, link_kind(lk.link_class),
                            shares_uplink(lk.link_class, lk.p2p_supported))
    devs = [d.index for d in node.devices]
    return [[(by_pair.get((a, b) if a < b else (b, a), fallback) if a != b else fallback) for b in devs]
            for a in devs]


def _mat_content(node: Node) -> tuple:
    """What a node's link matrix depends on: device indices in order and each link's pair, class, rates and P2P."""
    return (tuple(d.index for d in node.devices),
            tuple((lk.a, lk.b, lk.link_class, lk.bandwidth_gb_per_s, lk.latency_us, lk.p2p_supported)
                  for lk in node.links))


class _Pattern:
    """Link matrix of one distinct node content as arrays, by (position a, position b)."""

    def __init__(self, mat: list[list[tuple[float, float, str, bool]]]):
        self.size = len(mat)
        self.bw = np.array([[c[0] for c in row] for row in mat], dtype=float).reshape(self.size, self.size)
        self.lat = np.array([[c[1] for c in row] for row in mat], dtype=float).reshape(self.size, self.size)
        self.kind = np.array([[_KINDS.index(c[2]) for c in row] for row in mat], dtype=np.int8
                             ).reshape(self.size, self.size)
        self.shared = np.array([[c[3] for c in row] for row in mat], dtype=bool).reshape(self.size, self.size)


class Topology:
    """Per-cluster link matrices and a cache of group placements (the hot path's lookup table).

    Nodes with the same devices and links share one matrix (built once, keyed by content), and nodes with the
    same rails share one rail table, so a cluster of 16,384 identical nodes costs one node's work. Placement
    (`_place`) runs over arrays of ranks; on identical nodes it places one period of the layout (the smallest
    run of whole nodes holding whole groups) rather than the world, where that gives the same answer.
    """

    def __init__(self, cluster: Cluster, default_intra_gb_per_s: float = 8.0, default_intra_us: float = 10.0,
                 net_efficiency: float = 1.0):
        self.cluster = cluster
        self.mats: list[list[list[tuple[float, float, str, bool]]]] = []  # per node (alike nodes share one)
        self._patterns: list[_Pattern] = []
        pattern_mats: list[list[list[tuple[float, float, str, bool]]]] = []
        mat_ids: list[int] = []
        by_lists: dict[tuple[int, int], int] = {}  # (id(devices), id(links)) -> pattern: copies share the lists
        by_content: dict[tuple, int] = {}
        for node in cluster.nodes:
            ident = (id(node.devices), id(node.links))
            m = by_lists.get(ident)
            if m is None:
                content = _mat_content(node)
                m = by_content.get(content)
                if m is None:
                    m = by_content[content] = len(pattern_mats)
                    pattern_mats.append(_node_matrix(node, default_intra_gb_per_s, default_intra_us))
                    self._patterns.append(_Pattern(pattern_mats[m]))
                by_lists[ident] = m
            self.mats.append(pattern_mats[m])
            mat_ids.append(m)
        net = cluster.network
        self.net_bw = (net.bandwidth_gb_per_s * net_efficiency) if net else float("inf")
        self.net_lat = net.latency_us if net else 0.0
        # per node: the NICs inter-node traffic uses as (GB/s, us), and each device position's rails (NIC indices)
        self.nics: list[list[tuple[float, float]]] = []
        self.gpu_rails: list[list[tuple[int, ...]]] = []
        rail_ids: list[int] = []
        rail_keys: dict[tuple, int] = {}
        by_node_lists: dict[tuple[int, int], int] = {}  # (id(devices), id(nics)) -> rail table
        tables: list[tuple[list[tuple[float, float]], list[tuple[int, ...]]]] = []
        for node in cluster.nodes:
            ident = (id(node.devices), id(node.nics))
            r = by_node_lists.get(ident)
            if r is None:
                rates, owned = node_rails(node, cluster, net_efficiency)
                key = (tuple(rates), tuple(owned))
                r = rail_keys.get(key)
                if r is None:
                    r = rail_keys[key] = len(tables)
                    tables.append((rates, owned))
                by_node_lists[ident] = r
            rates, owned = tables[r]
            self.nics.append(rates)
            self.gpu_rails.append(owned)
            rail_ids.append(r)
        # the least inter-node bandwidth of a node over all its rails (what an all-to-all leaving it shares)
        self.node_net_bw = min((sum(b for b, _ in rates) for rates, _ in tables), default=self.net_bw)
        self._mat_ids = np.array(mat_ids, dtype=np.int64)
        self._rail_ids = np.array(rail_ids, dtype=np.int64)
        # leading nodes alike (same matrix and rails as node 0): placement may use one period of the layout there
        alike = (self._mat_ids == self._mat_ids[0]) & (self._rail_ids == self._rail_ids[0])
        self._alike = len(alike) if alike.all() else int(np.argmin(alike))
        self._all_alike = bool(alike.all())
        self._nrails = max(len(rates) for rates, _ in tables)
        J = self._nrails
        self._rail_bw, self._rail_lat, self._rail_onehot = [], [], []
        for rates, owned in tables:
            bw = [b for b, _ in rates] + [self.net_bw] * (J - len(rates))
            lat = [u for _, u in rates] + [self.net_lat] * (J - len(rates))
            self._rail_bw.append(np.array(bw, dtype=float))
            self._rail_lat.append(np.array(lat, dtype=float))
            onehot = np.zeros((len(owned), J), dtype=bool)
            for p, js in enumerate(owned):
                onehot[p, list(js)] = True
            self._rail_onehot.append(onehot)
        self._tables: dict[int, np.ndarray] = {}
        self._cache: dict[tuple, Group] = {}

    def group(self, kind: str, dp: int, tp: int, pp: int, nodes: int, gpn: int, order: str) -> Group:
        """Placement of the `kind` groups ('tp', 'dp', 'pp') of a plan, cached by its degrees."""
        key = (kind, dp, tp, pp, nodes, gpn, order)
        g = self._cache.get(key)
        if g is None:
            g = self._cache[key] = self._place(kind, dp, tp, pp, nodes, gpn, order)
        return g

    def _place(self, kind: str, dp: int, tp: int, pp: int, nodes: int, gpn: int, order: str) -> Group:
        """Every group of `kind` as arrays of ranks; ring hops -> slowest link, NIC flows per node.

        Groups are arithmetic progressions: rank = t + tp*(d + dp*p) for tp-dp-pp, t + tp*(p + pp*d) for
        tp-pp-dp, so the groups of one kind are rows of `first member + stride * arange(n)`, listed in the order
        of the loops over the other two coordinates. The groups tile aligned blocks of stride*n ranks; on
        identical nodes the layout repeats every lcm(block, gpn) ranks, so one period gives every per-node and
        per-group figure (`_stats` says when the order of the NIC-load sums could still matter: then the world).
        """
        inf = float("inf")
        sd, sp = (tp, tp * dp) if order == "tp-dp-pp" else (tp * pp, tp)  # strides of d and p (t's is 1)
        if kind == "tp":
            n, stride, (a, sa), (b, sb) = tp, 1, (dp, sd), (pp, sp)
        elif kind == "dp":
            n, stride, (a, sa), (b, sb) = dp, sd, (tp, 1), (pp, sp)
        else:
            n, stride, (a, sa), (b, sb) = pp, sp, (tp, 1), (dp, sd)
        if n == 1:
            return Group(1, 1, 1, inf, 0.0, "none", inf, 0.0, "none", inf, 0)
        first = np.add.outer(np.arange(a, dtype=np.int64) * sa, np.arange(b, dtype=np.int64) * sb).ravel()
        world, block = dp * tp * pp, stride * n
        if self._all_alike or -(-world // gpn) <= self._alike:  # every node the plan uses is alike
            if block % gpn == 0:
                # blocks of whole nodes, all alike and apart, so block 0 says it all. Around its ring (hop r -> r +
                # stride mod block) the rows repeat every q members (stride*q = lcm(stride, gpn): whole nodes): two
                # such runs stand for the n/q of them, with each group's node count scaled back. Shifting the
                # block by gpn ranks maps nodes onto nodes and groups onto groups, so node 0 and the groups on it
                # have every per-node and per-group figure, unless the order of the groups could matter
                q = gpn // math.gcd(stride, gpn)
                m = 2 * q if n > 2 * q else n
                ring = stride * np.arange(m, dtype=np.int64)
                g = self._stats(first[first < min(stride, gpn)][:, None] + ring, gpn, True, node0=True)
                if g is None:
                    g = self._stats(first[first < stride][:, None] + ring, gpn, False)
                assert g is not None
                return g if m == n else replace(g, n=n, nodes=g.nodes * n // m)
            period = math.lcm(block, gpn)
            if period < world and world % period == 0:
                # blocks straddle nodes: the layout repeats every `period` ranks; place the first
                g = self._stats(first[first < period][:, None] + stride * np.arange(n, dtype=np.int64), gpn, True)
                if g is not None:
                    return g
        g = self._stats(first[:, None] + stride * np.arange(n, dtype=np.int64), gpn, False)
        assert g is not None
        return g

    def _rail_table(self, gpn: int) -> np.ndarray:
        """(rail table, device position, NIC) -> the position sends over that NIC; positions past a node's
        devices use NIC 0 (as node_rails' tables say nothing about them)."""
        t = self._tables.get(gpn)
        if t is None:
            rows = max([gpn] + [len(oh) for oh in self._rail_onehot])
            t = np.zeros((len(self._rail_onehot), rows, self._nrails), dtype=bool)
            t[:, :, 0] = True
            for i, oh in enumerate(self._rail_onehot):
                t[i, :len(oh)] = oh
            t = self._tables[gpn] = t
        return t

    def _stats(self, members: np.ndarray, gpn: int, one_period: bool, node0: bool = False) -> Optional[Group]:
        """The Group of the rows of `members` (ranks, each row one group in ascending order, rows in the order
        the groups are listed). With `one_period` the rows are one period of identical nodes, and None says
        the world must be placed instead: ties between link kinds at the slowest hop, or a NIC whose load sums
        mix shares whose floating-point sum depends on the order of the periods. With `node0` only the hops
        leaving ranks of node 0 count (the rows are every group with a member there)."""
        inf = float("inf")
        rows, n = members.shape
        nd = members // gpn
        pos = members - nd * gpn
        f_nd, f_pos = nd.ravel(), pos.ravel()
        nx, npos = np.roll(nd, -1, axis=1).ravel(), np.roll(pos, -1, axis=1).ravel()
        last = np.zeros((rows, n), dtype=bool)
        last[:, -1] = True  # the ring's wrap-around hop (i = n-1 -> 0): not a pipeline boundary
        last = last.ravel()
        top = len(self.mats) - 1
        n_nodes = int(f_nd.max()) + 1
        same = f_nd == nx
        mine = f_nd == 0 if node0 else np.ones(rows * n, dtype=bool)  # hops counted: from these ranks
        # hops inside a node: link of (position, next position) from the node's matrix
        hop = np.flatnonzero(same & mine)
        la, lb, hn = f_pos[hop], npos[hop], f_nd[hop]
        if len(self._patterns) == 1:
            pat = self._patterns[0]
            ok = (la < pat.size) & (lb < pat.size)
            hop, la, lb, hn = hop[ok], la[ok], lb[ok], hn[ok]
            bw, lat, kd, sh = pat.bw[la, lb], pat.lat[la, lb], pat.kind[la, lb], pat.shared[la, lb]
        else:
            mid = self._mat_ids[np.minimum(hn, top)]
            size = np.array([p.size for p in self._patterns])[mid]
            ok = (la < size) & (lb < size)
            hop, la, lb, hn, mid = hop[ok], la[ok], lb[ok], hn[ok], mid[ok]
            bw, lat = np.empty(len(hop)), np.empty(len(hop))
            kd, sh = np.empty(len(hop), dtype=np.int8), np.empty(len(hop), dtype=bool)
            for m, pat in enumerate(self._patterns):
                s = mid == m
                if s.any():
                    bw[s], lat[s] = pat.bw[la[s], lb[s]], pat.lat[la[s], lb[s]]
                    kd[s], sh[s] = pat.kind[la[s], lb[s]], pat.shared[la[s], lb[s]]
        # concurrent in-node transfers over shared PCIe uplinks per node, and pipeline boundaries among them
        shared = np.bincount(hn[sh], minlength=n_nodes)
        chain = np.bincount(hn[sh & ~last[hop]], minlength=n_nodes)
        bw = np.where(sh, bw / np.maximum(1.0, shared[hn] / 2.0), bw)
        intra_bw, intra_lat, intra_kind = inf, 0.0, "none"
        if len(bw):
            i = int(np.argmin(bw))
            if bw[i] < inf:
                intra_bw, intra_kind = float(bw[i]), _KINDS[kd[i]]
                # (a comparison, not np.unique: numpy 2's 1-D unique imports numpy.ma, ~8 ms of every suggest)
                if one_period and (kd[bw == bw[i]] != kd[i]).any():
                    return None  # which kind comes first depends on the order of the periods
            intra_lat = max(intra_lat, float(lat.max()))
        # nodes per group, and most ranks of one group on one node: runs of one node along each row
        start = np.empty(rows * n, dtype=bool)
        start[0] = True
        start[1:] = f_nd[1:] != f_nd[:-1]
        start[::n] = True
        starts = np.flatnonzero(start)
        span = max(1, int(np.bincount(starts // n).max()))
        per_node = max(1, int(np.diff(np.append(starts, rows * n)).max()))
        out = np.flatnonzero(~same & mine)  # hops that leave their node
        busiest = int(np.bincount(f_nd[out]).max()) if len(out) else 0
        chain_max = int(chain.max()) if len(chain) else 0
        if not busiest:
            return Group(n, span, per_node, intra_bw, intra_lat, intra_kind, intra_bw, intra_lat, intra_kind, inf, 0,
                         chain_max, 0, 0)
        # a hop leaving node x splits over the rails its group's members use on x (the group's run there)
        rid = self._rail_ids[np.minimum(f_nd, top)]
        used = np.logical_or.reduceat(self._rail_table(gpn)[rid, f_pos], starts, axis=0)
        k = used.sum(axis=1)
        run = (np.cumsum(start) - 1)[out]
        rails = int(k[run].max())
        J = self._nrails
        hi, j = np.nonzero(used[run])  # hop-major: the order the reference adds 1/len(share)
        kh = k[run][hi]
        key = f_nd[out][hi] * J + j
        load = np.bincount(key, weights=1.0 / kh, minlength=n_nodes * J)
        hops = np.bincount(key, minlength=n_nodes * J)
        if one_period and ((kh & (kh - 1)) != 0).any():
            # 1/k for k not a power of two rounds: the sum is the same in every period only if one NIC's shares
            # are all equal (or all powers of two)
            lo = np.full(n_nodes * J, np.iinfo(np.int64).max)
            hi_k = np.zeros(n_nodes * J, dtype=np.int64)
            np.minimum.at(lo, key, kh)
            np.maximum.at(hi_k, key, kh)
            odd = np.bincount(key, weights=((kh & (kh - 1)) != 0), minlength=n_nodes * J) > 0
            if (odd & (lo != hi_k) & (hops > 0)).any():
                return None
        used_keys = np.flatnonzero(hops)
        knode = np.minimum(used_keys // J, top)
        table = self._rail_ids[knode]
        bw_j = np.stack(self._rail_bw)[table, used_keys % J]
        lat_j = np.stack(self._rail_lat)[table, used_keys % J]
        per_flow = float((bw_j / load[used_keys]).min())
        net_lat = max(0.0, float(lat_j.max()))
        bw_g = min(per_flow, intra_bw)
        kind_s = "network" if per_flow <= intra_bw else intra_kind
        return Group(n, span, per_node, bw_g, max(net_lat, intra_lat), kind_s, intra_bw, intra_lat, intra_kind,
                     per_flow, int(hops.max()), chain_max, busiest, rails)


def alike_nodes(cluster: Cluster) -> list[Node]:
    """One node per distinct (devices, links) pair: nodes alike share those lists (a cluster file's `count:`), so a
    per-node fact read from them is read once, not once per node (16,384 nodes: 0.9 s)."""
    return list({(id(n.devices), id(n.links)): n for n in cluster.nodes}.values())


def nvswitch_sharp(node: Node, links_per_gpu: int) -> bool:
    """Whether NCCL runs its NVLS all-reduce inside `node`: GPUs of compute capability 9.0+ (Hopper, Blackwell) that
    meet through an NVSwitch with in-switch reduction (NVLink SHARP, third-generation NVSwitch on: HGX H100/H200,
    B200). An NVSwitch shows in `nvidia-smi topo -m` as every pair of GPUs on NV<c> with c the GPU's whole link count
    (`links_per_gpu`, knowledge/gpus.yaml nvlink_links: NV18 on an HGX H100), which direct links cannot give: each
    GPU's links are split among its peers there (an HGX H100 4-GPU board: NV6 to each of three). NCCL enables NVLS by
    default where the driver and fabric support it (NCCL User Guide, NCCL_NVLS_ENABLE)."""
    devs = [d for d in node.devices if d.kind == "gpu"]
    if len(devs) < 3 or links_per_gpu <= 0 or len(devs) != len(node.devices):
        return False
    if not all(d.cc_major is not None and d.cc_major >= 9 for d in devs):
        return False
    idx = {d.index for d in devs}
    counts = {(min(lk.a, lk.b), max(lk.a, lk.b)): lk.nvlink_count for lk in node.links
              if lk.link_class == LinkClass.NVLINK and lk.a in idx and lk.b in idx}
    pairs = len(idx) * (len(idx) - 1) // 2
    return len(counts) == pairs and all(c >= links_per_gpu for c in counts.values())


def nvls_group(nodes, kind, n):
    """Where a placed group can take NCCL's NVLS all-reduce: on one node, over NVLink, more than one rank (arrays or
    scalars; the node's switch is Context.nvls_factor's to say)."""
    return (np.asarray(nodes) == 1) & (np.asarray(kind) == "nvlink") & (np.asarray(n) > 1)


def host_uplink_sharing(cluster: Cluster) -> list[int]:
    """For g = 0..(most devices in a node): how many of a node's first g devices share one PCIe path to the host,
    at most (the worst node).

    Devices that `nvidia-smi topo -m` joins by PIX or PXB reach each other through PCIe switches without the host
    bridge: they hang off one switch tree, whose uplink to the CPU they share (PHB, NODE and SYS pairs each have their
    own root port). Devices with the same `Device.pcie_switch` share one too: what the matrix's NIC columns show
    behind NVLink (probe.topo.pcie_switch_groups) or a cluster file's `pcie.devices_per_switch` says. Data-parallel
    ranks copy to and from host RAM together (ZeRO-Offload, host-RAM checkpoints), so each gets 1/n of that uplink,
    taken here as wide as one device's slot. Ranks sit on a node's devices in index order (launch: local rank =
    device). NVLink pairs with neither show nothing of their PCIe path: counted as not sharing."""
    most = max((len(n.devices) for n in cluster.nodes), default=0)
    share = [1] * (most + 1)
    for node in alike_nodes(cluster):
        order = sorted(d.index for d in node.devices)
        first: dict[int, int] = {}  # Device.pcie_switch -> the first device seen behind it
        tree = joined(order, [(lk.a, lk.b) for lk in node.links if lk.link_class in SWITCHED]
                      + [(first.setdefault(d.pcie_switch, d.index), d.index) for d in node.devices
                         if d.pcie_switch is not None])
        for g in range(1, most + 1):
            share[g] = max(share[g], max(Counter(tree[i] for i in order[:g]).values()))
    return share


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
        if nic.bandwidth_gb_per_s is None or NIC_PROTOCOL.get(nic.kind) != net.protocol:
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


def group_allreduce_s(size_bytes: float, g: Group, hier_min_nodes: int = 3, tree_bw_factor: float = 0.0,
                      nvls_factor: float = 0.0) -> float:
    """All-reduce on a placed group: min of the flat ring, NCCL's tree across nodes, NVLS inside an NVLink-SHARP node
    (`nvls_factor`: Context.nvls_factor, applied where the group is on one node's NVLink) and the hierarchical (2D)
    one.

    Hierarchical: intra-node reduce-scatter, inter-node all-reduce of S/g by each local rank in
    parallel (the g flows share the NIC), intra-node all-gather — NCCL's tree/CollNet-style split
    (Jeaugey, "Massively scale your deep learning training with NCCL 2.4", NVIDIA blog 2019).
    """
    return float(allreduce_s(size_bytes, g.n, g.nodes, g.per_node, g.bw_gb_per_s, g.latency_us, g.intra_bw,
                             g.intra_lat, g.flows_per_nic, g.net_bw_per_flow, hier_min_nodes, tree_bw_factor,
                             nvls_factor if nvls_group(g.nodes, g.kind, g.n) else 0.0))


def tree_allreduce_s(size_bytes, n, nodes, per_node, bw, lat, intra_lat, bw_factor: float = 1.0):
    """NCCL's tree all-reduce across nodes: a chain through each node's GPUs, a double binary tree over the nodes.

    Jeaugey, "Massively scale your deep learning training with NCCL 2.4" (NVIDIA blog, 2019): the two trees
    together keep most of the ring's bandwidth while the latency grows with log2(nodes) instead of the rank count,
    so NCCL picks trees for latency-bound sizes at scale and rings for large buffers. Bandwidth term as the flat
    ring's over `bw_factor` (calibration network.nccl_tree_bw_factor); latency
    2·(⌈log2 nodes⌉·α + (per_node − 1)·α_intra). Only across nodes: on one node NCCL rings (a chain gains nothing),
    and this returns inf so that a min() with the ring keeps the ring."""
    k = np.maximum(np.asarray(nodes, dtype=float), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (2.0 * (n - 1) / n * size_bytes / (bw * bw_factor * GB)
             + 2.0 * (np.ceil(np.log2(k)) * lat + (np.asarray(per_node) - 1) * np.where(np.isfinite(intra_lat),
                                                                                     intra_lat, 0.0)) * 1e-6)
    return _out(np.where(k >= 2, t, np.inf), n, size_bytes)


def nvls_allreduce_s(size_bytes, n, bw, lat, bw_factor):
    """NCCL's NVLS all-reduce inside one NVSwitch node (NVLink SHARP, nvswitch_sharp): the switch reduces and
    multicasts, so each GPU sends and receives the buffer once, S / (bw_factor · bw) against the ring's
    2(n−1)/n · S / bw (calibration network.nvls_bw_factor, fitted on nccl-tests sweeps of 5-8 H200 and B200), plus
    the ring all-reduce's latency, 2(n−1)α: on 8 H200s the sweep's 8-256 MiB points fit 70 µs + S / (0.74 · 360
    GB/s) within 9 % (nccl_busbw.csv mleng_h200_nvlink4_allreduce), where below 8 MiB NCCL keeps the ring and its LL
    protocol (the min() in allreduce_s). inf where `bw_factor` is 0 (no NVLS: across nodes, NVLink without a SHARP
    switch, PCIe)."""
    f = np.asarray(bw_factor, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = size_bytes / (bw * np.where(f > 0, f, 1.0) * GB) + 2.0 * ring_steps_latency_s(n, lat)
    return np.where(f > 0, t, np.inf)


def allreduce_s(size_bytes, n, nodes, per_node, bw, lat, intra_bw, intra_lat, flows, net_bw_per_flow,
                hier_min_nodes: int, tree_bw_factor: float = 0.0, nvls_bw_factor=0.0):
    """`group_allreduce_s` over arrays of group attributes (one entry per candidate plan), the engine's path.

    `tree_bw_factor` > 0 lets NCCL's tree compete (tree_allreduce_s); 0 (gloo) keeps rings. `nvls_bw_factor` > 0
    (per row: groups inside one NVLink-SHARP node, Context.nvls_factor) lets NVLS compete (nvls_allreduce_s)."""
    flat = ring_allreduce_s(size_bytes, n, bw, lat, nodes, intra_lat)
    if np.any(np.asarray(nvls_bw_factor) > 0):
        flat = _out(np.minimum(flat, nvls_allreduce_s(size_bytes, n, bw, lat, nvls_bw_factor)), n, size_bytes)
    if tree_bw_factor > 0:
        flat = np.minimum(flat, tree_allreduce_s(size_bytes, n, nodes, per_node, bw, lat, intra_lat, tree_bw_factor))
        flat = float(flat) if np.ndim(flat) == 0 else flat
    use = (np.asarray(nodes) >= hier_min_nodes) & (np.asarray(per_node) > 1) & (np.asarray(intra_bw) != np.inf) \
        & (np.asarray(n) > 1)
    if not np.any(use):
        return flat
    k, m = nodes, per_node
    with np.errstate(divide="ignore", invalid="ignore"):
        inter_bw = np.where(np.asarray(flows) > 0, net_bw_per_flow / m, bw)
        hier = (reduce_scatter_s(size_bytes, m, intra_bw, intra_lat) + ring_allreduce_s(size_bytes / m, k, inter_bw, lat)
                + all_gather_s(size_bytes, m, intra_bw, intra_lat))
    return np.where(use, np.minimum(flat, hier), flat)


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


#: PowerSGD's matrix approximation rank: PowerSGDState's default (torch.distributed.algorithms.ddp_comm_hooks.
#: powerSGD_hook), which Accelerate's DDPCommunicationHookType.POWER_SGD keeps unless comm_state_option sets it
#: and the bundled trainers' hook uses (trainers/strategies/ddp.py)
POWERSGD_RANK = 1


def powersgd_ratio(rank: int, d_model: int) -> float:
    """PowerSGD rank-r compression of an h×h-ish matrix: r·(n+m)/(n·m) (Vogels et al. 2019 §3)."""
    return min(1.0, rank * 2.0 / max(d_model, 1))


def pick(value: Optional[float], default: float) -> float:
    """`value` unless None."""
    return default if value is None else value
