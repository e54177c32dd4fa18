"""Human-readable text of a LaunchConfig (CLI output and README.txt)."""
from __future__ import annotations

import shlex

from ..schemas.launch import LaunchConfig


def _ds_summary(cfg: dict) -> str:
    """One line: stage, offload, batch arithmetic, precision."""
    z = cfg.get("zero_optimization", {})
    offload = [k.removeprefix("offload_") for k in ("offload_optimizer", "offload_param") if k in z]
    prec = "bf16" if "bf16" in cfg else "fp16" if "fp16" in cfg else "fp32"
    return (f"ZeRO stage {z.get('stage')}{' offload ' + '+'.join(offload) + ' to cpu' if offload else ''}; "
            f"train_batch_size {cfg['train_batch_size']} = micro {cfg['train_micro_batch_size_per_gpu']} x GAS "
            f"{cfg['gradient_accumulation_steps']} x dp; {prec}; buckets reduce "
            f"{z.get('reduce_bucket_size'):,} / all-gather "
            f"{z.get('allgather_bucket_size', z.get('stage3_prefetch_bucket_size')):,} elements")


def render_launch(launch: LaunchConfig) -> str:
    """The plan, per-node commands with their env, DeepSpeed summary and notes, as plain text."""
    p = launch.plan
    out = [f"Plan    : {p.strategy} ({p.to_string()}) on {p.nodes} node(s) x {p.devices_per_node} device(s)",
           f"Launcher: {launch.launcher}"]
    if launch.deepspeed_config is not None:
        out.append(f"DeepSpeed: {_ds_summary(launch.deepspeed_config)}")
    if launch.env:
        out.append("Environment (all nodes):")
        out += [f"  {v.name}={v.value}    # {v.reason}" for v in launch.env]
    for nl in launch.nodes:
        how = "bash launch.sh" if len(launch.nodes) == 1 else f"NODE_RANK={nl.node_rank} bash launch.sh"
        out.append(f"Node {nl.node_rank} ({nl.node}): {how}")
        out += [f"  {v.name}={v.value}    # {v.reason}" for v in nl.env]
        if nl.numa_binding:
            out.append(f"  NUMA: {nl.numa_binding}")
        out.append(f"  $ {shlex.join(nl.argv)}")
    if launch.notes:
        out.append("Notes:")
        out += [f"  - {n}" for n in launch.notes]
    return "\n".join(out) + "\n"
