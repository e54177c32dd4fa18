"""Which plans the bundled trainers can run (torch-free, so the trial planner can ask before launching).

They run: single device; DDP; TP and TP x DP; PP and PP x DP (GPipe, 1F1B, interleaved); TP x PP and TP x PP x DP
(TP inside each stage); DeepSpeed ZeRO 1-3 (with offload and hpZ) for pure data parallelism; ZeRO-1 with TP
and/or PP (a distributed optimizer over "dp"); ZeRO-2/3 with TP (FSDP2 x TP); ZeRO-3 with PP, with or without TP
(FSDP2 per stage). `Plan` itself refuses ZeRO-2 with PP and offload/hpZ with TP or PP. Not run: fp16 loss scaling
with pipelining or with ZeRO next to TP/PP.

The model is the spec's: GPT-2 or Llama-family blocks, dense or MoE (`blocks.py`), under every strategy above.
TP keeps whole heads per rank, so tp must divide n_heads and n_kv_heads (grouped-query attention) and the
MLP widths (d_ff, expert_d_ff, shared_expert_d_ff), and with sequence parallel the sequence length.
LoRA/QLoRA (`lora.py`) run data parallel only: single device, DDP, DeepSpeed ZeRO-1/2/3 (no offload/hpZ) or,
with GPUADVISOR_ZERO_IMPL=fsdp, FSDP2 ZeRO-2/3. QLoRA needs bitsandbytes' NF4 kernels (on CPU: bitsandbytes
>= 0.50, the version its CPU 4-bit path was tested with here) and runs single device or DDP.
Precision: fp8 jobs run (no refusal) without FP8 kernels: bf16 autocast on CUDA, fp32 on CPU as for every
precision, and the metrics' precision says so ('bf16 (fp8 requested: the bundled trainers have no FP8 kernels)',
parallel.py); confirm and study refuse fp8 up front (trials/hostcheck.refuse_fp8) rather than set those runs
against FP8 predictions.
Expert parallelism (ep > 1, `experts.py`) runs beside data parallelism only (tp = pp = 1, ep divides dp and the
routed experts) with DDP, ZeRO-1 or ZeRO-2/3 (torch-native, not DeepSpeed), full training, fp32 or bf16; not
with tp or pp > 1, LoRA/QLoRA, DDP comm hooks, hpZ or fp16 loss scaling (`ep_reason`, one line each).
"""
from __future__ import annotations

import importlib.util
from typing import Optional

from ..schemas import Plan, Workload
from ..schemas.workload import ModelSpec

#: bitsandbytes versions whose 4-bit NF4 Linear ran forward and backward on CPU in this project's tests.
BNB_CPU_MIN = (0, 50)


def tp_shape_reason(plan: Plan, spec: ModelSpec, seq_len: int) -> Optional[str]:
    """Why `spec` cannot be cut `plan.tp` ways (None if it can): whole heads and MLP columns per rank, and a share
    of the vocabulary."""
    tp = plan.tp
    if tp == 1 or spec.kind != "transformer":
        return None
    widths = {"n_heads": spec.n_heads, "n_kv_heads": spec.n_kv_heads or spec.n_heads}
    if spec.n_experts:
        widths["expert_d_ff"] = spec.expert_d_ff or spec.d_ff
        if spec.shared_expert_d_ff:
            widths["shared_expert_d_ff"] = spec.shared_expert_d_ff
    else:
        widths["d_ff"] = spec.d_ff
    bad = [f"{k}={v}" for k, v in widths.items() if v % tp]
    if bad:
        return f"tp={tp} must divide {', '.join(bad)} (each rank keeps whole heads and MLP columns)"
    if plan.sequence_parallel and seq_len % tp:
        return f"sequence parallel needs seq_len {seq_len} divisible by tp={tp}"
    if spec.vocab_size < tp:  # trainers/vocab.py gives each rank at least one vocabulary row
        return f"tp={tp} exceeds vocab_size={spec.vocab_size} (each rank keeps a share of the vocabulary); lower tp"
    return None


def bitsandbytes_version() -> Optional[tuple[int, ...]]:
    """The installed bitsandbytes version as integers, or None when it is absent (no import: torch-free)."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return None
    from importlib.metadata import version

    parts = []
    for piece in version("bitsandbytes").split(".")[:3]:
        digits = "".join(c for c in piece if c.isdecimal())
        parts.append(int(digits or 0))
    return tuple(parts)


def finetune_reason(plan: Plan, workload: Workload, *, cuda: bool) -> Optional[str]:
    """Why a LoRA/QLoRA trial of `plan` cannot run (None if it can, or for full fine-tuning)."""
    ft = workload.finetune
    if not ft.adapters:
        return None
    if plan.tp > 1 or plan.pp > 1:
        return "LoRA/QLoRA trials run data parallel only: DDP, ZeRO or FSDP"
    if plan.zero_offload or plan.zero_hpz_partition_size > 1:
        return "LoRA/QLoRA trials do not run ZeRO offload or hpZ; use plain ZeRO-1/2/3"
    if plan.offload_activations:
        # DeepSpeed's checkpoint is reentrant: behind a frozen embedding no block input requires a gradient, so
        # the adapters inside would get none
        return ("LoRA/QLoRA trials do not keep activation checkpoints in host RAM (DeepSpeed's reentrant checkpoint "
                "gives adapters behind a frozen embedding no gradient); drop offload_activations")
    if ft.method == "qlora":
        bnb = bitsandbytes_version()
        if bnb is None:
            return "QLoRA trials need bitsandbytes (pip install 'gpuadvisor[qlora]'); this host has none"
        if not cuda and bnb[:2] < BNB_CPU_MIN:
            return (f"QLoRA trials need bitsandbytes 4-bit kernels on CUDA, or bitsandbytes >= "
                    f"{'.'.join(map(str, BNB_CPU_MIN))} on CPU; this host has {'.'.join(map(str, bnb))} and no CUDA")
        if plan.zero_stage:
            return "QLoRA trials run single device or DDP (the bundled ZeRO/FSDP paths do not shard 4-bit weights)"
    return None


def ep_reason(plan: Plan, workload: Workload, *, cuda: bool) -> Optional[str]:
    """Why the bundled trainers cannot run `plan`'s expert parallelism (None if they can, or for ep = 1).

    They run ep > 1 beside data parallelism only (tp = pp = 1, ep divides dp; `strategies/expert.py`) with DDP,
    ZeRO-1 (distributed optimizer) or ZeRO-2/3 (FSDP2), in fp32 or bf16, full training.
    """
    ep = plan.ep
    if ep == 1:
        return None
    m = workload.model
    if m.kind != "transformer" or not m.n_experts:
        return f"ep={ep} needs a mixture-of-experts model; '{m.name}' has no routed experts: use ep=1"
    if m.n_experts % ep:
        return f"ep={ep} does not divide the {m.n_experts} routed experts of '{m.name}'; use an ep that divides them"
    if plan.tp > 1 or plan.pp > 1:
        return (f"plan {plan.strategy} (ep={ep}, tp={plan.tp}, pp={plan.pp}): the bundled trainers run expert "
                f"parallelism beside data parallelism only; use tp=1 and pp=1 with ep dividing dp, or ep=1")
    if workload.finetune.adapters:
        return f"plan {plan.strategy}: LoRA/QLoRA trials do not run expert parallelism; use ep=1"
    if plan.comm_hook != "none":
        return (f"plan {plan.strategy}: the bundled trainers run no DDP comm hook with ep > 1 (expert gradients are "
                "reduced outside DDP); use comm_hook none or ep=1")
    if plan.zero_hpz_partition_size > 1:
        return (f"plan {plan.strategy}: the bundled trainers run ZeRO-3 with ep > 1 on FSDP2, which has no hpZ; "
                "use zero_hpz_partition_size=1 or ep=1")
    if cuda and workload.training.precision == "fp16":
        return f"plan {plan.strategy}: the bundled trainers do not run fp16 loss scaling with ep > 1 (use bf16)"
    return None


def unsupported_reason(plan: Plan, workload: Workload, *, cuda: bool) -> Optional[str]:
    """Why the bundled trainers cannot run `plan` (None if they can). `cuda`: the ranks have GPUs."""
    fp16 = workload.training.precision == "fp16" and cuda  # CPU runs fp32 whatever is asked
    if plan.cp > 1:
        return ("the bundled trainers do not run context parallelism (ring attention: cp > 1 needs torchtitan's "
                "context_parallel_degree or Megatron's --context-parallel-size: torchtitan.toml / megatron_args.txt); "
                "use cp=1 for a trial")
    if plan.tp_comm_overlap:
        return ("the bundled trainers do not overlap TP communication with GEMMs (tp_comm_overlap needs Megatron's "
                "--tp-comm-overlap or torchtitan's async TP: megatron_args.txt / torchtitan.toml); use "
                "tp_comm_overlap=false for a trial")
    if plan.ep_overlap:
        return ("the bundled trainers do not hide expert all-to-alls behind compute (ep_overlap needs Megatron-Core's "
                "--overlap-moe-expert-parallel-comm: megatron_args.txt); use ep_overlap=false for a trial")
    why = ep_reason(plan, workload, cuda=cuda)
    if why:
        return why
    if plan.pp > 1 and fp16:
        return "the bundled pipeline trainer does not support fp16 (use bf16)"
    if plan.zero_stage and plan.tp > 1 and fp16:
        return "the bundled trainers do not run fp16 loss scaling with ZeRO x TP (use bf16)"
    if plan.comm_hook == "bf16" and not cuda:
        return "the bf16 compression hook needs CUDA/NCCL; gloo refuses it"
    why = finetune_reason(plan, workload, cuda=cuda)
    if why:
        return why
    return tp_shape_reason(plan, workload.model, workload.training.seq_len)
