"""DeepSpeed config JSON and the equivalent `deepspeed` launcher command for ZeRO plans.

Key names checked against DeepSpeed 0.19.8: runtime/constants.py (train_batch_size,
train_micro_batch_size_per_gpu, gradient_accumulation_steps, bf16/fp16 {"enabled"}, gradient_clipping,
steps_per_print) and runtime/zero/config.py + offload_config.py (zero_optimization: stage,
reduce_bucket_size, allgather_bucket_size, overlap_comm, contiguous_gradients, zero_hpz_partition_size,
offload_optimizer/offload_param {device, pin_memory}), zero_allow_untested_optimizer and
zero_force_ds_cpu_optimizer (runtime/constants.py); launcher flags from launcher/runner.py.
This is the one plan -> DeepSpeed JSON builder: ds_config.json, the Accelerate DeepSpeed plugin and the
bundled trainer all start from `deepspeed_config`.
Precision fp8 keeps the bf16 section: DeepSpeed 0.19.8 has no FP8 training switch in its config
(runtime/constants.py; deepspeed.linear's FP8 weight quantization is for frozen LoRA bases, not FP8 GEMMs in
training). FP8 under DeepSpeed comes only from FP8 modules in the user's model, with the engine in bf16:
Transformer Engine's te.Linear under te.fp8_autocast, or the torchao Float8Linear that accelerate.yaml's AO
backend swaps in before DeepSpeed wraps the model; `FP8_NOTE` says so in the launch notes.
DeepSpeed runs ZeRO plans with pure data parallelism only (`runs_on_deepspeed`): ds_config has no Megatron-style
tensor parallelism (AutoTP is inference/HF-model sharding, not the plan's TP), and its pipeline engine
(runtime/pipe/engine.py) accepts ZeRO-1 only and is not the bundled path. ZeRO combined with TP/PP is the
distributed optimizer / FSDP2 of torchtitan and Megatron-LM (`hybrid_reason` says so); such plans get no JSON.
Context parallelism (Plan.cp > 1: ring attention) is not DeepSpeed's either: its sequence parallelism (Ulysses,
`sequence_parallel_size`) splits heads with all-to-alls, another algorithm; cp plans get no JSON.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from ..schemas.plan import DEEPSPEED_MAX_LIVE_PARAMETERS, DEEPSPEED_MAX_REUSE_DISTANCE, Plan
from ..schemas.workload import Workload

GRADIENT_CLIPPING = 1.0  # DeepSpeed's GRADIENT_CLIPPING_DEFAULT (runtime/constants.py)
#: Launch note of an fp8 workload with a ds_config.json (build.py adds it)
FP8_NOTE = ("ds_config.json keeps its bf16 section: DeepSpeed has no FP8 switch, FP8 under it comes only from FP8 "
            "modules in your model (Transformer Engine's te.Linear under te.fp8_autocast, or the torchao Float8Linear "
            "accelerate.yaml swaps in); the predicted figures assume FP8 Linears, so a bf16 model under this config "
            "(the bundled trainer's) runs slower than predicted")


def runs_on_deepspeed(plan: Plan) -> bool:
    """DeepSpeed runs this plan: a ZeRO stage with pure data parallelism (tp = pp = cp = 1, no expert parallelism:
    DeepSpeed-MoE sets ep_size in the model code, deepspeed.moe.layer.MoE, not in the JSON; DeepSpeed has no ring
    attention for cp)."""
    return plan.zero_stage > 0 and plan.tp == 1 and plan.pp == 1 and plan.ep == 1 and plan.cp == 1


def hybrid_reason(plan: Plan) -> Optional[str]:
    """Why a ZeRO plan combined with TP/PP gets no ds_config.json (None for every other plan)."""
    if not plan.zero_stage or runs_on_deepspeed(plan):
        return None
    if plan.cp > 1:
        return (f"ZeRO-{plan.zero_stage} with context parallelism cp={plan.cp} runs as torchtitan's FSDP2 over "
                f"dp*cp = {plan.gradient_ranks} ranks (torchtitan.toml context_parallel_degree) or Megatron-Core's "
                "distributed optimizer / FSDP2 (megatron_args.txt --context-parallel-size, where Megatron takes "
                "the plan); DeepSpeed has no ring attention (its Ulysses sequence parallelism splits heads, another "
                "plan)")
    if plan.tp == 1 and plan.pp == 1:
        return (f"ZeRO-{plan.zero_stage} with expert parallelism ep={plan.ep} runs as Megatron-Core's distributed "
                "optimizer or torchtitan's FSDP with expert_parallel_degree (megatron_args.txt, torchtitan.toml); "
                "DeepSpeed-MoE takes ep_size in the model code (deepspeed.moe.layer.MoE), not in ds_config")
    return (f"ZeRO-{plan.zero_stage} with tp={plan.tp}, pp={plan.pp} runs as FSDP2 or Megatron's distributed "
            "optimizer beside TP/PP (torchtitan.toml; megatron_args.txt where Megatron takes it); DeepSpeed's "
            "ds_config has no Megatron-style tensor parallelism and its pipeline engine takes ZeRO-1 only")


def deepspeed_config(plan: Plan, workload: Workload, *, steps_per_print: int = 10,
                     gradient_clipping: float = GRADIENT_CLIPPING) -> Optional[dict[str, Any]]:
    """The DeepSpeed JSON for a ZeRO plan with pure data parallelism (None otherwise: `runs_on_deepspeed`).

    Batch arithmetic (DeepSpeed's own check): train_batch_size = train_micro_batch_size_per_gpu ×
    gradient_accumulation_steps × data-parallel size.
    """
    if not runs_on_deepspeed(plan):
        return None
    zero: dict[str, Any] = {
        "stage": plan.zero_stage,
        "reduce_bucket_size": plan.zero_reduce_bucket_size,
        "overlap_comm": plan.zero_overlap_comm,
        "contiguous_gradients": True,
    }
    # stages 1/2 all-gather updated partitions in allgather_bucket_size chunks; stage 3 prefetches
    # parameters in stage3_prefetch_bucket_size chunks (DeepSpeed runtime/zero/config.py)
    zero["stage3_prefetch_bucket_size" if plan.zero_stage == 3 else "allgather_bucket_size"] = \
        plan.zero_allgather_bucket_size
    if plan.zero_hpz_partition_size > 1:
        zero["zero_hpz_partition_size"] = plan.zero_hpz_partition_size
    if plan.zero_stage == 3:  # written only where the plan differs from DeepSpeed's own defaults (1e9 each)
        for key, value, default in (
                ("stage3_max_live_parameters", plan.zero_max_live_parameters, DEEPSPEED_MAX_LIVE_PARAMETERS),
                ("stage3_max_reuse_distance", plan.zero_max_reuse_distance, DEEPSPEED_MAX_REUSE_DISTANCE)):
            if value != default:
                zero[key] = value
    if plan.zero_offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if plan.offloads_params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg: dict[str, Any] = {
        "train_batch_size": plan.micro_batch_size * plan.num_micro_batches * plan.dp,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.num_micro_batches,
        "gradient_clipping": gradient_clipping,
        "steps_per_print": steps_per_print,
        "zero_optimization": zero,
    }
    if plan.offload_activations:
        # DeepSpeed's activation checkpointing keeps each checkpoint in host RAM (side-stream copies since PR #8282):
        # it acts where the model checkpoints through deepspeed.checkpointing.checkpoint, configured from this JSON
        # (the bundled trainer; Megatron-DeepSpeed with --deepspeed-activation-checkpointing). Unpartitioned: with
        # partition_activations DeepSpeed copies the partitions blocking
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": True,
                                           "contiguous_memory_optimization": False,
                                           "synchronize_checkpoint_boundary": False}
    precision = workload.training.precision
    if precision in ("bf16", "fp8"):  # fp8: the engine stays bf16 (DeepSpeed has no FP8 setting; module docstring)
        cfg["bf16"] = {"enabled": True}
    elif precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    if plan.zero_offload:
        # A client (torch) optimizer with ZeRO-Offload: DeepSpeed 0.19 raises "You are using ZeRO-Offload
        # with a client provided optimizer" unless zero_force_ds_cpu_optimizer is false
        # (runtime/engine.py, _configure_zero_optimizer); untested optimizers need the second flag.
        cfg["zero_allow_untested_optimizer"] = True
        cfg["zero_force_ds_cpu_optimizer"] = False
    return cfg


def hostfile_text(hosts: Sequence[tuple[str, int]]) -> str:
    """DeepSpeed hostfile: one 'host slots=N' line per node."""
    return "".join(f"{host} slots={slots}\n" for host, slots in hosts)


def deepspeed_command(hosts: Sequence[tuple[str, int]], master_addr: str, port: int, trainer_args: Sequence[str],
                      *, module: str = "gpuadvisor.trainers", hostfile: str = "hostfile") -> list[str]:
    """The `deepspeed` launcher line equivalent to the torchrun commands (run once, on the first node)."""
    argv = ["deepspeed"]
    if len(hosts) > 1:
        argv += ["--hostfile", hostfile, "--num_nodes", str(len(hosts)), "--master_addr", master_addr]
    argv += ["--num_gpus", str(hosts[0][1]), "--master_port", str(port), "--no_local_rank", "--module", module]
    return argv + list(trainer_args)
