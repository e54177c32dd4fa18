"""Run under torchrun (2 ranks): gradients of one TP (optionally SP) forward/backward of a Llama/MoE job,
gathered to full tensors, against the same model's single-process gradients; rank 0 writes
{job: {param: max |diff| / max |grad|}} to argv[1]. Losses cannot show a wrong gradient on a tiny
replicated weight (Adam's first steps are sign-like), so this checks the gradients themselves."""
from __future__ import annotations

import json
import sys

import torch

from gpuadvisor.schemas import TrainerJob
from gpuadvisor.trainers.parallel import setup, teardown
from gpuadvisor.trainers.strategies import build_strategy
from gpuadvisor.trainers.strategies.base import loss_fn


def grads(model, x, y) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    out = {}
    for n, p in model.named_parameters():
        g = p.grad
        out[n] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    return out


def main() -> None:
    result = {}
    for path in sys.argv[2:]:
        job = TrainerJob.model_validate_json(open(path).read())
        ctx = setup(job)
        strat = build_strategy(ctx)
        x, y = strat.replica_batch(0)
        got = grads(strat.model, x, y)
        want = grads(strat.build_model(), x, y)  # same seed, unsharded
        if ctx.rank == 0:
            result[path] = {n: float((got[n] - want[n]).abs().max() / want[n].abs().max().clamp_min(1e-30))
                            for n in want}
    if torch.distributed.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(result, f)
    teardown(True)


if __name__ == "__main__":
    main()
