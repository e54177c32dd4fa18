"""Helpers for the trainer tests: tiny jobs and torchrun launches (several jobs per launch)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpuadvisor.schemas import ModelSpec, Plan, TrainerJob, TrainingSettings, Workload

TINY = ModelSpec(name="tiny-gpt", n_layers=4, d_model=32, n_heads=4, d_ff=64, vocab_size=64, max_seq_len=16,
                 tied_embeddings=False)
SEQ, BATCH = 16, 4


def job(spec: ModelSpec = TINY, steps: int = 4, warmup: int = 1, model: str = "gpt", **plan) -> TrainerJob:
    """A tiny fp32-on-CPU job with global batch 4; `plan` fields override the 1-device defaults."""
    plan.setdefault("devices_per_node", plan.get("dp", 1) * plan.get("tp", 1) * plan.get("pp", 1))
    if "micro_batch_size" not in plan:
        plan["micro_batch_size"] = BATCH // (plan.get("dp", 1) * plan.get("num_micro_batches", 1))
    p = Plan(**plan)
    training = TrainingSettings(seq_len=SEQ, global_batch=p.global_batch(), precision="bf16")
    return TrainerJob(plan=p, workload=Workload(model=spec, training=training), trainer_model=model,
                      steps=steps, warmup=warmup, lr=1e-3, device="cpu", init_timeout_s=120)


def env(**extra: str) -> dict:
    e = dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", **extra)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    return e


def launch(tmp: Path, jobs: dict[str, TrainerJob], nproc: int, timeout: int = 400,
           **extra_env: str) -> subprocess.CompletedProcess:
    """Run `jobs` (name -> job) in one launch: torchrun for nproc > 1, plain python for 1 rank; `extra_env`
    is added to the ranks' environment (e.g. GPUADVISOR_ZERO_IMPL="fsdp")."""
    args = []
    for i, (name, j) in enumerate(jobs.items()):
        path = tmp / f"{name}.json"
        path.write_text(j.model_dump_json())
        args += (["--plan", str(path), "--out", str(tmp / name)] if i == 0
                 else ["--also", str(path), str(tmp / name)])
    if nproc == 1:
        cmd = [sys.executable, "-m", "gpuadvisor.trainers", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "gpuadvisor.trainers", *args]
    return subprocess.run(cmd, env=env(**extra_env), capture_output=True, text=True, timeout=timeout)


def run_groups(tmp_path_factory, groups) -> dict:
    """name -> RunMetrics for every job of `groups` ((nproc, {name: job}) ...), one launch per group; a failed
    launch fails the test with the tail of its output."""
    from gpuadvisor.schemas import RunMetrics

    out: dict = {}
    for nproc, jobs in groups:
        tmp = tmp_path_factory.mktemp(f"ranks{nproc}")
        proc = launch(tmp, jobs, nproc)
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-5000:])
        for name in jobs:
            out[name] = RunMetrics.model_validate_json((tmp / name / "metrics.json").read_text())
    return out


def run_probe(tmp: Path, probe: str, jobs: dict[str, TrainerJob], nproc: int, *extra: str,
              timeout: int = 400) -> dict:
    """Run a probe script of this folder under torchrun on `jobs` (written to tmp as JSON) and return the
    JSON it writes: `probe out.json [extra ...] job.json ...`. A failed launch fails the test with its stderr."""
    paths = []
    for name, j in jobs.items():
        (tmp / f"{name}.json").write_text(j.model_dump_json())
        paths.append(str(tmp / f"{name}.json"))
    script = Path(__file__).with_name(probe)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(script),
           str(tmp / "out.json"), *extra, *paths]
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads((tmp / "out.json").read_text())


def errors(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("error-rank*.json"))]
