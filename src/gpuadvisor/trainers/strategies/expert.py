"""Expert parallelism (ep > 1) with data parallelism: DDP, ZeRO-1 (distributed optimizer) and ZeRO-2/3 (FSDP2).

Every rank builds the whole seeded model, keeps its block of routed experts (`experts.shard_experts`) and runs
the MoE layers with all-to-all dispatch/combine over the ep group (`experts.py`: GShard/Switch dispatch and
combine, Megatron-Core's "alltoall" token dispatcher, DeepSpeed-MoE's expert + data parallelism). Dense,
router and shared-expert parameters are replicated over all dp ranks; expert parameters over the edp group
(the dp/ep ranks holding the same experts). How each ZeRO stage treats the two kinds:

| zero_stage | dense parameters (all dp ranks) | routed-expert parameters (edp group) |
|---|---|---|
| 0 | DDP (gradients averaged, `ddp_bucket_mb`) | ignored by DDP; gradients summed over edp in one flat all-reduce after the last micro-batch and divided by dp (`experts.reduce_expert_grads`) |
| 1 | the same + `ZeroRedundancyOptimizer` over all ranks | the same + `ZeroRedundancyOptimizer` over edp (plain optimizer when edp = 1) |
| 2 / 3 | FSDP2 `fully_shard` per block and root over all ranks (`reshard_after_forward` = stage 3) | each local expert its own `fully_shard` over the edp sub-mesh, gradient divide factor dp |

ZeRO-1 is Megatron-Core's distributed optimizer with EP (expert parameters in their own buffers, sharded over
the expert-data-parallel group); ZeRO-2/3 is torchtitan's EP layout (experts `fully_shard`ed over the
"dp_mod_ep" mesh with `set_gradient_divide_factor` equal to the dense one). DeepSpeed is not used with ep > 1:
its MoE path needs DeepSpeed's own MoE layer class, so a `--ds-config` is refused as for ZeRO next to TP/PP.
"""
from __future__ import annotations

from typing import Any, cast

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ..blocks import MoE
from ..experts import ExpertParallel, expert_parallel, reduce_expert_grads, shard_experts
from ..model import GPT
from ..parallel import Context
from .base import AccumulatingStrategy, make_optimizer
from .ddp import wrap_ddp


class Optimizers:
    """Two optimizers stepped as one (dense and expert parameters sharded over different groups)."""

    def __init__(self, *optimizers: Any):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list:
        return [g for o in self.optimizers for g in o.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()


def _expert_model(strategy: AccumulatingStrategy, ctx: Context) -> tuple[GPT, ExpertParallel, set[str]]:
    """The seeded model with this rank's experts only, on the device; the groups; the expert parameter names."""
    plan = ctx.plan
    if strategy.scaler is not None:
        raise ValueError("fp16 loss scaling is not supported with expert parallelism; use bf16")
    ep = expert_parallel(ctx)
    if ep is None:
        raise ValueError(f"plan {plan.to_string()} has ep = 1: no expert parallelism to run")
    model = cast(GPT, strategy.build_model())
    if not any(isinstance(m, MoE) for m in model.modules()):
        raise ValueError(f"ep={plan.ep} needs a mixture-of-experts model; '{ctx.job.workload.model.name}' has no "
                         "routed experts: use ep=1")
    names = set(shard_experts(model, ep))
    return model.to(ctx.device), ep, names


class ExpertDataParallel(AccumulatingStrategy):
    """ep > 1 with DDP (zero_stage 0) or a distributed optimizer (zero_stage 1) over the dense and expert groups."""

    name = "ep"

    model: DDP

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        plan = ctx.plan
        if plan.zero_stage not in (0, 1):
            raise ValueError(f"DDP with expert parallelism runs zero_stage 0 or 1, not {plan.to_string()}")
        model, self.ep, names = _expert_model(self, ctx)
        DDP._set_params_and_buffers_to_ignore_for_model(model, sorted(names))  # experts differ per ep rank
        params = dict(model.named_parameters())
        self.expert_params = [p for n, p in params.items() if n in names]
        dense = [p for n, p in params.items() if n not in names]
        self.model = wrap_ddp(model, ctx)
        self.optimizer: Any
        if plan.zero_stage == 1:  # Megatron's distributed optimizer: dense states over dp, expert states over edp
            from .zero1 import zero1_optimizer

            experts = (zero1_optimizer(self.expert_params, ctx, self.ep.edp_group) if self.ep.edp_size > 1
                       else make_optimizer(self.expert_params, ctx))
            self.optimizer = Optimizers(zero1_optimizer(dense, ctx, dist.group.WORLD), experts)
        else:
            self.optimizer = make_optimizer(model.parameters(), ctx)

    def sync_context(self, last: bool):
        return super().sync_context(last) if last else self.model.no_sync()

    def reduce_gradients(self) -> None:
        reduce_expert_grads(self.expert_params, self.ep)


class FsdpExpertParallel(AccumulatingStrategy):
    """ep > 1 with ZeRO-2/3 (FSDP2): dense over all ranks, each local expert over the edp sub-mesh."""

    name = "fsdp-ep"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        plan = ctx.plan
        if plan.zero_stage not in (2, 3):
            raise ValueError(f"FSDP2 with expert parallelism runs zero_stage 2 or 3, not {plan.to_string()}")
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        model, self.ep, _ = _expert_model(self, ctx)
        kwargs: dict[str, Any] = {"reshard_after_forward": plan.zero_stage == 3}
        if ctx.amp_dtype == torch.bfloat16:
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        dp_mesh = init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("dp",))
        edp_mesh = self.ep.mesh["edp"]
        for block in model.blocks:
            if isinstance(block.mlp, MoE):
                for expert in block.mlp.experts:
                    sharded = fully_shard(expert, mesh=edp_mesh, **kwargs)
                    # mean over all dp replicas, not over the edp group (see experts.py)
                    sharded.set_gradient_divide_factor(float(plan.dp))
                    if self.ep.edp_size > 1:  # SUM then divide: gloo has no PREMUL_SUM
                        sharded.set_force_sum_reduction_for_comms(True)
            fully_shard(block, mesh=dp_mesh, **kwargs)
        self.model = cast(torch.nn.Module, fully_shard(model, mesh=dp_mesh, **kwargs))
        self.optimizer = make_optimizer(self.model.parameters(), ctx)


def build(ctx: Context) -> AccumulatingStrategy:
    """The EP strategy for this plan's ZeRO stage."""
    if ctx.plan.zero_stage in (2, 3):
        return FsdpExpertParallel(ctx)
    return ExpertDataParallel(ctx)
