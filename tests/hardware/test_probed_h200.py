"""A real probe of a one-GPU H200 machine (tests/fixtures/probe, from `gpuadvisor probe --measure --json` on it,
2026-11-27) built into a cluster as `suggest` builds it: catalog rates, NVML facts, the measured GEMM rate."""
import json
from pathlib import Path

import pytest

from gpuadvisor.hardware.build import cluster_from_probe
from gpuadvisor.schemas.measure import MeasureReport
from gpuadvisor.schemas.probe import ProbeReport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "probe"
GIB = 2 ** 30


@pytest.fixture(scope="module")
def report() -> ProbeReport:
    return ProbeReport.model_validate(json.loads((FIXTURES / "h200-1gpu-vm.json").read_text()))


def test_the_h200_is_the_catalogs_and_nvml_sizes_it(report):
    cluster = cluster_from_probe(report)
    (node,) = cluster.nodes
    (dev,) = node.devices
    assert dev.spec_key == "h200" and dev.rate_source == "catalog"
    assert dev.peak_tflops_bf16 == pytest.approx(989.5) and dev.memory_bandwidth_gb_per_s == pytest.approx(4800)
    assert dev.memory_bytes == 150754820096  # NVML's total: 140.4 GiB, the datasheet's "141 GB"
    assert dev.compute_capability == "9.0" and (dev.pcie_gen, dev.pcie_width) == (5, 16)
    # NVML answered NotSupported for NVLink and NUMA on this VM: recorded, not guessed
    assert {m.field for m in report.gpus[0].missing} == {"nvlinks", "numa_node"}


def test_the_measured_gemm_rate_replaces_the_catalogs(report):
    measured = MeasureReport.model_validate(json.loads((FIXTURES / "h200-1gpu-vm-measure.json").read_text()))
    dev = cluster_from_probe(report, measured=measured).nodes[0].devices[0]
    # 8192^3 bf16 at 730 TFLOP/s: 74 % of the datasheet's dense 989.5 (the device tool's notes: 769-798 on others)
    assert dev.rate_source == "measured" and dev.achieved_tflops == pytest.approx(729.86, rel=1e-3)
    assert measured.matmul[0].best_tflops == max(p.tflops for p in measured.matmul[0].points)


@pytest.mark.parametrize("name, shown", [("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3"),
                                         ("NVIDIA GeForce RTX 4090", "RTX 4090"),
                                         ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"), ("NVIDIA RTX A6000", "RTX A6000")])
@pytest.mark.parametrize("gen", [5, 1])
def test_the_gpu_table_keeps_one_line_per_gpu_at_80_columns(report, name, shown, gen):
    """The table drops NVML's brand words and shows the PCIe link in one column, so a GPU's row does not fold at
    80 columns (it did for this H200: "NVIDIA" on one line, "H200" on the next), an idle GPU's trained-down link
    included ('Gen1/5 x16'); the JSON keeps NVML's name."""
    from rich.console import Console

    from gpuadvisor.probe.render import report_view

    gpu = report.gpus[0].model_copy(update={"name": name, "pcie_gen": gen})
    console = Console(width=80, record=True)
    console.print(report_view(report.model_copy(update={"gpus": [gpu]})))
    lines = console.export_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.strip().startswith("0  "))
    assert f"0  {shown} " in lines[row] and "140.4 GiB" in lines[row], lines[row]
    assert ("Gen5 x16" if gen == 5 else "Gen1/5 x16") in lines[row], lines[row]
    assert lines[row + 1].strip().startswith("GPU0 fields"), lines[row + 1]  # no folded name below it
