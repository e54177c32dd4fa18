"""Launch stage: render a plan as per-node torchrun commands, DeepSpeed JSON, NCCL/gloo env and notes.

Entry points: `build_launch(plan, cluster, workload, estimate)`, `emit(launch, job, out_dir)`,
`render_launch(launch)`, `make_job(plan, workload)`. No torch/deepspeed import (fast `suggest` path).
"""
from .build import build_launch, launch_steps, make_job, trainer_model_for
from .deepspeed import deepspeed_config
from .emit import emit
from .render import render_launch

__all__ = ["build_launch", "deepspeed_config", "emit", "launch_steps", "make_job", "render_launch",
           "trainer_model_for"]
