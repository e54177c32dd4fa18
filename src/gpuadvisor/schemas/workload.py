"""What the user wants to train: the model's shape and the training settings."""
from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import Field, model_validator

from ._base import Frozen

Precision = Literal["fp32", "bf16", "fp16"]


#: Largest transformer shape accepted (10x beyond today's largest published models).
MAX_SHAPE = {"n_layers": 10_000, "d_model": 1_000_000, "n_heads": 100_000, "d_ff": 10_000_000,
             "vocab_size": 100_000_000}


class ModelSpec(Frozen):
    """A model's shape. Transformers give layers/hidden/heads; anything else gives params + FLOPs."""

    name: str = Field(description="Display name, e.g. 'gpt2-xl (1.5B)'")
    kind: Literal["transformer", "generic"] = "transformer"
    n_layers: int = 0
    d_model: int = 0
    n_heads: int = 0
    d_ff: int = 0
    vocab_size: int = 0
    max_seq_len: int = Field(0, description="Learned position table length (0 for rotary/none)")
    tied_embeddings: bool = True
    n_kv_heads: int = Field(0, description="Key/value heads (grouped-query attention, e.g. Llama-2-70B); 0 = n_heads")
    mlp: Literal["gelu", "swiglu"] = Field(
        "gelu",
        description="gelu: GPT-2 block (2-matrix MLP, biases, LayerNorm); "
        "swiglu: Llama block (3-matrix gated MLP, no biases, RMSNorm)",
    )
    params_override: Optional[int] = Field(None, description="Parameter count for generic models")
    flops_per_sample: Optional[float] = Field(None, description="Training FLOPs per sample (generic models)")
    activation_bytes_per_sample: Optional[float] = Field(None, description="Peak activation bytes per sample (generic)")
    source: str = Field("", description="Where the shape comes from (paper/table, HF config path)")

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.kind == "transformer":
            for f in ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size"):
                if getattr(self, f) <= 0:
                    raise ValueError(f"model '{self.name}': {f} must be a positive integer for a transformer")
                if getattr(self, f) > MAX_SHAPE[f]:
                    raise ValueError(f"model '{self.name}': {f} {getattr(self, f)} is above {MAX_SHAPE[f]}; "
                                     "check the model's config")
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"model '{self.name}': d_model {self.d_model} is not divisible by n_heads {self.n_heads}"
                )
            if self.n_kv_heads < 0 or (self.n_kv_heads and self.n_heads % self.n_kv_heads):
                raise ValueError(
                    f"model '{self.name}': n_kv_heads {self.n_kv_heads} must divide n_heads {self.n_heads}"
                )
        else:
            if not self.params_override or not self.flops_per_sample:
                raise ValueError(
                    f"model '{self.name}': a generic model needs params and flops_per_sample"
                )
            for f in ("params_override", "flops_per_sample", "activation_bytes_per_sample"):
                v = getattr(self, f)
                if v is not None and not (math.isfinite(v) and 0 < v <= 1e21):
                    raise ValueError(f"model '{self.name}': {f} must be a positive finite number, got {v}")
        return self

    @property
    def params(self) -> int:
        """Parameter count from the shape (exact for GPT-2 and Llama checkpoints).

        gelu (GPT-2, Radford et al. 2019): per layer 4h² attention + 2·h·d_ff MLP + biases (5h + d_ff)
        + two LayerNorms (4h); final LayerNorm 2h. swiglu (Llama, Touvron et al. 2023): per layer
        2h² + 2·h·h_kv attention (h_kv = h·n_kv_heads/n_heads) + 3·h·d_ff gated MLP + two RMSNorms (2h),
        no biases; final RMSNorm h. Embeddings V·h plus S·h learned positions, plus V·h for an untied head.
        """
        if self.params_override:
            return int(self.params_override)
        h, L, f = self.d_model, self.n_layers, self.d_ff
        kv = h * (self.n_kv_heads or self.n_heads) // self.n_heads
        if self.mlp == "swiglu":
            per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
            final_norm = h
        else:
            per_layer = 2 * h * h + 2 * h * kv + 2 * h * f + 9 * h + f
            final_norm = 2 * h
        emb = self.vocab_size * h + self.max_seq_len * h
        head = 0 if self.tied_embeddings else self.vocab_size * h
        return int(L * per_layer + emb + head + final_norm)


#: Input bounds (beyond them a number is a typo, not a training run).
MAX_SEQ_LEN = 2 ** 21
MAX_GLOBAL_BATCH = 2 ** 31
MAX_TOKEN_BUDGET = 1e16


class TrainingSettings(Frozen):
    """How the user wants to train."""

    seq_len: int = Field(1024, description="Tokens per sequence (ignored for generic models)")
    global_batch: int = Field(8, description="Sequences (or samples) per optimizer step, all ranks together")
    precision: Precision = "bf16"
    optimizer: Literal["adam", "adamw", "sgd"] = "adamw"
    allow_recompute: bool = True
    allow_batch_change: bool = Field(False, description="May the advisor change global batch (LR is rescaled)")
    token_budget: Optional[float] = Field(None, description="Total tokens to train on (time-to-train)")

    @model_validator(mode="after")
    def _check(self) -> "TrainingSettings":
        if self.seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {self.seq_len}")
        if self.seq_len > MAX_SEQ_LEN:
            raise ValueError(f"seq_len {self.seq_len} is above the supported {MAX_SEQ_LEN}; "
                             "give a real sequence length")
        if self.global_batch <= 0:
            raise ValueError(f"global batch must be positive, got {self.global_batch}")
        if self.global_batch > MAX_GLOBAL_BATCH:
            raise ValueError(f"global batch {self.global_batch} is above the supported {MAX_GLOBAL_BATCH}; "
                             "give sequences per optimizer step")
        tb = self.token_budget
        if tb is not None and not (math.isfinite(tb) and 0 < tb <= MAX_TOKEN_BUDGET):
            raise ValueError(f"token budget must be a positive finite number of tokens up to {MAX_TOKEN_BUDGET:g}, "
                             f"got {tb}")
        return self


class Workload(Frozen):
    """Model + training settings: the second input of ranking."""

    model: ModelSpec
    training: TrainingSettings = Field(default_factory=TrainingSettings)

    @property
    def tokens_per_step(self) -> int:
        return self.training.global_batch * (self.training.seq_len if self.model.kind == "transformer" else 1)
