"""`gpuadvisor probe` in-process (fake host, fake NVML, fake optional features) and once as a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pynvml
import pytest

from gpuadvisor.cli import main
from gpuadvisor.probe import nvml as nvml_mod
from gpuadvisor.schemas.measure import MeasureReport
from gpuadvisor.schemas.probe import ProbeReport

from .fake_host import typical_host
from .fake_nvml import FakeNVML

TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
GPUADVISOR = Path(sys.executable).with_name("gpuadvisor")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake 2-socket host without GPUs (NVML library missing)."""
    fake = FakeNVML(raises={("nvmlInit", None): pynvml.NVMLError_LibraryNotFound()})
    monkeypatch.setattr(nvml_mod, "load_pynvml", lambda: fake)
    return str(typical_host(tmp_path / "root"))


def run_cli(capsys, *argv):
    """main([...]) -> (exit code, stdout, stderr)."""
    rc = main(["probe", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def fake_module(monkeypatch, name: str, **attrs) -> None:
    """Install a stand-in module for an optional feature."""
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)


def test_table_on_gpu_less_host(host, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "gpuadvisor.probe.health", None)  # health not installed: no section
    rc, out, err = run_cli(capsys, "--sysfs-root", host)
    assert rc == 0 and err == ""
    assert "no GPU found: NVML unavailable (LibraryNotFound" in out
    assert "ens1f0np0" in out and "100 Gb/s" in out and "2 socket(s)" in out and "Health" not in out


def test_json_round_trips(host, capsys):
    rc, out, _ = run_cli(capsys, "--json", "--sysfs-root", host)
    r = ProbeReport.model_validate_json(out)
    assert rc == 0 and r.gpus == [] and r.hostname == "fakehost" and r.cpu.sockets == 2


def test_topo_file_json_includes_topology(host, capsys):
    rc, out, _ = run_cli(capsys, "--json", "--sysfs-root", host, "--topo-file",
                         str(TOPO / "06_dgx-a100-nv12-12xmlx5-named-cols.txt"))
    r = ProbeReport.model_validate_json(out)
    assert rc == 0 and len(r.topology.gpus) == 8 and r.topology.gpu_link(0, 7).nvlink_count == 12


def test_topo_file_table_names_the_gpus_that_share_a_pcie_switch(host, capsys):
    """DGX A100: NV12 everywhere, but the NIC columns pair the GPUs on four switches, said under its own heading;
    an H100 box (a switch per GPU) gets no such section."""
    rc, out, _ = run_cli(capsys, "--sysfs-root", host, "--topo-file",
                         str(TOPO / "06_dgx-a100-nv12-12xmlx5-named-cols.txt"))
    assert rc == 0 and "PCIe switches (GPUs that share one uplink to host RAM)" in out
    assert "GPU0, GPU1; GPU2, GPU3; GPU4, GPU5; GPU6, GPU7" in out
    rc, out, _ = run_cli(capsys, "--sysfs-root", host, "--topo-file",
                         str(TOPO / "21_h100-8gpu-nv18-9nic-truncated-nic-rows.txt"))
    assert rc == 0 and "PCIe switches" not in out


@pytest.mark.parametrize(
    "argv,needle",
    [(["--topo-file", "/nonexistent/topo.txt"], "cannot read topology file /nonexistent/topo.txt"),
     (["--quick"], "--quick only applies with --measure"),
     (["--cpu-ranks", "2"], "--cpu-ranks only applies with --save"),
     (["--probes", "matmul"], "--probes only applies with --measure"),
     (["--measure", "--probes", "matmul,gemm"], "--probes: unknown probe(s) ['gemm']"),
     (["--measure", "--probes", ","], "--probes: unknown probe(s)"),
     (["--cluster", "hosts.yaml", "--measure", "--probes", "matmul"], "--probes does not apply with --cluster"),
     (["--cpu-ranks", "0", "--save", "x.yaml"], "--cpu-ranks must be at least 1")],
)
def test_user_errors_are_one_line(host, capsys, argv, needle):
    rc, out, err = run_cli(capsys, "--sysfs-root", host, *argv)
    assert rc == 2 and out == "" and needle in err and err.count("\n") == 1


def test_garbage_topo_file_names_the_file(host, capsys, tmp_path):
    bad = tmp_path / "topo.txt"
    bad.write_text("this is not a matrix\n")
    rc, _, err = run_cli(capsys, "--sysfs-root", host, "--topo-file", str(bad))
    assert rc == 2 and f"{bad}: no GPU rows found" in err and err.count("\n") == 1


def test_save_passes_cpu_ranks_and_measure(host, capsys, monkeypatch, tmp_path):
    seen = {}
    measured = MeasureReport(hostname="fakehost", device_kind="cpu", world_size=2)

    def run_measurements(nproc=None, quick=False, progress=None):
        seen["measure"] = (nproc, quick)
        progress("collectives", 1, 2, 300.0)
        return measured

    def cluster_from_probe(report, *, cpu_ranks=None, measured=None):
        seen["build"] = (report.hostname, cpu_ranks, measured)
        return "CLUSTER"

    def save_cluster(cluster, path):
        seen["save"] = (cluster, path)
        return Path(path)

    fake_module(monkeypatch, "gpuadvisor.probe.measure", run_measurements=run_measurements)
    fake_module(monkeypatch, "gpuadvisor.hardware.build", cluster_from_probe=cluster_from_probe)
    fake_module(monkeypatch, "gpuadvisor.hardware.cluster_file", save_cluster=save_cluster)
    fake_module(monkeypatch, "gpuadvisor.probe.health", findings=lambda report, measured=None: ["eno1 is slow"])
    target = str(tmp_path / "c.yaml")
    rc, out, err = run_cli(capsys, "--sysfs-root", host, "--measure", "--quick", "--save", target,
                           "--cpu-ranks", "2", "--json")
    assert rc == 0 and seen["measure"] == (None, True)
    assert seen["build"] == ("fakehost", 2, measured) and seen["save"] == ("CLUSTER", target)
    doc = json.loads(out)
    assert set(doc) == {"probe", "measure", "health"} and doc["health"] == ["eno1 is slow"]
    assert MeasureReport.model_validate(doc["measure"]) == measured and "saved cluster to" in err
    assert "gpuadvisor probe: measuring collectives (1/2)  0s  (budget left 5m00s)" in err  # not silent
    rc, out, _ = run_cli(capsys, "--sysfs-root", host, "--measure")
    assert rc == 0 and "Measured" in out and "cpu x2 on fakehost" in out and "eno1 is slow" in out


@pytest.mark.parametrize(
    "module,argv,needle",
    [("gpuadvisor.hardware.build", ["--save", "c.yaml"], "--save (cluster building) is not installed"),
     ("gpuadvisor.hardware.cluster_file", ["--save", "c.yaml"], "(gpuadvisor.hardware.cluster_file is missing)"),
     ("gpuadvisor.probe.measure", ["--measure"], "--measure is not installed")],
)
def test_missing_features_say_so_in_one_line(host, capsys, monkeypatch, module, argv, needle):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ModuleNotFoundError
    rc, _, err = run_cli(capsys, "--sysfs-root", host, *argv)
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_subprocess_json_on_this_host():
    done = subprocess.run([str(GPUADVISOR), "probe", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    r = ProbeReport.model_validate_json(done.stdout)
    assert r.cpu.threads >= 1 and (r.gpus or r.nvml_error)
