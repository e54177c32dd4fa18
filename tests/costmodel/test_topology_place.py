"""Topology._place (costmodel/analytical/comm.py) gives exactly the Group the original per-rank walk gave.

`_place_reference` is the implementation before the array rewrite, kept verbatim (only `self` renamed `topo` and
its two helpers inlined): every field of every Group must be equal, on every bundled preset, rail clusters,
PCIe boxes with shared uplinks, hand-built heterogeneous clusters and generated degree tuples.
"""
from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor.costmodel.analytical.comm import Group, Topology
from gpuadvisor.hardware.presets import list_presets, load_preset
from gpuadvisor.ranking import apply_what_if
from gpuadvisor.schemas import Cluster

ORDERS = ("tp-dp-pp", "tp-pp-dp")
KINDS = ("tp", "dp", "pp")


def _rails_of(topo, node: int, pos: int) -> tuple[int, ...]:
    owned = topo.gpu_rails[min(node, len(topo.gpu_rails) - 1)]
    return owned[pos] if pos < len(owned) else (0,)


def _nic(topo, node: int, j: int) -> tuple[float, float]:
    rates = topo.nics[min(node, len(topo.nics) - 1)]
    return rates[j] if j < len(rates) else (topo.net_bw, topo.net_lat)


def _place_reference(topo, kind: str, dp: int, tp: int, pp: int, nodes: int, gpn: int, order: str) -> Group:
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
                mat = topo.mats[min(r // gpn, len(topo.mats) - 1)]
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
            used.setdefault(r // gpn, set()).update(_rails_of(topo, r // gpn, r % gpn))
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
                mat = topo.mats[min(na, len(topo.mats) - 1)]
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
            bw_j, lat_j = _nic(topo, na, j)
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


def _triples(world: int):
    """Every (dp, tp, pp) with dp*tp*pp == world."""
    for tp in range(1, world + 1):
        if world % tp:
            continue
        for dp in range(1, world // tp + 1):
            if (world // tp) % dp == 0:
                yield dp, tp, world // (tp * dp)


def _check(topo: Topology, dp: int, tp: int, pp: int, nodes: int, gpn: int) -> int:
    """Every kind and order of one plan shape: the Group equals the reference's, field by field."""
    for kind in KINDS:
        for order in ORDERS:
            got = topo._place(kind, dp, tp, pp, nodes, gpn, order)
            want = _place_reference(topo, kind, dp, tp, pp, nodes, gpn, order)
            assert got == want, (kind, dp, tp, pp, nodes, gpn, order, got, want)
            assert [type(v) for v in vars(got).values()] == [type(v) for v in vars(want).values()]
    return len(KINDS) * len(ORDERS)


def _sweep(topo: Topology, shapes) -> int:
    """All degree tuples of each (nodes, devices per node) shape."""
    return sum(_check(topo, dp, tp, pp, nodes, gpn) for nodes, gpn in shapes
               for dp, tp, pp in _triples(nodes * gpn))


def _shapes(cluster: Cluster, extra_nodes: int = 0):
    """Every plan shape on the cluster: 1..nodes (and past them, repeating the last node) x 1..most devices."""
    return [(k, g) for k in range(1, len(cluster.nodes) + 1 + extra_nodes)
            for g in range(1, max(cluster.devices_per_node) + 1)]


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_places_as_the_reference(name):
    c = load_preset(name)
    assert _sweep(Topology(c), _shapes(c, extra_nodes=1)) > 0


# rails (8 NICs, one per GPU), PCIe boxes with shared uplinks, and TCP clusters, grown to many alike nodes: the
# periods and node 0 stand for the world there; odd devices per node make blocks straddle nodes
BIG = [("dgx-a100-8x-4nodes-ib-hdr", "gpus=16x8", [(16, 8), (12, 8), (9, 8), (6, 8), (16, 6), (10, 5), (12, 7)]),
       ("hgx-h100-8x-8nodes-ib-ndr", "gpus=32x8", [(32, 8), (24, 8), (32, 6), (15, 4), (18, 3)]),
       ("a6000-4x-pcie", "gpus=32x4", [(32, 4), (24, 4), (30, 3), (16, 2)]),
       ("baskerville-a100-25gbe", "gpus=24x4", [(24, 4), (20, 3), (12, 4)]),
       ("nano-cluster-2x2-a40-1gbe", "gpus=64x2", [(64, 2), (48, 2), (60, 1)])]


@pytest.mark.parametrize("name, spec, shapes", BIG, ids=[b[0] for b in BIG])
def test_many_alike_nodes_place_as_the_reference(name, spec, shapes):
    assert _sweep(Topology(apply_what_if(load_preset(name), spec)), shapes) > 0


def _node(name: str, gpus: str, topology, nics=None) -> dict:
    node = {"name": name, "gpus": gpus, "topology": topology}
    if nics is not None:
        node["nics"] = nics
    return node


def _ib(name: str, closest: list[int]) -> dict:
    return {"name": name, "kind": "infiniband", "speed_gbit_per_s": 200, "closest_devices": closest}


MIXED = [["X", "NV12", "PXB", "SYS"], ["NV12", "X", "SYS", "PHB"], ["PXB", "SYS", "X", "NV4"],
         ["SYS", "PHB", "NV4", "X"]]


def _hetero() -> list[Cluster]:
    """Hand-built clusters whose nodes differ: devices, links (shared PCIe or not), rails and their mapping."""
    from gpuadvisor.hardware.cluster_file import cluster_from_dict

    rails4 = [_ib("mlx5_0", [0, 1]), _ib("mlx5_1", [2]), _ib("mlx5_2", []), _ib("mlx5_3", [1, 3])]
    a = cluster_from_dict({"nodes": [_node("a", "4x A100-SXM4-80GB", MIXED, rails4),
                                     _node("b", "2x A40", "PHB"),
                                     _node("c", "3x A6000", "PXB", "3x ib-hdr")], "network": "ib-hdr"})
    b = cluster_from_dict({"nodes": [{**_node("p", "4x A100-SXM4-80GB", "NV12", "4x ib-hdr"), "count": 3},
                                     _node("q", "4x A100-SXM4-80GB", "SYS", "2x ib-hdr")], "network": "ib-hdr"})
    c = cluster_from_dict({"nodes": [{**_node("s", "6x A40", "SYS", [_ib("m0", [0, 1, 2]), _ib("m1", [3, 4, 5]),
                                                                    _ib("m2", [])]), "count": 2},
                                     _node("t", "8x A40", "PIX")], "network": "ib-hdr"})
    out = [a, b, c]
    # missing links (the node's fallback) and a reversed duplicate pair (the first link of a pair wins)
    n0 = a.nodes[0]
    links = [lk for lk in n0.links if (lk.a, lk.b) != (0, 2)]
    dup = n0.links[0].model_copy(update={"a": n0.links[0].b, "b": n0.links[0].a, "bandwidth_gb_per_s": 1.5})
    holes = n0.model_copy(update={"links": links + [dup]})
    out.append(a.model_copy(update={"nodes": [holes, a.nodes[1], holes.model_copy(update={"name": "a2"})]}))
    bare = n0.model_copy(update={"name": "bare", "links": []})
    out.append(a.model_copy(update={"nodes": [bare, a.nodes[2]]}))
    return out


@pytest.mark.parametrize("i", range(5))
def test_heterogeneous_clusters_place_as_the_reference(i):
    c = _hetero()[i]
    assert _sweep(Topology(c), _shapes(c, extra_nodes=2)) > 0


@lru_cache(maxsize=None)
def _topologies() -> tuple[Topology, ...]:
    return tuple(Topology(c) for c in [*_hetero(), apply_what_if(load_preset("hgx-h100-8x-8nodes-ib-ndr"), "gpus=64x8"),
                                       apply_what_if(load_preset("a6000-4x-pcie"), "gpus=64x4"),
                                       load_preset("dgx-a100-8x-4nodes-ib-hdr")])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 7), st.integers(1, 12), st.integers(1, 9), st.integers(1, 24), st.integers(1, 8),
       st.data())
def test_generated_degrees_place_as_the_reference(which, nodes, gpn, dp_f, tp_f, data):
    topo = _topologies()[which]
    world = nodes * gpn
    dp = data.draw(st.sampled_from([d for d in range(1, world + 1) if world % d == 0]))
    rest = world // dp
    tp = data.draw(st.sampled_from([t for t in range(1, rest + 1) if rest % t == 0]))
    _check(topo, dp, tp, rest // tp, nodes, gpn)


def test_single_rank_groups():
    topo = Topology(load_preset("dgx-a100-8x"))
    inf = float("inf")
    assert topo._place("tp", 8, 1, 1, 1, 8, "tp-dp-pp") == Group(1, 1, 1, inf, 0.0, "none", inf, 0.0, "none", inf, 0)
    assert _check(topo, 1, 1, 1, 1, 1) == 6


def test_the_sweeps_reach_every_placement_path(monkeypatch):
    """One period, node 0 and the world each place some of the cases above (and the checks send some back)."""
    seen = set()
    real = Topology._stats

    def spy(self, members, gpn, one_period, node0=False):
        g = real(self, members, gpn, one_period, node0)
        seen.add((one_period, node0, g is None))
        return g
    monkeypatch.setattr(Topology, "_stats", spy)
    for name, spec, shapes in BIG[:2]:
        _sweep(Topology(apply_what_if(load_preset(name), spec)), shapes)
    _sweep(_topologies()[1], _shapes(_hetero()[1]))
    # shares of 1/3 and 1/6 on one NIC (node 0's groups, one period's groups): those go back to the world
    _check(_topologies()[1], 2, 1, 6, 2, 6)
    from gpuadvisor.hardware.cluster_file import cluster_from_dict
    rails8 = cluster_from_dict({"nodes": [{"name": "s", "count": 4, "gpus": "8x A100-SXM4-80GB", "topology": "NV12",
                                           "nics": "8x ib-hdr"}], "network": "ib-hdr"})
    _check(Topology(rails8), 4, 1, 12, 6, 8)
    assert {(True, True, False), (True, True, True), (True, False, False), (False, False, False)} <= seen, seen
