"""One module per parallel strategy; `build_strategy` picks the one a plan asks for."""
from __future__ import annotations

from ..parallel import Context
from ..support import unsupported_reason
from .base import Strategy


def build_strategy(ctx: Context) -> Strategy:
    """ZeRO if zero_stage > 0, else pipeline (PP, PP x DP), tensor (TP, TP x DP), DDP, or single device."""
    p = ctx.plan
    why = unsupported_reason(p, ctx.job.workload, cuda=ctx.is_cuda)
    if why:
        raise ValueError(why)
    if p.zero_stage:
        from .zero import Zero
        return Zero(ctx)
    if p.pp > 1:
        from .pipeline import Pipeline
        return Pipeline(ctx)
    if p.tp > 1:
        from .tensor import TensorParallel
        return TensorParallel(ctx)
    if p.dp > 1:
        from .ddp import DataParallel
        return DataParallel(ctx)
    from .single import Single
    return Single(ctx)


__all__ = ["Strategy", "build_strategy"]
