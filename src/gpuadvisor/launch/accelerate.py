"""HuggingFace Accelerate config (YAML) for a plan, plus the `accelerate launch` line.

Keys follow accelerate's ClusterConfig (accelerate/commands/config/config_args.py, 1.15.0) and the launch
arguments the config fills (accelerate/commands/launch.py: deepspeed_config -> deepspeed_config_file,
deepspeed_multinode_launcher, zero3_init_flag; fsdp_config -> fsdp_* with fsdp_version 2; parallelism_config
-> parallelism_config_{dp_replicate,dp_shard,tp,cp}_size). Mapping: ZeRO with pure data parallelism -> the
DeepSpeed plugin reading the emitted ds_config.json (one JSON builder); pure DP -> MULTI_GPU (DDP); ZeRO with TP
-> FSDP2 (sharding over dp) + parallelism_config tp, fsdp_reshard_after_forward true for ZeRO-3 and false for
ZeRO-1/2 (Accelerate has no distributed optimizer: ZeRO-1 is written as FSDP2 without resharding, which also
shards gradients, as in torchtitan). ZeRO with context parallelism (cp > 1) -> the same FSDP2 path with
parallelism_config_cp_size = cp (accelerate >= 1.10: ParallelismConfig cp_size, torch's context_parallel; FSDP
shards over its dp_shard_cp mesh, dp x cp ranks): the script runs each step inside
`accelerator.maybe_context_parallel(...)`, which has no effect without FSDP2 (accelerator.py).
Precision fp8 (`FP8_CONFIG`): `mixed_precision: fp8` with `fp8_config` backend AO, torchao's Float8Linear with
tensorwise dynamic scaling, the per-tensor current scaling the cost model prices (calibration.yaml `fp8`);
accelerate keeps bf16 autocast for the rest (its DeepSpeed plugin requires the ds_config's bf16 section,
utils/dataclasses.py DeepSpeedPlugin.set_mixed_precision; FSDP2 maps fp8 to bf16 parameters). fp8_config keys
are the `accelerate launch --fp8_*` arguments without the prefix (launch.py maps `fp8_config.x` to `fp8_x` and
exports ACCELERATE_FP8_X, which AORecipeKwargs reads): enable_fsdp_float8_all_gather false keeps bf16 weights in
FSDP2's all-gather as the prediction does (accelerate's default true halves those bytes), pad_inner_dim true
(accelerate's default: torch._scaled_mm needs dims divisible by 16). accelerate's torchao path leaves the model's
first and last Linear in bf16 (utils/ao.py `convert_model_to_fp8_ao`). accelerate's own checks of this backend
(benchmarks/fp8/torchao/ddp.py, distrib_deepspeed.py for ZeRO 1-3, fsdp.py) cover the three paths written here.
No file (`unsupported`) where Accelerate cannot represent the plan: pp > 1 (no training pipeline parallelism);
TP without ZeRO sharding, since accelerate 1.15's ParallelismConfig refuses TP beside pure replication
(dp_replicate > 1, dp_shard == 1), and 1.16, which accepts that config, wraps a tensor-parallel model in neither
DDP nor FSDP (Accelerator.prepare_model skips the DDP wrap when tp is enabled), so nothing would sync its gradients
across the replicas; its FSDP2 path needs dp_shard > 1 (parallelism_config.py _validate_accelerator), while
`accelerate launch` takes a parallelism config only with FSDP v2 (launch.py _validate_launch_command); ZeRO with
TP and dp = cp = 1 (nothing for FSDP to shard over); cp without ZeRO (the same refusal as TP beside pure
replication, in 1.16 too; DeepSpeed's plugin has no ring attention).
"""
from __future__ import annotations

import shlex
from typing import Any, Optional

from ..schemas.launch import LaunchConfig
from ..schemas.plan import Plan

FILE = "accelerate.yaml"
#: fp8_config for precision fp8 (the module docstring says where each key comes from and why these values)
FP8_CONFIG = {"backend": "AO", "enable_fsdp_float8_all_gather": False, "pad_inner_dim": True}
MIXED_PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}  # anything else (fp32): 'no'


def unsupported(launch: LaunchConfig) -> Optional[str]:
    """Why Accelerate cannot run this plan (None when it can)."""
    return plan_unsupported(launch.plan)


def plan_unsupported(p: Plan) -> Optional[str]:
    """`unsupported` of a plan (what build.py asks before the LaunchConfig exists)."""
    if p.pp > 1:
        return "Accelerate has no training pipeline parallelism (pp > 1): use the torchtitan or Megatron-LM files"
    if p.tp > 1 and not p.zero_stage:
        return ("Accelerate runs TP only beside FSDP2 sharding (1.15's ParallelismConfig refuses TP with pure data "
                "parallelism; 1.16 accepts it but wraps a TP model in no DDP, so its replicas would not sync "
                "gradients): use the torchtitan or Megatron-LM files, or a ZeRO plan with TP")
    if p.cp > 1 and not p.zero_stage:
        return ("Accelerate runs context parallelism only beside FSDP2 sharding (its ParallelismConfig refuses cp_size "
                "> 1 with pure data parallelism): use the torchtitan or Megatron-LM files, or a ZeRO plan with cp")
    if p.tp > 1 and p.gradient_ranks == 1:
        return "Accelerate's FSDP2 + TP needs a data-parallel degree > 1 to shard over (dp_shard_size > 1)"
    return None


def accelerate_config(launch: LaunchConfig, precision: str, ds_file: str) -> dict[str, Any]:
    """The config as a dict (what the YAML holds); machine_rank 0, the launch line overrides it per node."""
    p = launch.plan
    cfg: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "debug": False,
                           "num_machines": p.nodes, "num_processes": p.world_size, "machine_rank": 0,
                           "main_training_function": "main", "rdzv_backend": "static", "same_network": True,
                           "use_cpu": False, "mixed_precision": MIXED_PRECISION.get(precision, "no")}
    if precision == "fp8":
        cfg["fp8_config"] = dict(FP8_CONFIG)
    if p.zero_stage and p.tp == 1 and p.cp == 1:
        cfg["distributed_type"] = "DEEPSPEED"
        cfg["deepspeed_config"] = {"deepspeed_config_file": ds_file, "deepspeed_multinode_launcher": "standard",
                                   "zero3_init_flag": p.zero_stage == 3}
    elif p.zero_stage:  # FSDP2 sharding over dp beside TP and CP (ParallelismConfig: dp_shard x tp x cp = world)
        cfg["distributed_type"] = "FSDP"
        cfg["fsdp_config"] = {"fsdp_version": 2, "fsdp_reshard_after_forward": p.zero_stage == 3,
                              "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                              "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                              "fsdp_activation_checkpointing": p.recompute}
        cfg["parallelism_config"] = {"parallelism_config_dp_replicate_size": 1,
                                     "parallelism_config_dp_shard_size": p.dp, "parallelism_config_tp_size": p.tp,
                                     "parallelism_config_cp_size": p.cp}
    else:
        cfg["distributed_type"] = "MULTI_GPU" if p.world_size > 1 else "NO"
    return cfg


def accelerate_yaml(launch: LaunchConfig, precision: str, *, ds_file: str, marker: str) -> str:
    """The YAML text (flat keys and one level of mapping; values are plain scalars)."""
    cfg = accelerate_config(launch, precision, ds_file)
    lines = [f"# {marker}: HuggingFace Accelerate config for plan {launch.plan.to_string()}",
             "# start on node i: " + shlex.join(accelerate_launch(launch, "<i>", "train.py"))]
    if precision == "fp8":
        lines.append("# fp8: torchao Float8Linear (tensorwise dynamic scaling) via accelerate's AO backend, bf16 "
                     "elsewhere; needs torchao and an FP8 GPU (Ada, Hopper, Blackwell)")
    if launch.plan.tp > 1:
        lines.append("# TP: Accelerate shards a transformers (>= 4.52) model by its tp_plan; FSDP2 shards over dp")
    if launch.plan.cp > 1:
        lines.append(f"# CP: accelerate >= 1.10 splits each sequence over {launch.plan.cp} ranks (torch's "
                     "context_parallel around SDPA) inside accelerator.maybe_context_parallel(buffers=[input_ids, "
                     "labels], buffer_seq_dims=[1, 1]): wrap each step of train.py in it")
    if launch.plan.recompute_interval > 1:
        lines.append(f"# recompute: the plan checkpoints every {launch.plan.recompute_interval}th layer; transformers' "
                     "gradient checkpointing and fsdp_activation_checkpointing checkpoint every layer (less memory, "
                     "more compute than predicted)")
    ddp = ddp_kwargs(launch.plan)
    if ddp:
        lines.append(f"# DDP: train.py builds its Accelerator with kwargs_handlers=[{ddp}] (accelerate.utils): the "
                     "prediction counts one copy of the gradients (without gradient_as_bucket_view DDP keeps a "
                     "second, 4 bytes per parameter) and the plan's gradient buckets")
    if launch.plan.zero_stage == 1 and (launch.plan.tp > 1 or launch.plan.cp > 1):
        lines.append("# ZeRO-1 + TP/CP: FSDP2 without resharding after forward (Accelerate has no distributed "
                     "optimizer; gradients are sharded too)")
    return "\n".join(lines + yaml_lines(cfg)) + "\n"


#: Plan.comm_hook -> accelerate's DDPCommunicationHookType member (accelerate/utils/dataclasses.py)
_HOOKS = {"fp16": "FP16", "bf16": "BF16", "powersgd": "POWER_SGD"}


def ddp_kwargs(p: Plan) -> Optional[str]:
    """The DistributedDataParallelKwargs a pure-DDP plan's script passes to its Accelerator (Accelerate's YAML has
    no DDP keys), None for other plans: the plan's bucket size, gradients as views into the buckets (one copy, as
    the cost model counts them), and its compression hook at PowerSGD's default rank 1 (comm.POWERSGD_RANK)."""
    if p.world_size == 1 or p.zero_stage or p.tp > 1 or p.pp > 1 or p.cp > 1:
        return None
    args = [f"bucket_cap_mb={p.ddp_bucket_mb:g}", "gradient_as_bucket_view=True"]
    if p.comm_hook != "none":
        args.append(f"comm_hook=DDPCommunicationHookType.{_HOOKS[p.comm_hook]}")
    return f"DistributedDataParallelKwargs({', '.join(args)})"


def yaml_lines(cfg: dict) -> list[str]:
    """An Accelerate config (one level of nesting) as YAML lines, words YAML would read as booleans quoted."""
    lines: list[str] = []
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines.append(f"{k}:")
            lines += [f"  {kk}: {_scalar(vv)}" for kk, vv in v.items()]
        else:
            lines.append(f"{k}: {_scalar(v)}")
    return lines


#: Words YAML 1.1 (PyYAML, which accelerate reads the file with) turns into booleans: quoted when meant as text.
_YAML_BOOLS = {"y", "n", "yes", "no", "on", "off", "true", "false"}


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if str(v).lower() in _YAML_BOOLS:  # mixed_precision: 'no' must stay the string accelerate expects
        return f"'{v}'"
    return shlex.quote(str(v)) if any(c in str(v) for c in ":#{}[],&*!|>'\"%@`") else str(v)


def accelerate_launch(launch: LaunchConfig, machine_rank: str, script: str) -> list[str]:
    """`accelerate launch --config_file accelerate.yaml --machine_rank i [--main_process_ip ...] script`."""
    argv = ["accelerate", "launch", "--config_file", FILE, "--machine_rank", machine_rank]
    if launch.plan.nodes > 1:
        endpoint = launch.nodes[0].argv[launch.nodes[0].argv.index("--rdzv-endpoint") + 1]
        host, port = endpoint.rsplit(":", 1)
        argv += ["--main_process_ip", host, "--main_process_port", port]
    return argv + [script]
