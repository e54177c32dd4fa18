"""The one GPT model every strategy trains: a pre-LN decoder built from a `ModelSpec`.

Layout (GPT-2, Radford et al. 2019; the A6000 paper's SimpleTransformerDecoder, §II-C):
token embedding + learned positions -> n_layers x [LN -> causal self-attention -> +res,
LN -> Linear(d_model, d_ff) -> GELU -> Linear(d_ff, d_model) -> +res] -> LN -> LM head.

Written so the parallel strategies can cut it without rewriting it:
- tensor parallel shards `attn.q/k/v` and `mlp.fc1` column-wise and `attn.proj`/`mlp.fc2` row-wise
  (Megatron-LM, Shoeybi et al. 2019, §3); q, k and v are separate Linears so a column split keeps
  whole heads, and attention reads the local head count from the tensor shape.
- pipeline parallel builds a `GPTStage` from a layer range: the first stage owns the embeddings,
  the last the final LayerNorm and the head.

Weight tying: the head shares the embedding matrix when `spec.tied_embeddings` and the whole
model lives on one pipeline stage. With pp > 1 the embedding (first stage) and head (last stage)
sit on different ranks, so the head is a separate parameter *initialised as a copy* of the embedding,
and the pipeline strategy sums the two copies' gradients between the first and last stage after every
step, as Megatron-LM does: both copies stay equal and training matches the tied model (tested).

No dropout: training is deterministic, so every strategy produces the same loss sequence.
"""
from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ..schemas.workload import ModelSpec


class Attention(nn.Module):
    """Causal multi-head self-attention with separate q/k/v projections (TP-friendly)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.head_dim = d_model // n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]
        # -1 heads: under tensor parallelism each rank holds n_heads / tp of them.
        q, k, v = (m(x).view(b, t, -1, self.head_dim).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    """Linear(d_model, d_ff) -> GELU -> Linear(d_ff, d_model)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-LN transformer layer; `recompute` re-runs its forward in backward (full recompute)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, recompute: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ff)
        self.recompute = recompute

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            # Activation checkpointing (Chen et al. 2016): keep only the block input.
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class Embedding(nn.Module):
    """Token embedding + learned absolute positions."""

    def __init__(self, vocab_size: int, max_seq_len: int, d_model: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_seq_len, d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.pos.num_embeddings:
            raise ValueError(f"sequence length {t} exceeds the model's max_seq_len {self.pos.num_embeddings}")
        return self.tok(idx) + self.pos(torch.arange(t, device=idx.device))


class GPT(nn.Module):
    """Decoder-only language model; `forward(idx) -> logits (B, T, V)`."""

    def __init__(self, spec: ModelSpec, seq_len: int, recompute: bool = False, tie: bool | None = None):
        super().__init__()
        if spec.kind != "transformer":
            raise ValueError(f"model '{spec.name}' is generic (params + FLOPs); the GPT trainer needs a transformer shape")
        max_len = spec.max_seq_len or seq_len
        if seq_len > max_len:
            raise ValueError(f"seq_len {seq_len} exceeds max_seq_len {max_len} of '{spec.name}'")
        self.spec = spec
        self.embed = Embedding(spec.vocab_size, max_len, spec.d_model)
        self.blocks = nn.ModuleList(
            Block(spec.d_model, spec.n_heads, spec.d_ff, recompute) for _ in range(spec.n_layers)
        )
        self.ln_f = nn.LayerNorm(spec.d_model)
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.apply(self._init)
        # GPT-2: scale residual projections by 1/sqrt(2 L).
        for b in self.blocks:
            blk = cast(Block, b)
            for w in (blk.attn.proj.weight, blk.mlp.fc2.weight):
                nn.init.normal_(w, std=0.02 / math.sqrt(2 * spec.n_layers))
        self.tied = spec.tied_embeddings if tie is None else tie
        if self.tied:
            self.head.weight = self.embed.tok.weight
        else:  # same starting point as the tied model
            with torch.no_grad():
                self.head.weight.copy_(self.embed.tok.weight)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class GPTStage(nn.Module):
    """A contiguous slice of a GPT for one pipeline stage: token ids or hidden states in, hidden or logits out."""

    def __init__(self, gpt: GPT, first_layer: int, last_layer: int, is_first: bool, is_last: bool):
        super().__init__()
        self.embed = gpt.embed if is_first else None
        self.blocks = nn.ModuleList(gpt.blocks[first_layer:last_layer])
        self.ln_f = gpt.ln_f if is_last else None
        self.head = gpt.head if is_last else None
        if gpt.tied and not (is_first and is_last):
            raise ValueError("build the model with tie=False before splitting it into pipeline stages")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        if self.head is not None and self.ln_f is not None:  # set together, on the last stage
            x = self.head(self.ln_f(x))
        return x


def split_layers(n_layers: int, n_chunks: int) -> list[tuple[int, int]]:
    """Layer ranges [start, end) of `n_chunks` pipeline chunks, as even as possible (earlier chunks get extras)."""
    if n_chunks > n_layers:
        raise ValueError(f"cannot split {n_layers} layers into {n_chunks} pipeline chunks; use pp*virtual <= layers")
    base, extra = divmod(n_layers, n_chunks)
    out, start = [], 0
    for i in range(n_chunks):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def build_gpt(spec: ModelSpec, seq_len: int, seed: int, recompute: bool = False,
              tie: bool | None = None) -> GPT:
    """Build the full model from `seed` on CPU: every rank and strategy starts from identical weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT(spec, seq_len, recompute=recompute, tie=tie)
