"""The command line: errors are files with a classified cause, comm hooks, ResNet-18."""
from __future__ import annotations

import math

import pytest

from gpuadvisor.schemas import ModelSpec, RunMetrics
from gpuadvisor.trainers.aggregate import global_losses

from ._launch import errors, job, launch

pytestmark = pytest.mark.slow
RESNET = ModelSpec(name="resnet18", kind="generic", params_override=11_200_000, flops_per_sample=1.7e9)


def test_world_size_mismatch_is_a_clear_error(tmp_path):
    proc = launch(tmp_path, {"dp": job(dp=2)}, nproc=1)
    assert proc.returncode == 1
    (err,) = errors(tmp_path / "dp")
    assert err["rank"] == 0 and err["cause"] == "exception" and err["type"] == "ValueError"
    assert "torchrun --nproc-per-node 2" in err["message"]
    assert not (tmp_path / "dp" / "metrics.json").exists()


def test_unreadable_job_is_recorded(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"plan": {"dp": 0}}')
    import subprocess
    import sys

    from ._launch import env

    proc = subprocess.run([sys.executable, "-m", "gpuadvisor.trainers", "--plan", str(bad), "--out",
                           str(tmp_path / "o")], env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    message = errors(tmp_path / "o")[0]["message"]
    assert "invalid trainer job" in message and "plan.dp:" in message and "gpuadvisor suggest --emit" in message
    assert "Traceback" not in proc.stdout + proc.stderr  # the caller's input: one line, no trace


def test_resnet_single_process(tmp_path):
    proc = launch(tmp_path, {"r": job(spec=RESNET, model="resnet18", steps=2, warmup=0)}, nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = RunMetrics.model_validate_json((tmp_path / "r" / "metrics.json").read_text())
    assert m.model_name == "resnet18" and m.seq_len == 1
    assert m.summary.total_tokens == 8  # images: 2 steps x batch 4
    assert all(math.isfinite(l) for l in m.ranks[0].losses)


def test_comm_hooks_resnet_ddp_and_bf16_refusal(tmp_path):
    jobs = {
        "dp": job(dp=2),
        "fp16": job(dp=2, comm_hook="fp16"),
        "powersgd": job(dp=2, comm_hook="powersgd"),
        "resnet_dp": job(spec=RESNET, model="resnet18", dp=2, steps=1, warmup=0),
        "bf16": job(dp=2, comm_hook="bf16"),  # last: refuses on gloo and stops the launch
    }
    proc = launch(tmp_path, jobs, nproc=2)
    assert proc.returncode == 1
    loss = {n: global_losses(RunMetrics.model_validate_json((tmp_path / n / "metrics.json").read_text()))
            for n in ("dp", "fp16", "powersgd")}
    assert loss["fp16"] == pytest.approx(loss["dp"], rel=1e-3)  # compression: close, not exact
    assert loss["powersgd"][:2] == pytest.approx(loss["dp"][:2], rel=1e-4)  # uncompressed first 2 steps
    assert all(math.isfinite(l) for l in loss["powersgd"])
    resnet = RunMetrics.model_validate_json((tmp_path / "resnet_dp" / "metrics.json").read_text())
    assert resnet.summary.total_tokens == 4
    errs = errors(tmp_path / "bf16")
    assert [e["rank"] for e in errs] == [0, 1]
    assert all(e["cause"] == "exception" and "NCCL" in e["message"] for e in errs)
