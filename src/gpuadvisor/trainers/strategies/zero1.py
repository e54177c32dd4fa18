"""ZeRO-1 next to TP or PP: a distributed optimizer over the "dp" sub-group.

Megatron-LM's distributed optimizer (`--use-distributed-optimizer`) is ZeRO-1 for TP/PP models: the
gradients stay whole on every data-parallel rank, the optimizer states are split over the "dp" group,
each rank updates its part and the updated parameters are sent to the others. The bundled trainers use
PyTorch's `ZeroRedundancyOptimizer` for that, on top of the gradient averaging the strategy already does
(DDP for TP x DP, FSDP2 `replicate` for PP x DP): it assigns whole parameters to dp ranks (greedy, by
size), steps the torch optimizer on its own parameters only and broadcasts each one from its owner.
Numerically it is the plain optimizer: the same update of the same averaged gradients. Megatron cuts a
flat buffer instead (reduce-scatter of gradients, all-gather of parameters); the states per rank and the
bytes moved are the same to within the greedy assignment's imbalance.
"""
from __future__ import annotations

from torch.distributed.optim import ZeroRedundancyOptimizer

from ..parallel import Context
from .base import optimizer_spec


def zero1_optimizer(params, ctx: Context, group) -> ZeroRedundancyOptimizer:
    """The workload's optimizer with its states sharded over `group` (the "dp" process group)."""
    cls, kwargs = optimizer_spec(ctx)
    return ZeroRedundancyOptimizer([p for p in params if p.requires_grad], optimizer_class=cls,
                                   process_group=group, **kwargs)
