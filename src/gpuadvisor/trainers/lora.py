"""LoRA and QLoRA on the bundled decoder, with peft (the ecosystem's adapter library).

LoRA (Hu et al. 2021, arXiv:2106.09685, §4.1): a frozen Linear W gets h = W x + (alpha / r) B A x with A (r x in,
Kaiming-uniform) and B (out x r, zeros) trained, so training starts from the base model's outputs. peft's
`LoraConfig(r=lora_rank, lora_alpha=alpha, lora_dropout=0)` builds exactly that; dropout 0 keeps the trial
deterministic, so every strategy reproduces the single-process losses.

QLoRA (Dettmers et al. 2023, arXiv:2305.14314, §3): the frozen base Linears are stored as 4-bit NormalFloat
(NF4, blocks of 64 with an absmax each; double quantisation quantises those absmax constants again, 8-bit in
blocks of 256) and dequantised to the compute dtype (bf16 on GPU; fp32 on CPU, where the trainers run fp32)
for each matmul; the LoRA adapters stay in full precision. The swap is bitsandbytes' `Linear4bit(quant_type=
"nf4", compress_statistics=double_quant)` on every Linear of the transformer blocks except the MoE router
(routing decisions stay exact, as bitsandbytes users skip MoE gates); embeddings and LM head stay unquantised
(transformers' default `llm_int8_skip_modules` is the head). Otherwise the path is LoRA's.

Roles -> module names (`blocks.ROLE_NAMES`): q, k, v and o ("proj") in attention; gate, up, down in a gated MLP,
up ("fc1") and down ("fc2") in GPT-2's MLP, which has no gate (a "gate" target is skipped there). Every MoE
expert's MLP gets adapters like the dense MLP; the router gets none.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..schemas.workload import FineTune
from .blocks import ROLE_NAMES, MoE
from .model import GPT


def target_names(model: GPT, ft: FineTune) -> list[str]:
    """Module-name suffixes peft should wrap for `ft.target_modules` on this model."""
    roles = ROLE_NAMES["gated" if model.spec.mlp != "gelu" else "gelu"]
    names = [roles[r] for r in ft.target_modules if r in roles]
    if not names:
        raise ValueError(f"none of the LoRA targets {','.join(ft.target_modules)} exists in a {model.spec.mlp} "
                         f"model (its roles: {','.join(roles)})")
    return names


def quantize_blocks(model: GPT, ft: FineTune, compute_dtype: torch.dtype) -> int:
    """Replace the blocks' Linears (not MoE routers) by bitsandbytes NF4 `Linear4bit` holding the same weights,
    quantised on the model's (CPU) device; returns how many were swapped."""
    import bitsandbytes as bnb

    routers = {id(m.router) for m in model.modules() if isinstance(m, MoE)}
    swapped = 0
    for block in model.blocks:
        for name, mod in list(block.named_modules()):
            if not isinstance(mod, nn.Linear) or id(mod) in routers:
                continue
            q = bnb.nn.Linear4bit(mod.in_features, mod.out_features, bias=mod.bias is not None,
                                  compute_dtype=compute_dtype, compress_statistics=ft.double_quant,
                                  quant_type="nf4")
            q.load_state_dict(mod.state_dict())
            q = q.to(mod.weight.device)  # Params4bit quantises on the first .to()
            parent_name, _, child = name.rpartition(".")
            setattr(block.get_submodule(parent_name) if parent_name else block, child, q)
            swapped += 1
    model.is_loaded_in_4bit = True  # type: ignore[assignment]  # peft then wraps Linear4bit with its bnb layer
    return swapped


def apply_lora(model: GPT, ft: FineTune, seed: int, compute_dtype: torch.dtype = torch.float32) -> GPT:
    """Freeze `model` and add LoRA adapters (QLoRA: on NF4-quantised base Linears) in place; returns the model.

    Adapter A matrices are drawn from `seed` so every rank and strategy starts from the same adapters.
    """
    from peft import LoraConfig, get_peft_model

    if not ft.adapters:
        return model
    if ft.method == "qlora":
        quantize_blocks(model, ft, compute_dtype)
    # peft annotates lora_alpha as int but scales by lora_alpha / r, so a fractional alpha works as written
    config = LoraConfig(r=ft.lora_rank, lora_alpha=ft.alpha, lora_dropout=0.0, bias="none",  # type: ignore[arg-type]
                        target_modules=target_names(model, ft))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        peft_model = get_peft_model(model, config)
    inner = peft_model.get_base_model()  # the same GPT, its Linears now peft LoRA layers, base frozen
    return inner  # type: ignore[return-value]


def trainable_names(model: nn.Module) -> list[str]:
    """Names of the parameters that train (after `apply_lora`: the lora_A / lora_B matrices only)."""
    return [n for n, p in model.named_parameters() if p.requires_grad]
