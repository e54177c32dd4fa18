"""Inter-node traffic over rails: each GPU sends through its own NIC, groups sharing a NIC split it
(costmodel/analytical/comm.py Topology, node_rails)."""
import pytest

from gpuadvisor.costmodel.analytical.comm import Topology, group_allreduce_s, node_rails, rail_nics
from gpuadvisor.hardware.cluster_file import cluster_from_dict
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.knowledge import link_spec

HDR = link_spec("ib-hdr-rail").bandwidth_gb_per_s      # one HDR port as a rail (nccl-tests)
HDR_SHARED = link_spec("ib-hdr").bandwidth_gb_per_s    # the network alone: one port per node (seed 002)


def cluster(nics=None, gpus="8x A100-SXM4-80GB", nodes=2, network="ib-hdr"):
    node = {"name": "n", "count": nodes, "gpus": gpus, "topology": "NV12"}
    if nics is not None:
        node["nics"] = nics
    return cluster_from_dict({"nodes": [node], "network": network})


def dp_group(c, tp, nodes=2, gpn=8, order="tp-dp-pp"):
    return Topology(c).group("dp", nodes * gpn // tp, tp, 1, nodes, gpn, order)


def test_eight_rails_one_each_for_dp_rings_of_one_gpu_per_node():
    g = dp_group(cluster("8x ib-hdr"), tp=8)  # 8 DP rings, GPU i of every node in ring i: one rail each
    assert g.net_bw_per_flow == pytest.approx(HDR) and g.bw_gb_per_s == pytest.approx(HDR)
    assert (g.flows_per_nic, g.flows_per_node, g.rails, g.kind) == (1, 8, 1, "network")


def test_eight_rails_carry_one_ring_of_eight_gpus_per_node():
    g = dp_group(cluster("8x ib-hdr"), tp=1)  # NCCL spreads the ring's channels over the 8 local NICs
    assert g.net_bw_per_flow == pytest.approx(8 * HDR)
    assert g.bw_gb_per_s == pytest.approx(min(8 * HDR, g.intra_bw))
    assert g.rails == 8 and g.flows_per_nic == 1


def test_rings_of_two_gpus_per_node_share_their_two_rails():
    g = dp_group(cluster("8x ib-hdr"), tp=4)  # ring t has GPUs t and t+4 on each node: NICs t and t+4
    assert g.rails == 2 and g.net_bw_per_flow == pytest.approx(2 * HDR)


def test_one_nic_shared_by_eight_gpus():
    g = dp_group(cluster("1x ib-hdr"), tp=8)
    assert g.flows_per_nic == 8 and g.net_bw_per_flow == pytest.approx(HDR / 8)
    assert dp_group(cluster("1x ib-hdr"), tp=1).net_bw_per_flow == pytest.approx(HDR)


def test_two_nics_for_four_gpus():
    c = cluster("2x ib-hdr", gpus="4x A100-SXM4-80GB")
    rates, owned = node_rails(c.nodes[0], c)
    assert len(rates) == 2 and owned == [(0,), (1,), (0,), (1,)]  # GPUs 2, 3 have no NIC: they share
    assert dp_group(c, tp=1, gpn=4).net_bw_per_flow == pytest.approx(2 * HDR)
    assert dp_group(c, tp=2, gpn=4).net_bw_per_flow == pytest.approx(HDR)  # ring 0: GPUs 0, 2 on NIC 0
    g = dp_group(c, tp=4, gpn=4)  # 4 rings, 2 per NIC
    assert g.flows_per_nic == 2 and g.net_bw_per_flow == pytest.approx(HDR / 2)


def test_closest_devices_decide_the_rail():
    nics = [{"name": "mlx5_0", "kind": "infiniband", "speed_gbit_per_s": 200, "closest_devices": [0, 1, 2, 3]},
            {"name": "mlx5_1", "kind": "infiniband", "speed_gbit_per_s": 200, "closest_devices": [4, 5, 6, 7]}]
    c = cluster(nics)
    assert node_rails(c.nodes[0], c)[1] == [(0,)] * 4 + [(1,)] * 4
    assert dp_group(c, tp=8).net_bw_per_flow == pytest.approx(HDR / 4)  # 8 rings, 4 per NIC
    assert dp_group(c, tp=4).net_bw_per_flow == pytest.approx(HDR / 2)  # ring t: GPUs t (NIC 0), t+4 (NIC 1)


@pytest.mark.parametrize("nodes", [2, 4])
def test_dp_across_nodes(nodes):
    c = cluster("8x ib-hdr", nodes=nodes)
    g1, g8 = dp_group(c, tp=1, nodes=nodes), dp_group(c, tp=8, nodes=nodes)
    assert g1.nodes == g8.nodes == nodes
    assert g8.net_bw_per_flow == pytest.approx(HDR)
    assert g1.net_bw_per_flow == pytest.approx(8 * HDR)
    size = 2**30
    if nodes >= 3:  # hierarchical: each local rank all-reduces S/8 over its own rail
        k = nodes
        inter = 2 * (k - 1) / k * (size / 8) / (HDR * 1e9)
        assert group_allreduce_s(size, g1, 3) >= inter
    plain = dp_group(cluster(nodes=nodes), tp=8, nodes=nodes)
    assert group_allreduce_s(size, g8, 3) < group_allreduce_s(size, plain, 3) / 8


def test_tp_inside_a_node_is_unaffected():
    rails, plain = Topology(cluster("8x ib-hdr")), Topology(cluster())
    for tp in (2, 8):
        a = rails.group("tp", 16 // tp, tp, 1, 2, 8, "tp-dp-pp")
        b = plain.group("tp", 16 // tp, tp, 1, 2, 8, "tp-dp-pp")
        assert a == b and a.flows_per_nic == 0 and a.kind == "nvlink"


def test_no_nics_keeps_the_network_alone():
    g = dp_group(cluster(), tp=8)  # one NIC per node at the network's rate, shared by the 8 rings
    assert g.net_bw_per_flow == pytest.approx(HDR_SHARED / 8)
    assert (g.flows_per_nic, g.flows_per_node, g.rails) == (8, 8, 1)


def test_network_naming_its_interface_pins_one_nic():
    c = cluster("8x ib-hdr", network={"link": "ib-hdr", "nic": "rail0"})
    assert rail_nics(c.nodes[0], c) == []
    assert dp_group(c, tp=8).net_bw_per_flow == pytest.approx(HDR_SHARED / 8)


def test_network_of_another_class_ignores_the_rails():
    c = cluster("8x ib-hdr", network="25gbe")  # the job runs over Ethernet; the IB ports stay idle
    assert rail_nics(c.nodes[0], c) == []
    assert dp_group(c, tp=1).net_bw_per_flow == pytest.approx(link_spec("25gbe").bandwidth_gb_per_s)


def test_seed_presets_have_no_rails():
    for name in ("baskerville-a100-nvlink-ib", "baskerville-a100-25gbe", "nano-cluster-2x2-a40-1gbe", "cpu-2ranks"):
        c = load_preset(name)
        assert all(rail_nics(n, c) == [] for n in c.nodes), name


