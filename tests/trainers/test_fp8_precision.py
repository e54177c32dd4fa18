"""--precision fp8 in the bundled trainers: no FP8 kernels, so CUDA trains bf16 autocast and CPU fp32, and the
metrics say what ran and why (the figures are not an FP8 measurement)."""
from __future__ import annotations

import pytest
import torch

from gpuadvisor.schemas import RunMetrics
from gpuadvisor.trainers.parallel import Context, amp_dtype_for

from ._launch import job, launch


def _fp8(j):
    training = j.workload.training.model_copy(update={"precision": "fp8"})
    return j.model_copy(update={"workload": j.workload.model_copy(update={"training": training})})


@pytest.mark.parametrize("precision,device,want", [
    ("fp8", "cuda", torch.bfloat16), ("bf16", "cuda", torch.bfloat16), ("fp16", "cuda", torch.float16),
    ("fp32", "cuda", None), ("fp8", "cpu", None), ("bf16", "cpu", None),
])
def test_autocast_dtype(precision, device, want):
    assert amp_dtype_for(precision, device) is want


@pytest.mark.parametrize("precision,amp,want", [
    ("fp8", torch.bfloat16, "bf16 (fp8 requested: the bundled trainers have no FP8 kernels)"),
    ("fp8", None, "fp32 (fp8 requested)"),
    ("bf16", None, "fp32 (bf16 requested)"),
    ("bf16", torch.bfloat16, "bf16"),
])
def test_reported_precision(precision, amp, want):
    j = job()
    if precision == "fp8":
        j = _fp8(j)
    ctx = Context(job=j, rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo",
                  coords={"dp": 0, "tp": 0, "pp": 0}, amp_dtype=amp)
    assert ctx.precision == want


@pytest.mark.slow
def test_an_fp8_job_runs_and_says_fp32_on_cpu(tmp_path):
    proc = launch(tmp_path, {"fp8": _fp8(job(steps=2, warmup=0))}, nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = RunMetrics.model_validate_json((tmp_path / "fp8" / "metrics.json").read_text())
    assert m.precision == "fp32 (fp8 requested)"
