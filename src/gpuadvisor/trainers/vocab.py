"""The vocabulary split over tensor-parallel ranks: embedding, LM head and cross-entropy (Megatron-LM, Shoeybi
et al. 2019, §3: "we parallelize the input embedding weight matrix along the vocabulary dimension" and fuse the
parallel GEMM's output with the cross-entropy loss, so the logits are never gathered).

Each TP rank keeps the rows [start, end) of the V x h word embedding (`torch.tensor_split`, so V need not divide
by tp: GPT-2's 50,257 rows split 25,129 / 25,128). A tied head is the same local shard, so tying survives the
split. Per micro-batch this costs what Megatron's layers cost:

- embedding forward: each rank looks up the tokens in its rows (zero elsewhere) and the partial sums are
  all-reduced (b·s·h); backward needs no communication;
- head: identity forward, all-reduce of the input's gradient in backward (Megatron's copy-to-TP-region, b·s·h);
  under sequence parallelism an all-gather of the final norm's sequence shards forward and a reduce-scatter of
  the gradient backward (the same bytes); each rank computes its b·s·V/tp logits;
- loss: three all-reduces of b·s floats (the row max, the target's logit, the sum of exponentials).

The loss saves one fp32 softmax of the local logits (4 bytes per local logit) and turns it into the gradient in
place, as Megatron's _VocabParallelCrossEntropy does. Its peak is the forward's: the bf16 logits, their fp32
copy and the shifted exponentials, 10 bytes per local logit (counted, not measured on a GPU); the cost model
prices the eager loss at 12 bytes per logit / tp (costmodel.analytical.memory.LOGIT_BYTES_EAGER), which
F.cross_entropy's backward holds.
The parameters are plain tensors (DTensor only carries the collectives): DDP, FSDP2, ZeroRedundancyOptimizer
and the pipeline see ordinary parameters, and a tied weight stays one parameter.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Partial, Replicate


def vocab_range(vocab: int, rank: int, size: int) -> tuple[int, int]:
    """[start, end) of the vocabulary rows rank `rank` of `size` keeps (torch.tensor_split's uneven split)."""
    base, extra = divmod(vocab, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def _from_tp_region(x: torch.Tensor, mesh: Any) -> torch.Tensor:
    """Sum every rank's partial `x` (all-reduce); the gradient passes through (Megatron's reduce-from-TP-region)."""
    return DTensor.from_local(x, mesh, [Partial()], run_check=False).redistribute(mesh, [Replicate()]).to_local()


def _to_tp_region(x: torch.Tensor, mesh: Any) -> torch.Tensor:
    """The whole input on every rank, its gradient summed over them: identity forward and an all-reduce backward
    for a replicated `x` (Megatron's copy-to-TP-region); an all-gather forward and a reduce-scatter backward for a
    sequence-parallel DTensor shard (Megatron's gather-from-sequence-parallel-region)."""
    if not isinstance(x, DTensor):
        x = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
    return x.redistribute(mesh, [Replicate()]).to_local(grad_placements=[Partial()])


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token cross-entropy of logits split by vocabulary: (N, V/tp) fp32 local logits, N targets in [0, V)."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, start: int, group: Any) -> torch.Tensor:
        end = start + logits.shape[-1]
        row_max = logits.max(dim=-1).values
        dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - row_max.unsqueeze(-1)
        outside = (target < start) | (target >= end)
        local = (target - start).masked_fill(outside, 0)
        rows = torch.arange(len(target), device=logits.device)
        picked = shifted[rows, local].masked_fill(outside, 0.0)
        dist.all_reduce(picked, group=group)
        exp = shifted.exp_()  # in place: the shifted logits are not needed again
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local, outside)
        return sum_exp.log() - picked

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        # in place on the saved softmax, as Megatron does: the graph is never run backward twice
        out, local, outside = ctx.saved_tensors
        rows = torch.arange(len(local), device=out.device)
        out[rows, local] -= (~outside).to(out.dtype)
        return out.mul_(grad.unsqueeze(-1)), None, None, None


class VocabParallelEmbedding(nn.Module):
    """This rank's rows [start, end) of a token embedding; forward sums every rank's lookups."""

    def __init__(self, weight: nn.Parameter, start: int, mesh: Any):
        super().__init__()
        self.weight, self.start, self.mesh = weight, start, mesh

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        end = self.start + self.weight.shape[0]
        outside = (idx < self.start) | (idx >= end)
        x = F.embedding((idx - self.start).masked_fill(outside, 0), self.weight)
        x = x.masked_fill(outside.unsqueeze(-1), 0.0)
        return _from_tp_region(x, self.mesh)


class VocabParallelHead(nn.Module):
    """The LM head's rows of the vocabulary (`weight`, this rank's shard): (..., h) -> this rank's (..., V/tp)
    logits. Takes the final norm's output whole (a plain tensor, equal on every rank) or sequence-parallel (a
    Shard(1) DTensor)."""

    def __init__(self, weight: nn.Parameter, mesh: Any):
        super().__init__()
        self.weight, self.mesh = weight, mesh

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(_to_tp_region(x, self.mesh), self.weight)


def split_vocab(model: nn.Module, tp_mesh: Any) -> None:
    """Replace a GPT's (or pipeline stage's) token embedding and LM head, where present, by this TP rank's
    vocabulary shard, in place; a tied head keeps sharing the embedding's (now local) weight."""
    rank, size = tp_mesh.get_local_rank(), tp_mesh.size()
    embed, head = getattr(model, "embed", None), getattr(model, "head", None)
    full = embed.tok.weight if embed is not None else head.weight if head is not None else None
    if full is None:
        return
    start, end = vocab_range(full.shape[0], rank, size)
    shards: dict[int, nn.Parameter] = {}

    def shard(w: torch.Tensor) -> nn.Parameter:
        if id(w) not in shards:
            shards[id(w)] = nn.Parameter(w.detach()[start:end].clone(), requires_grad=w.requires_grad)
        return shards[id(w)]

    if embed is not None:
        embed.tok = VocabParallelEmbedding(shard(embed.tok.weight), start, tp_mesh)
    if head is not None:
        model.head = VocabParallelHead(shard(head.weight), tp_mesh)


def vocab_parallel_loss(tp_mesh: Any, vocab: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The strategies' loss (`base.loss_fn`: mean cross-entropy over every token, fp32 logits) for the logits of
    a `VocabParallelHead` over `vocab` entries split over `tp_mesh`."""
    start, _ = vocab_range(vocab, tp_mesh.get_local_rank(), tp_mesh.size())
    group = tp_mesh.get_group()

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return _VocabParallelCrossEntropy.apply(output.float().flatten(0, -2), target.flatten(), start, group).mean()

    return loss
