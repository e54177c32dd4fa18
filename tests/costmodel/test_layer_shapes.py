"""Layer shapes flow into the cost model: parameters, FLOPs per token and stored activations per layer type."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuadvisor.costmodel.analytical import compute as K
from gpuadvisor.costmodel.analytical import memory as M
from gpuadvisor.workload import resolve_model
from gpuadvisor.workload.shapes import embedding_params, head_params, layer_shape


@pytest.mark.parametrize("name", ["gpt2", "gpt2-xl", "gpt-10m", "llama-7b", "llama-70b", "llama-3.1-8b",
                                  "mistral-7b", "mixtral-8x7b", "qwen2.5-0.5b", "qwen3-30b-a3b", "gemma-2-9b"])
def test_layer_params_add_up_to_model_params(name):
    m = resolve_model(name)
    final_norm = layer_shape(m).norm_params(m.d_model)
    assert m.n_layers * K.layer_params(m) + embedding_params(m) + head_params(m) + final_norm == m.params
    assert m.n_layers * K.layer_active_params(m) + embedding_params(m) + head_params(m) + final_norm \
        == m.active_params


def test_llama_layer_is_not_counted_as_gpt2():
    m = resolve_model("llama-2-7b")
    h, f = m.d_model, m.d_ff
    assert K.layer_params(m) == 4 * h * h + 3 * h * f + 2 * h  # SwiGLU 3 matrices, 2 RMSNorms, no biases
    gqa = resolve_model("llama-2-70b")
    h, kv = gqa.d_model, gqa.d_model * 8 // 64
    assert K.layer_params(gqa) == 2 * h * h + 2 * h * kv + 3 * h * gqa.d_ff + 2 * h


def test_flops_per_token_llama2_7b_at_4096():
    m = resolve_model("llama-2-7b")
    s = 4096
    per_layer = 6 * (4 * 4096 ** 2 + 3 * 4096 * 11008 + 2 * 4096) + 12 * 4096 * s
    assert K.layer_flops_per_token(m, s) == pytest.approx(per_layer)
    total = K.flops_per_token(m, s)
    assert total == pytest.approx(32 * per_layer + 6 * 32000 * 4096)
    # the GPT-2 count (2·h·d_ff + 4h², biases) gave 37.4 GFLOP; the real shape is 23 % more
    gpt2_style = 32 * (6 * (2 * 4096 * 11008 + 4 * 4096 ** 2 + 9 * 4096 + 11008) + 12 * 4096 * s) + 6 * 32000 * 4096
    assert total / gpt2_style == pytest.approx(1.231, abs=0.002)


def test_moe_flops_use_active_params():
    m = resolve_model("mixtral-8x7b")
    assert K.layer_flops_per_token(m, 1024) == pytest.approx(6 * K.layer_active_params(m) + 12 * 4096 * 1024)
    assert K.layer_active_params(m) < K.layer_params(m) / 3


def test_attention_uses_query_heads_times_head_dim():
    g = resolve_model("gemma-2-9b")  # 16 heads x 256 = 4096 != d_model 3584
    assert K.attention_flops_per_token(g, 2048) == pytest.approx(12 * 16 * 256 * 2048)


def test_sliding_window_caps_attention():
    m = resolve_model("mistral-7b")  # window 4096 on every layer
    assert K.attention_flops_per_token(m, 2048) == pytest.approx(12 * 4096 * 2048)
    assert K.attention_flops_per_token(m, 32768) == pytest.approx(12 * 4096 * 4096)
    g = resolve_model("gemma-2-9b")  # 21 of 42 layers slide over 4096
    assert K.attention_keys_per_query(g, 8192) == pytest.approx((21 * 4096 + 21 * 8192) / 42)
    llama = resolve_model("llama-3.1-8b")
    assert K.attention_keys_per_query(llama, 32768) == 32768


def test_head_flops():
    m = resolve_model("qwen2.5-7b")
    assert K.head_flops_per_token(m) == 6 * 152064 * 3584


def test_gpt2_shape_reproduces_korthikanti_table_2():
    m = resolve_model("gpt2-medium")  # d_ff = 4h, LayerNorm, dropout: the paper's GPT block
    shape = layer_shape(m)
    s, h, a = 1024, m.d_model, m.n_heads
    for b, tp, sp, rc, fused in itertools.product((1, 4), (1, 2, 8), (False, True), (False, True), (False, True)):
        legacy = M.activation_bytes_per_layer(s, b, h, a, tp, sp, rc, fused)
        shaped = M.activation_bytes_per_layer(s, b, h, a, tp, sp, rc, fused, shape=shape)
        assert shaped == pytest.approx(legacy), (b, tp, sp, rc, fused)


def test_activation_terms_gpt_block_is_34_and_10_plus_24():
    t = M.activation_terms(layer_shape(resolve_model("gpt2")))
    h, a = 768, 12
    assert (t.replicated, t.split, t.scores_per_s) == (10 * h, 24 * h, 5 * a)


def test_llama_activations_count_swiglu_and_gqa():
    sh = layer_shape(resolve_model("llama-2-7b"))
    t = M.activation_terms(sh)
    h, f = 4096, 11008
    # norms 2·2h, QKV and MLP inputs 2h each, no dropout masks; Q, K, V, O-input 2h each; SwiGLU 4 tensors 2f
    assert t.replicated == 8 * h and t.split == 8 * h + 8 * f
    gqa = M.activation_terms(layer_shape(resolve_model("llama-2-70b")))
    h70, f70, kv = 8192, 28672, 1024
    assert gqa.split == 2 * (h70 + 2 * kv) + 2 * h70 + 8 * f70
    b = M.activation_bytes_per_layer(4096, 1, 4096, 32, shape=sh)
    assert b / (4096 * 4096) == pytest.approx((16 * h + 8 * f) / h)  # 37.5 "sbh" vs GPT's 34
    assert b > M.activation_bytes_per_layer(4096, 1, 4096, 32)


def test_moe_activations_grow_with_top_k():
    m = resolve_model("mixtral-8x7b")
    top1 = m.model_copy(update={"experts_per_token": 1})
    assert M.activation_terms(layer_shape(m)).split > M.activation_terms(layer_shape(top1)).split
    assert M.activation_terms(layer_shape(m)).replicated > M.activation_terms(layer_shape(top1)).replicated


@pytest.mark.parametrize("shape_of", [None, "gpt2", "llama-2-70b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("fused", [True, False])
def test_array_call_equals_scalar_calls(shape_of, fused):
    shape = layer_shape(resolve_model(shape_of)) if shape_of else None
    rng = np.random.default_rng(7)
    n = 64
    b = rng.integers(1, 9, n)
    tp = rng.choice([1, 2, 4, 8], n)
    sp = rng.random(n) < 0.5
    rc = rng.random(n) < 0.5
    arr = M.activation_bytes_per_layer(2048, b, 1024, 16, tp, sp, rc, fused, 2, shape=shape)
    assert isinstance(arr, np.ndarray) and arr.shape == (n,)
    one = [M.activation_bytes_per_layer(2048, int(b[i]), 1024, 16, int(tp[i]), bool(sp[i]), bool(rc[i]), fused, 2,
                                        shape=shape) for i in range(n)]
    assert all(isinstance(x, float) for x in one)
    np.testing.assert_allclose(arr, one, rtol=1e-12)


def test_recompute_keeps_the_layer_input_only():
    sh = layer_shape(resolve_model("llama-3.1-8b"))
    s, b, h = 4096, 2, 4096
    assert M.activation_bytes_per_layer(s, b, h, 32, recompute=True, shape=sh) == 2 * s * b * h
    assert M.activation_bytes_per_layer(s, b, h, 32, tp=4, sp=True, recompute=True, shape=sh) == 2 * s * b * h / 4


def test_transformer_engine_gated_mlp_stores_three_f_wide_tensors():
    # Megatron-Core's fused SwiGLU saves its input (gate and up) and recomputes its output; fc2 saves that output
    sh = layer_shape(resolve_model("llama-2-7b"))
    eager, te = M.activation_terms(sh), M.activation_terms(sh, te=True)
    h, f = 4096, 11008
    assert te.replicated == eager.replicated
    assert eager.split - te.split == 2 * f
    # a GeLU MLP stores its two f-wide tensors either way
    gpt = layer_shape(resolve_model("gpt2"))
    assert M.activation_terms(gpt, te=True) == M.activation_terms(gpt)
    assert te.split == 2 * (h + 2 * h) + 2 * h + 6 * f


def test_fp8_saves_linear_inputs_in_one_byte_with_transformer_engine_only():
    sh = layer_shape(resolve_model("llama-2-70b"))
    h, f, kv = 8192, 28672, 1024
    te8 = M.activation_terms(sh, te=True, fp8=True)
    # norm inputs 2·2h at bf16; the QKV and MLP inputs as FP8 copies (1 B)
    assert te8.replicated == 4 * h + h + h
    # Q, K, V and the attention output at bf16, the output projection's FP8 copy, fc1 output 2·2f, fc2 input f
    assert te8.split == 2 * (h + 2 * kv) + 2 * h + h + 4 * f + f
    # torchao's float8 Linear saves the bf16 input and recasts it: FP8 without TE stores what bf16 does
    assert M.activation_terms(sh, fp8=True) == M.activation_terms(sh)
    # LoRA with every Linear frozen drops the FP8 copies the weight gradients would have needed
    frozen = frozenset({"q", "k", "v", "o", "gate", "up", "down"})
    assert M.activation_terms(sh, frozen=frozen, te=True, fp8=True).replicated == 4 * h
