"""Peak memory per device: model states (ZeRO sharding, offload), activations, logits, buffers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def state_bytes_per_param(precision: str, optimizer: str) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes per parameter.

    Mixed precision Adam: 2 + 2 + 12 (fp32 master, momentum, variance) — Rajbhandari et al. 2020,
    ZeRO §3.1 (K = 12). fp32 Adam: 4 + 4 + 8. SGD with momentum: K = 8 mixed (master + momentum),
    4 in fp32.
    """
    adam = optimizer in ("adam", "adamw")
    if precision == "fp32":
        return 4, 4, (8 if adam else 4)
    return 2, 2, (12 if adam else 8)


def activation_bytes_per_layer(s: int, b: Any, h: int, a: int, tp: Any = 1, sp: Any = False,
                               recompute: Any = False, fused_attention: bool = True, act_bytes: int = 2) -> Any:
    """Stored activations of one transformer layer for one micro-batch (bytes).

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    Table 2: no parallelism s·b·h·(34 + 5·a·s/h); tensor parallel s·b·h·(10 + 24/t + 5·a·s/(h·t));
    tensor + sequence parallel s·b·h·(34/t + 5·a·s/(h·t)); full recompute 2·s·b·h (layer input).
    The 5·a·s/h term (attention scores, softmax, dropout mask) vanishes with fused/flash attention
    (SDPA), assumed on modern GPUs. The table assumes 16-bit activations; fp32 doubles it. b, tp, sp and
    recompute may be NumPy arrays (the engine evaluates every plan at once); scalars give a float.
    """
    scale = act_bytes / 2.0
    sbh = float(s) * np.asarray(b, dtype=float) * h
    tp_ = np.asarray(tp, dtype=float)
    attn = 0.0 if fused_attention else 5.0 * a * s / h
    per = np.where(tp_ == 1, 34.0 + attn, np.where(sp, 34.0 / tp_ + attn / tp_, 10.0 + 24.0 / tp_ + attn / tp_))
    out = np.where(recompute, 2.0 * sbh * scale / np.where(sp, tp_, 1.0), sbh * per * scale)
    return float(out) if out.ndim == 0 else out


def inflight_microbatches(pp: int, m: int, schedule: str, virtual: int = 1) -> float:
    """Micro-batches whose activations stage 0 holds at the peak.

    GPipe keeps all m (Huang et al. 2019); 1F1B keeps min(p, m) (Narayanan et al. 2021 §2.2.1);
    interleaved 1F1B holds p·(1 + (p−1)/(p·v)) layer-chunks' worth (Korthikanti et al. 2022 §4.2.3).
    """
    if pp == 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved":
        return min(float(m), pp * (1.0 + (pp - 1) / (pp * virtual)))
    return float(min(pp, m))


def logits_bytes(s: int, b: int, vocab: int, tp: int = 1) -> float:
    """fp32 logits for the loss: s·b·V·4 bytes (vocab-parallel across tp, Megatron)."""
    return 4.0 * s * b * vocab / tp


@dataclass
class MemoryParts:
    """Lean memory breakdown of one device (bytes), converted to schemas.MemoryBreakdown for display."""

    weights: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    logits: float = 0.0
    comm_buffers: float = 0.0
    framework: float = 0.0
    host: float = 0.0  # host RAM this rank needs (offload)

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.activations + self.logits
                + self.comm_buffers + self.framework)


def model_state_bytes(params: float, dp: int, zero_stage: int, offload: bool, precision: str,
                      optimizer: str, hpz: int = 1) -> tuple[float, float, float, float]:
    """(weights, grads, optimizer, host) bytes on one device for `params` held by its stage/TP shard.

    ZeRO §5 (Rajbhandari et al. 2020): P_os shards the optimizer over N_d, P_os+g also gradients,
    P_os+g+p also parameters. ZeRO-Offload (Ren et al. 2021 §4): the fp32 optimizer states and the
    fp32 gradient partition live in host RAM; with stage 3 the parameter partition too.
    ZeRO++ hpZ (Wang et al. 2023 §3.2): a secondary copy of the weights sharded inside the node.
    """
    wb, gb, ob = state_bytes_per_param(precision, optimizer)
    w, g, o, host = params * wb, params * gb, params * ob, 0.0
    if zero_stage >= 1:
        o /= dp
    if zero_stage >= 2:
        g /= dp
    if zero_stage >= 3:
        w = w / dp + (params * wb / hpz if hpz > 1 else 0.0)
    if offload:
        host = o + params * 4.0 / dp  # fp32 states + fp32 gradient partition
        o = 0.0
        if zero_stage >= 3:
            host += params * wb / dp
            w = params * wb / dp if hpz == 1 else w  # GPU keeps a working partition
    return w, g, o, host


def framework_bytes(total_live: float, cuda_context: float, fragmentation: float, nccl_peers: int,
                    nccl_bytes_per_peer: float) -> float:
    """CUDA context + NCCL channel buffers + caching-allocator fragmentation (PyTorch CUDA notes)."""
    return cuda_context + nccl_peers * nccl_bytes_per_peer + fragmentation * total_live
