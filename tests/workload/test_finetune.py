"""LoRA/QLoRA adapter counts against peft's published counts, and the settings that build a FineTune."""
from __future__ import annotations

import json

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.schemas.workload import FineTune
from gpuadvisor.workload import model_from_hf_config
from gpuadvisor.workload.finetune import adapter_linears, adapter_params, make_finetune, parse_targets
from gpuadvisor.workload.settings import make_workload
from gpuadvisor.workload.specs import resolve_model

# HF Qwen/Qwen2.5-3B-Instruct config.json (the keys the model shape reads). knowledge/models.yaml has no
# qwen2.5-3b preset, so the test reads the model the way `--model config.json` does.
QWEN25_3B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 2048,
             "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
             "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
             "max_position_embeddings": 32768, "hidden_act": "silu", "rms_norm_eps": 1e-06,
             "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 70}


def test_qwen25_3b_r16_q_v_is_peft_readme_count(tmp_path):
    # peft README: get_peft_model(Qwen2.5-3B-Instruct, LoraConfig(r=16)) with peft's default Qwen2 targets
    # (q_proj, v_proj) prints "trainable params: 3,686,400 || all params: 3,089,625,088"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN25_3B))
    model = model_from_hf_config(str(path))
    n = adapter_params(model, FineTune(method="lora", lora_rank=16, target_modules=("q", "v")))
    assert n == 3_686_400
    assert model.params + n == 3_089_625_088  # peft's "all params" = frozen base + adapters


def test_llama2_7b_r8_q_v_is_peft_count():
    model = resolve_model("llama-2-7b")
    assert adapter_params(model, FineTune(method="lora", lora_rank=8, target_modules=("q", "v"))) == 4_194_304


def test_llama2_7b_all_linear_r16():
    # per layer: q,k,v,o 4 x 16 x (4096 + 4096); gate, up 2 x 16 x (4096 + 11008); down 16 x (11008 + 4096)
    model = resolve_model("llama-2-7b")
    per_layer = 4 * 16 * 8192 + 3 * 16 * (4096 + 11008)
    assert adapter_params(model, FineTune(method="qlora")) == 32 * per_layer == 39_976_960


def test_gqa_uses_kv_width():
    model = resolve_model("llama-70b")  # 64 heads, 8 KV heads, head_dim 128
    lin = adapter_linears(model)
    assert lin["k"] == [(8192, 8 * 128, 1)] and lin["q"] == [(8192, 8192, 1)] and lin["o"] == [(8192, 8192, 1)]


def test_moe_counts_every_expert_not_the_router():
    model = resolve_model("mixtral-8x7b")  # 8 experts of width 14336, no shared expert
    mlp = FineTune(method="lora", lora_rank=8, target_modules=("gate", "up", "down"))
    assert adapter_params(model, mlp) == 32 * 8 * 3 * 8 * (4096 + 14336)


def test_shared_expert_counted_at_its_width():
    model = resolve_model("qwen3-30b-a3b")
    if not model.shared_expert_d_ff:  # Qwen3-MoE has none: give one to the same shape
        model = model.model_copy(update={"shared_expert_d_ff": 1024})
    e, fe, fs, d = model.n_experts, model.expert_d_ff or model.d_ff, model.shared_expert_d_ff, model.d_model
    ft = FineTune(method="lora", lora_rank=4, target_modules=("down",))
    assert adapter_params(model, ft) == model.n_layers * 4 * (e * (fe + d) + (fs + d))


def test_gelu_mlp_has_no_gate():
    model = resolve_model("gpt2")
    assert "gate" not in adapter_linears(model)
    with_gate = FineTune(method="lora", target_modules=("up", "gate"))
    assert adapter_params(model, with_gate) == adapter_params(model, FineTune(method="lora", target_modules=("up",)))


def test_full_finetune_has_no_adapters():
    assert adapter_params(resolve_model("gpt2"), FineTune()) == 0


@pytest.mark.parametrize("text, roles", [("all-linear", ("q", "k", "v", "o", "gate", "up", "down")),
                                         ("attention", ("q", "k", "v", "o")), ("Q, V", ("q", "v")),
                                         ("mlp", ("gate", "up", "down"))])
def test_parse_targets(text, roles):
    assert parse_targets(text) == roles


@pytest.mark.parametrize("text, needle", [("q,x", "'x'"), ("", "nothing"), ("q,q", "twice"), ("q_proj", "q_proj")])
def test_parse_targets_refuses(text, needle):
    with pytest.raises(UserError, match="--lora-targets") as exc:
        parse_targets(text)
    assert needle in str(exc.value)


def test_make_finetune_settings_and_refusals():
    ft = make_finetune("qlora", lora_rank=64, lora_alpha=16, targets="attention")
    assert (ft.method, ft.lora_rank, ft.alpha, ft.target_modules) == ("qlora", 64, 16.0, ("q", "k", "v", "o"))
    assert make_finetune(None) == FineTune()
    given = FineTune(method="lora", lora_rank=4)
    assert make_finetune(given) is given
    with pytest.raises(UserError, match="unknown method 'lorax'; use full, lora or qlora"):
        make_finetune("lorax")
    with pytest.raises(UserError, match="--lora-rank only applies to adapters; add --finetune lora"):
        make_finetune("full", lora_rank=8, flags=True)
    with pytest.raises(UserError, match="lora_rank must be a whole number from 1 to 4096"):
        make_finetune("lora", lora_rank=0)
    with pytest.raises(UserError, match="lora_alpha must be a positive number"):
        make_finetune("lora", lora_alpha=-1.0)
    with pytest.raises(UserError, match="double quantisation is a QLoRA setting"):
        make_finetune("lora", double_quant=False)
    with pytest.raises(UserError, match="must be 'full', 'lora', 'qlora' or a FineTune, got int"):
        make_finetune(3)  # type: ignore[arg-type]


def test_make_workload_carries_finetune_and_refuses_what_trains_nothing():
    wl = make_workload("gpt2", finetune="lora")
    assert wl.finetune.method == "lora" and wl.training.seq_len == 1024
    with pytest.raises(UserError, match="resnet18.*generic: use --finetune full"):
        make_workload("resnet18", finetune="qlora")
    with pytest.raises(UserError, match="--lora-targets gate: 'gpt2.*no such linear layer.*q,k,v,o,up,down"):
        make_workload("gpt2", finetune=FineTune(method="lora", target_modules=("gate",)))


@pytest.mark.parametrize("method,label", [("lora", "LoRA"), ("qlora", "QLoRA")])
def test_adapters_with_fp8_are_one_line_errors(method, label):
    """peft adapters on an FP8 base are neither handed over nor trained here: refused wherever a workload is made."""
    from pydantic import ValidationError

    from gpuadvisor import api
    from gpuadvisor.schemas.workload import Workload

    with pytest.raises(UserError) as exc:
        make_workload("llama-7b", finetune=method, precision="fp8")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{label} with --precision fp8 is not supported")
    assert "--precision bf16" in msg and "--finetune full" in msg
    # an fp8 Workload given its adapters later (api._workload -> with_finetune), and the schema itself
    full = make_workload("llama-7b", precision="fp8")
    assert full.finetune.method == "full" and full.training.precision == "fp8"
    with pytest.raises(UserError, match=f"{label} with --precision fp8"):
        api.predict(full, "dp=8,mb=1,m=1", preset="hgx-h100-8x", finetune=method)
    with pytest.raises(ValidationError, match=f"{label} with --precision fp8"):
        Workload(model=full.model, training=full.training, finetune=FineTune(method=method))
    # bf16 adapters and full FP8 training stay accepted
    assert make_workload("llama-7b", finetune=method, precision="bf16").finetune.method == method
