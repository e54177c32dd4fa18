"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, §3) with torch.distributed.tensor.parallel.

Per block: q, k, v and fc1 are split column-wise (each rank keeps n_heads/tp heads and d_ff/tp
hidden units), proj and fc2 row-wise, so a layer costs one all-reduce of b·s·h in forward after
attention and one after the MLP, and two in backward (the "f"/"g" operators of Megatron §3).
The attention input is made a replicated DTensor once (PrepareModuleInput), so the three
column-parallel projections share one backward all-reduce, as Megatron's fused QKV does.

Sequence parallel (Korthikanti et al. 2022, §4.2.2): the LayerNorms and residual stream are
sharded along the sequence; the all-reduces become all-gather (before attention/MLP) and
reduce-scatter (after), the same bytes, and activation memory outside attention/MLP drops by tp.
The embeddings, final LayerNorm and LM head stay replicated on every TP rank (their gradients are
identical on every rank, so no extra communication); the vocabulary is not split.

TP x DP: the TP-sharded model is wrapped in DDP over the "dp" mesh dimension after
`_pre_dp_module_transform`, PyTorch's TP+DDP composition hook (DTensor parameters become local
tensors for DDP's buckets). Every TP rank takes its replica's slice of the batch (Table II).
ZeRO-1 x TP is this plus a distributed optimizer over "dp" (`zero1.py`); ZeRO-2/3 x TP is `fsdp.py`.
"""
from __future__ import annotations

from typing import cast

from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                               RowwiseParallel, SequenceParallel, parallelize_module)
from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
from torch.nn.parallel import DistributedDataParallel as DDP

from ..parallel import Context
from .base import AccumulatingStrategy, make_optimizer
from .ddp import wrap_ddp


def block_plan(sequence_parallel: bool) -> dict:
    """parallelize_module plan of one transformer block (torchtitan's layout, adapted to this model)."""
    if not sequence_parallel:
        return {
            "attn": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),)),
            "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(),
            "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel(),
        }
    return {
        "ln1": SequenceParallel(),
        "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
        "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
        "ln2": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
    }


def parallelize_gpt(model, tp_mesh, sequence_parallel: bool):
    """Shard a GPT's blocks over `tp_mesh` in place; with SP also shard the residual stream by sequence."""
    for block in model.blocks:
        parallelize_module(block, tp_mesh, block_plan(sequence_parallel))
    if sequence_parallel:
        parallelize_module(model, tp_mesh, {
            # Replicate -> Shard(1) is a local slice forward and an all-gather of gradients backward.
            "embed": PrepareModuleOutput(output_layouts=(Replicate(),), desired_output_layouts=(Shard(1),)),
            "ln_f": SequenceParallel(),
            "head": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                       use_local_output=True),
        })
    return model


def check_tp(ctx: Context, seq_len: int) -> None:
    """ValueError unless tp divides the heads and d_ff (and, with sequence parallel, the sequence)."""
    plan, spec = ctx.plan, ctx.job.workload.model
    if spec.n_heads % plan.tp or spec.d_ff % plan.tp:
        raise ValueError(f"tp={plan.tp} must divide n_heads={spec.n_heads} and d_ff={spec.d_ff}")
    if plan.sequence_parallel and seq_len % plan.tp:
        raise ValueError(f"sequence parallel needs seq_len {seq_len} divisible by tp={plan.tp}")


class TensorParallel(AccumulatingStrategy):
    """TP over the "tp" mesh dimension; with dp > 1 also DDP over "dp" (2D TP x DP); zero_stage 1 shards the
    optimizer states over "dp" (`zero1.py`)."""

    name = "tp"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        plan = ctx.plan
        check_tp(ctx, self.seq_len)
        model = parallelize_gpt(self.build_model().to(ctx.device), ctx.mesh_dim("tp"), plan.sequence_parallel)
        if plan.dp > 1:
            model = wrap_ddp(_pre_dp_module_transform(model) or model, ctx, group=ctx.group("dp"))
        self.model = model
        if plan.zero_stage == 1:  # Megatron's distributed optimizer: states sharded over "dp"
            from .zero1 import zero1_optimizer

            self.optimizer = zero1_optimizer(model.parameters(), ctx, ctx.group("dp"))
        else:
            self.optimizer = make_optimizer(model.parameters(), ctx)
        self.owns_loss = ctx.coords["tp"] == 0  # every TP rank computes the same loss; count it once

    def sync_context(self, last: bool):
        if self.plan.dp > 1 and not last:
            return cast(DDP, self.model).no_sync()  # wrapped by wrap_ddp when dp > 1
        return super().sync_context(last)
