"""NCCL/gloo environment per fabric over every bundled preset and every shared topology capture."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.hardware.catalog import network_from_key
from gpuadvisor.hardware.presets import list_presets, load_preset
from gpuadvisor.launch import build_launch
from gpuadvisor.launch.environment import is_hca
from gpuadvisor.probe.inventory import _closest_by_topo
from gpuadvisor.probe.topo import parse_topo
from gpuadvisor.schemas import Cluster, Nic, Plan
from gpuadvisor.workload.specs import make_workload

from .launch_fixtures import node

TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
CAPTURES = sorted(TOPO.glob("*.txt"))


def _multi(cluster: Cluster) -> Cluster:
    """Two nodes of the preset (single-node presets get a second copy and, without a network, IB HDR)."""
    if len(cluster.nodes) > 1:
        return cluster
    n = cluster.nodes[0]
    net = cluster.network or network_from_key("ib-hdr")
    return cluster.model_copy(update={"nodes": [n.model_copy(update={"name": f"{n.name}{i}"}) for i in range(2)],
                                      "network": net})


def _env(cluster: Cluster, gpn: int):
    plan = Plan(dp=2 * gpn, micro_batch_size=1, nodes=2, devices_per_node=gpn)
    lc = build_launch(plan, cluster, make_workload("gpt2", global_batch=2 * gpn))
    common = {v.name: v.value for v in lc.env}
    return common, [{v.name: v.value for v in nl.env} for nl in lc.nodes]


def _check(cluster: Cluster, common: dict, per_node: list[dict]) -> None:
    for env, n in zip(per_node, cluster.nodes):
        for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            if var in env:
                assert not is_hca(Nic(name=env[var])), f"{var}={env[var]} is an HCA, not an IP interface"
        rdma = [x.name for x in n.nics if is_hca(x) and x.kind in ("infiniband", "roce")]
        if "NCCL_IB_HCA" in env:
            assert set(env["NCCL_IB_HCA"].lstrip("=").split(",")) <= set(rdma)
    if cluster.network.protocol in ("ib", "roce"):
        assert common["NCCL_IB_DISABLE"] == "0"
        assert all("NCCL_IB_HCA" in e for e, n in zip(per_node, cluster.nodes)
                   if any(is_hca(x) for x in n.nics))


@pytest.mark.parametrize("name", list_presets())
def test_every_preset(name):
    cl = _multi(load_preset(name))
    if cl.nodes[0].devices[0].kind != "gpu":
        pytest.skip("CPU ranks: no NCCL")
    gpn = len(cl.nodes[0].devices)
    common, per_node = _env(cl, gpn)
    _check(cl, common, per_node)
    if name == "dgx-a100-8x":  # 8 HCAs named mlx5_*, no IP interface listed
        assert "NCCL_SOCKET_IFNAME" not in per_node[0]
        assert per_node[0]["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9"
    if name == "baskerville-a100-25gbe":  # IB present but the cluster says 25 GbE: stated, tuned
        assert common["NCCL_IB_DISABLE"] == "1" and "ib0" in next(v.reason for v in build_launch(
            Plan(dp=8, nodes=2, devices_per_node=4), cl, make_workload("gpt2", global_batch=8)).env
            if v.name == "NCCL_IB_DISABLE")
        assert common["NCCL_SOCKET_NTHREADS"] == "2" and common["NCCL_NSOCKS_PERTHREAD"] == "4"
        assert per_node[0]["NCCL_SOCKET_IFNAME"] == "ens1f0"
    if name == "aws-p4d-2nodes-efa":  # AWS: libfabric over EFA, no IB verbs settings
        assert common["FI_PROVIDER"] == "efa" and "NCCL_IB_DISABLE" not in common and "NCCL_IB_HCA" not in per_node[0]
    if name == "nano-cluster-2x2-a40-1gbe":
        assert common["NCCL_IB_DISABLE"] == "1" and "NCCL_SOCKET_NTHREADS" not in common


def _capture_node(path: Path, name: str):
    topo = parse_topo(path.read_text(encoding="utf-8"))
    closest = _closest_by_topo(topo)
    names = [topo.nic_names.get(n, n) for n in topo.nics]
    nics = [Nic(name="lo", kind="loopback")]
    nics += [Nic(name=n, kind="infiniband" if is_hca(Nic(name=n)) else "ethernet", speed_gbit_per_s=200,
                 closest_devices=sorted(closest.get(n, set()))) for n in names]
    return node(name, len(topo.gpus), nics=nics, numa=[0] * len(topo.gpus)), closest


@pytest.mark.parametrize("path", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_every_topology_capture_on_ib(path):
    a, closest = _capture_node(path, "a")
    b, _ = _capture_node(path, "b")
    cl = Cluster(name=path.stem, nodes=[a, b], network=network_from_key("ib-hdr"), source="test")
    gpn = len(a.devices)
    common, per_node = _env(cl, gpn)
    _check(cl, common, per_node)
    hca_names = [x.name for x in a.nics if is_hca(x)]
    if hca_names:
        assert set(per_node[0]["NCCL_IB_HCA"].lstrip("=").split(",")) == (
            {n for n, g in closest.items() if n in hca_names and g} or set(hca_names))
    assert "NCCL_IB_DISABLE=1" not in {f"{k}={v}" for k, v in common.items()}


def test_rails_of_a_subset_of_gpus():
    nics = [Nic(name=f"mlx5_{i}", kind="infiniband", speed_gbit_per_s=200, closest_devices=[i]) for i in range(4)]
    nics.append(Nic(name="eno1", speed_gbit_per_s=10, operstate="up"))
    cl = Cluster(name="rails", source="test", nodes=[node("a", 4, nics=nics), node("b", 4, nics=nics)],
                 network=network_from_key("ib-hdr"))
    lc = build_launch(Plan(dp=4, micro_batch_size=1, nodes=2, devices_per_node=2), cl,
                      make_workload("gpt2", global_batch=4))
    env = {v.name: v.value for v in lc.nodes[0].env}
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1" and env["NCCL_SOCKET_IFNAME"] == "eno1"


def test_ib_network_without_nics_keeps_ib():
    cl = Cluster(name="bare", source="test", nodes=[node("a", 2, nics=[]), node("b", 2, nics=[])],
                 network=network_from_key("ib-hdr"))
    common, per_node = _env(cl, 2)
    assert common["NCCL_IB_DISABLE"] == "0" and "NCCL_SOCKET_IFNAME" not in per_node[0]


@pytest.mark.parametrize("key,threads", [("1gbe", None), ("10gbe", None), ("25gbe", "2"), ("100gbe", "4"),
                                         ("roce-100g", None)])
def test_socket_tuning_by_speed(key, threads):
    cl = Cluster(name="t", source="test", nodes=[node("a", 2), node("b", 2)], network=network_from_key(key))
    common, _ = _env(cl, 2)
    assert common.get("NCCL_SOCKET_NTHREADS") == threads
    assert common["NCCL_IB_DISABLE"] == ("0" if key.startswith("roce") else "1")


def test_efa_cluster_runs_nccl_over_libfabric_not_ib_verbs():
    """AWS EFA (p4d: four 100 Gb/s adapters per 8 GPUs): libfabric's efa provider with GPUDirect RDMA, sockets only for
    the bootstrap, no IB verbs settings (the adapters are the plugin's to pick); also when the network names no
    protocol but every node has an EFA."""
    nics = [Nic(name=f"efa_{i}", kind="efa", speed_gbit_per_s=100, closest_devices=[2 * i, 2 * i + 1])
            for i in range(4)] + [Nic(name="ens32", speed_gbit_per_s=100, operstate="up")]
    nodes = [node(n, 8, nics=nics, numa=[0] * 8) for n in ("a", "b")]
    for net in (network_from_key("efa-100g"), network_from_key("efa-100g").model_copy(update={"protocol": "unknown"})):
        common, per_node = _env(Cluster(name="p4d", source="test", nodes=nodes, network=net), 8)
        assert common["FI_PROVIDER"] == "efa" and common["FI_EFA_USE_DEVICE_RDMA"] == "1"
        assert "NCCL_IB_DISABLE" not in common and "NCCL_IB_HCA" not in per_node[0]
        assert per_node[0]["NCCL_SOCKET_IFNAME"] == "ens32"
