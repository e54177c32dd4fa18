"""ZeRO stages 1/2/3 and ZeRO-3 with CPU offload via DeepSpeed (Rajbhandari et al. 2020; Ren et al. 2021).

Stage 1 shards the optimizer states over the data-parallel ranks, stage 2 also the gradients
(reduce-scatter of each `reduce_bucket_size` bucket on every micro-step), stage 3 also the
parameters (all-gathered for forward and backward; `allgather_bucket_size` becomes the stage-3
prefetch bucket). Offload moves the optimizer states (and at stage 3 the parameters) to host RAM.
ZeRO++ hpZ (`zero_hpz_partition_size`) keeps a secondary parameter shard per node group.
Batches follow the paper's Appendix H: micro-batch mb per rank, gradient_accumulation_steps m.
With activation_checkpointing.cpu_checkpointing in the JSON (Plan.offload_activations) the recomputing blocks
checkpoint through deepspeed.checkpointing, which keeps their inputs in host RAM.

The optimizer is DeepSpeed's torch-backed Adam/AdamW (`torch_adam`: the same torch.optim
classes the other strategies use), so the losses match them; SGD is passed as a client optimizer.
On CPU DeepSpeed needs DS_ACCELERATOR=cpu and JIT-builds a C++ comm op on first use: call
`ensure_deepspeed_ops()` once in the parent before launching ranks (two ranks building it at
once can abort).
"""
from __future__ import annotations

import os
from typing import Optional

import torch

from ..parallel import Context
from .base import Strategy, loss_fn, make_optimizer


def ensure_deepspeed_ops() -> None:
    """Build DeepSpeed's JIT ops (the CPU shared-memory comm op) once, in this process."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None and deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        builder.load(verbose=False)


def deepspeed_config(ctx: Context) -> dict:
    """The DeepSpeed config of this run: the job's (--ds-config) or launch's JSON for the plan, plus what
    the bundled trainer needs (its optimizer section, precision by device, no clipping unless the file sets it).

    `gpuadvisor.launch.deepspeed.deepspeed_config` is the one place the plan -> JSON mapping lives; the
    emitted ds_config.json is what this function starts from.
    """
    from ...launch.deepspeed import deepspeed_config as plan_config

    base = ctx.job.deepspeed_config
    cfg = dict(base) if base is not None else plan_config(ctx.plan, ctx.job.workload, gradient_clipping=0.0)
    if cfg is None:
        raise ValueError(f"plan {ctx.plan.to_string()} is not a ZeRO plan; DeepSpeed runs ZeRO stages 1-3 only")
    cfg.update({
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "bf16": {"enabled": ctx.amp_dtype == torch.bfloat16},  # fp32 on CPU whatever the workload asks
        "fp16": {"enabled": ctx.amp_dtype == torch.float16},
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
    })
    if not ctx.is_cuda:  # pinned host memory needs CUDA
        zero = cfg["zero_optimization"] = dict(cfg.get("zero_optimization", {}))
        for key in ("offload_optimizer", "offload_param"):
            if key in zero:
                zero[key] = {**zero[key], "pin_memory": False}
    kind = ctx.job.workload.training.optimizer
    if kind in ("adam", "adamw") and "optimizer" not in cfg:
        cfg["optimizer"] = {"type": "AdamW" if kind == "adamw" else "Adam", "params": {
            "lr": ctx.job.lr, "betas": [0.9, 0.999], "eps": 1e-8,
            "weight_decay": 0.01 if kind == "adamw" else 0.0,
            "torch_adam": True, "adam_w_mode": kind == "adamw",
        }}
    return cfg


class Zero(Strategy):
    """deepspeed.initialize over all ranks; engine.backward/step per micro-batch (step applies at the boundary)."""

    name = "zero"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        if ctx.plan.dp != ctx.world_size:
            raise ValueError(f"ZeRO needs dp == world size, got dp={ctx.plan.dp}, world={ctx.world_size}")
        if not ctx.is_cuda:
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed

        deepspeed.init_distributed(dist_backend=ctx.backend)
        model = self.build_model()
        cfg = deepspeed_config(ctx)
        if (cfg.get("activation_checkpointing") or {}).get("cpu_checkpointing"):
            # checkpoints in host RAM (Plan.offload_activations): the recomputing blocks checkpoint through
            # DeepSpeed's function, configured from this JSON as Megatron-DeepSpeed configures it. On CPU the device
            # is host RAM: DeepSpeed's copy to 'cpu' is the tensor itself, whose storage its blocking path then
            # empties (checkpointing.py get_cpu_activations_for_backward), so a CPU run keeps the checkpoint in place
            deepspeed.checkpointing.configure(None, deepspeed_config=cfg, checkpoint_in_cpu=bool(ctx.is_cuda))
            for block in model.modules():
                if getattr(block, "recompute", False) and hasattr(block, "checkpoint_fn"):
                    block.checkpoint_fn = deepspeed.checkpointing.checkpoint
        trainable = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters only
        client_opt = None if "optimizer" in cfg else make_optimizer(trainable, ctx)
        self.engine, *_ = deepspeed.initialize(model=model, model_parameters=trainable,
                                               optimizer=client_opt, config=cfg)

    def step(self, step: int) -> Optional[float]:
        x, y = self.replica_batch(step)
        m = self.plan.num_micro_batches
        total = 0.0
        for xm, ym in zip(x.chunk(m), y.chunk(m)):
            loss = loss_fn(self.engine(xm), ym)
            self.engine.backward(loss)  # DeepSpeed divides by gradient_accumulation_steps
            self.engine.step()
            total += float(loss.detach())
        return total / m
