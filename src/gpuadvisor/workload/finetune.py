"""What fine-tuning changes in a transformer's counts: adapter parameters, frozen-weight bytes, FLOPs per token.

LoRA (Hu et al. 2021, arXiv:2106.09685 §4.1): a frozen Linear W (out x in) gets A (r x in) and B (out x r), so
each adapted Linear adds r·(in + out) trainable parameters; nothing else trains (embeddings, norms, head frozen,
as peft does by default). QLoRA (Dettmers et al. 2023, arXiv:2305.14314 §3) stores the frozen Linear weights as
4-bit NormalFloat in blocks of 64 with one fp32 absmax each (32/64 = 0.5 bit/param); double quantisation stores
those absmax as 8-bit in blocks of 256 with one fp32 constant each: 8/64 + 32/(64·256) = 0.127 bit/param.
Embeddings, norms and the LM head stay 16-bit (bitsandbytes quantises Linear layers only; transformers keeps the
output head unquantised).

FLOPs (PaLM app. B accounting: forward 2N, backward 4N per token): a frozen Linear still needs its input
gradient (2N) but no weight gradient (2N), so a frozen base costs 4N per token instead of 6N; attention's score
and value matmuls (no weights) keep their full fwd+bwd cost; each adapter costs 6·r·(in + out) (its weight
gradients are computed).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .shapes import LayerShape, layer_shape

if TYPE_CHECKING:
    from ..schemas.workload import FineTune, ModelSpec

#: NF4 storage per frozen Linear parameter (bytes), without and with double quantisation (QLoRA §3).
NF4_BITS = 4.0
NF4_CONSTANT_BITS = 32.0 / 64.0
NF4_DOUBLE_QUANT_CONSTANT_BITS = 8.0 / 64.0 + 32.0 / (64.0 * 256.0)


#: Linear roles of a layer, as FineTune.target_modules names them.
ROLES = ("q", "k", "v", "o", "gate", "up", "down")


def nf4_bytes_per_param(double_quant: bool = True) -> float:
    """Bytes one NF4-stored weight takes with its block constants: 0.5625, or 0.5159 with double quantisation."""
    return (NF4_BITS + (NF4_DOUBLE_QUANT_CONSTANT_BITS if double_quant else NF4_CONSTANT_BITS)) / 8.0


def linears(shape: LayerShape, active: bool = False) -> dict[str, list[tuple[int, int, int]]]:
    """role -> [(in, out, copies)] of one layer's Linear weights (MoE: each routed expert, top-k when `active`).

    Roles as `FineTune.target_modules` names them: q, k, v, o (attention), gate, up, down (MLP; gate only in
    gated MLPs, a GeLU MLP's fc1/fc2 are up/down). The MoE router (d x E) is a Linear with no role: never adapted.
    """
    d, q, k = shape.d_model, shape.q_dim, shape.kv_dim
    out: dict[str, list[tuple[int, int, int]]] = {"q": [(d, q, 1)], "k": [(d, k, 1)], "v": [(d, k, 1)],
                                                  "o": [(q, d, 1)], "gate": [], "up": [], "down": []}
    mlps: list[tuple[int, int]] = []  # (width, copies)
    if shape.moe:
        mlps.append((shape.expert_d_ff, shape.experts_per_token if active else shape.n_experts))
        if shape.shared_d_ff:
            mlps.append((shape.shared_d_ff, 1))
    else:
        mlps.append((shape.d_ff, 1))
    for f, n in mlps:
        if shape.gated:
            out["gate"].append((d, f, n))
        out["up"].append((d, f, n))
        out["down"].append((f, d, n))
    return out


def linear_weight_params(shape: LayerShape, active: bool = False) -> int:
    """Matrix weights of one layer's Linears (what QLoRA quantises), router included, biases and norms not."""
    n = sum(i * o * c for mats in linears(shape, active).values() for i, o, c in mats)
    if shape.moe:
        n += shape.d_model * shape.n_experts
    return n


def adapter_params_per_layer(shape: LayerShape, ft: "FineTune", active: bool = False) -> int:
    """LoRA parameters of one layer: r·(in + out) per targeted Linear (per expert copy with MoE)."""
    if not ft.adapters:
        return 0
    mats = linears(shape, active)
    return sum(ft.lora_rank * (i + o) * c for role in ft.target_modules for i, o, c in mats[role])


def adapter_params(m: "ModelSpec", ft: "FineTune", active: bool = False) -> int:
    """Trainable adapter parameters of the whole model (0 for full fine-tuning)."""
    if not ft.adapters:
        return 0
    return m.n_layers * adapter_params_per_layer(layer_shape(m), ft, active)


def trainable_params(m: "ModelSpec", ft: "FineTune") -> int:
    """Parameters the optimizer updates: all of them (full) or the adapters (LoRA/QLoRA)."""
    return adapter_params(m, ft) if ft.adapters else m.params


def frozen_layer_bytes(shape: LayerShape, ft: "FineTune", weight_bytes: float) -> float:
    """Bytes of one layer's frozen base weights: all at `weight_bytes` (LoRA), Linear matrices NF4 (QLoRA)."""
    if ft.method == "qlora":
        lin = linear_weight_params(shape)
        return lin * nf4_bytes_per_param(ft.double_quant) + (shape.params - lin) * weight_bytes
    return shape.params * weight_bytes


def frozen_model_bytes(m: "ModelSpec", ft: "FineTune", weight_bytes: float) -> float:
    """Bytes of the whole frozen base: the layers (NF4 Linears with QLoRA) plus 16-bit embedding, head, final norm."""
    shape = layer_shape(m)
    rest = m.params - m.n_layers * shape.params
    return m.n_layers * frozen_layer_bytes(shape, ft, weight_bytes) + rest * weight_bytes


def adapter_flops_per_token(shape: LayerShape, ft: "FineTune") -> float:
    """Training FLOPs per token of one layer's adapters (active experts only): 6·r·(in + out) each."""
    return 6.0 * adapter_params_per_layer(shape, ft, active=True)
