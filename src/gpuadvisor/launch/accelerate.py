"""HuggingFace Accelerate config (YAML) for a plan, plus the `accelerate launch` line.

Keys follow accelerate's ClusterConfig (accelerate/commands/config/config_args.py, 1.15.0) and the launch
arguments the config fills (accelerate/commands/launch.py: deepspeed_config -> deepspeed_config_file,
deepspeed_multinode_launcher, zero3_init_flag; fsdp_config -> fsdp_* with fsdp_version 2; parallelism_config
-> parallelism_config_{dp_replicate,dp_shard,tp,cp}_size). Mapping: ZeRO plans -> the DeepSpeed plugin reading
the emitted ds_config.json (one JSON builder); pure DP -> MULTI_GPU (DDP); TP -> FSDP2 with a parallelism
config (Accelerate's only TP path). Accelerate has no training pipeline parallelism: pp > 1 gets no file.
"""
from __future__ import annotations

import shlex
from typing import Any, Optional

from ..schemas.launch import LaunchConfig

FILE = "accelerate.yaml"


def unsupported(launch: LaunchConfig) -> Optional[str]:
    """Why Accelerate cannot run this plan (None when it can)."""
    if launch.plan.pp > 1:
        return "Accelerate has no training pipeline parallelism (pp > 1): use the torchtitan or Megatron-LM files"
    return None


def accelerate_config(launch: LaunchConfig, precision: str, ds_file: str) -> dict[str, Any]:
    """The config as a dict (what the YAML holds); machine_rank 0, the launch line overrides it per node."""
    p = launch.plan
    cfg: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "debug": False,
                           "num_machines": p.nodes, "num_processes": p.world_size, "machine_rank": 0,
                           "main_training_function": "main", "rdzv_backend": "static", "same_network": True,
                           "use_cpu": False, "mixed_precision": {"bf16": "bf16", "fp16": "fp16"}.get(precision, "no")}
    if p.zero_stage:
        cfg["distributed_type"] = "DEEPSPEED"
        cfg["deepspeed_config"] = {"deepspeed_config_file": ds_file, "deepspeed_multinode_launcher": "standard",
                                   "zero3_init_flag": p.zero_stage == 3}
    elif p.tp > 1:
        cfg["distributed_type"] = "FSDP"
        cfg["fsdp_config"] = {"fsdp_version": 2, "fsdp_reshard_after_forward": False,
                              "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                              "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                              "fsdp_activation_checkpointing": p.recompute}
        cfg["parallelism_config"] = {"parallelism_config_dp_replicate_size": p.dp,
                                     "parallelism_config_dp_shard_size": 1, "parallelism_config_tp_size": p.tp,
                                     "parallelism_config_cp_size": 1}
    else:
        cfg["distributed_type"] = "MULTI_GPU" if p.world_size > 1 else "NO"
    return cfg


def accelerate_yaml(launch: LaunchConfig, precision: str, *, ds_file: str, marker: str) -> str:
    """The YAML text (flat keys and one level of mapping; values are plain scalars)."""
    cfg = accelerate_config(launch, precision, ds_file)
    lines = [f"# {marker}: HuggingFace Accelerate config for plan {launch.plan.to_string()}",
             "# start on node i: " + shlex.join(accelerate_launch(launch, "<i>", "train.py"))]
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines.append(f"{k}:")
            lines += [f"  {kk}: {_scalar(vv)}" for kk, vv in v.items()]
        else:
            lines.append(f"{k}: {_scalar(v)}")
    return "\n".join(lines) + "\n"


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return shlex.quote(str(v)) if any(c in str(v) for c in ":#{}[],&*!|>'\"%@`") else str(v)


def accelerate_launch(launch: LaunchConfig, machine_rank: str, script: str) -> list[str]:
    """`accelerate launch --config_file accelerate.yaml --machine_rank i [--main_process_ip ...] script`."""
    argv = ["accelerate", "launch", "--config_file", FILE, "--machine_rank", machine_rank]
    if launch.plan.nodes > 1:
        endpoint = launch.nodes[0].argv[launch.nodes[0].argv.index("--rdzv-endpoint") + 1]
        host, port = endpoint.rsplit(":", 1)
        argv += ["--main_process_ip", host, "--main_process_port", port]
    return argv + [script]
