"""The trainer's input file: `python -m gpuadvisor.trainers --plan job.json --steps N --out DIR`."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from ._base import Frozen
from .plan import Plan, ZeroImpl
from .workload import Workload


class Predicted(Frozen):
    """What the advisor predicted for this job, printed beside the measured figures at the end of a run."""

    tokens_per_s: float = Field(description="Whole-job tokens (samples for generic models) per second")
    step_time_s: float
    peak_memory_bytes: int = Field(description="Peak memory of the most loaded device")
    network_bytes_per_step: float = Field(0.0, description="Bytes through the busiest node NIC per step")
    mfu: Optional[float] = Field(None, description="Model FLOPs utilisation (PaLM appendix B), 0..1")


class TrainerJob(Frozen):
    """Plan + workload + run length: everything a bundled trainer needs."""

    plan: Plan
    workload: Workload
    trainer_model: Literal["gpt", "resnet18"] = Field("gpt", description="Which bundled model to build")
    steps: int = Field(20, ge=1, description="Timed optimizer steps")
    warmup: int = Field(3, ge=0, description="Untimed optimizer steps before the window")
    seed: int = 1234
    device: Literal["auto", "cuda", "cpu"] = "auto"
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    init_timeout_s: float = Field(120.0, gt=0, description="init_process_group timeout for trials")
    lr: float = 1e-4
    deepspeed_config: Optional[dict[str, Any]] = Field(
        None, description="DeepSpeed JSON to start from (--ds-config); None = built from the plan")
    zero_impl: Optional[ZeroImpl] = Field(
        None, description="What runs pure data-parallel ZeRO-2/3: DeepSpeed or PyTorch FSDP2; None = the "
                          "GPUADVISOR_ZERO_IMPL environment variable, else DeepSpeed. A DeepSpeed JSON (--ds-config) "
                          "always runs DeepSpeed")
    log_every: int = Field(10, ge=0, description="Print a progress line every N steps on rank 0 (0 = never)")
    predicted: Optional[Predicted] = Field(None, description="The advisor's prediction, for the final summary")
    model_flops_per_token: Optional[float] = Field(None, gt=0, description="Training FLOPs per token, no recompute")
    peak_flops_per_device: Optional[float] = Field(None, gt=0, description="Dense peak FLOP/s of one device")
