"""The default global batch (workload/batch_defaults.py): GPT-3's tokens per batch by size, the preset's own,
LoRA's 128, 8 for tiny and generic models, and the suggest note that says which and names the flag."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.schemas.workload import FineTune, ModelSpec
from gpuadvisor.workload import generic_model, make_workload, model_from_args
from gpuadvisor.workload.batch_defaults import GPT3_TOKENS_PER_BATCH, default_batch
from gpuadvisor.workload.catalog import presets

FULL = FineTune()


def dense(params: float) -> ModelSpec:
    """A stand-in whose count is `params` (only the count and kind pick the batch)."""
    return ModelSpec(name="stand-in", kind="transformer", n_layers=1, d_model=64, n_heads=1, d_ff=64,
                     vocab_size=8, params_override=int(params))


def test_gpt3_table_is_brown_et_al_table_2_1():
    # Brown et al. 2020 Table 2.1: 0.5M tokens up to 760M, 1M at 1.3B/2.7B, 2M at 6.7B/13B, 3.2M at 175B
    table = {size: tokens for _, size, _, tokens in GPT3_TOKENS_PER_BATCH}
    assert table == {"125M": 524_288, "350M": 524_288, "760M": 524_288, "1.3B": 1_048_576, "2.7B": 1_048_576,
                     "6.7B": 2_097_152, "13B": 2_097_152, "175B": 3_276_800}


@pytest.mark.parametrize("model, seq_len, expected", [
    ("gpt2", None, 512),            # 124.4M: GPT-3 Small's shape, 0.5M tokens / 1024
    ("gpt2-medium", None, 512),     # 354.8M: the 350M row
    ("gpt2-large", None, 512),      # 774M: the 760M row, still 0.5M
    ("1.5B", None, 1024),           # gpt2-xl 1.56B: the 1.3B row, 1M tokens / 1024
    ("7B", 4096, 512),              # llama-7b 6.74B: the 6.7B row, 2M tokens / 4096
    ("7B", None, 2048),             # rotary: seq 1024 by default, 2M / 1024
    ("70B", 4096, 512),             # llama-70b 69.0B: the 13B row (2M); 175B's row starts at 95% of 175B
    ("gpt3-175b", 2048, 1600),      # 174.6B by its shape: GPT-3 175B's own 3.2M = 1600 x 2048
    # the GPT-3 presets at their default 2048 context: Table 2.1's batches, which are also the global_batch_size
    # of Megatron-DeepSpeed's GPT-3 examples (256 / 512 / 512 / 1024 / 1024)
    ("760M", None, 256), ("1.3B", None, 512), ("2.7B", None, 512), ("6.7B", None, 1024), ("gpt3-13b", None, 1024),
])
def test_gpt3_rule_on_catalog_models(model, seq_len, expected):
    w = make_workload(model, **({"seq_len": seq_len} if seq_len else {}))
    assert w.training.global_batch == expected


def test_above_175b_uses_the_last_row():
    # Llama 3.1 405B (Meta's config.json: 126 layers, 16384 hidden, 128 heads, 8 KV heads, FFN 53248, vocab 128256)
    spec = model_from_args(layers=126, hidden=16384, heads=128, ffn=53248, vocab=128256, mlp="swiglu", kv_heads=8,
                           name="405b")
    assert 390e9 < spec.params < 420e9
    assert default_batch(spec, 8192, FULL).global_batch == 400  # 3,276,800 // 8192


@pytest.mark.parametrize("params, tokens", [
    (99.9e6, None),                 # under 100M: the small-model 8
    (100e6, 2 ** 19), (124e6, 2 ** 19),
    (0.95 * 1.3e9 - 1, 2 ** 19), (0.95 * 1.3e9, 2 ** 20),
    (2.65e9, 2 ** 20),              # GPT-3 2.7B's own count from its shape
    (0.95 * 6.7e9 - 1, 2 ** 20), (6.66e9, 2 ** 21),
    (12.95e9, 2 ** 21), (100e9, 2 ** 21),
    (0.95 * 175e9 - 1, 2 ** 21), (174.6e9, 1600 * 2048), (1e12, 1600 * 2048),
])
def test_row_boundaries(params, tokens):
    got = default_batch(dense(params), 1024, FULL).global_batch
    assert got == (8 if tokens is None else tokens // 1024)


def test_batch_is_at_least_one_sequence():
    assert default_batch(dense(1e9), 2 ** 20 + 1, FULL).global_batch == 1
    assert default_batch(dense(1e9), 2 ** 21, FULL).global_batch == 1


def test_preset_default_wins():
    # the A6000 paper's sizes keep its Table I batch, ResNet He et al.'s 256, whatever their size
    for label, batch in (("10M", 16), ("100M", 16), ("300M", 8), ("500M", 8), ("1B", 4), ("resnet50", 256)):
        assert make_workload(label).training.global_batch == batch, label
    why = default_batch(dense(1e9), 1024, FULL, preset_batch=4, preset_source="seed 001 Table I").why
    assert "seed 001 Table I" in why


def test_every_preset_batch_has_a_source():
    for key, p in presets().items():
        if p.default_global_batch:
            assert p.batch_source, f"models.yaml preset {key}: default_global_batch without batch_source"


def test_lora_and_qlora_take_alpacas_128():
    assert make_workload("llama-7b", finetune="lora").training.global_batch == 128
    assert make_workload("gpt2", finetune="qlora").training.global_batch == 128
    assert make_workload("llama-7b", finetune="full").training.global_batch == 2048  # full: the GPT-3 rule
    assert "Stanford Alpaca" in default_batch(dense(7e9), 1024, FineTune(method="lora")).why
    # an explicit batch still wins
    assert make_workload("llama-7b", finetune="lora", global_batch=32).training.global_batch == 32


def test_tiny_and_generic_models_keep_8():
    tiny = model_from_args(layers=2, hidden=64, heads=2, vocab=8000, seq=128, name="tiny")  # a CPU-rank test size
    assert tiny.params < 1e6
    assert make_workload(tiny).training.global_batch == 8
    assert make_workload(tiny, finetune="lora").training.global_batch == 8  # tiny wins over LoRA
    gen = generic_model("mlp", params=5e9, flops_per_sample=1e12)
    assert make_workload(gen).training.global_batch == 8


def test_moe_picks_the_row_by_active_parameters():
    q = presets()["qwen3-30b-a3b"].spec       # 30.5B total, 3.35B active
    assert q.active_params < 4e9 < 30e9 < q.params
    b = default_batch(q, 1024, FULL)
    assert b.global_batch == 1024 and "2.7B size" in b.why and "active" in b.why  # 1M: the 2.7B row, not 13B's 2M


def test_explicit_batch_or_tokens_is_kept():
    assert make_workload("1.5B", global_batch=8).training.global_batch == 8
    assert make_workload("1.5B", tokens_per_step=16384).training.global_batch == 16


def test_suggest_note_names_source_and_flag():
    s = api.suggest("gpt2", preset="workstation-2x4090", top=1)
    notes = [n for n in s.notes if n.startswith("global batch")]
    assert notes == ["global batch 512 (524,288 tokens) per step is the default for 'gpt2 (124.4M)' (GPT-3's 0.5M "
                     "tokens per batch at its 125M size, Brown et al. 2020 Table 2.1), not your run's: the best "
                     "plan depends on it; pass --global-batch N (API: global_batch=N)"]
    assert s.workload.training.global_batch == 512
    s = api.suggest("10M", preset="workstation-2x4090", top=1)
    assert any("seed 001 (the A6000 paper) Table I" in n and "--global-batch N" in n for n in s.notes)
    s = api.suggest("gpt2", preset="workstation-2x4090", top=1, finetune="lora")
    assert any(n.startswith("global batch 128 ") and "Stanford Alpaca" in n for n in s.notes)
    # a batch the user gave is not a default: no note
    s = api.suggest("gpt2", preset="workstation-2x4090", top=1, global_batch=64)
    assert not any(n.startswith("global batch") for n in s.notes)
