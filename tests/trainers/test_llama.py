"""The Llama-family and MoE blocks (`trainers/blocks.py`): parameter counts equal `workload.shapes`, and each
feature computes what its definition says (single process, fast)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpuadvisor.schemas import ModelSpec
from gpuadvisor.trainers.blocks import Attention, BlockConfig, MoE, rotate, uses_window
from gpuadvisor.trainers.model import build_gpt
from gpuadvisor.workload.shapes import model_params

BASE = dict(n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=64)
LLAMA = ModelSpec(name="tiny-llama", mlp="swiglu", n_kv_heads=2, tied_embeddings=False, **BASE)
GQA_QK = ModelSpec(name="tiny-gqa-qknorm", mlp="swiglu", n_kv_heads=1, qk_norm=True, qkv_bias=True, head_dim=16,
                   norms_per_layer=4, **BASE)
MOE = ModelSpec(name="tiny-moe", mlp="swiglu", n_kv_heads=2, n_experts=4, experts_per_token=2, expert_d_ff=32,
                shared_expert_d_ff=16, sliding_window=4, sliding_window_layers=1, **BASE)
GELU_MOE = ModelSpec(name="tiny-gelu-moe", max_seq_len=16, n_experts=4, experts_per_token=1, **BASE)
GEGLU_BIAS = ModelSpec(name="tiny-geglu-bias", mlp="geglu", bias=True, norm="layernorm", **BASE)
GPT2 = ModelSpec(name="tiny-gpt", max_seq_len=16, **BASE)


@pytest.mark.parametrize("spec", [GPT2, LLAMA, GQA_QK, MOE, GELU_MOE, GEGLU_BIAS], ids=lambda s: s.name)
def test_parameter_count_is_the_cost_models(spec):
    model = build_gpt(spec, 16, seed=0)
    assert sum(p.numel() for p in model.parameters()) == model_params(spec) == spec.params


def test_llama_block_has_no_position_table_biases_or_layernorms():
    model = build_gpt(LLAMA, 16, seed=0)
    assert model.embed.pos is None
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())
    assert isinstance(model.blocks[0].ln1, torch.nn.RMSNorm) and isinstance(model.ln_f, torch.nn.RMSNorm)
    assert {n for n, _ in model.blocks[0].mlp.named_children()} == {"gate", "up", "down"}
    assert model.blocks[0].attn.k.out_features == 2 * 8  # 2 kv heads of head_dim 8


def test_gqa_equals_attention_with_repeated_key_value_heads():
    """n_kv_heads = 2 of 4: query heads 0,1 use kv head 0 and 2,3 kv head 1 (Ainslie et al. 2023, §2)."""
    torch.manual_seed(0)
    gqa = Attention(BlockConfig.from_spec(LLAMA, 0))
    mha = Attention(BlockConfig.from_spec(LLAMA.model_copy(update={"n_kv_heads": 0}), 0))
    with torch.no_grad():
        mha.q.weight.copy_(gqa.q.weight)
        mha.proj.weight.copy_(gqa.proj.weight)
        for name in ("k", "v"):  # rows of kv head h repeated for its 2 query heads
            w = getattr(gqa, name).weight.view(2, 8, 32)
            getattr(mha, name).weight.copy_(w.repeat_interleave(2, dim=0).reshape(32, 32))
    x = torch.randn(2, 16, 32)
    torch.testing.assert_close(gqa(x), mha(x), rtol=0, atol=1e-6)


def test_rope_scores_depend_on_relative_position_only():
    """RoFormer eq. 16: <R_m q, R_n k> = <q, R_{n-m} k>; the same q, k at every position give scores that depend
    on m - n only, and rotation keeps norms."""
    torch.manual_seed(0)
    q, k = torch.randn(8), torch.randn(8)
    rq, rk = rotate(q.expand(1, 1, 10, 8).contiguous()), rotate(k.expand(1, 1, 10, 8).contiguous())
    scores = rq[0, 0] @ rk[0, 0].T
    assert torch.allclose(scores[3, 1], scores[7, 5], atol=1e-5) and torch.allclose(scores[2, 2], scores[9, 9])
    assert not torch.allclose(scores[3, 1], scores[3, 2])
    assert torch.allclose(rq.norm(dim=-1), q.norm().expand(1, 1, 10), atol=1e-5)


def test_sliding_window():
    spec = LLAMA.model_copy(update={"sliding_window": 1})
    torch.manual_seed(0)
    attn = Attention(BlockConfig.from_spec(spec, 0))
    x = torch.randn(2, 16, 32)
    # window 1: each token sees only itself, so attention returns its own value (GQA heads repeated)
    v = attn.v(x).view(2, 16, 2, 8).repeat_interleave(2, dim=2).reshape(2, 16, 32)
    torch.testing.assert_close(attn(x), attn.proj(v), rtol=0, atol=1e-6)
    full = Attention(BlockConfig.from_spec(LLAMA, 0))
    full.load_state_dict(attn.state_dict())
    wide = Attention(BlockConfig.from_spec(LLAMA.model_copy(update={"sliding_window": 16}), 0))
    wide.load_state_dict(attn.state_dict())
    torch.testing.assert_close(wide(x), full(x), rtol=0, atol=1e-6)
    assert [uses_window(spec.model_copy(update={"n_layers": 4, "sliding_window_layers": 2}), i) for i in range(4)] \
        == [True, False, True, False]  # Gemma 2: even layers local


def test_moe_is_the_top_k_mixture_token_by_token():
    """Mixtral §2.1: y = sum over the top-k experts of softmax(top-k logits)_i * E_i(x), plus the shared expert."""
    torch.manual_seed(0)
    moe = MoE(BlockConfig.from_spec(MOE, 0))
    x = torch.randn(3, 5, 32)
    got = moe(x)
    for b in range(3):
        for t in range(5):
            xt = x[b, t]
            top, idx = moe.router(xt).topk(2)
            w = F.softmax(top, dim=-1)
            want = sum(w[j] * moe.experts[int(idx[j])](xt) for j in range(2)) + moe.shared(xt)
            torch.testing.assert_close(got[b, t], want, rtol=0, atol=1e-6)


def test_moe_gives_every_expert_a_gradient():
    """Experts run on empty token sets too, so DDP/ZeRO see every parameter used (zero gradient if idle)."""
    torch.manual_seed(0)
    moe = MoE(BlockConfig.from_spec(MOE, 0))
    moe(torch.randn(1, 1, 32)).sum().backward()  # one token: 2 of 4 experts used
    grads = [e.down.weight.grad for e in moe.experts]
    assert all(g is not None for g in grads)
    assert sum(int(g.abs().sum() == 0) for g in grads) == 2
