"""What the user wants to train: the model's shape and the training settings."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from ._base import Frozen

Precision = Literal["fp32", "bf16", "fp16"]


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
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"model '{self.name}': d_model {self.d_model} is not divisible by n_heads {self.n_heads}"
                )
        else:
            if not self.params_override or not self.flops_per_sample:
                raise ValueError(
                    f"model '{self.name}': a generic model needs params and flops_per_sample"
                )
        return self

    @property
    def params(self) -> int:
        """Parameter count: 12·L·h² + 13·L·h (approx. with biases/norms) + embeddings (V·h + S·h)."""
        if self.params_override:
            return int(self.params_override)
        h, L = self.d_model, self.n_layers
        per_layer = 2 * h * self.d_ff + 4 * h * h + 9 * h + self.d_ff  # attn qkv+proj, mlp, biases, 2 norms
        emb = self.vocab_size * h + self.max_seq_len * h
        head = 0 if self.tied_embeddings else self.vocab_size * h
        return int(L * per_layer + emb + head + 2 * h)


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
        if self.global_batch <= 0:
            raise ValueError(f"global batch must be positive, got {self.global_batch}")
        return self


class Workload(Frozen):
    """Model + training settings: the second input of ranking."""

    model: ModelSpec
    training: TrainingSettings = Field(default_factory=TrainingSettings)

    @property
    def tokens_per_step(self) -> int:
        return self.training.global_batch * (self.training.seq_len if self.model.kind == "transformer" else 1)
