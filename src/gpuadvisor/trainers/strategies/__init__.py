"""One module per parallel strategy; `build_strategy` picks the one a plan asks for."""
from __future__ import annotations

from ..parallel import Context
from .base import Strategy


def build_strategy(ctx: Context) -> Strategy:
    """ZeRO if zero_stage > 0, else pipeline (PP, PP x DP), tensor (TP, TP x DP), DDP, or single device."""
    p = ctx.plan
    if p.tp > 1 and p.pp > 1:
        raise ValueError("the bundled trainers do not combine tp > 1 with pp > 1; use TP x DP or PP x DP")
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
