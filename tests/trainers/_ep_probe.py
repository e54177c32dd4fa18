"""Run under torchrun: expert-parallel strategies against the single-process model, gradient by gradient.

Usage: torchrun --nproc-per-node N tests/trainers/_ep_probe.py OUT.json STEPS JOB.json [JOB.json ...]
For each job and each of STEPS optimizer steps: the strategy's step (its gradient reduction included), then
every parameter's gradient gathered to full tensors under its global name (local expert i of the rank with
ep-index j is global expert j*E/ep + i) and compared with the gradient of the single-process model on the
whole global batch, which then takes the same optimizer step; after the last step the parameters are compared.
Losses alone cannot catch a wrong expert-gradient scale (Adam's update is scale-free); gradients can.
The all-to-alls are recorded, so the test can check that empty dispatches happened.
Rank 0 writes {job: {grad_abs, grad_rel, param_abs, worst, names, experts_compared, zero_counts,
zero_splits, empty_receives}} to OUT.json.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from gpuadvisor.schemas import TrainerJob
from gpuadvisor.trainers import experts
from gpuadvisor.trainers.parallel import setup, teardown
from gpuadvisor.trainers.strategies import build_strategy
from gpuadvisor.trainers.strategies.base import loss_fn, make_optimizer

RECORD = {"zero_counts": 0, "zero_splits": 0, "empty_receives": 0}
_a2a = experts.all_to_all


def recording_all_to_all(x, out_splits, in_splits, group):
    out = _a2a(x, out_splits, in_splits, group)
    if x.dtype == torch.long:  # the per-expert count exchange: zeros = (source, local expert) with no rows
        RECORD["zero_counts"] += int((out == 0).sum())
    else:
        RECORD["zero_splits"] += sum(1 for n in out_splits if n == 0)
        RECORD["empty_receives"] += int(sum(out_splits) == 0)
    return out


experts.all_to_all = recording_all_to_all
_EXPERT = re.compile(r"^(.*\.experts\.)(\d+)(\..*)$")


def inner(model):
    return model.module if hasattr(model, "module") else model


def full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def global_tensors(strategy, grads: bool) -> dict[str, torch.Tensor]:
    """Every rank's gradients (or parameters) under global names, gathered on every rank."""
    plan, ep = strategy.plan, getattr(strategy, "ep", None)
    per = strategy.ctx.job.workload.model.n_experts // plan.ep
    mine = {}
    for name, p in inner(strategy.model).named_parameters():
        t = full(p.grad) if grads else full(p)
        m = _EXPERT.match(name)
        if m and ep is not None:
            name = f"{m.group(1)}{ep.ep_rank * per + int(m.group(2))}{m.group(3)}"
        mine[name] = t
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    out: dict[str, torch.Tensor] = {}
    for d in gathered:
        for name, t in d.items():
            if name in out and not _EXPERT.match(name):  # dense: every replica must hold the same
                assert torch.equal(out[name], t), f"replicas differ on {name}"
            out.setdefault(name, t)
    return out


def probe(job: TrainerJob, steps: int) -> dict:
    for k in RECORD:
        RECORD[k] = 0
    ctx = setup(job)
    strategy = build_strategy(ctx)
    ref = strategy.build_model()  # same seed, every expert, one process
    ref_opt = make_optimizer(ref.parameters(), ctx)
    grad_abs = grad_rel = 0.0
    worst = ""
    names: set[str] = set()
    for step in range(steps):
        strategy.step(step)
        got = global_tensors(strategy, grads=True)
        x, y = strategy.global_batch_at(step)
        ref_opt.zero_grad(set_to_none=True)
        loss_fn(ref(x), y).backward()
        for n, p in ref.named_parameters():
            d = float((got[n] - p.grad).abs().max())
            rel = d / float(p.grad.abs().max().clamp_min(1e-30))
            if rel > grad_rel:
                worst = f"{n} (step {step})"
            grad_abs, grad_rel = max(grad_abs, d), max(grad_rel, rel)
        names = set(got)
        ref_opt.step()
    got = global_tensors(strategy, grads=False)
    param_abs = max(float((got[n] - p.detach()).abs().max()) for n, p in ref.named_parameters())
    counts = [None] * dist.get_world_size()
    dist.all_gather_object(counts, dict(RECORD))
    return {"grad_abs": grad_abs, "grad_rel": grad_rel, "param_abs": param_abs, "worst": worst,
            "names": sorted(names) == sorted(n for n, _ in ref.named_parameters()),
            "experts_compared": sum(1 for n in names if _EXPERT.match(n)),
            **{k: sum(c[k] for c in counts) for k in RECORD}}


def main() -> None:
    out, steps, jobs = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    result = {}
    try:
        for path in jobs:
            result[Path(path).stem] = probe(TrainerJob.model_validate_json(Path(path).read_text()), steps)
        if dist.get_rank() == 0:
            out.write_text(json.dumps(result, indent=1))
    finally:
        teardown(clean=True)


if __name__ == "__main__":
    main()
