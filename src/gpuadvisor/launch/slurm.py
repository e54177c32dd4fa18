"""Slurm batch script beside launch.sh: one task per node (srun), torchrun's c10d rendezvous on the first node.

sbatch options from the sbatch manual (--job-name, --nodes, --ntasks-per-node, --gpus-per-node,
--output, --kill-on-bad-exit); `scontrol show hostnames "$SLURM_JOB_NODELIST"` names the head node;
`$SLURM_NODEID` is this node's index and `$SLURM_JOB_ID` the rendezvous id (same on every node).
"""
from __future__ import annotations

import shlex

from ..schemas.launch import LaunchConfig

FILE = "slurm.sbatch"


def _exports(launch: LaunchConfig) -> list[str]:
    out = []
    for v in launch.env:
        out += [f"# {' '.join(v.reason.split())}", f"export {v.name}={shlex.quote(v.value)}"]
    return out


def slurm_script(launch: LaunchConfig, *, marker: str, prebuild: str = "") -> str:
    """The sbatch script. Per-node variables that depend on the node (NCCL_SOCKET_IFNAME...) are taken from node 0:
    Slurm allocates alike nodes; review them if yours differ."""
    p = launch.plan
    first = launch.nodes[0]
    argv = first.argv
    port = argv[argv.index("--rdzv-endpoint") + 1].rsplit(":", 1)[1] if "--rdzv-endpoint" in argv else "29500"
    tail = argv[argv.index("--max-restarts"):]
    gpu = any(v.name.startswith("NCCL") or v.name == "TORCH_NCCL_ASYNC_ERROR_HANDLING" for v in launch.env)
    lines = ["#!/usr/bin/env bash", f"# {marker}: plan {p.to_string()}; submit with: sbatch slurm.sbatch",
             f"#SBATCH --job-name=gpuadvisor-{p.strategy}", f"#SBATCH --nodes={p.nodes}",
             "#SBATCH --ntasks-per-node=1"]
    if gpu:
        lines.append(f"#SBATCH --gpus-per-node={p.devices_per_node}")
    lines += ["#SBATCH --output=gpuadvisor-%j.out", "set -euo pipefail", 'cd "${SLURM_SUBMIT_DIR:-.}"',
              'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)', *_exports(launch)]
    lines += [f"# {' '.join(v.reason.split())}\nexport {v.name}={shlex.quote(v.value)}" for v in first.env
              if v.name not in ("CUDA_VISIBLE_DEVICES",)]
    if prebuild:
        lines += ["# build DeepSpeed's JIT op once per node before the ranks start",
                  f"srun --ntasks-per-node=1 python3 -c {shlex.quote(prebuild)}"]
    torchrun = ["torchrun", "--nnodes", str(p.nodes), "--nproc-per-node", str(p.devices_per_node),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"$head_node:{port}", "--rdzv-id", "$SLURM_JOB_ID",
                *tail]
    quoted = " ".join(a if a.startswith("$") else shlex.quote(a) for a in torchrun)
    lines += ["# one task per node; each runs torchrun, which starts the node's ranks",
              f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 {quoted}"]
    return "\n".join(lines) + "\n"
