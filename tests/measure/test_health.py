"""Health findings from hand-built probe reports: each kind triggers, a healthy host gives none."""
import pytest

from gpuadvisor.probe.health import findings
from gpuadvisor.schemas import (BandwidthPoint, Cluster, CollectiveCurve, Device, DeviceLink, GpuInfo,
                                LinkClass, MeasureReport, Network, Nic, Node, P2PStatus, ProbeReport)


def gpu(i, **kw):
    base = dict(index=i, name="NVIDIA A40", pcie_gen=4, pcie_width=16, pcie_gen_max=4, pcie_width_max=16,
                nvlinks_active=0, nvlinks_total=0, mig_enabled=False)
    return GpuInfo(**{**base, **kw})


def healthy(**kw) -> ProbeReport:
    base = dict(
        hostname="node0",
        gpus=[gpu(0), gpu(1)],
        p2p=[P2PStatus(a=0, b=1, read=True, write=True)],
        nics=[
            Nic(name="lo", kind="loopback", mtu=65536),
            Nic(name="eth0", speed_gbit_per_s=1, speed_max_gbit_per_s=1, mtu=1500, operstate="up"),
            Nic(name="ens1", speed_gbit_per_s=100, speed_max_gbit_per_s=100, mtu=9000, operstate="up"),
            Nic(name="docker0", driver="bridge", mtu=1500, operstate="up"),
            Nic(name="eth9", speed_gbit_per_s=None, operstate="down"),
        ],
    )
    return ProbeReport(**{**base, **kw})


def curve(op="all_reduce", busbw=10.0, backend="nccl", n=2, nodes=1):
    t = 1e8 / (busbw * 1e9)
    return CollectiveCurve(op=op, backend=backend, world_size=n, nodes=nodes, alpha_us=20.0, busbw_gb_per_s=busbw,
                           points=[BandwidthPoint(size_bytes=100_000_000, time_s=t, algbw_gb_per_s=busbw,
                                                  busbw_gb_per_s=busbw)])


def measured(*curves, kind="gpu"):
    return MeasureReport(hostname="node0", device_kind=kind, world_size=2, collectives=list(curves))


def cluster(link_bw=13.45, net_bw=1.5, nodes=1):
    def dev(i):
        return Device(index=i, name="NVIDIA A40", memory_bytes=48 << 30, peak_tflops_bf16=150,
                      peak_tflops_fp32=37, memory_bandwidth_gb_per_s=696)
    node_list = [Node(name=f"node{k}", devices=[dev(0), dev(1)],
                      links=[DeviceLink(a=0, b=1, link_class=LinkClass.PXB, bandwidth_gb_per_s=link_bw, latency_us=8)])
                 for k in range(nodes)]
    net = Network(bandwidth_gb_per_s=net_bw, latency_us=30, protocol="tcp", nic="eth0") if nodes > 1 else None
    return Cluster(name="c", nodes=node_list, network=net)


def test_healthy_report_gives_no_findings():
    assert findings(healthy()) == []
    assert findings(healthy(), measured(curve(busbw=12.0)), cluster()) == []


def test_every_finding_is_one_sentence_line():
    bad = healthy(gpus=[gpu(0, pcie_width=8, pcie_gen=3, nvlinks_total=4, nvlinks_active=0, mig_enabled=True),
                        gpu(1)],
                  p2p=[P2PStatus(a=0, b=1, read=False, write=False, reason="NotSupported")],
                  nics=[Nic(name="ens1", speed_gbit_per_s=40, speed_max_gbit_per_s=100, mtu=1500, operstate="up")])
    out = findings(bad, measured(curve(busbw=2.0)), cluster())
    assert len(out) == 8
    for f in out:
        assert "\n" not in f and f.endswith(".") and ":" in f  # problem: fix.


@pytest.mark.parametrize("gpus,needle", [
    ([gpu(0, pcie_width=8), gpu(1)], "x8 although it supports x16"),
    ([gpu(0, pcie_gen=3), gpu(1)], "PCIe Gen3 below its Gen4"),
    ([gpu(0, nvlinks_total=4, nvlinks_active=0), gpu(1)], "none is active"),
    ([gpu(0, nvlinks_total=12, nvlinks_active=8), gpu(1)], "only 8 are active"),
    ([gpu(0, mig_enabled=True), gpu(1, mig_enabled=True)], "nvidia-smi -i 0,1 -mig 0"),
])
def test_gpu_findings(gpus, needle):
    out = findings(healthy(gpus=gpus))
    assert len(out) == 1 and needle in out[0], out


def test_p2p_missing_is_grouped_with_reason():
    rep = healthy(gpus=[gpu(0), gpu(1), gpu(2)],
                  p2p=[P2PStatus(a=0, b=1, read=False, write=False, reason="ACS enabled"),
                       P2PStatus(a=0, b=2, read=True, write=True),
                       P2PStatus(a=1, b=2, read=None, write=None)])
    (f,) = findings(rep)
    assert "0-1 have no CUDA peer-to-peer" in f and "ACS enabled" in f and "host memory" in f


@pytest.mark.parametrize("nic,needle", [
    (Nic(name="ens1", speed_gbit_per_s=10, speed_max_gbit_per_s=25, mtu=9000, operstate="up"),
     "negotiated 10 Gb/s although it supports 25 Gb/s"),
    (Nic(name="ens2", speed_gbit_per_s=None, mtu=9000, operstate="up"), "reports no link speed"),
    (Nic(name="ens3", speed_gbit_per_s=25, mtu=1500, operstate="up"), "jumbo frames"),
    (Nic(name="ens4", kind="roce", speed_gbit_per_s=100, mtu=1500, operstate="up"), "4096-byte frames"),
    (Nic(name="ib0", kind="infiniband", speed_gbit_per_s=200, mtu=1500, operstate="up"), "IPoIB"),
])
def test_nic_findings(nic, needle):
    out = findings(healthy(nics=[nic]))
    assert len(out) == 1 and needle in out[0], out


def test_cluster_nics_are_checked_too():
    c = cluster()
    node = c.nodes[0].model_copy(update={"nics": [Nic(name="ens5", speed_gbit_per_s=50, mtu=1500)]})
    c = c.model_copy(update={"nodes": [node]})
    (f,) = findings(healthy(), cluster=c)
    assert "ens5" in f and "MTU 1500" in f


def test_measured_busbw_far_below_the_cluster_link():
    (f,) = findings(healthy(), measured(curve(busbw=3.0), curve("send_recv", busbw=4.0)), cluster(link_bw=13.45))
    assert "send-recv" in f and "4 GB/s" in f and "30%" in f and "PXB link between devices 0 and 1" in f
    assert "NCCL_DEBUG=INFO" in f


def test_measured_busbw_close_enough_is_fine():
    assert findings(healthy(), measured(curve(busbw=7.0)), cluster(link_bw=13.45)) == []


def test_measured_across_nodes_uses_the_network():
    (f,) = findings(healthy(), measured(curve(busbw=0.2, n=4, nodes=2)), cluster(net_bw=1.5, nodes=2))
    assert "4 ranks on 2 nodes" in f and "eth0 tcp network" in f
    assert findings(healthy(), measured(curve(busbw=1.2, n=4, nodes=2)), cluster(net_bw=1.5, nodes=2)) == []


def test_gloo_reduce_scatter_is_not_judged():
    # gloo emulates reduce_scatter with an all-reduce, so its busbw is half by construction
    m = measured(curve("reduce_scatter", busbw=0.1, backend="gloo"), kind="cpu")
    assert findings(healthy(gpus=[]), m, cluster(link_bw=1.1)) == []


def test_without_cluster_gloo_is_judged_against_shared_memory():
    pytest.importorskip("gpuadvisor.knowledge")
    m = measured(curve(busbw=0.01, backend="gloo"), kind="cpu")
    (f,) = findings(ProbeReport(hostname="node0"), m)
    assert "shared memory" in f and "GLOO_SOCKET_IFNAME" in f


def test_without_cluster_or_expectation_nothing_is_claimed():
    # NCCL over 2 nodes with no cluster: no network rate to compare with
    assert findings(healthy(), measured(curve(busbw=0.01, n=4, nodes=2))) == []


def test_without_cluster_nccl_is_judged_against_the_topology_path():
    pytest.importorskip("gpuadvisor.knowledge")
    from gpuadvisor.schemas import TopoLink, TopoMatrix
    topo = TopoMatrix(gpus=["GPU0", "GPU1"],
                      links=[TopoLink(a="GPU0", b="GPU1", token="PXB", link_class=LinkClass.PXB)])
    rep = healthy(topology=topo)
    (f,) = findings(rep, measured(curve(busbw=3.0)))
    assert "PXB path between GPU0 and GPU1" in f
    assert findings(rep, measured(curve(busbw=20.0))) == []
