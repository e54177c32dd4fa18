"""Accuracy metrics for predicted vs measured runs: MAPE, Kendall's tau-b, regret; Megatron's FLOP count."""
from __future__ import annotations

import math
from typing import Optional, Sequence


def mape(measured: Sequence[float], predicted: Sequence[float]) -> float:
    """Mean absolute percentage error of `predicted` against `measured`, in percent."""
    if len(measured) != len(predicted) or not measured:
        raise ValueError(f"mape needs two equal, non-empty sequences (got {len(measured)} and {len(predicted)})")
    return 100.0 * sum(abs(p - m) / m for m, p in zip(measured, predicted)) / len(measured)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """Kendall's tau-b (ties in either sequence handled; Kendall 1945); None if either is all ties."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau needs two equal sequences (got {len(x)} and {len(y)})")
    concordant = discordant = ties_x = ties_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denom if denom else None


def regret(measured_s: Sequence[float], predicted_s: Sequence[float]) -> float:
    """How much slower the config the model ranks first is than the measured best: t_meas[argmin pred] / min - 1.

    Times are seconds per step of the same job (lower is better). Ties in the prediction take the first.
    """
    if len(measured_s) != len(predicted_s) or not measured_s:
        raise ValueError("regret needs two equal, non-empty sequences")
    pick = min(range(len(predicted_s)), key=lambda i: predicted_s[i])
    return measured_s[pick] / min(measured_s) - 1.0


def megatron_flops_per_token(layers: int, hidden: int, heads: int, kv_heads: int, ffn_hidden: int, vocab: int,
                             seq_len: int, gated: bool = False) -> float:
    """Model FLOPs per token as Megatron-LM's num_floating_point_operations counts them (training.py, f2e5db40).

    12·L·h²·(1 + kv/heads + s/h + g·ffn/h + V/(2·L·h)), g = 1.5 for a gated (SwiGLU) MLP: forward and
    backward (3x forward), full (non-causal) attention, no recompute.
    """
    g = 1.5 if gated else 1.0
    L, h = layers, hidden
    return 12.0 * L * h * h * (1 + kv_heads / heads + seq_len / h + g * ffn_hidden / h + vocab / (2.0 * L * h))


#: The GPT-2/GPT-3 byte-level BPE vocabulary (Radford et al. 2019, "Language Models are Unsupervised Multitask
#: Learners" §2.2: 50,257 tokens; GPT-3 reuses it, Brown et al. 2020 §2.1) for GPT rows that leave `vocab` empty.
GPT2_VOCAB = 50257

#: The row's `metric_definition` when its TFLOP/s follow full_recompute_flops_per_iteration (DeepSpeed's Azure post).
FULL_RECOMPUTE_FORMULA = "96*B*s*l*h^2*(1+s/(6h)+V/(16*l*h))"


#: The row's `metric_definition` when its TFLOP/s follow causal_model_flops_per_iteration (ml-engineering's
#: HF + DeepSpeed benchmark, insights/when-to-upgrade-gpus).
CAUSAL_MODEL_FORMULA = "with causal attention FLOPs"


def causal_model_flops_per_iteration(batch: int, seq_len: int, layers: int, hidden: int, heads: int,
                                     kv_heads: int, ffn_hidden: int, vocab: int) -> float:
    """Model FLOPs of one iteration of a dense gated (SwiGLU) GQA decoder, attention counted causally.

    6·N·B·s + 6·B·s²·q·L, N = L·(3·h·ffn + h·(2q + 2kv)) + V·h (q = heads·head_dim, kv = kv_heads·head_dim, the
    embedding and LM head once), activation-checkpoint recompute excluded: `estimate_tflos` of stas00/ml-engineering
    insights/when-to-upgrade-gpus/benchmark.py (ported there from arctic_training's FlopsCounter), whose TFLOPS
    per GPU x GPUs x seconds is this number. Causal: half of PaLM's 12·s·q per token (compute.py counts the full s).
    """
    head_dim = hidden // heads
    q, kv = heads * head_dim, kv_heads * head_dim
    dense = layers * (3 * hidden * ffn_hidden + hidden * (2 * q + 2 * kv)) + vocab * hidden
    return 6.0 * dense * batch * seq_len + 6.0 * batch * seq_len * seq_len * q * layers


def full_recompute_flops_per_iteration(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Hardware FLOPs of one iteration of a GPT (4h MLP) trained with full activation recomputation.

    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)): forward, backward and the recomputed forward (4 x 24·B·s·l·h²), the
    attention scores and the LM head, as DeepSpeed's post "Azure empowers easy-to-use, high-performance, and
    hyperscale model training using DeepSpeed" states it for its TFLOPs/GPU (microsoft/DeepSpeed
    docs/_posts/2022-07-26-deepspeed-azure.md, lines 90-95). Their TFLOPs/GPU x GPUs x seconds is this number.
    """
    L, h, s = layers, hidden, seq_len
    return 96.0 * batch * s * L * h * h * (1 + s / (6.0 * h) + vocab / (16.0 * L * h))
