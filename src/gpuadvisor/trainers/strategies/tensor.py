"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, §3) with torch.distributed.tensor.parallel.

Per block: q, k, v and fc1 are split column-wise (each rank keeps n_heads/tp heads and d_ff/tp
hidden units), proj and fc2 row-wise, so a layer costs one all-reduce of b·s·h in forward after
attention and one after the MLP, and two in backward (the "f"/"g" operators of Megatron §3).
The attention input is made a replicated DTensor once (PrepareModuleInput), so the three
column-parallel projections share one backward all-reduce, as Megatron's fused QKV does.

Sequence parallel (Korthikanti et al. 2022, §4.2.2): the LayerNorms and residual stream are
sharded along the sequence; the all-reduces become all-gather (before attention/MLP) and
reduce-scatter (after), the same bytes, and activation memory outside attention/MLP drops by tp.
The word embedding, LM head and loss are split by vocabulary (`vocab.py`, Megatron §3): each rank keeps V/tp
rows, its b·s·V/tp logits and their softmax; the final norm and learned positions stay replicated (their
gradients are identical on every rank, so no extra communication).

TP x DP: the TP-sharded model is wrapped in DDP over the "dp" mesh dimension after
`_pre_dp_module_transform`, PyTorch's TP+DDP composition hook (DTensor parameters become local
tensors for DDP's buckets). Every TP rank takes its replica's slice of the batch (Table II).
ZeRO-1 x TP is this plus a distributed optimizer over "dp" (`zero1.py`); ZeRO-2/3 x TP is `fsdp.py`.
"""
from __future__ import annotations

from typing import cast

from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, ParallelStyle, PrepareModuleInput,
                                               PrepareModuleInputOutput, PrepareModuleOutput, RowwiseParallel, SequenceParallel,
                                               parallelize_module)
from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
from torch.nn.parallel import DistributedDataParallel as DDP

from ..parallel import Context
from ..vocab import split_vocab, vocab_parallel_loss
from .base import AccumulatingStrategy, make_optimizer
from .ddp import wrap_ddp


def mlp_plan(prefix: str, mlp, sp_output) -> dict:
    """Column-parallel in-projections (fc1, or gate and up) and a row-parallel out-projection of one MLP;
    `sp_output` is the row-parallel output layout (Shard(1) with sequence parallel, else Replicate)."""
    from ..blocks import GatedMLP

    cols = ("gate", "up") if isinstance(mlp, GatedMLP) else ("fc1",)
    down = "down" if isinstance(mlp, GatedMLP) else "fc2"
    out: dict[str, ParallelStyle] = {f"{prefix}.{c}": ColwiseParallel() for c in cols}
    out[f"{prefix}.{down}"] = RowwiseParallel(output_layouts=sp_output)
    return out


def block_plan(block, sequence_parallel: bool) -> dict:
    """parallelize_module plan of one transformer block (torchtitan's layout, adapted to this model).

    Dense MLP: fc1 (or gate, up) column-wise, fc2 (or down) row-wise. MoE: every expert (and the shared
    expert) is cut like the dense MLP, so each keeps expert_d_ff/tp hidden units per rank, and the router stays
    replicated: each TP rank routes the same tokens to the same experts (Megatron-Core's MoE with expert
    tensor parallelism, no expert parallelism). Each expert's row-parallel output is all-reduced on its own
    tokens. QK-norm weights are replicated and applied to each rank's heads (SequenceParallel over the head
    dimension, so their gradients are summed over the TP ranks, as torchtitan does for Qwen3).
    """
    from ..blocks import MoE

    seq = Shard(1) if sequence_parallel else Replicate()
    row_out = Shard(1) if sequence_parallel else Replicate()
    plan: dict = {
        "attn": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
        "attn.proj": RowwiseParallel(output_layouts=row_out),
    }
    if block.attn.q_norm is not None:
        plan["attn.q_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        plan["attn.k_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
    if sequence_parallel:
        plan["ln1"] = SequenceParallel()
        plan["ln2"] = SequenceParallel()
        for name in ("post_attn_norm", "post_mlp_norm"):
            if getattr(block, name) is not None:
                plan[name] = SequenceParallel(use_local_output=True)
    if isinstance(block.mlp, MoE):
        # the MoE runs on plain (local) tensors: the router and the token gather/scatter are replicated work
        if sequence_parallel:
            plan["mlp"] = PrepareModuleInputOutput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_input=True,
                output_layouts=(Replicate(),), desired_output_layouts=(Shard(1),), use_local_output=True)
        for i, expert in enumerate(block.mlp.experts):
            plan.update(mlp_plan(f"mlp.experts.{i}", expert, Replicate()))
        if block.mlp.shared is not None:
            plan.update(mlp_plan("mlp.shared", block.mlp.shared, Replicate()))
    else:
        if sequence_parallel:
            plan["mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        plan.update(mlp_plan("mlp", block.mlp, row_out))
    return plan


def parallelize_gpt(model, tp_mesh, sequence_parallel: bool):
    """Shard a GPT's blocks over `tp_mesh` in place; with SP also shard the residual stream by sequence.

    Also a pipeline stage (`model.GPTStage`, whose embed or ln_f/head are None off the first/last stage): its
    blocks take and give plain tensors, whole (b, s, h) without SP and this rank's (b, s/tp, h) sequence shard
    with it, so the stages of one TP rank exchange those between them (torchtitan's TP inside each PP stage).
    """
    split_vocab(model, tp_mesh)  # the word embedding and LM head by vocabulary, a tied head kept tied
    for block in model.blocks:
        parallelize_module(block, tp_mesh, block_plan(block, sequence_parallel))
    if sequence_parallel:
        ends = {
            # Replicate -> Shard(1) is a local slice forward and an all-gather of gradients backward.
            "embed": PrepareModuleOutput(output_layouts=(Replicate(),), desired_output_layouts=(Shard(1),)),
            "ln_f": SequenceParallel(),  # hands the head its Shard(1) output (vocab.VocabParallelHead gathers it)
        }
        present = {name: style for name, style in ends.items() if getattr(model, name, None) is not None}
        if present:
            parallelize_module(model, tp_mesh, present)
    return model


def vocab_loss(ctx: Context):
    """The loss of a model whose head `parallelize_gpt` split by vocabulary over the "tp" mesh dimension."""
    return vocab_parallel_loss(ctx.mesh_dim("tp"), ctx.job.workload.model.vocab_size)


def check_tp(ctx: Context, seq_len: int) -> None:
    """ValueError unless tp divides the heads, key/value heads and MLP widths (and, with sequence parallel,
    the sequence): `support.tp_shape_reason`."""
    from ..support import tp_shape_reason

    why = tp_shape_reason(ctx.plan, ctx.job.workload.model, seq_len)
    if why:
        raise ValueError(why)


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
        self.loss_fn = vocab_loss(ctx)
        self.owns_loss = ctx.coords["tp"] == 0  # every TP rank computes the same loss; count it once

    def sync_context(self, last: bool):
        if self.plan.dp > 1 and not last:
            return cast(DDP, self.model).no_sync()  # wrapped by wrap_ddp when dp > 1
        return super().sync_context(last)
