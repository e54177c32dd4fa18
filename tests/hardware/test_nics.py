"""Cluster files list each node's NICs ('8x ib-hdr' or a list), rated as rails from knowledge/links.yaml."""
import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.hardware.catalog import rail_key, rail_key_for
from gpuadvisor.hardware.cluster_file import cluster_from_dict, load_cluster
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.knowledge import link_spec

NODE = {"name": "n", "count": 2, "gpus": "8x A100-SXM4-80GB", "topology": "NV12"}


def test_count_x_class_on_a_node():
    c = cluster_from_dict({"nodes": [{**NODE, "nics": "8x ib-hdr"}], "network": "ib-hdr"})
    nics = c.nodes[1].nics
    assert [n.name for n in nics] == [f"rail{i}" for i in range(8)]
    assert [n.closest_devices for n in nics] == [[i] for i in range(8)]
    assert {(n.kind, n.speed_gbit_per_s, n.link) for n in nics} == {("infiniband", 200, "ib-hdr-rail")}
    assert nics[0].bandwidth_gb_per_s == link_spec("ib-hdr-rail").bandwidth_gb_per_s
    assert c.network.bandwidth_gb_per_s == link_spec("ib-hdr").bandwidth_gb_per_s  # the network: as written


def test_count_x_class_in_the_network_section():
    c = cluster_from_dict({"nodes": [NODE], "network": {"nics": "8x roce-400g"}})
    assert all(len(n.nics) == 8 for n in c.nodes)
    assert (c.network.protocol, c.network.link_speed_gbit_per_s, c.network.nic) == ("roce", 400, None)
    assert c.nodes[0].nics[0].kind == "roce"


def test_a_node_own_nics_win_over_the_network_section():
    nodes = [{**NODE, "count": 1, "name": "a"}, {**NODE, "count": 1, "name": "b", "nics": "2x ib-hdr"}]
    c = cluster_from_dict({"nodes": nodes, "network": {"link": "ib-hdr", "nics": "8x ib-hdr"}})
    assert [len(n.nics) for n in c.nodes] == [8, 2]


def test_more_nics_than_gpus_leave_the_rest_unassigned():
    c = cluster_from_dict({"nodes": [{**NODE, "gpus": "2x A100-SXM4-80GB", "nics": "4x ib-hdr"}], "network": "ib-hdr"})
    assert [n.closest_devices for n in c.nodes[0].nics] == [[0], [1], [], []]


def test_explicit_list_is_rated_from_kind_and_speed():
    nics = [{"name": "mlx5_0", "kind": "infiniband", "speed_gbit_per_s": 400, "closest_devices": [0]},
            {"name": "eno1", "kind": "ethernet", "speed_gbit_per_s": 1},
            {"name": "odd", "kind": "ethernet", "speed_gbit_per_s": 3}]
    c = cluster_from_dict({"nodes": [{**NODE, "gpus": "8x H100 80GB HBM3", "topology": "NV18", "nics": nics}],
                           "network": "ib-ndr"})
    ib, eth, odd = c.nodes[0].nics
    assert ib.link == "ib-ndr-rail" and ib.bandwidth_gb_per_s == link_spec("ib-ndr-rail").bandwidth_gb_per_s
    assert eth.link == "1gbe" and eth.bandwidth_gb_per_s == link_spec("1gbe").bandwidth_gb_per_s
    assert odd.link is None and odd.bandwidth_gb_per_s is None  # no 3 Gb/s class: not a rail


def test_explicit_rate_is_kept():
    nic = {"name": "x", "link": "ib-hdr", "bandwidth_gb_per_s": 20.0, "rate_source": "measured"}
    c = cluster_from_dict({"nodes": [{**NODE, "nics": [nic]}], "network": "ib-hdr"})
    assert c.nodes[0].nics[0].bandwidth_gb_per_s == 20.0 and c.nodes[0].nics[0].kind == "infiniband"


def test_rail_capped_by_the_gpu_pcie_path():
    # A100: PCIe 4.0 x16; a 400 Gb/s port reaches the GPU-to-NIC PCIe rate (links.yaml PIX), not NDR's rail rate
    c = cluster_from_dict({"nodes": [{**NODE, "nics": "8x ib-ndr"}], "network": "ib-ndr"})
    cap = link_spec("PIX", pcie_gen=4, pcie_width=16, p2p=True).bandwidth_gb_per_s
    assert cap < link_spec("ib-ndr-rail").bandwidth_gb_per_s
    assert c.nodes[0].nics[0].bandwidth_gb_per_s == pytest.approx(cap, abs=1e-3)


@pytest.mark.parametrize("text, match", [
    ("0x ib-hdr", "NIC count must be a whole number"),
    ("2.5x ib-hdr", "NIC count must be a whole number"),
    ("8x ib-hdx", "unknown network class 'ib-hdx'"),
    ("8 ib-hdr", "write '<count>x <network class>'"),
    ("8x PIX", "unknown network class 'PIX'"),
])
def test_bad_nics_are_one_line_errors(tmp_path, text, match):
    f = tmp_path / "c.yaml"
    f.write_text(f"nodes:\n  - gpus: 8x A100-SXM4-80GB\n    nics: {text}\n    count: 2\nnetwork: ib-hdr\n")
    with pytest.raises(UserError, match=match) as info:
        load_cluster(f)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("c.yaml line 3: nodes[0].nics:")


def test_unknown_link_in_a_list_is_an_error():
    with pytest.raises(UserError, match=r"nics\[0\].link: unknown network class 'ib-xdr'"):
        cluster_from_dict({"nodes": [{**NODE, "nics": [{"name": "x", "link": "ib-xdr"}]}], "network": "ib-hdr"})


def test_rail_keys():
    assert rail_key("ib-hdr") == "ib-hdr-rail" and rail_key("25gbe") == "25gbe"
    assert rail_key_for("roce", 400) == "roce-400g-rail" and rail_key_for("ethernet", 200) is None
    with pytest.raises(ValueError, match="unknown network class"):
        rail_key("loopback")


@pytest.mark.parametrize("name, nodes, gbit", [("dgx-a100-8x-4nodes-ib-hdr", 4, 200),
                                                ("hgx-h100-8x-8nodes-ib-ndr", 8, 400)])
def test_rail_presets(name, nodes, gbit):
    c = load_preset(name)
    assert len(c.nodes) == nodes and c.devices_per_node == [8] * nodes
    assert c.network.protocol == "ib" and c.network.nic is None
    for node in c.nodes:
        assert [n.closest_devices for n in node.nics] == [[i] for i in range(8)]
        assert {(n.kind, n.speed_gbit_per_s) for n in node.nics} == {("infiniband", gbit)}


def test_publicruns_cluster_form_gets_rails():
    """What publicruns.mapping writes (kind + speed per rail, network link) is read as rails."""
    from gpuadvisor.costmodel.analytical.comm import rail_nics

    nics = [{"name": f"rail{i}", "kind": "roce", "speed_gbit_per_s": 400.0} for i in range(8)]
    c = cluster_from_dict({"nodes": [{"name": "node", "count": 2, "gpus": [{"gpu": "h100-sxm"}] * 8, "topology": "NV18",
                                      "nics": nics}], "network": {"link": "roce-400g"}})
    assert len(rail_nics(c.nodes[0], c)) == 8
    assert c.nodes[0].nics[0].bandwidth_gb_per_s == link_spec("roce-400g-rail").bandwidth_gb_per_s
