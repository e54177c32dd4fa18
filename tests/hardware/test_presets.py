"""Every bundled preset loads into a valid Cluster that matches its seed."""
import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import list_presets, load_preset, preset_citation
from gpuadvisor.schemas.hardware import Cluster, LinkClass

SEEDS = ["nano-cluster-2x2-a40-1gbe", "a6000-4x-pcie", "baskerville-a100-nvlink-ib", "baskerville-a100-25gbe"]


@pytest.mark.parametrize("name", list_presets())
def test_preset_loads_with_source(name):
    c = load_preset(name)
    assert isinstance(c, Cluster) and c.source == f"preset:{name}"
    assert len(preset_citation(name)) > 20
    Cluster.model_validate(c.model_dump())  # full round trip through the schema
    for node in c.nodes:
        n = len(node.devices)
        assert len(node.links) == n * (n - 1) // 2


def test_seed_presets_present():
    assert set(SEEDS) <= set(list_presets())


def test_nano_cluster():
    c = load_preset("nano-cluster-2x2-a40-1gbe")
    assert c.devices_per_node == [2, 2]
    assert {d.spec_key for n in c.nodes for d in n.devices} == {"a40"}
    assert c.network.bandwidth_gb_per_s == pytest.approx(0.113, rel=0.05)
    assert c.nodes[0].links[0].link_class == LinkClass.SYS


def test_a6000_topology_from_appendix_d():
    node = load_preset("a6000-4x-pcie").nodes[0]
    assert node.link(2, 3).link_class == LinkClass.PIX
    assert all(node.link(a, b).link_class == LinkClass.PXB for a, b in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3)])
    assert node.link(2, 3).bandwidth_gb_per_s > node.link(0, 1).bandwidth_gb_per_s


def test_baskerville_variants():
    ib, eth = load_preset("baskerville-a100-nvlink-ib"), load_preset("baskerville-a100-25gbe")
    assert ib.network.protocol == "ib" and eth.network.protocol == "tcp"
    assert ib.network.bandwidth_gb_per_s > 5 * eth.network.bandwidth_gb_per_s
    assert ib.nodes[0].link(0, 1).nvlink_count == 4


def test_unknown_preset():
    with pytest.raises(UserError, match="unknown preset 'nope': use one of"):
        load_preset("nope")
