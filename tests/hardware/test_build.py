"""cluster_from_probe: link classes from the topology matrix, P2P from NVML, rates from the catalogs."""
import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.hardware.build import cluster_from_probe
from gpuadvisor.knowledge import link_spec
from gpuadvisor.schemas.hardware import CpuInfo, LinkClass, Nic
from gpuadvisor.schemas.measure import BandwidthPoint, CollectiveCurve, MatmulCurve, MatmulPoint, MeasureReport
from gpuadvisor.schemas.probe import GpuInfo, P2PStatus, ProbeReport, TopoLink, TopoMatrix

GIB = 1024**3


def _topo(labels, pairs):
    links = [TopoLink(a=labels[i], b=labels[j], token=tok, link_class=cls, nvlink_count=n)
             for (i, j), (tok, cls, n) in pairs.items()]
    return TopoMatrix(gpus=labels, links=links)


def della_report():
    """Topo capture 08 (Princeton Della: 2x A100 PCIe 40GB, GPU0-GPU1 SYS, 2 mlx5 NICs), built by hand."""
    gpus = [GpuInfo(index=i, name="NVIDIA A100-PCIE-40GB", memory_total_bytes=40 * GIB, compute_capability="8.0",
                    pcie_gen=1, pcie_width=16, pcie_gen_max=4, pcie_width_max=16, numa_node=i) for i in range(2)]
    topo = _topo(["GPU0", "GPU1"], {(0, 1): ("SYS", LinkClass.SYS, 0)})
    return ProbeReport(hostname="della-i14g20", gpus=gpus, topology=topo,
                       p2p=[P2PStatus(a=0, b=1, read=True, write=True)],
                       nics=[Nic(name="mlx5_0", kind="infiniband", speed_gbit_per_s=100),
                             Nic(name="lo", kind="loopback")],
                       cpu=CpuInfo(sockets=2, cores=64, threads=64, numa_nodes=2, ram_bytes=512 * GIB))


def test_della_sys_pair():
    c = cluster_from_probe(della_report())
    node = c.nodes[0]
    assert [d.spec_key for d in node.devices] == ["a100-pcie-40gb"] * 2
    link = node.link(0, 1)
    assert link.link_class == LinkClass.SYS
    # SYS: NCCL bounces through host memory; PCIe gen taken from the max (current gen 1 is idle power saving)
    assert link.bandwidth_gb_per_s == pytest.approx(link_spec("SYS", pcie_gen=4).bandwidth_gb_per_s)
    assert [n.name for n in node.nics] == ["mlx5_0"]
    assert c.source == "probe" and c.name == "della-i14g20"


def test_nvlink_and_pix_and_no_p2p():
    labels = ["GPU0", "GPU1", "GPU2"]
    gpus = [GpuInfo(index=i, name="NVIDIA RTX A6000", memory_total_bytes=48 * GIB, pcie_gen_max=4, pcie_width_max=16)
            for i in range(3)]
    topo = _topo(labels, {(0, 1): ("NV4", LinkClass.NVLINK, 4), (0, 2): ("PIX", LinkClass.PIX, 0),
                          (1, 2): ("PIX", LinkClass.PIX, 0)})
    p2p = [P2PStatus(a=0, b=1, read=True, write=True), P2PStatus(a=0, b=2, read=True, write=True),
           P2PStatus(a=1, b=2, read=False, write=False, reason="ACS")]
    node = cluster_from_probe(ProbeReport(hostname="ws", gpus=gpus, topology=topo, p2p=p2p)).nodes[0]
    nv, pix, nop2p = node.link(0, 1), node.link(0, 2), node.link(1, 2)
    assert nv.link_class == LinkClass.NVLINK and nv.nvlink_count == 4
    assert nv.bandwidth_gb_per_s == pytest.approx(0.8 * 4 * 112.5 / 2 / 4)
    assert pix.p2p_supported is True and nop2p.p2p_supported is False
    assert pix.bandwidth_gb_per_s > nop2p.bandwidth_gb_per_s
    assert nop2p.bandwidth_gb_per_s == pytest.approx(link_spec("PIX", p2p=False).bandwidth_gb_per_s)


def test_geforce_defaults_to_no_p2p():
    gpus = [GpuInfo(index=i, name="NVIDIA GeForce RTX 4090", memory_total_bytes=24 * GIB) for i in range(2)]
    topo = _topo(["GPU0", "GPU1"], {(0, 1): ("PHB", LinkClass.PHB, 0)})
    link = cluster_from_probe(ProbeReport(hostname="h", gpus=gpus, topology=topo)).nodes[0].link(0, 1)
    assert link.p2p_supported is False
    assert link.bandwidth_gb_per_s == pytest.approx(link_spec("PHB", p2p=False).bandwidth_gb_per_s)


def test_no_topology_is_unknown_with_note():
    gpus = [GpuInfo(index=i, name="NVIDIA A40", memory_total_bytes=48 * GIB) for i in range(2)]
    c = cluster_from_probe(ProbeReport(hostname="h", gpus=gpus, topology_error="nvidia-smi not found"))
    assert c.nodes[0].link(0, 1).link_class == LinkClass.UNKNOWN
    assert any("nvidia-smi not found" in n for n in c.notes)


def test_unknown_gpu_policy():
    g = GpuInfo(index=0, name="NVIDIA RTX A7000", memory_total_bytes=48 * GIB, compute_capability="8.6")
    c = cluster_from_probe(ProbeReport(hostname="h", gpus=[g]))
    d = c.nodes[0].devices[0]
    assert d.name == "NVIDIA RTX A7000" and d.spec_key is None and d.rate_source == "assumed"
    assert d.peak_tflops_bf16 == 71.0  # slowest 8.6 GPU in the catalog (RTX 3090)
    assert any("A7000" in n for n in c.notes)
    with pytest.raises(UserError, match="unknown GPU 'NVIDIA RTX A7000'.*no memory size"):
        cluster_from_probe(ProbeReport(hostname="h", gpus=[GpuInfo(index=0, name="NVIDIA RTX A7000")]))
    with pytest.raises(UserError, match="unknown GPU 'Mystery'"):
        cluster_from_probe(ProbeReport(hostname="h", gpus=[GpuInfo(index=0, name="Mystery", memory_total_bytes=GIB)]))


def test_measured_gpu_rates_override():
    mm = MatmulCurve(device="cuda:0", dtype="bfloat16", points=[MatmulPoint(m=8192, n=8192, k=8192, time_s=0.01,
                                                                             tflops=110.0)], best_tflops=110.0)
    curve = CollectiveCurve(op="all_reduce", backend="nccl", world_size=2, points=[
        BandwidthPoint(size_bytes=1 << 30, time_s=0.1, algbw_gb_per_s=10.7, busbw_gb_per_s=10.7)],
        busbw_gb_per_s=10.7, alpha_us=20.0)
    meas = MeasureReport(hostname="della-i14g20", device_kind="gpu", world_size=2, matmul=[mm], collectives=[curve])
    node = cluster_from_probe(della_report(), measured=meas).nodes[0]
    assert node.devices[0].achieved_tflops == 110.0 and node.devices[0].rate_source == "measured"
    assert node.devices[1].rate_source == "catalog"
    link = node.link(0, 1)
    assert link.bandwidth_gb_per_s == pytest.approx(10.7) and link.latency_us == pytest.approx(10.0)
    assert link.rate_source == "measured"


def test_cpu_ranks():
    rep = ProbeReport(hostname="ci", nvml_error="NVML Shared Library Not Found",
                      cpu=CpuInfo(cores=2, threads=2, ram_bytes=24 * GIB))
    with pytest.raises(UserError, match="has no GPU.*--cpu-ranks"):
        cluster_from_probe(rep)
    c = cluster_from_probe(rep, cpu_ranks=2)
    node = c.nodes[0]
    assert [d.kind for d in node.devices] == ["cpu", "cpu"]
    assert node.devices[0].memory_bytes == 12 * GIB
    assert node.link(0, 1).link_class == LinkClass.SHM
    assert node.link(0, 1).bandwidth_gb_per_s == pytest.approx(link_spec("shm").bandwidth_gb_per_s)
    mm = MatmulCurve(device="cpu", dtype="float32", threads=1,
                     points=[MatmulPoint(m=2048, n=2048, k=2048, time_s=0.25, tflops=0.07)], best_tflops=0.07)
    gl = CollectiveCurve(op="all_reduce", backend="gloo", world_size=2, points=[
        BandwidthPoint(size_bytes=1 << 26, time_s=0.05, algbw_gb_per_s=1.3, busbw_gb_per_s=1.3)], alpha_us=300.0)
    meas = MeasureReport(hostname="ci", device_kind="cpu", world_size=2, matmul=[mm], collectives=[gl])
    node = cluster_from_probe(rep, cpu_ranks=2, measured=meas).nodes[0]
    assert node.devices[0].peak_tflops_fp32 == 0.07 and node.devices[0].rate_source == "measured"
    assert node.link(0, 1).bandwidth_gb_per_s == pytest.approx(1.3)
    assert node.link(0, 1).latency_us == pytest.approx(150.0)


def test_a_dgx_a100_probe_knows_which_gpus_share_a_pcie_switch():
    """The DGX A100 capture (tests/fixtures/topo/06) prints NV12 between all GPUs, but its NIC columns put GPU pairs
    PXB to the same ConnectX ports: the built devices carry their switch, and host copies split its uplink."""
    from pathlib import Path

    from gpuadvisor.costmodel.analytical.comm import host_uplink_sharing
    from gpuadvisor.probe.topo import parse_topo

    topo = parse_topo((Path(__file__).resolve().parents[1] / "fixtures" / "topo"
                       / "06_dgx-a100-nv12-12xmlx5-named-cols.txt").read_text())
    gpus = [GpuInfo(index=i, name="NVIDIA A100-SXM4-40GB", memory_total_bytes=40 * GIB, pcie_gen_max=4,
                    pcie_width_max=16) for i in range(8)]
    c = cluster_from_probe(ProbeReport(hostname="dgx", gpus=gpus, topology=topo))
    assert [d.pcie_switch for d in c.nodes[0].devices] == [0, 0, 2, 2, 4, 4, 6, 6]
    assert c.nodes[0].link(0, 1).link_class == LinkClass.NVLINK
    assert host_uplink_sharing(c) == [1, 1, 2, 2, 2, 2, 2, 2, 2]


def test_measured_host_copies_price_the_offload_traffic():
    """probes/hostcopy.py's pinned copies (cuda:0 alone) replace the PCIe table's rate for every GPU of the node: the
    slower direction at the largest buffer; pageable copies and a one-way measurement do not count."""
    from gpuadvisor.costmodel.analytical import Context
    from gpuadvisor.schemas.measure import CopyBandwidth
    from gpuadvisor.workload.specs import make_workload

    copies = [CopyBandwidth(direction="h2d", pinned=True, size_bytes=2 ** 25, gb_per_s=9.0),
              CopyBandwidth(direction="h2d", pinned=True, size_bytes=2 ** 28, gb_per_s=21.5),
              CopyBandwidth(direction="d2h", pinned=True, size_bytes=2 ** 28, gb_per_s=19.8),
              CopyBandwidth(direction="d2h", pinned=False, size_bytes=2 ** 28, gb_per_s=6.1)]
    meas = MeasureReport(hostname="della-i14g20", device_kind="gpu", world_size=2, copies=copies)
    c = cluster_from_probe(della_report(), measured=meas)
    assert [d.host_copy_gb_per_s for d in c.nodes[0].devices] == [19.8, 19.8]
    assert Context(c, make_workload("1.3B")).host_bw == pytest.approx(19.8e9)
    one_way = MeasureReport(hostname="h", device_kind="gpu", world_size=1, copies=copies[:2])
    table = cluster_from_probe(della_report(), measured=one_way)
    assert table.nodes[0].devices[0].host_copy_gb_per_s is None
    assert Context(table, make_workload("1.3B")).host_bw == pytest.approx(24e9)  # Gen4 x16 (the max, not idle Gen1)
