"""One module per parallel strategy; `build_strategy` picks the one a plan asks for.

Plans with ep > 1 (expert parallelism beside data parallelism, all-to-all token dispatch as Megatron-Core's
"alltoall" dispatcher and DeepSpeed-MoE) go to `expert.py` whatever their ZeRO stage: DDP, ZeRO-1 as a
distributed optimizer, ZeRO-2/3 on FSDP2 with experts sharded over the expert-data-parallel group.
"""
from __future__ import annotations

from ..parallel import Context
from ..support import unsupported_reason
from .base import Strategy


def build_strategy(ctx: Context) -> Strategy:
    """Expert parallelism for ep > 1 (`expert.py`: DDP, ZeRO-1, ZeRO-2/3 over dp); DeepSpeed ZeRO for pure-DP ZeRO
    plans (FSDP2 for ZeRO-2/3 when GPUADVISOR_ZERO_IMPL or the job's zero_impl says fsdp); pipeline for pp > 1
    (PP, PP x DP, TP x PP, TP x PP x DP, with ZeRO-1/3 over dp); FSDP2 x TP for ZeRO-2/3 with tp > 1; else tensor
    (TP, TP x DP, ZeRO-1 x TP), DDP, or single device."""
    p = ctx.plan
    why = unsupported_reason(p, ctx.job.workload, cuda=ctx.is_cuda)
    if why:
        raise ValueError(why)
    if p.ep > 1:  # torch-native: DDP / distributed optimizer / FSDP2 with all-to-all expert dispatch
        if ctx.job.deepspeed_config is not None:
            raise ValueError("a DeepSpeed config (--ds-config) applies to ep=1 ZeRO plans only; ZeRO with ep > 1 runs "
                             "torch-native (ZeroRedundancyOptimizer, FSDP2): drop --ds-config")
        from .expert import build
        return build(ctx)
    if p.zero_stage and (p.tp > 1 or p.pp > 1) and ctx.job.deepspeed_config is not None:
        raise ValueError("a DeepSpeed config (--ds-config) applies to pure data-parallel ZeRO plans only; ZeRO with "
                         "tp/pp > 1 runs torch-native (FSDP2, ZeroRedundancyOptimizer): drop --ds-config")
    if p.zero_stage in (2, 3) and p.tp == 1 and p.pp == 1 and ctx.job.deepspeed_config is None:
        from .fsdp import FsdpDataParallel, zero_impl

        if zero_impl(ctx.job.zero_impl) == "fsdp":
            return FsdpDataParallel(ctx)
    if p.zero_stage and p.tp == 1 and p.pp == 1:
        from .zero import Zero
        return Zero(ctx)
    if p.pp > 1:  # with or without TP inside the stages and ZeRO-1/3 over "dp"
        from .pipeline import Pipeline
        return Pipeline(ctx)
    if p.zero_stage in (2, 3) and p.tp > 1:
        from .fsdp import FsdpTensorParallel
        return FsdpTensorParallel(ctx)
    if p.tp > 1:
        from .tensor import TensorParallel
        return TensorParallel(ctx)
    if p.dp > 1:
        from .ddp import DataParallel
        return DataParallel(ctx)
    from .single import Single
    return Single(ctx)


__all__ = ["Strategy", "build_strategy"]
