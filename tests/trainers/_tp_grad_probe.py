"""Run under torchrun (2 ranks, world = TP group): gradients of one TP (optionally SP) forward/backward of a job,
gathered to full tensors (DTensors, and the vocabulary shards of `trainers/vocab.py` concatenated by rank),
against the same model's single-process gradients; rank 0 writes {job: {param: max |diff| / max |grad|}} to
argv[1]. Losses cannot show a wrong gradient on a tiny replicated weight (Adam's first steps are sign-like), so
this checks the gradients themselves."""
from __future__ import annotations

import json
import sys

import torch

from gpuadvisor.schemas import TrainerJob
from gpuadvisor.trainers.parallel import setup, teardown
from gpuadvisor.trainers.strategies import build_strategy
from gpuadvisor.trainers.strategies.base import loss_fn
from gpuadvisor.trainers.vocab import VocabParallelEmbedding, VocabParallelHead


def full(g: torch.Tensor, vocab_shard: bool) -> torch.Tensor:
    """The whole gradient: a DTensor's full tensor, a vocabulary shard's rows from every rank, else as is."""
    if hasattr(g, "full_tensor"):
        return g.full_tensor()
    if not vocab_shard:
        return g
    parts: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(parts, g.detach().cpu())
    return torch.cat(parts)


def grads(model, loss, x, y) -> dict[str, torch.Tensor]:
    """{name: full gradient} of one forward/backward, a shared (tied) parameter once under its first name."""
    model.zero_grad(set_to_none=True)
    loss(model(x), y).backward()
    out, seen = {}, set()
    for prefix, m in model.named_modules():
        shard = isinstance(m, (VocabParallelEmbedding, VocabParallelHead))
        for n, p in m.named_parameters(recurse=False):
            if id(p) not in seen and p.grad is not None:
                seen.add(id(p))
                out[f"{prefix}.{n}" if prefix else n] = full(p.grad, shard).detach().clone()
    return out


def main() -> None:
    result = {}
    for path in sys.argv[2:]:
        job = TrainerJob.model_validate_json(open(path).read())
        ctx = setup(job)
        strat = build_strategy(ctx)
        x, y = strat.replica_batch(0)
        got = grads(strat.model, strat.loss_fn, x, y)
        want = grads(strat.build_model(), loss_fn, x, y)  # same seed, unsharded
        if ctx.rank == 0:
            result[path] = {n: float((got[n] - want[n]).abs().max() / want[n].abs().max().clamp_min(1e-30))
                            for n in want}
    if torch.distributed.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(result, f)
    teardown(True)


if __name__ == "__main__":
    main()
