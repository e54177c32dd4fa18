"""Which plans the bundled trainers can run (torch-free, so the trial planner can ask before launching).

They run: single device; DDP; TP and TP x DP; PP and PP x DP (GPipe, 1F1B, interleaved); DeepSpeed ZeRO 1-3
(with offload and hpZ) for pure data parallelism; ZeRO-1 with TP or PP (a distributed optimizer over "dp");
ZeRO-2/3 with TP (FSDP2 x TP); ZeRO-3 with PP (FSDP2 per stage). `Plan` itself refuses ZeRO-2 with PP and
offload/hpZ with TP or PP. Not run: TP combined with PP (with or without ZeRO), and fp16 loss scaling with
pipelining or with ZeRO next to TP/PP.
"""
from __future__ import annotations

from typing import Optional

from ..schemas import Plan, Workload


def unsupported_reason(plan: Plan, workload: Workload, *, cuda: bool) -> Optional[str]:
    """Why the bundled trainers cannot run `plan` (None if they can). `cuda`: the ranks have GPUs."""
    fp16 = workload.training.precision == "fp16" and cuda  # CPU runs fp32 whatever is asked
    if plan.tp > 1 and plan.pp > 1:
        return "the bundled trainers do not combine tp > 1 with pp > 1; use TP x DP or PP x DP (with or without ZeRO)"
    if plan.pp > 1 and fp16:
        return "the bundled pipeline trainer does not support fp16 (use bf16)"
    if plan.zero_stage and plan.tp > 1 and fp16:
        return "the bundled trainers do not run fp16 loss scaling with ZeRO x TP (use bf16)"
    if plan.comm_hook == "bf16" and not cuda:
        return "the bf16 compression hook needs CUDA/NCCL; gloo refuses it"
    return None
