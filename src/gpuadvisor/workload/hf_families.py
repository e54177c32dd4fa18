"""What each supported HuggingFace `model_type` builds, beyond what its config.json states.

Every entry is read off the family's modelling code in HuggingFace transformers (models/<type>/modeling_*.py):
which blocks are gated, where biases and norms sit, how sliding-window layers and experts are laid out, and
the config class's default for tie_word_embeddings when a config.json omits it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """Layout facts of one model_type that its config.json does not spell out."""

    label: str
    tied_default: bool = False       # the config class's tie_word_embeddings default
    qkv_bias: bool = False           # q/k/v projections built with bias=True regardless of config keys
    qk_norm: bool = False            # RMSNorm over head_dim on queries and keys
    norms_per_layer: int = 2         # input + post-attention RMSNorm; Gemma 2/3 add pre/post-feedforward norms
    moe: str = ""                    # "" dense; "mixtral": num_local_experts x intermediate_size;
    #                                  "qwen": num_experts x moe_intermediate_size (+ shared expert)
    sliding: str = ""                # "": none; "all": every layer when sliding_window is set;
    #                                  "qwen": use_sliding_window and layer index >= max_window_layers;
    #                                  "alternate": even layers (Gemma 2); "pattern": all but every k-th (Gemma 3)
    bias: bool = False               # every Linear, experts and output projection included, built with a bias
    sinks: bool = False              # a learned per-head logit in the softmax (ModelSpec.attention_sinks)


#: model_type -> layout. Sources: transformers modeling_llama.py (LlamaMLP gate/up/down, attention_bias,
#: mlp_bias), modeling_mistral.py (sliding_window on every layer), modeling_mixtral.py (MixtralSparseMoeBlock:
#: gate h x num_local_experts without bias, experts w1/w2/w3), modeling_qwen2.py (q/k/v bias=True, o bias False;
#: sliding layers from max_window_layers), modeling_qwen2_moe.py (shared_expert + gate), modeling_qwen3.py and
#: modeling_qwen3_moe.py (q_norm/k_norm over head_dim, attention_bias), modeling_gemma.py (GeGLU, tied),
#: modeling_gemma2.py (4 norms, sliding window on even layers), modeling_gemma3.py (q/k norms, 5 local : 1 global
#: via sliding_window_pattern), modeling_phi3.py (fused qkv_proj and gate_up_proj: same parameter count, no bias),
#: modeling_gpt_oss.py (GptOssAttention's q/k/v/o with attention_bias and its `sinks` parameter, GptOssExperts'
#: gate_up_proj_bias and down_proj_bias, a biased router; layer_types alternate sliding and full from layer 0).
FAMILIES: dict[str, Family] = {
    "llama": Family("Llama"),
    "mistral": Family("Mistral", sliding="all"),
    "mixtral": Family("Mixtral", moe="mixtral", sliding="all"),
    "qwen2": Family("Qwen2", qkv_bias=True, sliding="qwen"),
    "qwen2_moe": Family("Qwen2-MoE", qkv_bias=True, moe="qwen", sliding="qwen"),
    "qwen3": Family("Qwen3", qk_norm=True, sliding="qwen"),
    "qwen3_moe": Family("Qwen3-MoE", qk_norm=True, moe="qwen", sliding="qwen"),
    "gemma": Family("Gemma", tied_default=True),
    "gemma2": Family("Gemma 2", tied_default=True, norms_per_layer=4, sliding="alternate"),
    "gemma3_text": Family("Gemma 3", tied_default=True, norms_per_layer=4, qk_norm=True, sliding="pattern"),
    "phi3": Family("Phi-3", sliding="all"),
    "gpt_oss": Family("GPT-OSS", moe="mixtral", sliding="alternate", bias=True, sinks=True),
}

#: Activations of the gated MLP: SiLU/Swish -> SwiGLU, GeLU variants -> GeGLU (Shazeer 2020).
GATE_ACTS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_new": "geglu",
             "gelu_pytorch_tanh": "geglu", "gelu_fast": "geglu"}
