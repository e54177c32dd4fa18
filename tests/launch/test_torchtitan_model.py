"""The torchtitan job TOML names the model: the emitted file writes torchtitan's [model] name/flavor for a model
torchtitan registers (knowledge/models.yaml `torchtitan`) and a placeholder torchtitan refuses for one it does not,
and `predict --from` reads a known flavor back to its shape, so --model is optional there."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from gpuadvisor.cli import main
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch import build_launch, emit, make_job
from gpuadvisor.launch.readback import read_config
from gpuadvisor.launch.torchtitan import PLACEHOLDER, flavor_of
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload import catalog
from gpuadvisor.workload.hf_config import model_from_hf_config
from gpuadvisor.workload.specs import make_workload

PRESET = "hgx-h100-8x"
FIX = Path(__file__).resolve().parents[1] / "workload" / "fixtures"
TITAN = {key: p.torchtitan for key, p in catalog.presets().items() if p.torchtitan}


def _emit(tmp_path: Path, model) -> Path:
    plan = parse_plan("dp=8,zero=3,mb=1,m=2", nodes=1, devices_per_node=8)
    wl = make_workload(model, global_batch=plan.global_batch(), seq_len=1024)
    emit(build_launch(plan, load_preset(PRESET), wl), make_job(plan, wl), tmp_path)
    return tmp_path / "torchtitan.toml"


def test_the_flavors_are_torchtitans():
    assert TITAN == {"llama-3.1-8b": ("llama3", "8B"), "llama-3.1-70b": ("llama3", "70B"),
                     "llama-3.1-405b": ("llama3", "405B"), "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
                     "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
                     **{f"qwen3-{s.lower()}": ("qwen3", s) for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")}}
    # torchtitan's qwen3 dense flavors (models/qwen3 `qwen3_configs`): dim, layers, heads, ffn, weight tying
    for key, shape in {"qwen3-0.6b": (1024, 28, 16, 3072, True), "qwen3-1.7b": (2048, 28, 16, 6144, True),
                       "qwen3-4b": (2560, 36, 32, 9728, True), "qwen3-8b": (4096, 36, 32, 12288, False),
                       "qwen3-14b": (5120, 40, 40, 17408, False), "qwen3-32b": (5120, 64, 64, 25600, False)}.items():
        s = catalog.presets()[key].spec
        assert (s.d_model, s.n_layers, s.n_heads, s.d_ff, s.tied_embeddings) == shape, key
        assert (s.n_kv_heads, s.head_dim, s.vocab_size, s.qk_norm) == (8, 128, 151936, True), key
    # distinct flavors have distinct shapes, so the writer's match is the flavor's
    specs = [catalog.presets()[k].spec for k in TITAN]
    assert all(flavor_of(s) == TITAN[k] for k, s in zip(TITAN, specs))
    # torchtitan's Llama 3 FFN width (models/llama3: compute_ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier))
    for key, multiple_of, mult in (("llama-3.1-8b", 1024, 1.3), ("llama-3.1-70b", 4096, 1.3),
                                   ("llama-3.1-405b", 4096, 1.2)):
        spec = catalog.presets()[key].spec
        hidden = int(mult * int(2 * 4 * spec.d_model / 3))
        assert spec.d_ff == multiple_of * ((hidden + multiple_of - 1) // multiple_of), key
    assert catalog.torchtitan_preset("llama3", "8B").key == "llama-3.1-8b"
    assert catalog.torchtitan_preset("llama3", "debugmodel") is None


@pytest.mark.parametrize("key", ["llama-3.1-8b", "qwen3-30b-a3b"])
def test_emitted_flavor_reads_back_to_the_same_shape(tmp_path, key):
    path = _emit(tmp_path, key)
    cfg = tomllib.loads(path.read_text())
    assert (cfg["model"]["name"], cfg["model"]["flavor"]) == TITAN[key]
    rb = read_config(path, world=8, global_batch=16)
    want = catalog.presets()[key].spec
    assert rb.model is not None and rb.model.params == want.params and rb.model.vocab_size == want.vocab_size
    assert "[model]" not in rb.ignored and rb.model_notes == []


def test_an_hf_config_of_a_flavor_gets_it_and_other_shapes_get_the_placeholder(tmp_path):
    assert flavor_of(model_from_hf_config(str(FIX / "llama31_8b_config.json"))) == ("llama3", "8B")
    # a Llama 3.1 8B with another vocabulary, GPT-2 and Llama 2 are not torchtitan flavors
    llama = catalog.presets()["llama-3.1-8b"].spec
    assert flavor_of(llama.model_copy(update={"vocab_size": 32000})) is None
    assert flavor_of(catalog.presets()["llama-7b"].spec) is None
    cfg = tomllib.loads(_emit(tmp_path, "gpt2").read_text())
    assert (cfg["model"]["name"], cfg["model"]["flavor"]) == PLACEHOLDER
    assert "gpt2 (124.4M) is not a model torchtitan registers" in (tmp_path / "torchtitan.toml").read_text()


def test_predict_from_a_known_flavor_needs_no_model(tmp_path, capsys):
    path = _emit(tmp_path, "llama-3.1-8b")
    assert main(["predict", "--preset", PRESET, "--from", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "llama-3.1-8b (8.03B)"
    assert "[model] llama3 '8B': torchtitan's flavor of llama-3.1-8b, predicted with its shape" in data["notes"]
    # another --model is named and the file's flavor predicted
    assert main(["predict", "--model", "gpt2", "--preset", PRESET, "--from", str(path), "--json"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["model"] == "llama-3.1-8b (8.03B)"
    assert any(n.startswith("--model gpt2 is gpt2 (124.4M), which is not the model torchtitan.toml trains (layers 32 "
                            "vs 12;") for n in other["notes"])
    assert other["estimate"]["tokens_per_s"] == pytest.approx(data["estimate"]["tokens_per_s"])


def test_a_model_key_that_is_not_a_section_is_one_line(tmp_path, capsys):
    (tmp_path / "t.toml").write_text('model = "llama3"\n[training]\nlocal_batch_size = 1\n')
    assert main(["predict", "--preset", PRESET, "--from", str(tmp_path / "t.toml")]) == 2
    err = capsys.readouterr().err
    assert "t.toml: 'model' is a str, not a section; write its keys under [model]" in err and err.count("\n") == 1


@pytest.mark.parametrize("model,says", [
    ('name = "llama4"\nflavor = "17bx16e"', "[model] llama4 '17bx16e' is not a torchtitan model gpuadvisor has the "
                                           "shape of (it knows llama3 '8B', llama3 '70B', llama3 '405B', qwen3 "),
    ('name = "llama3"', "t.toml has no [model] name and flavor, which would say the model; pass --model"),
    (f'name = "{PLACEHOLDER[0]}"\nflavor = "{PLACEHOLDER[1]}"',
     "[model] still holds the placeholder gpuadvisor writes for a model torchtitan does not register; pass --model"),
])
def test_an_unknown_flavor_without_model_is_one_line(tmp_path, capsys, model, says):
    (tmp_path / "t.toml").write_text(f"[model]\n{model}\n[training]\nlocal_batch_size = 1\n")
    assert main(["predict", "--preset", PRESET, "--from", str(tmp_path / "t.toml")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    # with --model the file's plan is predicted for it
    assert main(["predict", "--model", "llama-3.1-8b", "--preset", PRESET, "--from", str(tmp_path / "t.toml")]) == 0
    assert "llama-3.1-8b (8.03B) on hgx-h100-8x" in capsys.readouterr().out
