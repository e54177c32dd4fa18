"""probe_host on fake hosts: composition, nvidia-smi handling, closest NIC per GPU, rendering."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pynvml
import pytest

from gpuadvisor.probe import inventory
from gpuadvisor.probe.inventory import assign_closest_devices, probe_host
from gpuadvisor.probe.render import render_report
from gpuadvisor.schemas.hardware import CpuInfo, Nic
from gpuadvisor.schemas.measure import CollectiveCurve, MatmulCurve, MeasureReport
from gpuadvisor.schemas.probe import ProbeReport

from .fake_host import cpu_tree, ib_device, netdev, typical_host
from .fake_nvml import FakeGpu, FakeNVML

TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
NO_NVML = FakeNVML(raises={("nvmlInit", None): pynvml.NVMLError_LibraryNotFound()})


def fake_smi(tmp_path: Path, monkeypatch, body: str) -> None:
    """Put an executable `nvidia-smi` shell script first on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


def test_gpu_less_host_is_a_normal_report(tmp_path):
    r = probe_host(sysfs_root=typical_host(tmp_path), nvml=NO_NVML)
    assert r.gpus == [] and "LibraryNotFound" in r.nvml_error
    assert r.topology is None and r.topology_error is None  # nvidia-smi not run without GPUs
    assert r.hostname == "fakehost" and r.cpu.threads == 8 and len(r.nics) == 5
    assert all(n.closest_devices == [] for n in r.nics)
    assert ProbeReport.model_validate_json(r.model_dump_json()) == r


def test_runs_nvidia_smi_and_maps_nic_legend_to_sysfs(tmp_path, monkeypatch):
    root = tmp_path / "root"
    cpu_tree(root)
    ib_device(root, "mlx5_4", {1: ("400 Gb/sec (4X NDR)", "InfiniBand", "4: ACTIVE")}, netdevs=("ibp1s0",))
    ib_device(root, "mlx5_5", {1: ("400 Gb/sec (4X NDR)", "InfiniBand", "4: ACTIVE")})
    netdev(root, "ibp1s0", speed="400000", arptype="32")
    capture = TOPO / "19_h800-4gpu-nv8-17nic-ansi-empty-affinity.txt"
    fake_smi(tmp_path, monkeypatch, f'[ "$1 $2" = "topo -m" ] || exit 3\ncat "{capture}"')
    r = probe_host(sysfs_root=root, nvml=FakeNVML(gpus=[FakeGpu() for _ in range(4)]))
    assert r.topology_error is None and r.topology.gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]
    nics = {n.name: n for n in r.nics}
    assert nics["mlx5_4"].closest_devices == [0]  # NIC4 is PIX to GPU0
    assert nics["ibp1s0"].closest_devices == [0]  # the netdev on mlx5_4's PCI function
    assert nics["mlx5_5"].closest_devices == []  # NIC5 is SYS to all; every GPU has a PIX NIC
    assert r.warnings == []


@pytest.mark.parametrize(
    "body,expect",
    [("echo 'NVIDIA-SMI has failed' >&2; exit 9", "failed (exit 9): NVIDIA-SMI has failed"),
     ("echo 'not a matrix'", "could not parse"),
     ("exec sleep 5", "did not answer within 0.2 s")],
)
def test_nvidia_smi_failures_set_topology_error(tmp_path, monkeypatch, body, expect):
    cpu_tree(tmp_path / "root")
    fake_smi(tmp_path, monkeypatch, body)
    monkeypatch.setattr(inventory, "TOPO_TIMEOUT_S", 0.2)
    r = probe_host(sysfs_root=tmp_path / "root", nvml=FakeNVML(gpus=[FakeGpu()]))
    assert r.topology is None and expect in r.topology_error and len(r.gpus) == 1


def test_nvidia_smi_not_found(tmp_path, monkeypatch):
    cpu_tree(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    r = probe_host(sysfs_root=tmp_path, nvml=FakeNVML(gpus=[FakeGpu()]))
    assert "nvidia-smi not found" in r.topology_error


def test_run_nvidia_smi_false_and_topo_text_without_gpus(tmp_path, monkeypatch):
    cpu_tree(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    r = probe_host(sysfs_root=tmp_path, nvml=FakeNVML(gpus=[FakeGpu()]), run_nvidia_smi=False)
    assert r.topology is None and r.topology_error is None
    text = (TOPO / "08_della-2xa100-pcie-sys-2xmlx5.txt").read_text()
    r = probe_host(sysfs_root=tmp_path, nvml=NO_NVML, topo_text=text)
    assert r.gpus == [] and r.topology.gpus == ["GPU0", "GPU1"]
    r = probe_host(sysfs_root=tmp_path, nvml=NO_NVML, topo_text="garbage")
    assert r.topology is None and "no GPU rows" in r.topology_error


def test_gpu_count_mismatch_warns(tmp_path):
    cpu_tree(tmp_path)
    text = (TOPO / "08_della-2xa100-pcie-sys-2xmlx5.txt").read_text()
    r = probe_host(sysfs_root=tmp_path, nvml=FakeNVML(gpus=[FakeGpu()] * 3), topo_text=text)
    assert any("NVML sees 3 GPUs but the topology matrix has 2" in w for w in r.warnings)


def test_closest_by_numa_without_nic_columns(tmp_path):
    root = typical_host(tmp_path)  # ens1f0np0 on NUMA 1, eno1 and mlx5_0 on NUMA 0, veth0 virtual
    text = (TOPO / "10_3x-rtxa6000-nv4-pair-plus-node-ansi-header.txt").read_text()  # no NICs, all NUMA 0
    gpus = [FakeGpu(numa=0), FakeGpu(numa=0), FakeGpu(numa=1)]
    r = probe_host(sysfs_root=root, nvml=FakeNVML(gpus=gpus), topo_text=text)
    nics = {n.name: n.closest_devices for n in r.nics}
    assert nics == {"eno1": [0, 1, 2], "ens1f0np0": [], "lo": [], "veth0": [], "mlx5_0": [0, 1, 2]}
    r = probe_host(sysfs_root=root, nvml=FakeNVML(gpus=gpus), run_nvidia_smi=False)  # NVML's NUMA ids
    nics = {n.name: n.closest_devices for n in r.nics}
    assert nics["eno1"] == [0, 1] and nics["ens1f0np0"] == [2] and nics["veth0"] == []


def test_single_numa_host_unknown_nic_numa_is_close_to_all():
    nics = [Nic(name="eth0"), Nic(name="lo", kind="loopback"), Nic(name="veth1")]
    out = assign_closest_devices(nics, topology=None, gpu_numa={0: None, 1: None}, cpu=CpuInfo(numa_nodes=1),
                                 virtual={"veth1"})
    assert [n.closest_devices for n in out] == [[0, 1], [], []]
    out = assign_closest_devices(nics[:1], topology=None, gpu_numa={0: None}, cpu=CpuInfo(numa_nodes=2))
    assert out[0].closest_devices == []


@pytest.mark.parametrize("width", [80, 120])
def test_render_fits_the_width_and_shows_everything(tmp_path, width):
    root = typical_host(tmp_path)
    text = (TOPO / "21_h100-8gpu-nv18-9nic-truncated-nic-rows.txt").read_text()
    nv = FakeNVML(gpus=[FakeGpu(name="NVIDIA H100 80GB HBM3 with a very long name", nvlink_states=[1] * 18)
                        for _ in range(8)], raises={("nvmlDeviceGetUUID", 3): pynvml.NVMLError_GpuIsLost()})
    r = probe_host(sysfs_root=root, nvml=nv, topo_text=text)
    measured = MeasureReport(
        hostname="fakehost", device_kind="gpu", world_size=8,
        collectives=[CollectiveCurve(op="all_reduce", backend="nccl", world_size=8, points=[], busbw_gb_per_s=370.5,
                                     alpha_us=12.0)],
        matmul=[MatmulCurve(device="cuda:0", device_name="H100", dtype="bfloat16", points=[], best_tflops=700.0)])
    out = render_report(r, measured=measured, health=["NIC eno1 runs at 1 Gb/s"], width=width)
    assert max(len(line) for line in out.splitlines()) <= width
    flat = " ".join(out.split())  # wrapped paragraphs and cells: compare with whitespace collapsed
    for needle in ("Host fakehost", "GPUs (8)", "NV18", "GPU3 fields NVML did not give: uuid (GpuIsLost",
                   "NIC8: PIX to GPU0", "ens1f0np0", "100 Gb/s", "200 Gb/s", "2 socket(s), 4 cores, 8 threads",
                   "Measured", "370.50 GB/s", "700.00 TFLOP/s", "Health", "NIC eno1 runs at 1 Gb/s", "Warnings",
                   "columns without a row: NIC6, NIC7, NIC8", "veth0"):
        assert needle in flat, needle


def test_render_no_gpu_and_topology_error(tmp_path, monkeypatch):
    cpu_tree(tmp_path)
    out = render_report(probe_host(sysfs_root=tmp_path, nvml=NO_NVML))
    assert "no GPU found: NVML unavailable (LibraryNotFound" in out and "none found" in out
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = render_report(probe_host(sysfs_root=tmp_path, nvml=FakeNVML(gpus=[FakeGpu()] * 2)))
    assert "no topology: nvidia-smi not found" in out and "0-1 read yes write yes" in out


def test_render_wide_matrix_falls_back_to_pairs():
    lines = ["\t" + "\t".join(f"GPU{i}" for i in range(16))]
    for i in range(16):
        lines.append("\t".join([f"GPU{i}"] + [" X " if j == i else "NV6" for j in range(16)]))
    from gpuadvisor.probe.topo import parse_topo

    r = ProbeReport(hostname="big", topology=parse_topo("\n".join(lines)))
    out = render_report(r, width=100)
    assert "GPU0-GPU15 NV6" in out and max(len(x) for x in out.splitlines()) <= 100
    small = ProbeReport(hostname="small", topology=parse_topo("\n".join("\t".join(line.split("\t")[:3])
                                                                        for line in lines[:3])))
    assert "GPU0  X     NV6" in render_report(small, width=80)  # a matrix that fits stays a matrix


def test_probe_host_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; from gpuadvisor.probe.inventory import probe_host; import gpuadvisor.cli.probe_cmd; "
            "probe_host(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
    assert os.environ.get("PATH") is not None
