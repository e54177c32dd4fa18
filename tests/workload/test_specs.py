"""Model resolution: sizes, presets, HF config.json, explicit shapes, generic models, parameter counts."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.schemas import ModelSpec
from gpuadvisor.workload import generic_model, model_from_args, model_from_hf_config, resolve_model
from gpuadvisor.workload import catalog
from gpuadvisor.workload.convnets import resnet_counts

FIX = Path(__file__).parent / "fixtures"


def within(value: float, ref: float, tol: float = 0.01) -> bool:
    return abs(value - ref) <= tol * ref


# Published parameter counts (HF model cards / configs; LLaMA and GPT-3 papers).
PUBLISHED = {
    "gpt2": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080, "gpt2-xl": 1_557_611_200,
    "llama-7b": 6_738_415_616, "llama-13b": 13_015_864_320, "llama-30b": 32.5e9, "llama-65b": 65.2e9,
    "llama-70b": 68_976_648_192, "gpt3-175b": 175.0e9,
}


@pytest.mark.parametrize("name,ref", sorted(PUBLISHED.items()))
def test_preset_params_match_published(name, ref):
    assert within(resolve_model(name).params, ref)


def test_every_preset_with_published_params_matches():
    for key, preset in catalog.presets().items():
        if preset.published_params:
            assert within(preset.spec.params, preset.published_params), key


def test_every_preset_and_alias_resolves_and_has_a_source():
    for key, preset in catalog.presets().items():
        assert resolve_model(key).source, key
        for alias in preset.aliases:
            assert resolve_model(alias).params == preset.spec.params


@pytest.mark.parametrize("text,preset,exact", [
    ("1.5B", "gpt2-xl", True), ("1.5b", "gpt2-xl", True), ("1500M", "gpt2-xl", True),
    ("350M", "gpt2-medium", False), ("125m", "gpt2", False), ("7B", "llama-7b", True),
    ("10M", "gpt-10m", True), ("100M", "gpt-100m", True), ("300M", "gpt-300m", True),
    ("500M", "gpt-500m", True), ("1B", "gpt-1b", True), ("13B", "llama-13b", True),
    ("30B", "llama-30b", True), ("33B", "llama-30b", True), ("65B", "llama-65b", True),
    ("70B", "llama-70b", True), ("175B", "gpt3-175b", True), ("6.7B", "gpt3-6.7b", True),
    ("124M", "gpt2", True), ("774M", "gpt2-large", True), ("760M", "gpt3-760m", True),
    ("1.3B", "gpt3-1.3b", True), ("2.7B", "gpt3-2.7b", True), ("1.2B", "gpt3-1.3b", False),
    ("3B", "gpt3-2.7b", False), ("6.9B", "llama-7b", False),
])
def test_sizes(text, preset, exact):
    spec = resolve_model(text)
    assert spec.name.startswith(preset + " (")
    assert ("snapped" in spec.source) is (not exact)
    assert catalog.presets()[preset].spec.params == spec.params


# Brown et al. 2020 Table 2.1: (size name, layers, d_model, heads); d_ff = 4 x d_model, 2048 positions,
# vocabulary 50257. XL and 13B keep the d_head column (128): 16 heads on 2048, 40 x 128 = 5120 (models.yaml).
GPT3_TABLE_2_1 = [("gpt3-125m", 125e6, 12, 768, 12), ("gpt3-350m", 350e6, 24, 1024, 16),
                  ("gpt3-760m", 760e6, 24, 1536, 16), ("gpt3-1.3b", 1.3e9, 24, 2048, 16),
                  ("gpt3-2.7b", 2.7e9, 32, 2560, 32), ("gpt3-6.7b", 6.7e9, 32, 4096, 32),
                  ("gpt3-13b", 13e9, 40, 5120, 40), ("gpt3-175b", 175e9, 96, 12288, 96)]


@pytest.mark.parametrize("name,nominal,layers,hidden,heads", GPT3_TABLE_2_1)
def test_gpt3_family_is_table_2_1(name, nominal, layers, hidden, heads):
    spec = resolve_model(name)
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.d_ff) == (layers, hidden, heads, 4 * hidden)
    assert (spec.vocab_size, spec.max_seq_len, spec.tied_embeddings, spec.mlp) == (50257, 2048, True, "gelu")
    # the paper rounds its size names (2.7B counts 2.652B); a wrong layer count or width is off by >= 10 %
    assert within(spec.params, nominal, tol=0.02), (name, spec.params)


@pytest.mark.parametrize("name", [row[0] for row in GPT3_TABLE_2_1])
def test_gpt3_family_trains_at_its_2048_context_by_default(name):
    from gpuadvisor.workload import make_workload
    assert make_workload(name).training.seq_len == 2048


def test_snapping_says_how_far():
    assert "snapped to 355M (gpt2-medium, 1.4% away)" in resolve_model("350M").source


@pytest.mark.parametrize("text", ["3.3B", "2B", "250B", "40M", "0.5M", "1e3T"])
def test_unknown_size_is_one_line_user_error(text):
    with pytest.raises(UserError) as exc:
        resolve_model(text)
    msg = str(exc.value)
    # echoes what was typed (0.5M, not 500K) and names only options that exist
    assert "\n" not in msg and f"unknown model size '{text}'" in msg and "config.json" in msg and "L24-H1024-A16" in msg
    assert "--layers" not in msg


def test_param_counts_read_as_words():
    from gpuadvisor.cli.render import human_count

    assert [human_count(x) for x in (1.56e9, 124e6, 1.25e3, 7e12, 1.1200013010e17)] == \
        ["1.56B", "124M", "1.25K", "7.00T", "1.12e+17"]
    assert catalog.format_size(1.1200013010e17) == "1.12e+17" and catalog.format_size(0.5e6) == "500K"


def test_unknown_name_lists_presets():
    with pytest.raises(UserError, match="unknown model 'gpt5'.*gpt2-xl"):
        resolve_model("gpt5")
    with pytest.raises(UserError, match="no model given"):
        resolve_model("  ")


def test_paper_table_one_shapes():
    s = resolve_model("1B")
    assert (s.d_model, s.n_heads, s.n_layers, s.d_ff, s.vocab_size, s.max_seq_len) == (1536, 24, 36, 6144, 8000, 1024)
    s = resolve_model("10M")
    assert (s.d_model, s.n_heads, s.n_layers, s.d_ff, s.max_seq_len) == (320, 8, 4, 1536, 128)


def test_gpt2_large_notes_seed_002_name():
    s = resolve_model("gpt2-large")
    assert "708M" in s.source
    non_embedding = s.params - s.vocab_size * s.d_model - s.max_seq_len * s.d_model
    assert within(non_embedding, 708e6)


def test_names_are_case_and_underscore_insensitive():
    assert resolve_model("GPT2_XL").params == resolve_model("gpt2-xl").params
    assert resolve_model("meta-llama/Llama-2-7b-hf").params == 6_738_415_616


def test_resnet18_cifar_derivation():
    s = resolve_model("resnet18")
    assert s.kind == "generic" and s.params == 11_173_962
    assert within(s.flops_per_sample, 3 * 2 * 0.556e9)  # 0.556 GMACs forward per 32x32 image
    assert s.activation_bytes_per_sample > 0


def test_resnet_counts_match_torchvision():
    # torchvision weight tables: params and GFLOPS (= multiply-accumulates)
    r18 = resnet_counts(18)
    assert r18.params == 11_689_512 and within(r18.forward_macs, 1.81e9)
    r50 = resnet_counts(50)
    assert r50.params == 25_557_032 and within(r50.forward_macs, 4.09e9)
    assert within(resolve_model("resnet50").flops_per_sample, 3 * 2 * 4.09e9)
    with pytest.raises(ValueError):
        resnet_counts(19)


def test_hf_gpt2_config():
    s = resolve_model(str(FIX / "gpt2_config.json"))
    assert s.params == 124_439_808 and s.d_ff == 3072 and s.tied_embeddings and "HuggingFace config" in s.source


def test_hf_llama_config_and_folder(tmp_path):
    s = resolve_model(str(FIX / "llama2_7b_config.json"))
    assert s.mlp == "swiglu" and not s.tied_embeddings and s.max_seq_len == 0 and s.params == 6_738_415_616
    shutil.copy(FIX / "llama2_7b_config.json", tmp_path / "config.json")
    assert resolve_model(str(tmp_path)).params == s.params
    g = model_from_hf_config(str(FIX / "llama2_70b_config.json"))
    assert g.n_kv_heads == 8 and within(g.params, 68_976_648_192)


def test_hf_config_errors(tmp_path):
    with pytest.raises(UserError, match="missing key 'n_layer'"):
        resolve_model(str(FIX / "missing_key_config.json"))
    with pytest.raises(UserError, match="not valid JSON"):
        resolve_model(str(FIX / "broken_config.json"))
    with pytest.raises(UserError, match="not found"):
        resolve_model(str(tmp_path / "nope.json"))
    (tmp_path / "odd.json").write_text('{"foo": 1}')
    with pytest.raises(UserError, match="missing key 'n_layer' or 'num_hidden_layers'"):
        resolve_model(str(tmp_path / "odd.json"))
    (tmp_path / "bad.json").write_text('{"n_layer": 12, "n_embd": 768, "n_head": -1, "n_positions": 1, "vocab_size": 5}')
    with pytest.raises(UserError, match="'n_head' must be a positive integer"):
        resolve_model(str(tmp_path / "bad.json"))
    (tmp_path / "div.json").write_text('{"n_layer": 2, "n_embd": 100, "n_head": 3, "n_positions": 8, "vocab_size": 5}')
    with pytest.raises(UserError) as exc:
        resolve_model(str(tmp_path / "div.json"))
    assert "not divisible" in str(exc.value) and "\n" not in str(exc.value)


def test_model_from_args():
    s = model_from_args(12, 768, 12)
    assert s.params == 124_439_808
    llama = model_from_args(32, 4096, 32, vocab=32000, mlp="swiglu")
    assert llama.d_ff == 11008 and llama.params == 6_738_415_616
    with pytest.raises(UserError, match="heads"):
        model_from_args(2, 100, 3)
    with pytest.raises(UserError, match="n_layers must be a positive integer"):
        model_from_args(0, 64, 4)


def test_generic_model():
    g = generic_model("mynet", 5e6, 1e9, 1e6)
    assert g.kind == "generic" and g.params == 5_000_000
    with pytest.raises(UserError, match="flops_per_sample must be positive"):
        generic_model("x", 1e6, 0)
    with pytest.raises(UserError, match="params must be positive"):
        generic_model("x", 0, 1e9)


def test_schema_defaults_unchanged_for_gpt2_style():
    s = ModelSpec(name="x", n_layers=12, d_model=768, n_heads=12, d_ff=3072, vocab_size=50257, max_seq_len=1024)
    assert s.mlp == "gelu" and s.n_kv_heads == 0 and s.params == 124_439_808
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelSpec(name="x", n_layers=1, d_model=64, n_heads=4, n_kv_heads=3, d_ff=4, vocab_size=5)
