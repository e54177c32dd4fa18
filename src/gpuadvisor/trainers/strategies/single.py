"""One device, no communication: the baseline every other strategy is compared with (Appendix F)."""
from __future__ import annotations

from ..parallel import Context
from .base import AccumulatingStrategy, make_optimizer


class Single(AccumulatingStrategy):
    """The whole model on one device; num_micro_batches > 1 is plain gradient accumulation."""

    name = "single"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        if ctx.world_size != 1:
            raise ValueError(f"the single-device strategy runs on 1 rank, not {ctx.world_size}")
        self.model = self.build_model().to(ctx.device)
        self.optimizer = make_optimizer(self.model.parameters(), ctx)
