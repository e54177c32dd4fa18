"""The one place that counts a transformer from its shapes: parameters per layer (total and active) and the model.

`ModelSpec.params`, `costmodel.analytical.compute.layer_params` / `layer_active_params` and the activation
memory (`costmodel.analytical.memory.activation_bytes_per_layer(shape=...)`) all read `layer_shape(m)`.

Per layer (d = d_model, q = n_heads·head_dim, k = n_kv_heads·head_dim):
- attention: Q d·q, K and V d·k each (grouped-query attention, Ainslie et al. 2023), O q·d; biases q + 2k on
  Q/K/V where the family has them (GPT-2, Qwen2), d on O (GPT-2); QK-norm 2 norms of head_dim (Qwen3, Gemma 3).
- MLP: 2 matrices d·f for a GeLU MLP (Vaswani et al. 2017; GPT-2), 3 for a gated GLU variant (SwiGLU/GeGLU,
  Shazeer 2020; Llama, Gemma); biases f + d (2 matrices) or 2f + d (3) where the family has them.
- MoE (Fedus et al. 2022; Mixtral, Jiang et al. 2024; Qwen3-MoE): router d·E (no bias), E routed experts of
  width f_e (top-k of them active per token) and an optional shared expert of width f_s, each a gated MLP.
  Qwen2-MoE's 1-output shared-expert gate (d parameters per layer, < 0.01 %) is not counted.
- norms: LayerNorm weight + bias (2d), RMSNorm weight (d; Zhang & Sennrich 2019), norms_per_layer of them.
Model: token embedding V·d, learned positions S·d (none for rotary, Su et al. 2021), an untied LM head V·d,
one final norm.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..schemas.workload import ModelSpec


@dataclass(frozen=True)
class LayerShape:
    """The widths of one transformer layer that parameters, FLOPs and stored activations depend on."""

    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    gated: bool = False
    bias: bool = True
    qkv_bias: bool = True
    rmsnorm: bool = False
    norms: int = 2
    qk_norm: bool = False
    dropout: bool = True
    n_experts: int = 0
    experts_per_token: int = 0
    expert_d_ff: int = 0
    shared_d_ff: int = 0

    @property
    def q_dim(self) -> int:
        """Width of all query heads together (n_heads·head_dim; = d_model unless head_dim says otherwise)."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values): n_kv_heads·head_dim."""
        return self.n_kv_heads * self.head_dim

    @property
    def moe(self) -> bool:
        return self.n_experts > 0

    def norm_params(self, width: int) -> int:
        """LayerNorm: weight + bias (2·width); RMSNorm: weight (width)."""
        return width if self.rmsnorm else 2 * width

    def attention_params(self) -> int:
        """Q, K, V, O projections, their biases where present, QK-norms."""
        d, q, k = self.d_model, self.q_dim, self.kv_dim
        n = d * q + 2 * d * k + q * d
        if self.qkv_bias:
            n += q + 2 * k
        if self.bias:
            n += d
        if self.qk_norm:
            n += 2 * self.norm_params(self.head_dim)
        return n

    def mlp_params(self, width: int) -> int:
        """One MLP of hidden width `width`: 2 matrices (GeLU) or 3 (gated), biases where the family has them."""
        d = self.d_model
        mats = 3 if self.gated else 2
        n = mats * d * width
        if self.bias:
            n += (mats - 1) * width + d
        return n

    def ffn_params(self, active: bool = False) -> int:
        """Dense MLP, or MoE: router + routed experts (all, or top-k when `active`) + shared expert."""
        if not self.moe:
            return self.mlp_params(self.d_ff)
        routed = self.experts_per_token if active else self.n_experts
        shared = self.mlp_params(self.shared_d_ff) if self.shared_d_ff else 0
        return self.d_model * self.n_experts + routed * self.mlp_params(self.expert_d_ff) + shared

    @property
    def routed_expert_params(self) -> int:
        """Parameters of the layer's routed experts, all E of them (what expert parallelism splits); 0 if dense."""
        return self.n_experts * self.mlp_params(self.expert_d_ff) if self.moe else 0

    @property
    def params(self) -> int:
        """All parameters of the layer (what memory holds)."""
        return self.attention_params() + self.ffn_params() + self.norms * self.norm_params(self.d_model)

    @property
    def active_params(self) -> int:
        """Parameters one token multiplies through (MoE: router + top-k + shared experts); FLOPs use these."""
        return self.attention_params() + self.ffn_params(active=True) + self.norms * self.norm_params(self.d_model)

    def gathered_modules(self) -> int:
        """The layer's Linear modules (Q, K, V and O as separate Linears, as in Hugging Face Llama/Qwen and the
        bundled trainer, where Megatron's fused QKV is one; the MLP's 2 or 3; MoE: the router, every expert's and the
        shared expert's): what DeepSpeed ZeRO-3 gathers one module at a time once its live-parameter cap binds
        (partitioned_param_coordinator.fetch_sub_module). Norms and biases stay resident: parameters under
        stage3_param_persistence_threshold (1e5 elements by default) are never released."""
        mlp = 3 if self.gated else 2
        ffn = (1 + self.n_experts * mlp + (mlp if self.shared_d_ff else 0)) if self.moe else mlp
        return 4 + ffn

    def gathered_module_numels(self) -> list[int]:
        """Elements of each module DeepSpeed ZeRO-3's hooks meet in one layer's forward, in order: the input norm,
        Q, K, V, O, the post-attention norm, then the MLP's Linears (gate, up, down; or fc1, fc2). The norms hold
        persistent parameters (0 here: never gathered, stage3_param_persistence_threshold) but their hooks run the
        prefetch too. Dense layers only (an MoE layer's experts run in a data-dependent order): [] for MoE."""
        if self.moe:
            return []
        d, q, k = self.d_model, self.q_dim, self.kv_dim
        return [0, d * q, d * k, d * k, q * d, 0] + [d * self.d_ff] * (3 if self.gated else 2)

    def tensor_numels(self) -> list[int]:
        """The layer's parameter tensors, one entry each, in forward order: what a runtime that walks parameters
        one by one (DeepSpeed ZeRO-3's gathers and gradient buckets) iterates over. Q, K and V are separate
        Linears (Hugging Face Llama/Qwen, the bundled trainer); a fused QKV (GPT-2's c_attn, Megatron) is one
        tensor where this counts three. Counts sum to `params`."""
        d, q, k = self.d_model, self.q_dim, self.kv_dim
        norm = [d, d] if not self.rmsnorm else [d]
        out = list(norm)
        out += [d * q, d * k, d * k] + ([q, k, k] if self.qkv_bias else [])
        hd_norm = [self.head_dim] * (1 if self.rmsnorm else 2)
        out += hd_norm * 2 if self.qk_norm else []  # QK-norm: one norm on the queries, one on the keys
        out += [q * d] + ([d] if self.bias else [])
        out += list(norm) * (self.norms - 1)

        def mlp(width: int) -> list[int]:
            mats = [d * width] * (3 if self.gated else 2)
            biases = ([width] * (2 if self.gated else 1) + [d]) if self.bias else []
            return mats + biases

        if self.moe:
            out.append(d * self.n_experts)
            for _ in range(self.n_experts):
                out += mlp(self.expert_d_ff)
            if self.shared_d_ff:
                out += mlp(self.shared_d_ff)
        else:
            out += mlp(self.d_ff)
        return out

    @property
    def mlp_width_per_token(self) -> int:
        """MLP hidden width one token's activations occupy: d_ff, or top-k·f_e + f_s with MoE."""
        if not self.moe:
            return self.d_ff
        return self.experts_per_token * self.expert_d_ff + self.shared_d_ff


def layer_shape(m: "ModelSpec") -> LayerShape:
    """The LayerShape of a transformer ModelSpec, family defaults filled in (gelu = GPT-2, gated = Llama)."""
    if m.kind != "transformer":
        raise ValueError(f"model '{m.name}' is not a transformer; it has no layer shape")
    gated = m.mlp != "gelu"
    bias = (not gated) if m.bias is None else m.bias
    return LayerShape(
        d_model=m.d_model, n_heads=m.n_heads, n_kv_heads=m.n_kv_heads or m.n_heads,
        head_dim=m.head_dim or m.d_model // m.n_heads, d_ff=m.d_ff, gated=gated, bias=bias,
        qkv_bias=bias if m.qkv_bias is None else m.qkv_bias,
        rmsnorm=(m.norm or ("rmsnorm" if gated else "layernorm")) == "rmsnorm",
        norms=m.norms_per_layer, qk_norm=m.qk_norm,
        dropout=(not gated) if m.dropout is None else m.dropout,
        n_experts=m.n_experts, experts_per_token=m.experts_per_token,
        expert_d_ff=m.expert_d_ff or m.d_ff, shared_d_ff=m.shared_expert_d_ff,
    )


def embedding_params(m: "ModelSpec") -> int:
    """Token embedding V·d plus a learned position table S·d (0 for rotary models)."""
    return m.vocab_size * m.d_model + m.max_seq_len * m.d_model


def head_params(m: "ModelSpec") -> int:
    """The LM head's own weight: V·d when untied, 0 when tied to the embedding."""
    return 0 if m.tied_embeddings else m.vocab_size * m.d_model


def model_params(m: "ModelSpec", active: bool = False) -> int:
    """Whole-model parameters: layers (total, or active per token), embeddings, head, final norm."""
    shape = layer_shape(m)
    per_layer = shape.active_params if active else shape.params
    return m.n_layers * per_layer + embedding_params(m) + head_params(m) + shape.norm_params(m.d_model)


def shape_differences(mine: ModelSpec, other: ModelSpec) -> list[str]:
    """What sets two transformers' compute and memory apart, as 'field a vs b' (empty when they train alike):
    the widths, head counts, layers, gating, tied embeddings, experts and a learned position table's length."""
    a, b = layer_shape(mine), layer_shape(other)
    pairs = [("layers", mine.n_layers, other.n_layers), ("hidden", a.d_model, b.d_model),
             ("heads", a.n_heads, b.n_heads), ("key/value heads", a.n_kv_heads, b.n_kv_heads),
             ("head width", a.head_dim, b.head_dim), ("ffn", a.d_ff, b.d_ff),
             ("gated MLP", a.gated, b.gated), ("tied embeddings", mine.tied_embeddings, other.tied_embeddings),
             ("experts", a.n_experts, b.n_experts), ("experts per token", a.experts_per_token, b.experts_per_token),
             ("expert ffn", a.expert_d_ff if a.moe else 0, b.expert_d_ff if b.moe else 0),
             ("shared expert ffn", a.shared_d_ff, b.shared_d_ff),
             ("learned positions", mine.max_seq_len, other.max_seq_len)]
    def say(v: object) -> str:
        return ("yes" if v else "no") if isinstance(v, bool) else str(v)

    return [f"{name} {say(x)} vs {say(y)}" for name, x, y in pairs if x != y]
