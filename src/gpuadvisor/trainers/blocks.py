"""The transformer layer the trainers build from a `ModelSpec`: GPT-2's, Llama's, or a mixture of experts.

One `Block` covers the families `workload/shapes.py` counts (its per-layer count is this module's parameter
count, tested):
- GPT-2 (Radford et al. 2019): LayerNorm, biases everywhere, Linear -> GELU -> Linear MLP (`mlp.fc1`/`mlp.fc2`).
- Llama (Touvron et al. 2023, §2.2): RMSNorm (Zhang & Sennrich 2019), no biases, SwiGLU MLP
  down(silu(gate x) * up x) (Shazeer 2020, "GLU Variants Improve Transformer", eq. 5-6; GeGLU uses gelu),
  rotary positions (Su et al. 2021, RoFormer §3.4) when the spec has no learned table (max_seq_len = 0).
- grouped-query attention (Ainslie et al. 2023): n_kv_heads key/value heads, each shared by
  n_heads / n_kv_heads query heads; head_dim may differ from d_model / n_heads (Gemma).
- QK-norm (Qwen3, Gemma 3): an RMSNorm (or LayerNorm) over head_dim on queries and keys, before RoPE.
- Gemma 2 post-norms (norms_per_layer = 4): a norm on the attention and MLP outputs before the residual add.
- sliding-window attention (Mistral; Beltagy et al. 2020): token i attends to j with 0 <= i - j < window.
- mixture of experts (Mixtral, Jiang et al. 2024, §2.1): router logits = x W_r (no bias); each token goes to
  its top-k experts with weights softmax over those k logits; output = sum_k w_k E_k(x) (+ a shared expert,
  Qwen2-MoE / DeepSeekMoE, always on). No capacity limit and no token dropping: every token reaches its k
  experts, computed per expert with index_select/index_add_, so the result is exact and deterministic.
  Auxiliary load-balancing losses are not added (they do not change the parallel structure).
  Under expert parallelism (Plan.ep > 1; `experts.py`) a layer keeps only its rank's contiguous block of routed
  experts and hands the routed tokens to `ExpertParallel.combine`, which sends each (token, slot) row to the
  rank owning its expert with all-to-all and back (GShard/Switch dispatch and combine, Megatron-Core's
  "alltoall" token dispatcher, DeepSpeed-MoE's expert + data parallelism); routing, the router and the shared
  expert are unchanged, so the layer computes what the single-device layer computes.

Names are stable across families so tensor-parallel plans and LoRA targets find them: attention q, k, v and
`proj` (the "o" role), MLP `fc1`/`fc2` (GeLU: "up"/"down" roles) or `gate`/`up`/`down`; MoE experts live in
`mlp.experts.<i>` with the same MLP names, the router in `mlp.router`, the shared expert in `mlp.shared`.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from ..schemas.workload import ModelSpec
from ..workload.shapes import LayerShape, layer_shape

ROPE_THETA = 10_000.0  # RoFormer §3.2.2 / Llama-2's base
NORM_EPS = 1e-5  # Llama's rms_norm_eps (and LayerNorm's default)

#: LoRA/TP role -> module-name suffix per MLP kind ("gelu": GPT-2's 2-matrix MLP has no gate).
ROLE_NAMES = {
    "gelu": {"q": "q", "k": "k", "v": "v", "o": "proj", "up": "fc1", "down": "fc2"},
    "gated": {"q": "q", "k": "k", "v": "v", "o": "proj", "gate": "gate", "up": "up", "down": "down"},
}


@dataclass(frozen=True)
class BlockConfig:
    """What one layer needs beyond `LayerShape`: how positions enter, the MLP activation, the window."""

    shape: LayerShape
    activation: str  # "gelu" | "swiglu" | "geglu"
    rope: bool
    window: int = 0  # 0 = full causal attention

    @classmethod
    def from_spec(cls, spec: ModelSpec, layer: int) -> "BlockConfig":
        return cls(shape=layer_shape(spec), activation=spec.mlp, rope=spec.max_seq_len == 0,
                   window=spec.sliding_window if uses_window(spec, layer) else 0)


def uses_window(spec: ModelSpec, layer: int) -> bool:
    """Whether `layer` uses the sliding window: all layers, or `sliding_window_layers` of them spread evenly
    starting with layer 0 (half of them: the even layers, Gemma 2's local/global alternation)."""
    if not spec.sliding_window:
        return False
    n, k = spec.n_layers, spec.sliding_window_layers
    if k is None:
        return True
    return math.ceil((layer + 1) * k / n) > math.ceil(layer * k / n)


def make_norm(shape: LayerShape, width: int) -> nn.Module:
    """RMSNorm (weight only) or LayerNorm (weight + bias), as the spec's family has it."""
    return nn.RMSNorm(width, eps=NORM_EPS) if shape.rmsnorm else nn.LayerNorm(width, eps=NORM_EPS)


def shared_input(x: torch.Tensor) -> torch.Tensor:
    """`x` cast once to torch.autocast's dtype, for Linears that read the same input (q/k/v, gate/up).

    Autocast caches its casts of weights only: each Linear would otherwise cast the norm's fp32 output again and
    save its own 16-bit copy for the weight gradient (three copies for q, k, v). Outside autocast (CPU ranks,
    fp32 runs) `x` is returned as it is.
    """
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        if x.dtype != dtype:
            return x.to(dtype)
    return x


def rotate(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x (b, heads, t, head_dim), half-split layout (GPT-NeoX / HF Llama):
    pairs (x_i, x_{i+d/2}) rotate by angle t * theta^(-2i/d) (RoFormer eq. 34)."""
    t, d = x.shape[-2], x.shape[-1]
    inv_freq = ROPE_THETA ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(t, device=x.device, dtype=torch.float32), inv_freq)
    cos, sin = angles.cos().repeat(1, 2).to(x.dtype), angles.sin().repeat(1, 2).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    """Causal self-attention with separate q/k/v/proj Linears (TP-friendly), GQA, optional RoPE, QK-norm and
    sliding window. Head counts are read from the tensor shapes: under TP each rank holds 1/tp of the query
    and of the key/value heads, and query head j still shares key/value head j // (n_heads / n_kv_heads)."""

    def __init__(self, cfg: BlockConfig, recompute_core: bool = False):
        super().__init__()
        s = cfg.shape
        self.head_dim, self.rope, self.window = s.head_dim, cfg.rope, cfg.window
        self.recompute_core = recompute_core
        self.q = nn.Linear(s.d_model, s.q_dim, bias=s.qkv_bias)
        self.k = nn.Linear(s.d_model, s.kv_dim, bias=s.qkv_bias)
        self.v = nn.Linear(s.d_model, s.kv_dim, bias=s.qkv_bias)
        self.proj = nn.Linear(s.q_dim, s.d_model, bias=s.bias)
        self.q_norm: Optional[nn.Module] = make_norm(s, s.head_dim) if s.qk_norm else None
        self.k_norm: Optional[nn.Module] = make_norm(s, s.head_dim) if s.qk_norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]
        x = shared_input(x)
        q, k, v = (m(x).view(b, t, -1, self.head_dim) for m in (self.q, self.k, self.v))
        if self.q_norm is not None and self.k_norm is not None:  # over head_dim, per head (b, t, heads, hd)
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        if self.rope:
            q, k = rotate(q), rotate(k)
        if self.recompute_core and torch.is_grad_enabled():
            # selective recompute (Korthikanti et al. 2022 §4.2; Megatron's checkpointed core attention): keep
            # q, k, v and replay the core's forward in the backward
            y = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            y = self._core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q·kᵀ/√d + causal or window mask)·v per head, (b, heads, t, head_dim) in and out."""
        t = q.shape[2]
        if k.shape[1] != q.shape[1]:  # GQA: each key/value head serves a contiguous group of query heads
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.window:
            i = torch.arange(t, device=q.device)
            dist = i[:, None] - i[None, :]
            mask = (dist >= 0) & (dist < self.window)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class MLP(nn.Module):
    """GPT-2's Linear(d_model, d_ff) -> GELU -> Linear(d_ff, d_model)."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = True):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class GatedMLP(nn.Module):
    """down(act(gate x) * up x): SwiGLU (act = SiLU, Llama) or GeGLU (act = tanh-GELU, Gemma); Shazeer 2020."""

    def __init__(self, d_model: int, d_ff: int, activation: str, bias: bool = False):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.act = F.silu if activation == "swiglu" else (lambda z: F.gelu(z, approximate="tanh"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = shared_input(x)
        return self.down(self.act(self.gate(x)) * self.up(x))


def make_mlp(cfg: BlockConfig, width: int) -> nn.Module:
    s = cfg.shape
    return GatedMLP(s.d_model, width, cfg.activation, s.bias) if s.gated else MLP(s.d_model, width, s.bias)


class MoE(nn.Module):
    """Top-k routed experts (+ optional shared expert), Mixtral-style; exact and deterministic (no capacity).

    Every expert runs on every call, on the (possibly empty) set of tokens routed to it, so every parameter
    takes part in every step (DDP and ZeRO need no unused-parameter handling) and an expert that gets no
    token receives a zero gradient.
    """

    def __init__(self, cfg: BlockConfig):
        super().__init__()
        s = cfg.shape
        self.top_k = s.experts_per_token
        self.router = nn.Linear(s.d_model, s.n_experts, bias=False)
        self.experts = nn.ModuleList(make_mlp(cfg, s.expert_d_ff) for _ in range(s.n_experts))
        self.shared: Optional[nn.Module] = make_mlp(cfg, s.shared_d_ff) if s.shared_d_ff else None
        self.n_routed = s.n_experts  # routed experts of the layer, wherever they live
        # set by `experts.shard_experts` under expert parallelism: `experts` then holds this rank's block only
        self.expert_parallel: Optional[Any] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        logits = self.router(flat)
        top, idx = logits.topk(self.top_k, dim=-1)  # (tokens, k)
        weights = top.float().softmax(dim=-1).to(flat.dtype)  # softmax over the k chosen logits
        if self.expert_parallel is not None:  # all-to-all dispatch/combine over the ep group (`experts.py`)
            out = self.expert_parallel.combine(flat, idx, weights, self.experts, self.n_routed)
        else:
            out = torch.zeros_like(flat)
            for e, expert in enumerate(self.experts):
                token, slot = (idx == e).nonzero(as_tuple=True)  # tokens routed to e, in token order
                y = expert(flat.index_select(0, token)) * weights[token, slot].unsqueeze(-1)
                out = out.index_add(0, token, y)
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view_as(x)


#: A layer's matmuls as op-level checkpointing counts them: nn.Linear dispatches mm, or addmm with a bias.
MATMULS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
#: Ops whose outputs op-level checkpointing always keeps: the attention core's fused kernels (CUDA and CPU) and
#: the sequence-parallel reduce-scatter (torchtitan's `_save_list`, torchtitan/distributed/activation_checkpoint.py).
SAVED_OPS = tuple(op for op in (
    getattr(torch.ops.aten, "_scaled_dot_product_flash_attention", None),
    getattr(torch.ops.aten, "_scaled_dot_product_efficient_attention", None),
    getattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention", None),
    getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None),
    getattr(torch.ops._c10d_functional, "reduce_scatter_tensor", None)) if op is not None)


def op_checkpoint_policy(counts: collections.Counter) -> Callable[..., CheckpointPolicy]:
    """torchtitan's per-op selective checkpointing policy (selective_ac_option 'op'): keep every odd-numbered matmul
    of the layer's forward and the SAVED_OPS outputs, recompute the rest (norms, activations, rotary, the even
    matmuls); the recompute counts its matmuls separately so it keeps the same ones. What it keeps is what the cost
    model prices (costmodel.analytical.memory.op_checkpoint_linears)."""
    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func in MATMULS:
            mode = "recompute" if ctx.is_recompute else "forward"
            counts[mode] += 1
            return CheckpointPolicy.MUST_SAVE if counts[mode] % 2 else CheckpointPolicy.PREFER_RECOMPUTE
        packet = getattr(func, "overloadpacket", None)
        return CheckpointPolicy.MUST_SAVE if packet in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def op_checkpoint_context() -> Any:
    """checkpoint's context_fn for one layer call: a fresh matmul count per call (torchtitan's per-call `meta`)."""
    return create_selective_checkpoint_contexts(op_checkpoint_policy(collections.Counter()))


class Block(nn.Module):
    """Pre-norm transformer layer (GPT-2 or Llama family, dense or MoE); `recompute` re-runs its forward in
    backward (full activation recompute), `recompute_core` only its attention core's (selective), `recompute_ops`
    the ops op-level checkpointing does not keep (op_checkpoint_policy)."""

    def __init__(self, cfg: BlockConfig, recompute: bool = False, recompute_core: bool = False,
                 recompute_ops: bool = False):
        super().__init__()
        s = cfg.shape
        if s.norms not in (2, 4):
            raise ValueError(f"the bundled trainer builds 2 pre-norms or 2 pre- + 2 post-norms (Gemma 2) per layer, "
                             f"not norms_per_layer={s.norms}")
        self.ln1 = make_norm(s, s.d_model)
        self.attn = Attention(cfg, recompute_core)
        self.ln2 = make_norm(s, s.d_model)
        self.mlp = MoE(cfg) if s.moe else make_mlp(cfg, s.d_ff)
        self.post_attn_norm: Optional[nn.Module] = make_norm(s, s.d_model) if s.norms == 4 else None
        self.post_mlp_norm: Optional[nn.Module] = make_norm(s, s.d_model) if s.norms == 4 else None
        self.recompute = recompute
        self.recompute_ops = recompute_ops
        # DeepSpeed's checkpoint function where the run keeps checkpoints in host RAM (Plan.offload_activations:
        # strategies.zero), else torch's
        self.checkpoint_fn: Optional[Callable[..., torch.Tensor]] = None

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.attn(self.ln1(x))
        x = x + (self.post_attn_norm(a) if self.post_attn_norm is not None else a)
        m = self.mlp(self.ln2(x))
        return x + (self.post_mlp_norm(m) if self.post_mlp_norm is not None else m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            # Activation checkpointing (Chen et al. 2016): keep only the block input.
            if self.checkpoint_fn is not None:
                return self.checkpoint_fn(self._forward, x)
            return checkpoint(self._forward, x, use_reentrant=False)
        if self.recompute_ops and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False, context_fn=op_checkpoint_context)
        return self._forward(x)

    def residual_projections(self) -> list[nn.Linear]:
        """The Linears that write into the residual stream (attention out, MLP/expert down)."""
        mlps = [self.mlp] if not isinstance(self.mlp, MoE) else [*self.mlp.experts, *(
            [self.mlp.shared] if self.mlp.shared is not None else [])]
        out = [self.attn.proj]
        for m in mlps:
            out.append(m.fc2 if isinstance(m, MLP) else cast(GatedMLP, m).down)
        return out
