"""ZeRO-2/3 next to TP or PP with PyTorch FSDP2 (`fully_shard`) over the "dp" mesh dimension.

ZeRO-2/3 x TP is torchtitan's 2D parallelism (`parallelize_llama`): `parallelize_module` first (the
`tensor.py` plan), then `fully_shard` per transformer block and once for the root over the "dp"
sub-mesh, so each parameter is sharded twice: its TP placement on "tp" and `Shard(0)` on "dp".
- ZeRO-3 = `reshard_after_forward=True`: parameters are all-gathered over "dp" for forward, freed, and
  all-gathered again for backward; gradients are reduce-scattered, optimizer states are sharded.
- ZeRO-2 = `reshard_after_forward=False`: the unsharded parameters stay from forward to backward (no
  second all-gather); gradients and optimizer states are sharded, as DeepSpeed's stage 2. Unlike
  DeepSpeed's stage 2, the parameters are freed after backward and all-gathered at the next forward,
  so they are sharded at rest (the same bytes DeepSpeed spends all-gathering the updated shards).
ZeRO-3 x PP is torchtitan's 3D layout without TP: each pipeline stage is `fully_shard`ed over "dp"
(`shard_gpt` on the stage, reshard_after_forward=True: parameters are gathered again for every
micro-batch; torchtitan's default under PP keeps them for the whole step), and `PipelineStage` defers
the reduce-scatter to the last micro-batch.
Outside the pipeline, gradients are reduce-scattered after every micro-batch (DeepSpeed's stages 2 and 3
do the same) and averaged over "dp", so every strategy takes the same optimizer step. The optimizer is
the plain torch class over the sharded DTensor parameters (each rank updates its own shard).
Mixed precision on GPU follows torchtitan: bf16 parameters for compute and all-gather, fp32 reduce.

Pure data-parallel ZeRO-2/3 runs on DeepSpeed by default; with GPUADVISOR_ZERO_IMPL=fsdp in the environment, or
zero_impl "fsdp" in the job (what make_job writes for a plan whose ZeRO runs on FSDP, Plan.zero_runtime:
`suggest` gives ZeRO-3 across nodes, and of models above DeepSpeed's live-parameter cap, that runtime;
launch/build.py `fsdp_zero3`), it runs on FSDP2 instead (`FsdpDataParallel`: `fully_shard` over all ranks, the
same per-block groups), the way torchtitan and most LoRA recipes shard a model. Frozen parameters (LoRA's base)
are sharded like the others and get no gradient reduce-scatter.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from ..parallel import Context
from .base import AccumulatingStrategy, make_optimizer
from .tensor import check_tp, parallelize_gpt, vocab_loss


def shard_gpt(model, dp_mesh, ctx: Context, reshard_after_forward: bool):
    """FSDP2 over `dp_mesh` of a GPT or GPTStage: one group per transformer block, one for the rest."""
    kwargs: dict[str, Any] = {"mesh": dp_mesh, "reshard_after_forward": reshard_after_forward}
    if ctx.amp_dtype == torch.bfloat16:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, **kwargs)
    return fully_shard(model, **kwargs)


class FsdpTensorParallel(AccumulatingStrategy):
    """ZeRO-2/3 x TP: TP over "tp" (the `tensor.py` plan), then FSDP2 over "dp"."""

    name = "fsdp-tp"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        plan = ctx.plan
        if plan.zero_stage not in (2, 3) or plan.pp != 1:
            raise ValueError(f"FSDP2 x TP runs zero_stage 2 or 3 with pp = 1, not {plan.to_string()}")
        if self.scaler is not None:
            raise ValueError("fp16 loss scaling is not supported with ZeRO x TP; use bf16")
        check_tp(ctx, self.seq_len)
        model = parallelize_gpt(self.build_model().to(ctx.device), ctx.mesh_dim("tp"), plan.sequence_parallel)
        self.model = shard_gpt(model, ctx.mesh_dim("dp"), ctx, reshard_after_forward=plan.zero_stage == 3)
        self.optimizer = make_optimizer(self.model.parameters(), ctx)
        self.loss_fn = vocab_loss(ctx)
        self.owns_loss = ctx.coords["tp"] == 0  # every TP rank computes the same loss; count it once


#: Environment variable choosing the pure data-parallel ZeRO-2/3 implementation: "deepspeed" (default) or "fsdp".
ZERO_IMPL_ENV = "GPUADVISOR_ZERO_IMPL"


def zero_impl(job_choice: Optional[str] = None) -> str:
    """"deepspeed" or "fsdp" for pure data-parallel ZeRO-2/3: GPUADVISOR_ZERO_IMPL when set (the user's switch),
    else the job's choice (TrainerJob.zero_impl: the advisor's, e.g. FSDP2 for ZeRO-3 across nodes), else
    DeepSpeed. ValueError for anything else."""
    impl = os.environ.get(ZERO_IMPL_ENV, "").strip().lower() or job_choice or "deepspeed"
    if impl not in ("deepspeed", "fsdp"):
        raise ValueError(f"{ZERO_IMPL_ENV}={impl!r}: use 'deepspeed' or 'fsdp'")
    return impl


class FsdpDataParallel(AccumulatingStrategy):
    """ZeRO-2/3 over all ranks with FSDP2 (GPUADVISOR_ZERO_IMPL=fsdp): no TP, no PP."""

    name = "fsdp"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        plan = ctx.plan
        if plan.zero_stage not in (2, 3) or plan.tp != 1 or plan.pp != 1 or plan.dp != ctx.world_size:
            raise ValueError(f"FSDP2 data parallelism runs zero_stage 2 or 3 with dp = world size, not "
                             f"{plan.to_string()}")
        if plan.zero_offload or plan.zero_hpz_partition_size > 1:
            raise ValueError("the FSDP2 path runs no ZeRO offload or hpZ; use DeepSpeed (unset GPUADVISOR_ZERO_IMPL)")
        if self.scaler is not None:
            raise ValueError("fp16 loss scaling is not supported with FSDP2; use bf16")
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("dp",))
        self.model = shard_gpt(self.build_model().to(ctx.device), mesh, ctx,
                               reshard_after_forward=plan.zero_stage == 3)
        self.optimizer = make_optimizer(self.model.parameters(), ctx)
