"""Checks before any trial runs: does this host match the cluster, and is the trainer's software installed?

A trial measures the plan on the devices of *this* host (and of the cluster's reachable nodes). A GPU
cluster described by a preset or file, measured on a GPU-less host, would run CPU ranks and report
numbers that say nothing about the plan; a missing torch/DeepSpeed would make every plan "crash". Both
are refused here in one line, before any plan is blamed. So is --precision fp8 (`refuse_fp8`): the bundled
trainers have no FP8 kernels, so their runs would be bf16 measurements set against FP8 predictions. Nothing here
imports torch.
"""
from __future__ import annotations

import glob
import importlib.util
import shutil
from pathlib import Path
from typing import Iterable, Optional

from ..errors import UserError
from ..schemas import Cluster, Plan
from ..schemas.workload import FLASH_KERNELS

#: What the bundled trainers need, by feature (the `train` / `plots` extras of pyproject.toml).
EXTRAS = {"torch": "train", "deepspeed": "train", "matplotlib": "plots"}


def local_gpu_count() -> Optional[int]:
    """NVIDIA GPUs visible on this host (/dev/nvidiaN), 0 when none; None when unknown (nvidia-smi only)."""
    devs = [p for p in glob.glob("/dev/nvidia[0-9]*") if Path(p).name[6:].isdigit()]
    if devs:
        return len(devs)
    return None if shutil.which("nvidia-smi") else 0


def host_mismatch(cluster: Cluster, plan_only: str = "drop --confirm to only rank") -> Optional[str]:
    """Why trials of `cluster` cannot run on this host, or None when they can.

    Only nodes reached locally are checked (ssh/slurm/prefix nodes are checked by the remote preflight).
    CPU-rank clusters run anywhere; GPU clusters need at least as many GPUs here as the largest local node.
    `plan_only` says how the command plans without running (e.g. "use --dry-run to plan").
    """
    local = [n for n in cluster.nodes if n.access.method == "local"]
    want = max((sum(d.kind == "gpu" for d in n.devices) for n in local), default=0)
    if want == 0:
        return None
    have = local_gpu_count()
    if have == 0:
        return (f"cluster '{cluster.name}' has GPUs but this host has none, so trials would run on CPU ranks and "
                f"say nothing about its plans; {plan_only}, run on the machine it describes, or use --cpu-ranks N "
                "here (or --preset cpu-2ranks)")
    if have is not None and have < want:
        return (f"cluster '{cluster.name}' has {want} GPUs per node but this host has {have}; run the trials on "
                "the machine the cluster describes, or describe this host (gpuadvisor probe --save FILE)")
    return None


def require_host(cluster: Cluster, plan_only: str = "drop --confirm to only rank") -> None:
    """Raise the one-line UserError of `host_mismatch`, if any."""
    why = host_mismatch(cluster, plan_only)
    if why:
        raise UserError(why)


def missing(modules: Iterable[str]) -> list[str]:
    """The modules of `modules` that this interpreter cannot import (found without importing them)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def trainer_modules(plans: Iterable[Plan]) -> list[str]:
    """What the bundled trainers import to run `plans`: torch, plus DeepSpeed for ZeRO plans."""
    need = ["torch"]
    if any(p.zero_stage for p in plans):
        need.append("deepspeed")
    return need


def require_modules(modules: Iterable[str], what: str) -> None:
    """One-line UserError naming the missing modules and the pip extra that brings them."""
    gone = missing(modules)
    if not gone:
        return
    extras = sorted({EXTRAS.get(m, m) for m in gone})
    pip = " ".join(f"'gpuadvisor[{e}]'" for e in extras)
    raise UserError(f"{what} needs {', '.join(gone)}, which this Python cannot import; install it with "
                    f"`pip install {pip}` (no trial was run, no plan was blamed)")


#: The fix `refuse_fp8` names, per command that runs the bundled trainers
FP8_FIX = {
    "confirm": "confirm with --precision bf16, or time the torchtitan.toml / megatron_args.txt that --emit writes "
               "for --precision fp8 (they train FP8 Linears)",
    "study": "run the study with --precision bf16, or time the torchtitan.toml / megatron_args.txt that "
             "`gpuadvisor suggest --precision fp8 --emit DIR` writes (they train FP8 Linears)",
}


def refuse_fp8(precision: str, command: str) -> None:
    """One-line UserError (exit 2) when `command` ("confirm" or "study") would run the bundled trainers for an fp8
    workload: they have no FP8 kernels (trainers/parallel.py trains bf16 autocast and says so), so every trial
    would time bf16 steps against predictions that price FP8 Linears, and store them as fp8 measurements."""
    if precision != "fp8":
        return
    raise UserError(f"{command}: --precision fp8 cannot be measured by the bundled trainers, which have no FP8 "
                    f"kernels: every {'trial' if command == 'confirm' else 'cell'} would time bf16 steps against "
                    f"FP8 predictions; {FP8_FIX[command]}")


def refuse_unmeasurable(precision: str, attention_kernel: str, command: str,
                        core_kernel: Optional[str] = None, kernels: Optional[str] = None) -> None:
    """`refuse_fp8`, and the same for `attention_kernel` "cudnn" and "eager": the bundled trainers run PyTorch's SDPA
    (FlashAttention-2), so their trials would time it against predictions that price cuDNN's faster attention or an
    unfused core's slower one. `core_kernel` (Workload.core_kernel) "eager" on the flash stack is a model with
    attention sinks, which the trainers' SDPA runs without: the same mismatch. `kernels` "hf" prices Hugging Face's
    op-by-op modeling code, which the trainers' modules (PyTorch's nn.RMSNorm) do not run."""
    refuse_fp8(precision, command)
    if kernels == "liger":
        raise UserError(f"{command}: --kernels liger prices Liger-Kernel's chunked linear cross-entropy, which the "
                        "bundled trainers do not run (their loss holds the logits); confirm with --kernels eager, or "
                        "predict your own script with `gpuadvisor predict --from` its config")
    if kernels == "hf":
        raise UserError(f"{command}: --kernels hf prices Hugging Face's modeling code, which the bundled trainers do "
                        "not run (their norms are PyTorch's nn.RMSNorm); confirm with --kernels eager, or predict your "
                        "own script with `gpuadvisor predict --from` its accelerate.yaml")
    if core_kernel == "eager" and attention_kernel in FLASH_KERNELS:
        raise UserError(f"{command}: this model's attention sinks cannot be measured by the bundled trainers, whose "
                        "SDPA attention runs without them while the prediction prices the unfused core they need; "
                        "time your own stack with `gpuadvisor predict --from` on its config")
    elsewhere = _UNMEASURABLE_KERNELS.get(attention_kernel)
    if elsewhere:
        raise UserError(f"{command}: --attention-kernel {attention_kernel} cannot be measured by the bundled "
                        "trainers, which run PyTorch's SDPA (FlashAttention-2) attention; confirm with "
                        f"--attention-kernel flash, or time {elsewhere}")


#: attention kernels the bundled trainers do not run: where the user times them instead
_UNMEASURABLE_KERNELS = {
    "flash3": "your own script with flash-attn 3 (HF attn_implementation='flash_attention_3') with `gpuadvisor "
              "predict --from` its config",
    "cudnn": "the megatron_args.txt that --emit writes (Transformer Engine's cuDNN attention)",
    "eager": "your own stack's unfused attention with `gpuadvisor predict --from` on its config"}


__all__ = ["host_mismatch", "require_host", "missing", "refuse_fp8", "refuse_unmeasurable", "require_modules",
           "trainer_modules", "local_gpu_count"]
