"""Which plans the bundled trainers can run (torch-free, so the trial planner can ask before launching)."""
from __future__ import annotations

from typing import Optional

from ..schemas import Plan, Workload


def unsupported_reason(plan: Plan, workload: Workload, *, cuda: bool) -> Optional[str]:
    """Why the bundled trainers cannot run `plan` (None if they can). `cuda`: the ranks have GPUs."""
    if plan.zero_stage and (plan.tp > 1 or plan.pp > 1):
        return "the bundled trainers run ZeRO with pure data parallelism only (tp = pp = 1)"
    if plan.tp > 1 and plan.pp > 1:
        return "the bundled trainers do not combine tp > 1 with pp > 1; use TP x DP or PP x DP"
    if plan.pp > 1 and workload.training.precision == "fp16" and cuda:
        return "the bundled pipeline trainer does not support fp16 (use bf16)"
    if plan.comm_hook == "bf16" and not cuda:
        return "the bf16 compression hook needs CUDA/NCCL; gloo refuses it"
    return None
