"""Compute time of one micro-batch on one device: FLOPs, GEMM efficiency, elementwise and launch costs."""
from __future__ import annotations

from ...schemas import ModelSpec


def layer_params(m: ModelSpec) -> int:
    """Parameters of one transformer layer: QKV+proj 4h^2, MLP 2·h·d_ff, biases and 2 LayerNorms."""
    h = m.d_model
    return 2 * h * m.d_ff + 4 * h * h + 9 * h + m.d_ff


def layer_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Training FLOPs (fwd+bwd) per token of one layer: 6·P_layer + 12·h·s.

    PaLM (Chowdhery et al. 2022) appendix B: 6N + 12·L·H·Q·T per token; the second term is the
    attention score/value matmuls, here per layer with H·Q = d_model and T = seq_len.
    """
    return 6.0 * layer_params(m) + 12.0 * m.d_model * seq_len


def head_flops_per_token(m: ModelSpec) -> float:
    """Training FLOPs per token of the LM head (logits matmul V·h, fwd+bwd = 6·V·h; PaLM app. B)."""
    return 6.0 * m.vocab_size * m.d_model


def flops_per_token(m: ModelSpec, seq_len: int, recompute: bool = False) -> float:
    """Whole-model training FLOPs per token: 6N + 12·L·h·s (PaLM app. B); 8N-style with recompute.

    Full activation recompute repeats the forward pass (1/3 of 6N): Korthikanti et al. 2022 §5,
    Narayanan et al. 2021 §3.5 (model FLOPs 6N -> hardware FLOPs 8N).
    """
    if m.kind != "transformer":
        raise ValueError("flops_per_token applies to transformers; generic models use flops_per_sample")
    per_layer = layer_flops_per_token(m, seq_len) * (4.0 / 3.0 if recompute else 1.0)
    return m.n_layers * per_layer + head_flops_per_token(m)


def gemm_size(tokens: int, d_model: int, tp: int) -> float:
    """GEMM size index x for the efficiency curve: tokens per micro-batch × d_model / tp, in millions.

    Megatron-LM (Narayanan et al. 2021) Fig. 15/16: achieved TFLOP/s per GPU falls as the
    micro-batch or the per-GPU slice of the hidden dimension shrinks.
    """
    return tokens * d_model / tp / 1e6


def gemm_time_s(flops: float, peak_flops: float, efficiency: float) -> float:
    """Seconds for `flops` at peak × efficiency (efficiency floored to avoid division by zero)."""
    return flops / (peak_flops * max(efficiency, 1e-4))


def elementwise_time_s(tokens: int, layers: float, d_model: int, act_bytes: int, traffic_per_h: float,
                       mem_bw_bytes_per_s: float, divide_by: int = 1) -> float:
    """Memory-bound non-GEMM work (LayerNorm, GeLU, dropout, residual) as bytes / memory bandwidth.

    Korthikanti et al. 2022 §4.1: these ops are replicated across tensor-parallel ranks unless
    sequence parallelism splits them (`divide_by` = tp with SP).
    """
    return tokens * layers * traffic_per_h * d_model * act_bytes / divide_by / mem_bw_bytes_per_s


def launch_time_s(layers: float, kernels_per_layer: float, launch_us: float) -> float:
    """Kernel-launch floor of one micro-batch: layers × kernels per layer × launch latency."""
    return layers * kernels_per_layer * launch_us * 1e-6


def adam_time_s(params_local: float, bytes_per_param: float, mem_bw_bytes_per_s: float) -> float:
    """GPU Adam step: memory-bound pass over p, g, m, v (PyTorch fused/foreach Adam)."""
    return params_local * bytes_per_param / mem_bw_bytes_per_s
