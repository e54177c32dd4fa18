"""LoRA/QLoRA trials train the adapters only: the base stays bit-identical, the optimizer holds state for the
adapters alone, and the roles map to this model's Linears (single process, fast)."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from gpuadvisor.schemas.workload import FineTune
from gpuadvisor.trainers.lora import apply_lora, target_names
from gpuadvisor.trainers.model import build_gpt
from gpuadvisor.trainers.parallel import setup, teardown
from gpuadvisor.trainers.strategies import build_strategy

from ._launch import job
from .test_llama import GPT2, LLAMA, MOE

HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None


def lora_job(spec, ft: FineTune):
    j = job(spec, steps=2, warmup=0)
    return j.model_copy(update={"workload": j.workload.model_copy(update={"finetune": ft})})


def train_single(j, steps: int = 3):
    """(strategy, parameters before, parameters after) of `steps` single-process optimizer steps."""
    ctx = setup(j)
    try:
        strat = build_strategy(ctx)
        before = {n: p.detach().clone() for n, p in strat.model.named_parameters()}
        for s in range(steps):
            strat.step(s)
        return strat, before, dict(strat.model.named_parameters())
    finally:
        teardown(True)


@pytest.mark.parametrize("method", ["lora", pytest.param("qlora", marks=pytest.mark.skipif(
    not HAS_BNB, reason="bitsandbytes is not installed"))])
@pytest.mark.parametrize("spec", [LLAMA, MOE], ids=lambda s: s.name)
def test_only_adapters_change_and_only_they_have_optimizer_state(spec, method):
    ft = FineTune(method=method, lora_rank=4, lora_alpha=16)
    strat, before, after = train_single(lora_job(spec, ft))
    trainable = {n for n, p in after.items() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    for n, p in after.items():
        if n in trainable:
            assert not torch.equal(p.detach(), before[n]), f"adapter {n} did not train"
        else:
            assert torch.equal(p.detach(), before[n]), f"frozen {n} changed"
    held = {id(p) for p in strat.optimizer.state}
    assert held == {id(after[n]) for n in trainable}
    # Hu et al. 2021 §4.1: r (in + out) per adapted Linear
    lora_params = sum(after[n].numel() for n in trainable)
    linears = [m for name, m in strat.model.named_modules() if hasattr(m, "lora_A")]
    assert lora_params == sum(4 * (m.in_features + m.out_features) for m in linears)
    scaling = {m.scaling["default"] for m in linears}
    assert scaling == {16 / 4}  # alpha / r
    if method == "qlora":
        import bitsandbytes as bnb

        base = [m.base_layer for m in linears]
        assert all(isinstance(b, bnb.nn.Linear4bit) and b.weight.quant_type == "nf4" for b in base)
        assert all(b.weight.compress_statistics for b in base)  # double_quant defaults to True


def test_roles_map_to_each_familys_linears():
    gpt = build_gpt(GPT2, 16, seed=0)
    assert target_names(gpt, FineTune(method="lora")) == ["q", "k", "v", "proj", "fc1", "fc2"]  # no gate in GPT-2
    llama = build_gpt(LLAMA, 16, seed=0)
    assert target_names(llama, FineTune(method="lora", target_modules=("q", "v"))) == ["q", "v"]
    with pytest.raises(ValueError, match="none of the LoRA targets"):
        target_names(gpt, FineTune(method="lora", target_modules=("gate",)))
    moe = apply_lora(build_gpt(MOE, 16, seed=0), FineTune(method="lora", target_modules=("down",)), seed=0)
    adapted = sorted(n for n, m in moe.named_modules() if hasattr(m, "lora_A"))
    assert adapted == sorted([f"blocks.{b}.mlp.experts.{e}.down" for b in range(2) for e in range(4)]
                             + [f"blocks.{b}.mlp.shared.down" for b in range(2)])  # router untouched


def test_adapters_start_as_the_base_model():
    """B = 0 at init (Hu et al. 2021 §4.1): the adapted model computes the base model's logits at step 0."""
    x = torch.randint(0, 64, (2, 16))
    base = build_gpt(LLAMA, 16, seed=3)
    want = base(x)
    got = apply_lora(build_gpt(LLAMA, 16, seed=3), FineTune(method="lora", lora_rank=4), seed=3)(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
