"""Compute time of one micro-batch on one device: FLOPs, GEMM efficiency, elementwise and launch costs."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...schemas import FineTune, ModelSpec
from ...workload.finetune import adapter_flops_per_token
from ...workload.shapes import LayerShape, layer_shape


def layer_params(m: ModelSpec) -> int:
    """All parameters of one transformer layer (memory): attention with GQA/head_dim, dense, gated or MoE MLP,
    norms, biases where the family has them — counted in `workload.shapes.LayerShape` (sources there)."""
    return layer_shape(m).params


def layer_active_params(m: ModelSpec) -> int:
    """Parameters one token goes through in one layer (MoE: router + top-k routed + shared experts)."""
    return layer_shape(m).active_params


def attention_keys_per_query(m: ModelSpec, seq_len: int) -> float:
    """Keys each query is scored against, averaged over the layers: s, or min(s, window) on sliding layers.

    Sliding-window attention (Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023 §2; Gemma 2, every other
    layer) limits a query to the last `window` keys. Causal masking is not discounted (as in PaLM app. B):
    the full s is counted for full-attention layers, as dense attention kernels compute it.
    """
    if not m.sliding_window or m.sliding_window >= seq_len:
        return float(seq_len)
    sliding = m.n_layers if m.sliding_window_layers is None else m.sliding_window_layers
    return (sliding * m.sliding_window + (m.n_layers - sliding) * seq_len) / m.n_layers


#: The forward's share of the attention core's training FLOPs (QK^T and AV forward, 4·H·Q·T of the 12·H·Q·T
#: below): what its selective recompute (Plan.recompute_attention) replays in the backward
CORE_FORWARD_SHARE = 1.0 / 3.0


def attention_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token of one layer's score and value matmuls: 12·n_heads·head_dim·keys.

    PaLM (Chowdhery et al. 2022) appendix B: 12·L·H·Q·T per token (H heads of width Q, T keys; forward
    QK^T and AV 2·2·H·Q·T, backward twice that). GQA shares K/V across heads but every query head still
    scores every key, so H is n_heads. T = seq_len, or the window on sliding layers.
    """
    shape = layer_shape(m)
    return 12.0 * shape.q_dim * attention_keys_per_query(m, seq_len)


def layer_flops_per_token(m: ModelSpec, seq_len: int, ft: Optional[FineTune] = None) -> float:
    """Training FLOPs (fwd+bwd) per token of one layer: 6·P_active + 12·n_heads·head_dim·s.

    PaLM (Chowdhery et al. 2022) appendix B: 6N + 12·L·H·Q·T per token; N here is the layer's parameters
    a token passes through (all of them for dense layers, router + top-k + shared experts for MoE).
    With adapters (`ft` LoRA/QLoRA) the frozen Linears skip their weight gradients: 4N, plus 6·r·(in + out)
    per adapter (workload.finetune); attention's score and value matmuls keep their 12·H·Q·T.
    """
    attn = attention_flops_per_token(m, seq_len)
    if ft is not None and ft.adapters:
        return 4.0 * layer_active_params(m) + attn + adapter_flops_per_token(layer_shape(m), ft)
    return 6.0 * layer_active_params(m) + attn


def layer_forward_fraction(m: ModelSpec, seq_len: int, ft: Optional[FineTune] = None) -> float:
    """Share of a layer's training FLOPs that is the forward pass (what full recompute replays).

    1/3 for full training (2N of 6N, 4 of 12 for attention; PaLM app. B); with adapters 2N of 4N for the frozen
    Linears, so recompute costs relatively more.
    """
    if ft is None or not ft.adapters:
        return 1.0 / 3.0
    attn = attention_flops_per_token(m, seq_len)
    fwd = 2.0 * layer_active_params(m) + (attn + adapter_flops_per_token(layer_shape(m), ft)) / 3.0
    return fwd / layer_flops_per_token(m, seq_len, ft)


def head_flops_per_token(m: ModelSpec, ft: Optional[FineTune] = None) -> float:
    """Training FLOPs per token of the LM head (logits matmul V·h, fwd+bwd = 6·V·h; PaLM app. B).

    A frozen head (LoRA/QLoRA) computes logits and the input gradient only: 4·V·h.
    """
    return (4.0 if ft is not None and ft.adapters else 6.0) * m.vocab_size * m.d_model


def flops_per_token(m: ModelSpec, seq_len: int, recompute: bool = False, ft: Optional[FineTune] = None) -> float:
    """Whole-model training FLOPs per token: 6N_active + 12·L·H·Q·s (PaLM app. B); 8N-style with recompute.

    Full activation recompute repeats the forward pass (1/3 of 6N): Korthikanti et al. 2022 §5,
    Narayanan et al. 2021 §3.5 (model FLOPs 6N -> hardware FLOPs 8N). `ft`: adapters' FLOPs (see above).
    """
    if m.kind != "transformer":
        raise ValueError("flops_per_token applies to transformers; generic models use flops_per_sample")
    extra = 1.0 + layer_forward_fraction(m, seq_len, ft) if recompute else 1.0
    return m.n_layers * layer_flops_per_token(m, seq_len, ft) * extra + head_flops_per_token(m, ft)


def gemm_size(rows, d_model: int, width_per_rank):
    """GEMM size index x for the efficiency curve, in millions: rows × the GEMM's narrower side.

    A layer's GEMMs are (rows × h)·(h × w) or (rows × w)·(w × h) with rows = tokens per micro-batch and w the
    per-rank width (q_dim/tp, d_ff/tp, an expert's width); tensor parallelism splits w and keeps h
    (Shoeybi et al. 2019 §3: column- then row-parallel), so the size is rows × min(h, w). Achieved TFLOP/s
    falls as the micro-batch or the per-GPU slice shrinks (NVIDIA's "Matrix multiplication background" guide:
    tile and wave quantisation; the public H100 runs, benchmarks/fit_gemm_family.py). Works on arrays.
    """
    return rows * gemm_width(d_model, width_per_rank) / 1e6


def gemm_width(d_model: int, width_per_rank):
    """A layer GEMM's narrower side: min(h, per-rank width). It is the reduction length K of the forward GEMM
    of one of each column-/row-parallel pair and of its backward data-gradient GEMM (Shoeybi et al. 2019 §3)."""
    return np.minimum(d_model, width_per_rank)


def width_efficiency(width, w_half: float):
    """Share of the family's large-GEMM rate a GEMM keeps at narrower side `width`: width / (width + w_half).

    However many rows a GEMM has, a short reduction side K leaves each output tile few main-loop iterations to
    amortise its pipeline fill and epilogue (NVIDIA "Matrix multiplication background" guide: arithmetic
    intensity and tile quantisation), so rows cannot make up for a narrow model: the public llm-foundry runs
    reach 43 % MFU at h = 768 and 58-64 % at h = 4096 on the same A100s at any micro-batch
    (knowledge/measurements/public/llmfoundry_mpt.csv). `w_half` per GPU family (knowledge/calibration.yaml);
    0 turns the term off. Works on arrays.
    """
    if w_half <= 0:
        return np.ones_like(np.asarray(width, dtype=float))
    return width / (width + w_half)


def layer_gemm_efficiency(rows, d_model: int, width_per_rank, x_half: float, w_half: float):
    """Share of the family's large-GEMM rate a column-/row-parallel GEMM pair reaches, over its three passes.

    Forward, data-gradient and weight-gradient passes each do a third of the pair's FLOPs, so the pair's rate is
    the harmonic mean of theirs. With per-rank width w = width/tp below h (Shoeybi et al. 2019 §3: TP splits w
    and keeps h), one pass writes a rows × w output reducing over h, one writes rows × h reducing over the short
    w, and the weight gradient (an h × w output reducing over the rows) runs as the unsplit GEMM does (split-K /
    stream-K fill the GPU from its long reduction). Each pass: size term x / (x + x_half), x its output in
    millions of elements (tile and wave fill), times width_efficiency of its reduction length. Without a split
    narrower than h the three passes are one: rows × h at width_efficiency(h), the curve the public FSDP runs
    were fitted on (benchmarks/fit_gemm_family.py). Charging the split side to every pass made the Megatron-Core
    TP-8 runs 1.3-1.5x too slow at per-rank widths of 896-1024 (issue 13). Works on arrays.
    """
    w = gemm_width(d_model, width_per_rank)
    s_narrow = 1.0 / (1.0 + x_half / gemm_size(rows, d_model, width_per_rank))
    s_full = 1.0 / (1.0 + x_half / gemm_size(rows, d_model, d_model))
    k_full = width_efficiency(np.asarray(d_model, dtype=float), w_half)
    k_narrow = width_efficiency(w, w_half)
    return 3.0 / (1.0 / (s_narrow * k_full) + 1.0 / (s_full * k_narrow) + 1.0 / (s_full * k_full))


def alignment_factor(dims, element_bytes: float, align_bytes: float, misaligned_rate: float):
    """Share of its curve's rate a GEMM keeps: 1 when every leading dimension in `dims` (elements; d_model, a per-rank
    width, the vocabulary per TP rank) is a whole number whose bytes fill `align_bytes`-byte vectors, else
    `misaligned_rate` (calibration gemm_efficiency; NVIDIA's Tensor Core alignment rule, the H100 d_ff sweep in
    knowledge/measurements/public/matmul_shape_dependence.csv). `align_bytes` 0 (CPU ranks) turns it off. Works on
    arrays (one entry per candidate plan)."""
    if align_bytes <= 0:
        return 1.0
    ok = True
    for d in dims:
        d = np.asarray(d, dtype=float)
        ok = ok & (np.floor(d) == d) & (np.mod(d * element_bytes, align_bytes) == 0)
    return np.where(ok, 1.0, misaligned_rate)


def layer_flops_split(m: ModelSpec, seq_len: int, ft: Optional[FineTune] = None) -> dict[str, float]:
    """`layer_flops_per_token` split by the GEMMs that do it: attention projections (Q, K, V, O), the MLP
    (dense, shared and routed experts; router and norms ride along), the attention core (scores and values).
    With adapters the projections and MLP carry their adapters' FLOPs in proportion to their parameters."""
    shape = layer_shape(m)
    core = attention_flops_per_token(m, seq_len)
    linear = layer_flops_per_token(m, seq_len, ft) - core
    proj = shape.attention_params() / shape.active_params
    return {"proj": linear * proj, "mlp": linear * (1.0 - proj), "core": core}


def elementwise_time_s(tokens: int, layers: float, d_model: int, act_bytes: int, traffic_per_h: float,
                       mem_bw_bytes_per_s: float, divide_by: int = 1) -> float:
    """Memory-bound non-GEMM work (LayerNorm, GeLU, dropout, residual) as bytes / memory bandwidth.

    Korthikanti et al. 2022 §4.1: these ops are replicated across tensor-parallel ranks unless
    sequence parallelism splits them (`divide_by` = tp with SP).
    """
    return tokens * layers * traffic_per_h * d_model * act_bytes / divide_by / mem_bw_bytes_per_s


#: HBM bytes per logit (token x vocabulary entry) that eager PyTorch's loss moves beyond a fused cross-entropy's one
#: read and one write of the 16-bit logits, which the fitted curves already carry (TrainingSettings.kernels):
#: F.cross_entropy(logits.float(), ...) reads the bf16 logits and writes their fp32 copy (2 + 4); log_softmax reads
#: it twice (max, sum of exponentials) and writes its output (4 + 4 + 4); nll_loss's backward writes a dense fp32
#: gradient (4); log_softmax's backward reads it, its saved output and the gradient again for the row sum and writes
#: the input gradient (4 + 4 + 4 + 4); the cast back reads that and writes bf16 (4 + 2): 44, less the fused 4.
#: Counted from PyTorch's kernels, not fitted; on the H200 rows
#: (benchmarks/results/gpu_trainer_check_2026-11-27_h200.txt) it is 14 ms of GPT-2 124M's 149 ms step at
#: micro-batch 32 and 21 ms of Qwen2.5 0.5B's 197 ms (a 151,936 vocabulary).
EAGER_LOSS_BYTES_PER_LOGIT = 40.0


def hf_eager_traffic(shape: LayerShape, rotary: bool, act_bytes: float) -> tuple[float, float]:
    """(bytes per token per layer that stay whole under TP, bytes split tp ways) that Hugging Face transformers'
    modeling code, run eagerly, moves through HBM beyond a fused layer's elementwise traffic (TrainingSettings.kernels
    "hf"; the fused layer's is `elementwise_traffic_per_h`). Counted op by op from the code, forward and backward,
    every op reading its inputs and writing its output once (e = act_bytes, fp32 = 4), not fitted:

    - RMSNorm (LlamaRMSNorm; torchtitan's RMSNorm of 2024 is the same): x.to(fp32), pow(2), mean, x·rsqrt,
      .to(e), weight· — 28 + 4e bytes per element forward, 44 + 6e backward (the casts, the products' two gradients,
      mean's expansion, the two paths into x summed), against a fused norm's 2e + 3e: 72 + 5e more, per norm of
      width h (whole under TP unless sequence parallelism splits it). A LayerNorm runs PyTorch's fused kernel: 0.
    - rotary by rotate_half (q·cos + cat(−x2, x1)·sin): 10e forward and 10e backward per query and key element,
      against a fused rotary's 2e + 2e: 16e more over q_dim + kv_dim.
    - repeat_kv before SDPA (grouped-query attention): K and V copied to every query head, 2e·(kv + q) forward and
      the group sum 2e·(kv + q) backward.
    - the attention output's transpose(1, 2).contiguous(): 2e·q forward, 2e·q backward.
    - gated MLP act(gate)·up as two kernels: 5e forward, 9e backward per element of the MLP width, against a fused
      SwiGLU's 3e + 5e: 6e more.
    - QK-norm (Qwen3): the RMSNorm count over q_dim + kv_dim.

    Llama 3.1 8B in bf16: 264·h bytes per token per layer beyond the fused 120·h; at 16k tokens per H100 micro-batch
    ~0.17 s of the 0.39 s that torchtitan's eager step took beyond its compiled one (torchtitan_llama3_h100_202412
    rows 1-2), the rest kernel launches and the replayed forward's share. HF GPT-2's Python `gelu_new` is not counted.
    """
    e = float(act_bytes)
    h, q, k = shape.d_model, shape.q_dim, shape.kv_dim
    norm = 72.0 + 5.0 * e  # an op-by-op RMSNorm beyond a fused one, per element, forward + backward
    whole = shape.norms * norm * h if shape.rmsnorm else 0.0
    split = 4.0 * e * q
    if rotary:
        split += 16.0 * e * (q + k)
    if shape.n_kv_heads < shape.n_heads:
        split += 4.0 * e * (k + q)
    if shape.gated:
        split += 6.0 * e * shape.mlp_width_per_token
    if shape.qk_norm:
        split += norm * (q + k)
    return whole, split


def unfused_attention_bytes(act_bytes: int, dropout: bool) -> tuple[float, float]:
    """(forward, backward) HBM bytes per attention-score element of an unfused attention core (one head, one query,
    one key), which materialises the b·a·s² scores between its two batched GEMMs.

    Forward: Q·Kᵀ writes the scores (e); the fused scale-mask-softmax reads them and writes the probabilities (2e;
    Megatron's ScaledUpperTriangMaskedSoftmax, one kernel); attention dropout reads them and writes its output and
    a 1-byte mask (2e + 1); P·V reads its input (e). Backward: P·V's backward writes dP (e) and reads P for dV (e);
    dropout's backward reads dP and the mask and writes (2e + 1); softmax's backward reads P and dP and writes dS
    (3e); Q·Kᵀ's backward reads dS for dQ and for dK (2e). Without dropout the probabilities feed P·V directly:
    4e forward, 7e backward. bf16 with dropout: 13 + 19 = 32 bytes per element.
    """
    e = float(act_bytes)
    if dropout:
        return 6.0 * e + 1.0, 9.0 * e + 1.0
    return 4.0 * e, 7.0 * e


def launch_time_s(layers: float, kernels_per_layer: float, launch_us: float) -> float:
    """Kernel-launch floor of one micro-batch: layers × kernels per layer × launch latency."""
    return layers * kernels_per_layer * launch_us * 1e-6


def adam_time_s(params_local: float, bytes_per_param: float, mem_bw_bytes_per_s: float) -> float:
    """GPU Adam step: memory-bound pass over p, g, m, v (PyTorch fused/foreach Adam)."""
    return params_local * bytes_per_param / mem_bw_bytes_per_s
