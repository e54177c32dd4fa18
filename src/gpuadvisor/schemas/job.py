"""The trainer's input file: `python -m gpuadvisor.trainers --plan job.json --steps N --out DIR`."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from ._base import Frozen
from .plan import Plan
from .workload import Workload


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
