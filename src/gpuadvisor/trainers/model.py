"""The one decoder every strategy trains: a pre-norm transformer built from a `ModelSpec`.

Layout (GPT-2, Radford et al. 2019; the A6000 paper's SimpleTransformerDecoder, §II-C):
token embedding (+ learned positions when max_seq_len > 0) -> n_layers x Block -> final norm -> LM head.
The Block (`blocks.py`) is GPT-2's [LN -> causal self-attention -> +res, LN -> Linear -> GELU -> Linear -> +res]
for mlp "gelu", or the Llama family's (RMSNorm, RoPE, GQA, SwiGLU/GeGLU, QK-norm, MoE) as the spec says;
its parameter count equals `workload.shapes.model_params(spec)` (tested).

Written so the parallel strategies can cut it without rewriting it:
- tensor parallel shards `attn.q/k/v` and `mlp.fc1` (gated: `gate`, `up`) column-wise and `attn.proj`/`mlp.fc2`
  (gated: `down`) row-wise, every MoE expert like the dense MLP
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
from typing import Any, cast

import torch
import torch.nn as nn

from ..schemas.workload import ModelSpec
from .blocks import Block, BlockConfig, make_norm


class Embedding(nn.Module):
    """Token embedding + learned absolute positions (`max_seq_len` > 0), or tokens only (rotary models add
    positions inside attention)."""

    def __init__(self, vocab_size: int, max_seq_len: int, d_model: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_seq_len, d_model) if max_seq_len else None

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if self.pos is None:
            return self.tok(idx)
        t = idx.shape[1]
        if t > self.pos.num_embeddings:
            raise ValueError(f"sequence length {t} exceeds the model's max_seq_len {self.pos.num_embeddings}")
        return self.tok(idx) + self.pos(torch.arange(t, device=idx.device))


class GPT(nn.Module):
    """Decoder-only language model; `forward(idx) -> logits (B, T, V)`."""

    def __init__(self, spec: ModelSpec, seq_len: int, recompute: bool = False, tie: bool | None = None,
                 recompute_interval: int = 1, recompute_attention: bool = False, recompute_ops: bool = False):
        super().__init__()
        if spec.kind != "transformer":
            raise ValueError(f"model '{spec.name}' is generic (params + FLOPs); the GPT trainer needs a transformer shape")
        if spec.max_seq_len and seq_len > spec.max_seq_len:
            raise ValueError(f"seq_len {seq_len} exceeds max_seq_len {spec.max_seq_len} of '{spec.name}'")
        self.spec = spec
        self.embed = Embedding(spec.vocab_size, spec.max_seq_len, spec.d_model)
        configs = [BlockConfig.from_spec(spec, i) for i in range(spec.n_layers)]
        # every recompute_interval-th block checkpointed (torchtitan's layer-level selective AC counts the same way)
        # (recompute_attention: every block's attention core, Megatron's selective recompute; recompute_ops: every
        # block's op-level selective checkpointing, torchtitan's 'op')
        self.blocks = nn.ModuleList(Block(c, recompute and i % recompute_interval == 0, recompute_attention,
                                          recompute_ops) for i, c in enumerate(configs))
        self.ln_f = make_norm(configs[0].shape, spec.d_model)
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.apply(self._init)
        # GPT-2: scale residual projections (attention out, MLP/expert down) by 1/sqrt(2 L).
        for b in self.blocks:
            for lin in cast(Block, b).residual_projections():
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * spec.n_layers))
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
        self.tp_slices: Any = None  # a tp DeviceMesh: exchange hidden-dimension slices with the next/previous stage
        if gpt.tied and not (is_first and is_last):
            raise ValueError("build the model with tie=False before splitting it into pipeline stages")

    def exchange_tp_slices(self, tp_mesh: Any) -> None:
        """Megatron's scatter-gather between pipeline stages under TP without sequence parallelism (Megatron-LM's
        scatter_gather_tensors_in_pipeline, on unless --no-scatter-gather-tensors-in-pipeline): the hidden states a
        stage hands on are equal on every TP rank, so each TP rank sends only its 1/tp slice of the hidden
        dimension and the next stage all-gathers them over the fast TP links; in backward the received gradient
        slices are all-gathered the same way. The pipeline then moves b·s·h/tp per rank, the bytes the cost model
        prices, not b·s·h."""
        self.tp_slices = tp_mesh

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        elif self.tp_slices is not None:
            x = _tp_gather(x, self.tp_slices)
        for b in self.blocks:
            x = b(x)
        if self.head is not None and self.ln_f is not None:  # set together, on the last stage
            x = self.head(self.ln_f(x))
        elif self.tp_slices is not None:
            x = _tp_slice(x, self.tp_slices)
        return x


def _tp_slice(x: torch.Tensor, tp_mesh: Any) -> torch.Tensor:
    """This TP rank's 1/tp slice of the last (hidden) dimension of a tensor equal on every TP rank; backward
    all-gathers the gradient slices (DTensor Replicate -> Shard redistribution)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    return DTensor.from_local(x, tp_mesh, [Replicate()], run_check=False).redistribute(
        tp_mesh, [Shard(x.dim() - 1)]).to_local()


def _tp_gather(x: torch.Tensor, tp_mesh: Any) -> torch.Tensor:
    """The whole tensor from every TP rank's slice of the last dimension (all-gather); backward keeps this rank's
    slice of the gradient, which TP leaves equal on every rank."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    n = tp_mesh.size()
    shape = (*x.shape[:-1], x.shape[-1] * n)
    stride = torch.empty(shape, device="meta").stride()
    return DTensor.from_local(x, tp_mesh, [Shard(x.dim() - 1)], run_check=False, shape=torch.Size(shape),
                              stride=stride).redistribute(tp_mesh, [Replicate()]).to_local()


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
              tie: bool | None = None, recompute_interval: int = 1, recompute_attention: bool = False,
              recompute_ops: bool = False) -> GPT:
    """Build the full model from `seed` on CPU: every rank and strategy starts from identical weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT(spec, seq_len, recompute=recompute, tie=tie, recompute_interval=recompute_interval,
                   recompute_attention=recompute_attention, recompute_ops=recompute_ops)
