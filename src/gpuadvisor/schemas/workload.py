"""What the user wants to train: the model's shape and the training settings."""
from __future__ import annotations

import math
from typing import Literal, NamedTuple, Optional, get_args

from pydantic import Field, model_validator

from ._base import Frozen

#: fp8: FP8 tensor-core GEMMs in the Linear layers (Transformer Engine / torchao float8 training) with bf16
#: everywhere else (attention core, norms, gradients, fp32 master weights and Adam states).
Precision = Literal["bf16", "fp16", "fp32", "fp8"]
#: The precisions, for every command's choices and checks
PRECISIONS: tuple[str, ...] = get_args(Precision)
#: The attention kernel the training stack runs: "flash" is FlashAttention-2 (PyTorch SDPA's default fused kernel
#: on GPUs, flash-attn 2, Hugging Face, DeepSpeed, torchtitan, the bundled trainers); "cudnn" is cuDNN's fused
#: attention as Transformer Engine runs it in Megatron-Core and NeMo (FlashAttention-3 class on Hopper/Blackwell);
#: "flash3" is FlashAttention-3 on Hopper / FlashAttention-4 on Blackwell (flash-attn 3/4, Hugging Face
#: attn_implementation "flash_attention_3"), the architecture's own kernels, in PyTorch layers.
AttentionKernel = Literal["flash", "flash3", "cudnn", "eager"]
ATTENTION_KERNELS: tuple[str, ...] = get_args(AttentionKernel)
#: The FlashAttention kernels in PyTorch layers (FlashAttention-2 / SDPA, FlashAttention-3/4): they store what the
#: PyTorch stacks store and have no attention sinks
FLASH_KERNELS: tuple[str, ...] = ("flash", "flash3")
#: What the layers and the loss store (TrainingSettings.kernels): "eager" PyTorch modules (the bundled trainers, HF,
#: accelerate), "fused" norm/loss kernels and FlashAttention's own layout (llm-foundry, torch.compile, TE),
#: "fused-layers" compiled layers beside an eager loss on an fp32 copy of the logits (torch.compile of the model
#: alone: torchtitan until its loss was compiled too, its compile.components = ["model"]), "hf" Hugging Face
#: transformers' modeling code run eagerly (op-by-op fp32 RMSNorm, rotate-half rotary, repeat_kv, act·up as two
#: kernels; torchtitan's own modules of 2024 without torch.compile too): eager storage and loss, and the extra HBM
#: traffic of those ops (costmodel/analytical/compute.hf_eager_traffic), "liger" fused layers and a fused linear
#: cross-entropy that never holds the logits whole (Liger-Kernel on a Hugging Face model: memory.chunked_loss_bytes).
Kernels = Literal["eager", "fused", "fused-layers", "hf", "liger"]
KERNELS: tuple[str, ...] = get_args(Kernels)


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
    mlp: Literal["gelu", "swiglu", "geglu"] = Field(
        "gelu",
        description="gelu: GPT-2 block (2-matrix MLP, biases, LayerNorm); "
        "swiglu: Llama block (3-matrix gated MLP, no biases, RMSNorm); geglu: gated like swiglu with a GeLU "
        "gate (Gemma)",
    )
    # Finer layer shape (all optional; the defaults reproduce the GPT-2 / Llama blocks that `mlp` names).
    head_dim: int = Field(0, description="Width of one attention head; 0 = d_model / n_heads (Gemma 2: 256)")
    norm: Optional[Literal["layernorm", "rmsnorm"]] = Field(
        None, description="LayerNorm (weight + bias, 2h) or RMSNorm (weight, h); None = layernorm for gelu, "
        "rmsnorm for gated MLPs")
    norms_per_layer: int = Field(2, description="Norms in one layer: 2 pre-norms; Gemma 2/3 add 2 post-norms (4)")
    qk_norm: bool = Field(False, description="RMSNorm over head_dim on queries and keys (Qwen3, Gemma 3)")
    bias: Optional[bool] = Field(
        None, description="Biases on every linear layer (GPT-2); None = true for gelu, false for gated MLPs")
    qkv_bias: Optional[bool] = Field(None, description="Biases on the Q/K/V projections only (Qwen2); None = bias")
    dropout: Optional[bool] = Field(
        None, description="Dropout masks stored for backward; None = true for gelu (GPT-2 trains with 0.1), "
        "false for gated MLPs (Llama-family configs have no or 0.0 dropout)")
    n_experts: int = Field(0, description="Routed experts per MoE layer (Mixtral 8, Qwen3-30B-A3B 128); 0 = dense")
    experts_per_token: int = Field(0, description="Experts each token is routed to (top-k)")
    expert_d_ff: int = Field(0, description="Width of one routed expert's MLP; 0 = d_ff")
    shared_expert_d_ff: int = Field(0, description="Width of the always-active shared expert MLP; 0 = none")
    sliding_window: int = Field(0, description="Sliding-window attention span in tokens; 0 = full attention")
    sliding_window_layers: Optional[int] = Field(
        None, description="How many of the layers use the sliding window (Gemma 2: half); None = all")
    attention_sinks: bool = Field(
        False, description="A learned per-head logit in every softmax's denominator (GPT-OSS). FlashAttention-2 has "
        "no kernel for it, so on the flash stack the core runs unfused (HF trains GPT-OSS with "
        "attn_implementation='eager'); Transformer Engine's cuDNN attention fuses it from cuDNN 9.18")
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
            if self.d_model % self.n_heads and not self.head_dim:
                raise ValueError(
                    f"model '{self.name}': d_model {self.d_model} is not divisible by n_heads {self.n_heads}"
                )
            self._check_moe_and_window()
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

    def _check_moe_and_window(self) -> None:
        """Shape fields beyond the basic five: one-line errors naming the field and the fix."""
        for f in ("head_dim", "n_experts", "experts_per_token", "expert_d_ff", "shared_expert_d_ff",
                  "sliding_window"):
            v = getattr(self, f)
            if v < 0 or v > MAX_SHAPE["d_ff"]:
                raise ValueError(f"model '{self.name}': {f} {v} must be between 0 and {MAX_SHAPE['d_ff']}")
        if not 1 <= self.norms_per_layer <= 8:
            raise ValueError(f"model '{self.name}': norms_per_layer {self.norms_per_layer} must be 1-8")
        if self.n_experts and not 1 <= self.experts_per_token <= self.n_experts:
            raise ValueError(f"model '{self.name}': experts_per_token {self.experts_per_token} must be 1 to "
                             f"n_experts {self.n_experts} for a mixture-of-experts model")
        if not self.n_experts and (self.experts_per_token or self.shared_expert_d_ff):
            raise ValueError(f"model '{self.name}': experts_per_token/shared_expert_d_ff need n_experts > 0")
        swl = self.sliding_window_layers
        if swl is not None and not (self.sliding_window and 0 <= swl <= self.n_layers):
            raise ValueError(f"model '{self.name}': sliding_window_layers {swl} needs a sliding_window and "
                             f"at most n_layers {self.n_layers}")

    @property
    def params(self) -> int:
        """Total parameter count (what memory holds), counted from the layer shapes.

        The single count lives in `gpuadvisor.workload.shapes` (per layer: attention Q/K/V/O with GQA
        and head_dim, dense or gated MLP or MoE experts + router, norms, biases where the family has them;
        plus embeddings, learned positions, untied head and final norm). Generic models: params_override.
        """
        if self.params_override:
            return int(self.params_override)
        from ..workload.shapes import model_params  # lazy: workload imports this module

        return model_params(self)

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (MoE: top-k routed + shared experts); = params for dense models."""
        if self.params_override:
            return int(self.params_override)
        from ..workload.shapes import model_params

        return model_params(self, active=True)


#: Input bounds (beyond them a number is a typo, not a training run).
MAX_SEQ_LEN = 2 ** 21
MAX_GLOBAL_BATCH = 2 ** 31
MAX_TOKEN_BUDGET = 1e16


class BatchDefault(NamedTuple):
    """A default global batch (sequences, or samples for a generic model) and where it comes from
    (gpuadvisor.workload.batch_defaults.default_batch decides it)."""

    global_batch: int
    why: str


class TrainingSettings(Frozen):
    """How the user wants to train."""

    seq_len: int = Field(1024, description="Tokens per sequence (ignored for generic models)")
    global_batch: int = Field(8, description="Sequences (or samples) per optimizer step, all ranks together")
    precision: Precision = "bf16"
    attention_kernel: AttentionKernel = Field("flash", description="Attention kernel of the training stack: "
                                              "flash (FlashAttention-2, PyTorch SDPA; eager PyTorch layers), "
                                              "flash3 (FlashAttention-3 on Hopper, FlashAttention-4 on Blackwell: "
                                              "flash-attn 3/4, HF attn_implementation='flash_attention_3'; "
                                              "PyTorch layers), "
                                              "cudnn (Transformer Engine layers, whose stored activations and FP8 "
                                              "weight caches are priced too) or eager (an unfused core that "
                                              "materialises the s x s scores: HF attn_implementation='eager', "
                                              "Megatron's local layers, Megatron-DeepSpeed without "
                                              "--use-flash-attn)")
    kernels: Kernels = Field(
        "eager", description="How the stack runs norms, the attention's data movement and the loss, which sets what "
                             "the layers store: eager (PyTorch modules, as the bundled trainers, HF and accelerate "
                             "run them: under torch.autocast each norm saves an fp32 copy of its input, K and V are "
                             "repeated to every head before SDPA and its output is copied for the projection, the "
                             "loss runs on an fp32 copy of the logits, a MoE layer loops over its experts in "
                             "Python) or fused (fused norm and cross-entropy kernels, FlashAttention's own layout "
                             "and grouped-GEMM experts: llm-foundry's MPT, torch.compile, Transformer "
                             "Engine, Megatron, torchtitan) or liger (fused as above, and a fused linear "
                             "cross-entropy that computes the logits a chunk of tokens at a time and never holds "
                             "them whole: Liger-Kernel's, as Axolotl, TRL and LLaMA-Factory enable it) or "
                             "fused-layers (fused layers, eager fp32 loss: "
                             "torch.compile of the model alone) or hf (Hugging Face transformers' modeling code run "
                             "eagerly: eager storage and loss, and the HBM passes of its op-by-op fp32 RMSNorm, "
                             "rotate-half rotary, repeat_kv and act·up). attention_kernel cudnn implies fused")
    optimizer: Literal["adam", "adamw", "sgd"] = "adamw"
    grad_reduce_in_bf16: bool = Field(
        False, description="Megatron only: keep and reduce the gradients in bf16 (--grad-reduce-in-bf16, as NVIDIA's "
                           "Megatron-Bridge performance recipes set grad_reduce_in_fp32 = False) instead of the fp32 "
                           "gradient buffer Megatron uses with bf16 by default (4 bytes per parameter on the device "
                           "and on the wire)")
    fp8_param_gather: bool = Field(
        False, description="Megatron only, precision fp8 on Transformer Engine layers (attention_kernel cudnn): keep "
                           "the Linears' weights in FP8 as their only copy and all-gather them in FP8 "
                           "(--fp8-param-gather, which NVIDIA's NeMo and Megatron-Bridge FP8 recipes set): with the "
                           "distributed optimizer, 1 + 1 bytes per Linear parameter (row-wise and transposed FP8) "
                           "instead of the bf16 weight beside Transformer Engine's FP8 copies, and 1 byte on the "
                           "wire instead of 2")
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
        if self.fp8_param_gather and self.precision != "fp8":
            raise ValueError(f"fp8_param_gather (--fp8-param-gather) keeps FP8 weights, which precision "
                             f"{self.precision} does not train; use precision fp8 (--precision fp8) or drop it")
        if self.fp8_param_gather and self.attention_kernel != "cudnn":
            raise ValueError("fp8_param_gather (--fp8-param-gather) keeps Transformer Engine's FP8 weights; use "
                             "attention_kernel cudnn (--attention-kernel cudnn: Megatron-Core/NeMo layers) instead of "
                             f"{self.attention_kernel}, or drop it")
        tb = self.token_budget
        if tb is not None and not (math.isfinite(tb) and 0 < tb <= MAX_TOKEN_BUDGET):
            raise ValueError(f"token budget must be a positive finite number of tokens up to {MAX_TOKEN_BUDGET:g}, "
                             f"got {tb}")
        return self


#: Linear layers a LoRA adapter can sit on, by role (peft's names differ per family: q_proj/.../down_proj for
#: Llama, c_attn/c_proj/c_fc for GPT-2; the trainers and emitters map them). gelu MLPs have up/down only.
LoraTarget = Literal["q", "k", "v", "o", "gate", "up", "down"]
ALL_LINEAR: tuple[LoraTarget, ...] = ("q", "k", "v", "o", "gate", "up", "down")
MAX_LORA_RANK = 4096


class FineTune(Frozen):
    """Which weights train: all of them (full), or low-rank adapters on a frozen base (LoRA, QLoRA).

    LoRA: Hu et al. 2021 (arXiv:2106.09685), W x + (alpha/r) B A x with A (r x in) and B (out x r) trained.
    QLoRA: Dettmers et al. 2023 (arXiv:2305.14314): the frozen base stored as 4-bit NormalFloat (NF4, blocks of
    64 with an absmax each), double quantisation of those absmax constants (8-bit, blocks of 256), bf16 compute;
    adapters on *all* linear layers are what matches full fine-tuning there (§4), hence the default targets.
    """

    method: Literal["full", "lora", "qlora"] = "full"
    lora_rank: int = Field(16, description="LoRA rank r (adapter width)")
    lora_alpha: Optional[float] = Field(None, description="LoRA scaling alpha; None = 2 x rank")
    target_modules: tuple[LoraTarget, ...] = Field(
        ALL_LINEAR, description="Linear layers that get adapters (q,k,v,o attention; gate,up,down MLP)")
    double_quant: bool = Field(True, description="QLoRA: quantise the NF4 block constants too (-0.37 bit/param)")

    @model_validator(mode="after")
    def _check(self) -> "FineTune":
        if not 1 <= self.lora_rank <= MAX_LORA_RANK:
            raise ValueError(f"LoRA rank must be 1 to {MAX_LORA_RANK}, got {self.lora_rank}")
        a = self.lora_alpha
        if a is not None and not (math.isfinite(a) and a > 0):
            raise ValueError(f"LoRA alpha must be a positive finite number, got {a}")
        if not self.target_modules:
            raise ValueError("LoRA needs at least one target module (q,k,v,o,gate,up,down)")
        if len(set(self.target_modules)) != len(self.target_modules):
            raise ValueError(f"LoRA target modules repeat: {','.join(self.target_modules)}; name each once")
        return self

    @property
    def adapters(self) -> bool:
        """True when only adapters train (LoRA, QLoRA)."""
        return self.method != "full"

    @property
    def alpha(self) -> float:
        return self.lora_alpha if self.lora_alpha is not None else 2.0 * self.lora_rank


class Workload(Frozen):
    """Model + training settings: the second input of ranking."""

    model: ModelSpec
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    finetune: FineTune = Field(default_factory=FineTune)

    @model_validator(mode="after")
    def _check_finetune(self) -> "Workload":
        if self.finetune.adapters and self.model.kind != "transformer":
            raise ValueError(f"{self.finetune.method} needs a transformer model (its linear layers get the "
                             f"adapters); '{self.model.name}' is generic: use --finetune full")
        if self.finetune.adapters and self.training.precision == "fp8":
            # FP8 training as priced (Transformer Engine / torchao float8) swaps the trained nn.Linear layers;
            # the adapter hand-over (launch/peft.py: transformers + peft) and the bundled trainers
            # (trainers/lora.py) keep the frozen base in bf16 (QLoRA: NF4 dequantised to bf16), so an FP8
            # prediction of an adapter run would describe no file gpuadvisor writes
            label = {"lora": "LoRA", "qlora": "QLoRA"}[self.finetune.method]
            raise ValueError(f"{label} with --precision fp8 is not supported: train_lora.py (transformers + peft) "
                             "and the bundled trainers keep the frozen base in bf16, so an FP8 prediction would "
                             "not describe the run; use --precision bf16, or --finetune full for FP8 training")
        if self.training.precision == "fp8" and self.model.kind != "transformer":
            # FP8 training swaps a transformer's nn.Linear layers (Transformer Engine, torchao float8); a convnet's
            # convolutions stay bf16, and the cost model prices FP8 for transformer Linears only
            raise ValueError(f"--precision fp8 runs a transformer's Linear layers in FP8; '{self.model.name}' is "
                             "not a transformer: use --precision bf16")
        return self

    @property
    def tokens_per_step(self) -> int:
        return self.training.global_batch * (self.training.seq_len if self.model.kind == "transformer" else 1)

    @property
    def core_kernel(self) -> str:
        """The attention kernel the core runs: TrainingSettings.attention_kernel, except that a model with attention
        sinks (ModelSpec.attention_sinks, GPT-OSS) on the flash stack runs unfused ("eager"): FlashAttention-2 has
        no kernel for the sink logit (Dao-AILab/flash-attention #1895, TE disables it for softmax_type
        'learnable'), and HF trains GPT-OSS with attn_implementation='eager'."""
        kernel = self.training.attention_kernel
        return "eager" if kernel in FLASH_KERNELS and self.model.attention_sinks else kernel
