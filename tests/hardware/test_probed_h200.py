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
