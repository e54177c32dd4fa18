"""Data parallelism with PyTorch DistributedDataParallel (Li et al., VLDB 2020).

Each replica holds the whole model and its slice of the global batch; DDP all-reduces gradients
in `bucket_cap_mb` buckets, overlapped with backward, and averages them over the group.
Gradient accumulation uses `no_sync()` so the all-reduce runs once per optimizer step.
Optional gradient-compression hooks: fp16/bf16 compression (halves the bytes; bf16 needs NCCL)
and PowerSGD (Vogels et al. 2019, rank-1 low-rank compression after 2 uncompressed steps).
Compression changes the numerics, so those runs are not expected to match the baseline loss.
"""
from __future__ import annotations

import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from ..parallel import Context
from .base import AccumulatingStrategy, make_optimizer


def wrap_ddp(module: nn.Module, ctx: Context, group=None) -> DDP:
    """Wrap in DDP over `group` (default: world) with the plan's bucket size and comm hook.

    The gradients are views into DDP's buckets (`gradient_as_bucket_view`): otherwise DDP keeps a second copy of
    every gradient in its buckets, 4 bytes per parameter in fp32, which the cost model does not count (it holds
    the gradients once; docs/cost-model.md) and which would be the optimizer step's peak for models whose
    activations are small beside their gradients.
    """
    plan = ctx.plan
    ids = [ctx.device.index] if ctx.is_cuda else None
    model = DDP(module, device_ids=ids, process_group=group, bucket_cap_mb=plan.ddp_bucket_mb,
                gradient_as_bucket_view=True)
    if plan.comm_hook == "fp16":
        model.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif plan.comm_hook == "bf16":
        if ctx.backend != "nccl":
            raise ValueError(
                "the bf16 gradient-compression hook needs CUDA GPUs and the NCCL backend "
                f"(this run uses {ctx.backend}); use comm_hook 'fp16' or 'powersgd' instead"
            )
        model.register_comm_hook(group, default_hooks.bf16_compress_hook)
    elif plan.comm_hook == "powersgd":
        from ...costmodel.analytical.comm import POWERSGD_RANK  # the rank the cost model prices

        state = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=POWERSGD_RANK,
                                            start_powerSGD_iter=2, random_seed=ctx.job.seed)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return model


class DataParallel(AccumulatingStrategy):
    """DDP over all ranks (pure data parallelism)."""

    name = "dp"

    model: DDP

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        if ctx.plan.dp != ctx.world_size:
            raise ValueError(f"pure DDP needs dp == world size, got dp={ctx.plan.dp}, world={ctx.world_size}")
        self.model = wrap_ddp(self.build_model().to(ctx.device), ctx)
        self.optimizer = make_optimizer(self.model.parameters(), ctx)

    def sync_context(self, last: bool):
        return super().sync_context(last) if last else self.model.no_sync()
