"""The GPU and link catalogs load, every entry carries a source, and lookups behave."""
import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.knowledge import gpu_spec, link_spec, load_gpus, load_links

REQUIRED = ["rtx3090", "rtx4090", "rtx5090", "rtx-pro-6000-blackwell", "rtx-a6000", "a40", "l40s", "a100-pcie-40gb",
            "a100-pcie-80gb", "a100-sxm-40gb", "a100-sxm-80gb", "h100-pcie", "h100-sxm", "h200", "v100-sxm2-16gb",
            "v100-sxm2-32gb", "v100-pcie-16gb", "v100-pcie-32gb", "p100-sxm2-16gb", "cpu"]


def test_required_gpus_present_with_sources():
    specs = {s.key: s for s in load_gpus()}
    for key in REQUIRED:
        assert key in specs, key
    for s in specs.values():
        assert len(s.source) > 20, s.key
        assert s.tflops_bf16 > 0 and s.tflops_fp32 > 0 and s.memory_bandwidth_gb_per_s > 0
        if s.kind == "gpu":
            assert s.memory_gib > 0
            assert s.tflops_bf16 >= s.tflops_fp32  # dense tensor peak is at least fp32


def test_links_have_sources():
    cat = load_links()
    for name, cls in cat.pcie.classes.items():
        assert cls.source, name
    assert cat.pcie.no_p2p.source and cat.nvlink.efficiency_source and cat.shm.source
    for net in cat.network:
        assert net.source and net.bandwidth_gb_per_s > 0 and net.latency_us > 0, net.key


@pytest.mark.parametrize("name,key", [
    ("NVIDIA A40", "a40"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA GeForce RTX 5090", "rtx5090"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-blackwell"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-blackwell"),
    ("Tesla T4", "t4"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA H800", "h800"),
    ("NVIDIA A800-SXM4-80GB", "a800-sxm-80gb"),
    ("GH200", "gh200"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("Tesla P100-SXM2-16GB", "p100-sxm2-16gb"),
    ("A6000", "rtx-a6000"),
    ("a40", "a40"),
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "a100-sxm-80gb"),
])
def test_gpu_spec_matches_nvml_names(name, key):
    assert gpu_spec(name).key == key


def test_unknown_and_ambiguous_gpu():
    with pytest.raises(UserError, match=r"unknown GPU 'A7000': add it to knowledge/gpus.yaml"):
        gpu_spec("A7000")
    with pytest.raises(UserError, match="ambiguous GPU 'A100'"):
        gpu_spec("A100")


def test_partial_names_match_whole_words():
    """A partial name matches by words: 'A100' stays ambiguous (the A10 is not inside it), an L40 is not the L40S
    (half its bf16 rate), a GH200 is its own entry, not the H200; NVML's MIG suffix still finds its GPU."""
    from gpuadvisor.knowledge import find_gpu

    with pytest.raises(UserError, match="ambiguous GPU 'A100'"):
        gpu_spec("A100")
    assert find_gpu("NVIDIA L40") is None
    assert gpu_spec("NVIDIA GH200 480GB").key == "gh200" and gpu_spec("NVIDIA H200").key == "h200"
    assert find_gpu("NVIDIA A10G") is None  # AWS's variant, undocumented: not the A10
    assert gpu_spec("NVIDIA A100-SXM4-40GB MIG 3g.20gb").key == "a100-sxm-40gb"
    assert gpu_spec("NVIDIA GeForce RTX 3090 Ti").key == "rtx3090" and gpu_spec("NVIDIA L4").key == "l4"


def test_geforce_p2p_off():
    assert not gpu_spec("rtx4090").p2p_default and not gpu_spec("rtx3090").p2p_default
    assert not gpu_spec("rtx5090").p2p_default
    assert gpu_spec("a40").p2p_default and gpu_spec("rtx-pro-6000-blackwell").p2p_default


@pytest.mark.parametrize("name,key,family", [
    ("NVIDIA GeForce RTX 4090", "rtx4090", "geforce_ada"),
    ("NVIDIA GeForce RTX 3090", "rtx3090", "geforce_ampere"),
    ("NVIDIA GeForce RTX 5090", "rtx5090", "geforce_blackwell"),
    # "Blackwell" in its name would take the datacenter B200 curve if blackwell_pro did not come first
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-blackwell", "blackwell_pro"),
    ("NVIDIA B200", "b200", "blackwell"),
    ("NVIDIA L40S", "l40s", "ada"),
    ("NVIDIA RTX A6000", "rtx-a6000", "ampere_pro"),
    ("Tesla T4", "t4", "turing"),
    ("NVIDIA L4", "l4", "ada"),
    ("NVIDIA A10", "a10", "ampere_pro"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb", "volta"),
    ("NVIDIA H800", "h800", "hopper"),
    ("NVIDIA A800-SXM4-80GB", "a800-sxm-80gb", "a100"),
    ("NVIDIA GH200 480GB", "gh200", "hopper"),
])
def test_gemm_family_per_board_and_its_measured_ceiling(name, key, family):
    """Each board takes its own curve; the workstation and GeForce curves sit at or below the board's measured
    matmul rate (calibration.yaml, zzc0721 database.md), never above the 0.95 cap."""
    from gpuadvisor.costmodel.calibration import gemm_curve
    curve = gemm_curve(name, key)
    assert curve.family == family
    measured = {"geforce_ada": 166.6 / 165.2, "geforce_ampere": 76.5 / 71, "geforce_blackwell": 239.1 / 209.5,
                "blackwell_pro": 415.0 / 503.8, "ada": 269.2 / 362, "turing": 42.3 / 65}
    if family in measured:
        assert curve.e_max <= min(0.95, measured[family]) and curve.w_half == 256


def test_link_spec_orders_and_seed_anchors():
    pix, pxb, phb, sys_ = (link_spec(c).bandwidth_gb_per_s for c in ("PIX", "PXB", "PHB", "SYS"))
    assert pix > pxb > phb > sys_
    assert link_spec("PIX", p2p=False).bandwidth_gb_per_s == pytest.approx(sys_)
    assert link_spec("pcie3-x16-pix").bandwidth_gb_per_s == pytest.approx(pix / 2, rel=0.01)
    assert link_spec("pcie4-x8-pix").bandwidth_gb_per_s == pytest.approx(pix / 2, rel=0.01)
    # seed 002: NVLink3 between two A100 (NV4) busbw 159.29/2 GB/s; IB HDR 21.67/2; 25 GbE 3.01/2
    assert link_spec("NV4", gpu="a100-sxm-40gb").bandwidth_gb_per_s == pytest.approx(159.29 / 2, rel=0.02)
    assert link_spec("ib-hdr").bandwidth_gb_per_s == pytest.approx(21.67 / 2, rel=0.02)
    assert link_spec("25gbe").bandwidth_gb_per_s == pytest.approx(3.01 / 2, rel=0.02)
    assert link_spec("1gbe").bandwidth_gb_per_s < link_spec("10gbe").bandwidth_gb_per_s
    with pytest.raises(UserError, match="unknown link"):
        link_spec("warp-drive")


def test_bundled_yaml_reads_as_safe_load():
    """The fast loader for knowledge/ (libyaml where present) gives exactly yaml.safe_load's data, file by file."""
    import yaml

    from gpuadvisor.knowledge import knowledge_dir
    from gpuadvisor.safe_yaml import load_bundled_yaml

    files = sorted(knowledge_dir().rglob("*.yaml"))
    assert len(files) >= 10  # calibration, links, gpus, models, rules, findings and the presets
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert load_bundled_yaml(text) == yaml.safe_load(text), path.name


def test_gh200_host_link_is_nvlink_c2c():
    """The GH200's host copies run over NVLink-C2C at its measured device-to-host rate (297 GB/s), not a PCIe Gen5
    slot's 55: ZeRO-Offload's copies cost a fifth of an H100's. A measured rate (the probe's) still wins; a catalog
    GPU on PCIe keeps None (priced from its generation)."""
    from gpuadvisor.costmodel.analytical import Context
    from gpuadvisor.hardware.catalog import device_from_spec
    from gpuadvisor.hardware.cluster_file import cluster_from_dict
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.workload.specs import make_workload

    gh = gpu_spec("gh200")
    assert gh.host_copy_gb_per_s == 297 and gh.memory_gib == 96 and gh.compute_capability == "9.0"
    assert device_from_spec(gh, 0).host_copy_gb_per_s == 297
    assert device_from_spec(gh, 0, host_copy_gb_per_s=250.0).host_copy_gb_per_s == 250.0
    assert device_from_spec(gpu_spec("h100-sxm"), 0).host_copy_gb_per_s is None
    wl = make_workload("llama-3.1-8b", seq_len=4096, global_batch=64)
    quad = load_preset("gh200-4x-2nodes-ib-ndr200")
    h100 = cluster_from_dict({"name": "h", "nodes": [{"name": "n", "gpus": "4x H100 80GB HBM3", "topology": "NV6"}]})
    assert Context(quad, wl).host_bw == 297e9 and Context(h100, wl).host_bw == 55e9
    assert Context(quad, wl).nvls_factor == 0.0  # four GPUs joined directly: no NVSwitch
    from gpuadvisor import api

    plan = "dp=4,zero=3,mb=1,m=16,offload=true,recompute=true"
    one = cluster_from_dict({"name": "q", "nodes": [{"name": "n", "gpus": "4x GH200", "topology": "NV6",
                                                     "cpu": {"cores": 288, "ram_gib": 447}}]})
    fast, slow = api.predict(wl, plan, cluster=one), api.predict(wl, plan, cluster=h100)
    assert fast.feasible and fast.step.offload_s < 0.5 * slow.step.offload_s


def test_china_market_boards_are_their_parents_with_400_gb_s_nvlink():
    """The A800 and H800 are the A100 and H100 with NVLink cut from 600/900 to 400 GB/s (8 links of 25 GB/s each
    way): the same compute, memory and bandwidth; a real 4-GPU H800 capture (NV8 per pair) prices each pair at
    8 x 25 x 0.8 = 160 GB/s, not the H100's 18 links."""
    from pathlib import Path

    from gpuadvisor.hardware.cluster_file import cluster_from_dict

    for child, parent in (("a800-sxm-80gb", "a100-sxm-80gb"), ("h800", "h100-sxm")):
        c, p = gpu_spec(child), gpu_spec(parent)
        assert (c.tflops_bf16, c.tflops_fp8, c.memory_gib, c.memory_bandwidth_gb_per_s, c.compute_capability) == (
            p.tflops_bf16, p.tflops_fp8, p.memory_gib, p.memory_bandwidth_gb_per_s, p.compute_capability)
        assert c.nvlink_gb_per_s == 400 and c.nvlink_links == 8 and c.nvlink_per_link_one_way_gb_per_s == 25.0
    capture = Path(__file__).parents[1] / "fixtures" / "topo" / "19_h800-4gpu-nv8-17nic-ansi-empty-affinity.txt"
    node = cluster_from_dict({"name": "h800", "nodes": [{"name": "n", "gpus": "4x H800",
                                                         "topology": str(capture)}]}).nodes[0]
    assert node.devices[0].name == "NVIDIA H800" and node.devices[0].peak_tflops_bf16 == 989.5
    bws = {round(lk.bandwidth_gb_per_s, 1) for lk in node.links}
    assert bws == {160.0}, bws
