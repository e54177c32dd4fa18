"""Cluster probe pieces that need no namespaces: degraded-NIC flags, socket env, unreachable probe."""
from __future__ import annotations

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.launch.build import rdzv_host_args
from gpuadvisor.remote.cluster_probe import _network_warnings, probe_cluster, socket_env
from gpuadvisor.schemas.hardware import Cluster, Device, Network, Nic, Node, NodeAccess


def _node(name: str, speed=10.0, mtu=1500, kind="ethernet", extra=(), **acc) -> Node:
    dev = Device(index=0, kind="gpu", name="A40", memory_bytes=2**34, peak_tflops_bf16=150, peak_tflops_fp32=37,
                 memory_bandwidth_gb_per_s=696)
    nics = [Nic(name="eth0", kind=kind, speed_gbit_per_s=speed, mtu=mtu), *extra]
    return Node(name=name, devices=[dev], nics=nics, access=NodeAccess(ifname="eth0", **acc))


def _cluster(*nodes: Node) -> Cluster:
    return Cluster(name="c", nodes=list(nodes), network=Network(bandwidth_gb_per_s=1, latency_us=10))


def test_degraded_nic_flagged():
    warns = _network_warnings(_cluster(_node("a"), _node("b")), 0.12, gpu=True)  # ~1 Gbit/s on a 10 Gbit/s NIC
    assert len(warns) == 2 and "possible degraded link" in warns[0] and "MTU" in warns[0]


def test_healthy_nic_not_flagged():
    assert _network_warnings(_cluster(_node("a"), _node("b")), 0.9, gpu=True) == []


def test_mtu_mismatch_and_unused_ib():
    ib = Nic(name="ib0", kind="infiniband", speed_gbit_per_s=200, operstate="up")
    warns = _network_warnings(_cluster(_node("a", mtu=9000, extra=[ib]), _node("b")), 0.9, gpu=True)
    assert any("MTU differs" in w for w in warns) and any("InfiniBand/RoCE port" in w for w in warns)


def test_socket_env_and_host_args():
    n = _node("a", address="10.0.0.1")
    assert socket_env(n, gpu=True) == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}
    assert socket_env(n, gpu=False) == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert rdzv_host_args(n, 0) == ["--rdzv-conf", "is_host=true", "--local-addr", "10.0.0.1"]


def test_probe_unreachable_node_names_it():
    bad = _node("b", method="prefix", prefix=["false"])
    with pytest.raises(UserError, match=r"^node b \(false\): probe failed"):
        probe_cluster(_cluster(bad))


def test_no_torch_in_the_advisor_process():
    import subprocess
    import sys
    code = ("import sys, gpuadvisor.remote.access, gpuadvisor.remote.preflight, gpuadvisor.remote.cluster_probe, "
            "gpuadvisor.trials.multinode; print(sorted({'torch', 'deepspeed'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _cpu_node(name: str, rate_source: str = "user", tflops: float = 5.0) -> Node:
    dev = Device(index=0, kind="cpu", name="cpu", memory_bytes=2**32, peak_tflops_bf16=tflops,
                 peak_tflops_fp32=tflops, achieved_tflops=tflops, memory_bandwidth_gb_per_s=20,
                 rate_source=rate_source)
    return Node(name=name, devices=[dev], access=NodeAccess(method="local"))


def test_probe_keeps_hosts_file_rates_without_measurement():
    cluster = probe_cluster(_cluster(_cpu_node("a")))
    dev = cluster.nodes[0].devices[0]
    assert dev.kind == "cpu" and dev.achieved_tflops == 5.0 and dev.rate_source == "user"


def test_probe_measure_compute_replaces_rates_with_the_matmul_probe():
    pytest.importorskip("torch")
    cluster = probe_cluster(_cluster(_cpu_node("a")), measure_compute=True)
    dev = cluster.nodes[0].devices[0]
    # one thread of a CPU core: far below the 5 TFLOP/s the hosts file claimed, but positive
    assert dev.rate_source == "measured" and 0.001 < dev.achieved_tflops < 2.0, dev
    assert dev.peak_tflops_fp32 == dev.achieved_tflops


def _rail_node(name: str, kind: str = "infiniband", speed: float = 200.0, per_gpu: int = 1, gpus: int = 8) -> Node:
    """A probed GPU node as the probe reports it (ports with kind and speed, unrated), rated as probe_cluster rates
    it; `per_gpu` ports closest to each GPU, and the management interface eth0."""
    from gpuadvisor.remote.cluster_probe import _rate_rails

    devs = [Device(index=i, kind="gpu", name="A100", memory_bytes=2**36, peak_tflops_bf16=312, peak_tflops_fp32=19.5,
                   memory_bandwidth_gb_per_s=2039) for i in range(gpus)]
    pre = "efa_" if kind == "efa" else "mlx5_"
    ports = [Nic(name=f"{pre}{j}", kind=kind, speed_gbit_per_s=speed, operstate="active",
                 closest_devices=[j // per_gpu]) for j in range(gpus * per_gpu)]
    eth = Nic(name="eth0", kind="ethernet", speed_gbit_per_s=100, operstate="up")
    return _rate_rails(Node(name=name, devices=devs, nics=[eth, *ports], access=NodeAccess(ifname="eth0")))


def test_probed_rdma_ports_are_rails_until_and_after_measurement():
    """A remote probe of two 8-GPU nodes with one HDR port per GPU: the ports are rated as rails (as a cluster file
    rates them), the guessed network is their InfiniBand (not TCP on eth0), and a one-rank-per-node measurement
    rates every port at the measured busbw instead of pinning the whole node to the one port it drove."""
    from gpuadvisor.costmodel.analytical.comm import Topology
    from gpuadvisor.remote.cluster_probe import (InternodeMeasurement, _guess_network, measured_network, rail_protocol,
                                                 with_network)

    nodes = [_rail_node("a"), _rail_node("b")]
    assert rail_protocol(nodes) == "ib" and all(n.link == "ib-hdr-rail" for n in nodes[0].nics[1:])
    notes: list[str] = []
    guess = _guess_network(nodes, notes)
    assert guess is not None and (guess.protocol, guess.nic, guess.bandwidth_gb_per_s) == ("ib", None, 24.0)
    cl = Cluster(name="c", nodes=nodes, network=guess)
    assert Topology(cl).group("dp", 16, 1, 1, 2, 8, "tp-dp-pp").rails == 8
    m = InternodeMeasurement(network=measured_network(cl, 21.0, 6.0, gpu=True))
    assert (m.network.protocol, m.network.nic) == ("ib", None)
    done = with_network(cl, m)
    ports = [n for n in done.nodes[0].nics if n.kind == "infiniband"]
    assert {(p.bandwidth_gb_per_s, p.rate_source) for p in ports} == {(21.0, "measured")}
    g = Topology(done).group("dp", 16, 1, 1, 2, 8, "tp-dp-pp")
    assert g.rails == 8 and g.net_bw_per_flow == pytest.approx(8 * 21.0)
    # four EFA ports per GPU (a p5): the rank drove four, so each gets a quarter of the measured busbw
    efa = [_rail_node("a", "efa", 100, per_gpu=4), _rail_node("b", "efa", 100, per_gpu=4)]
    cl = Cluster(name="p5", nodes=efa, network=_guess_network(efa, []))
    done = with_network(cl, InternodeMeasurement(network=measured_network(cl, 40.0, 80.0, gpu=True)))
    assert {n.bandwidth_gb_per_s for n in done.nodes[1].nics if n.kind == "efa"} == {10.0}


def test_ethernet_only_nodes_keep_the_measured_interface():
    """Without RDMA ports the measurement stays what it was: the interface it ran over, shared by the node's ranks."""
    from gpuadvisor.remote.cluster_probe import measured_network, rail_protocol

    cl = _cluster(_node("a", speed=100), _node("b", speed=100))
    assert rail_protocol(cl.nodes) is None
    net = measured_network(cl, 5.0, 40.0, gpu=True)
    assert (net.protocol, net.nic, net.link_speed_gbit_per_s) == ("unknown", "eth0", 100.0)


def test_rated_ib_port_is_not_called_unused_when_the_measurement_reached_it():
    """An InfiniBand port beside the socket interface is flagged as unused only when the measured rate is well under
    its rated one (NCCL fell back to TCP) or it has no rating; at the port's rate it carried the data."""
    ib = Nic(name="mlx5_0", kind="infiniband", speed_gbit_per_s=200, operstate="active", bandwidth_gb_per_s=24.0)
    cl = _cluster(_node("a", speed=100, extra=[ib]), _node("b", speed=100, extra=[ib]))
    assert not any("InfiniBand/RoCE port" in w for w in _network_warnings(cl, 22.0, gpu=True))
    assert any("InfiniBand/RoCE port" in w for w in _network_warnings(cl, 1.2, gpu=True))
