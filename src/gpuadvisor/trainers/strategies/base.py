"""What every strategy shares: the model, data share, loss, optimizer and the accumulation loop.

Contract: `Strategy.step(step)` runs one optimizer step on global batch `step` and returns this
rank's loss (the mean cross-entropy over the sequences its replica processed) or None when the
rank does not own a loss (pipeline stages other than the last, tensor-parallel ranks other than
tp rank 0). The global loss of a step is the mean of the owned losses: every replica processes an
equal share of the global batch, so that mean is the mean cross-entropy over the global batch.
Gradients follow the same rule: micro-batch losses are scaled by 1/m and data-parallel
gradients are averaged, so every strategy takes the same optimizer step. `reduce_gradients` runs after the
last micro-batch for reductions no wrapper does: expert parallelism's expert gradients (summed over the
expert-data-parallel group and divided by dp, `experts.py`), a no-op for every other strategy.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data import image_batch, micro_batches, replica_slice, token_batch
from ..model import build_gpt
from ..parallel import Context
from ..resnet import build_resnet18


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (fp32 logits) over every token (GPT) or image (ResNet) of the batch."""
    return F.cross_entropy(output.float().flatten(0, -2), target.flatten())


def optimizer_spec(ctx: Context) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """(class, keyword arguments) of the workload's optimizer at job.lr: Adam, AdamW (weight decay 0.01)
    or SGD (momentum 0.9)."""
    kind, lr = ctx.job.workload.training.optimizer, ctx.job.lr
    if kind == "adam":
        return torch.optim.Adam, {"lr": lr}
    if kind == "adamw":
        return torch.optim.AdamW, {"lr": lr, "weight_decay": 0.01}
    return torch.optim.SGD, {"lr": lr, "momentum": 0.9}


def make_optimizer(params, ctx: Context) -> torch.optim.Optimizer:
    """The workload's optimizer (`optimizer_spec`) over the trainable `params`."""
    cls, kwargs = optimizer_spec(ctx)
    return cls([p for p in params if p.requires_grad], **kwargs)


class Strategy:
    """Base: builds the seeded model and serves this rank's share of the deterministic global batch."""

    name = "base"

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.plan = ctx.plan
        job = ctx.job
        self.is_gpt = job.trainer_model == "gpt"
        if not self.is_gpt and (self.plan.tp > 1 or self.plan.pp > 1):
            raise ValueError("the ResNet-18 trainer supports single, DDP and ZeRO plans only (tp = pp = 1)")
        if not self.is_gpt and job.workload.finetune.adapters:
            raise ValueError("LoRA/QLoRA trials train the GPT trainer's model, not ResNet-18")
        self.seq_len = job.workload.training.seq_len if self.is_gpt else 1
        self.global_batch = self.plan.global_batch()
        if self.global_batch != job.workload.training.global_batch:
            raise ValueError(
                f"plan batch dp*mb*m = {self.global_batch} != workload global batch "
                f"{job.workload.training.global_batch}; make them equal"
            )
        self.owns_loss = True
        # the loss of the model's output; tensor parallelism swaps in the vocabulary-parallel one (vocab.py)
        self.loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = loss_fn
        self.scaler = None
        if ctx.amp_dtype == torch.float16:
            self.scaler = torch.amp.GradScaler("cuda")

    # --- model and data -------------------------------------------------------------------------
    def build_model(self, tie: Optional[bool] = None) -> nn.Module:
        """The full model from job.seed on CPU (identical on every rank), not yet moved or sharded; with LoRA or
        QLoRA (`workload.finetune`) the base is frozen and carries seeded adapters (`lora.apply_lora`)."""
        job = self.ctx.job
        if not self.is_gpt:
            return build_resnet18(job.seed)
        model = build_gpt(job.workload.model, self.seq_len, job.seed, recompute=self.plan.recompute, tie=tie,
                          recompute_interval=self.plan.recompute_interval,
                          recompute_attention=self.plan.recompute_attention,
                          recompute_ops=self.plan.recompute_ops)
        if job.workload.finetune.adapters:
            from ..lora import apply_lora

            model = apply_lora(model, job.workload.finetune, job.seed, compute_dtype=self.ctx.amp_dtype or torch.float32)
        return model

    def global_batch_at(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        job = self.ctx.job
        if self.is_gpt:
            return token_batch(job.seed, step, self.global_batch, self.seq_len, job.workload.model.vocab_size)
        return image_batch(job.seed, step, self.global_batch)

    def replica_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's replica slice of global batch `step`, on the device."""
        x, y = self.global_batch_at(step)
        dp, d = self.plan.dp, self.ctx.coords["dp"]
        dev = self.ctx.device
        return replica_slice(x, d, dp).to(dev, non_blocking=True), replica_slice(y, d, dp).to(dev, non_blocking=True)

    # --- token accounting (Appendix F) ----------------------------------------------------------
    def tokens_seen_per_step(self) -> int:
        """Tokens (images for ResNet) this rank's replica processes per optimizer step."""
        return self.plan.per_replica_batch() * self.seq_len

    def tokens_counted_per_step(self) -> int:
        """Tokens this rank counts toward throughput; the default (DP, ZeRO, TP) counts its replica's tokens."""
        return self.tokens_seen_per_step()

    # --- training -------------------------------------------------------------------------------
    def autocast(self):
        if self.ctx.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device.type, dtype=self.ctx.amp_dtype)

    def step(self, step: int) -> Optional[float]:
        raise NotImplementedError


class AccumulatingStrategy(Strategy):
    """Single device, DDP and TP: m micro-batches of mb sequences, one optimizer step.

    Subclasses set `self.model` and `self.optimizer`; `sync_context(last)` returns DDP's no_sync
    for every micro-batch but the last, so gradients are all-reduced once per step.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer

    def sync_context(self, last: bool):
        return contextlib.nullcontext()

    def reduce_gradients(self) -> None:
        """Gradient reduction the wrappers do not do, after the last micro-batch (expert parallelism's expert
        gradients); nothing by default."""

    def step(self, step: int) -> Optional[float]:
        x, y = self.replica_batch(step)
        m = self.plan.num_micro_batches
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=self.ctx.device)
        for k, (xm, ym) in enumerate(zip(micro_batches(x, m), micro_batches(y, m))):
            with self.sync_context(last=k == m - 1):
                with self.autocast():
                    loss = self.loss_fn(self.model(xm), ym)
                scaled = loss / m  # mean over the replica's batch
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            total += loss.detach()
        self.reduce_gradients()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return float(total) / m if self.owns_loss else None
