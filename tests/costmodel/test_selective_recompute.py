"""Plan.recompute_attention: the attention core's selective recompute (Korthikanti et al. 2022 §4.2; Megatron's
--recompute-granularity selective). It drops the stored s x s scores of an unfused core for one replay of the
core's forward; with a fused kernel it changes no memory and still costs that forward."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.candidates import COLUMNS, enumerate_rows, row_plan
from gpuadvisor.costmodel.analytical import compute as K
from gpuadvisor.costmodel.analytical.memory import activation_terms
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import rank
from gpuadvisor.schemas import Plan, parse_plan
from gpuadvisor.workload.shapes import layer_shape
from gpuadvisor.workload.specs import make_workload

BASE = "dp=8,zero=1,mb=2,m=32"


def _est(kernel: str, recompute: str, model: str = "gpt3-1.3b"):
    wl = api.make_workload(model, seq_len=2048, global_batch=512, attention_kernel=kernel)
    return api.predict(wl, f"{BASE},recompute={recompute}", cluster=load_preset("dgx-a100-8x")), wl


def test_plan_words_and_the_one_choice_rule():
    assert parse_plan("dp=2,mb=1,recompute=selective").recompute_attention
    assert parse_plan("dp=2,mb=1,recompute=full").recompute and not parse_plan("dp=2,recompute=none").recompute
    assert "recompute_attention=true" in parse_plan("dp=2,recompute=selective").to_string()
    with pytest.raises(ValueError, match="write recompute=full, selective, op or none"):
        parse_plan("dp=2,mb=1,recompute=partial")
    with pytest.raises(ValueError, match="one choice"):
        Plan(recompute=True, recompute_attention=True)
    with pytest.raises(ValueError, match="no attention core"):
        api.predict("resnet18", "dp=1,mb=8,recompute_attention=true", preset="dgx-a100-8x")


def test_unfused_core_stores_no_scores_and_replays_its_forward():
    none, wl = _est("eager", "none")
    sel, _ = _est("eager", "selective")
    full, _ = _est("eager", "full")
    m = wl.model
    # memory: every layer's stored scores go (5 bytes per score with dropout: activation_terms), one layer's
    # replayed scores are held during its backward
    scores_layer = activation_terms(layer_shape(m), 2).scores_per_s * 2048 * 2048 * 2  # s·b·(a·5 bytes)·s
    assert none.memory.activations - sel.memory.activations == pytest.approx((m.n_layers - 1) * scores_layer,
                                                                            rel=1e-9)
    assert full.memory.activations < sel.memory.activations < none.memory.activations
    # time: the core's forward again (a third of its FLOPs, its forward score traffic): more than none, far less
    # than replaying the whole layer
    d_sel, d_full = sel.step.compute_s - none.step.compute_s, full.step.compute_s - none.step.compute_s
    assert 0 < d_sel < 0.5 * d_full
    assert K.CORE_FORWARD_SHARE == pytest.approx(1 / 3)


def test_fused_core_keeps_its_memory_and_pays_the_replay():
    none, _ = _est("flash", "none")
    sel, _ = _est("flash", "selective")
    assert sel.memory.activations == none.memory.activations
    assert sel.step.compute_s > none.step.compute_s
    assert sel.step.compute_s - none.step.compute_s < 0.1 * none.step.compute_s


def test_enumerated_for_an_unfused_core_only_and_never_beside_full_recompute():
    cl = load_preset("dgx-a100-8x")
    col, rc = COLUMNS.index("recompute_attention"), COLUMNS.index("recompute")
    eager = enumerate_rows(cl, make_workload("gpt3-1.3b", seq_len=2048, global_batch=512, attention_kernel="eager"))
    flash = enumerate_rows(cl, make_workload("gpt3-1.3b", seq_len=2048, global_batch=512))
    sel = [r for r in eager if r[col]]
    assert sel and all(r[rc] == 0 for r in sel)
    assert not any(r[col] for r in flash)
    assert row_plan(sel[0]).recompute_attention and len(eager) > len(flash)
    lora = make_workload("gpt3-1.3b", seq_len=2048, global_batch=512, attention_kernel="eager", finetune="lora")
    assert not any(r[col] for r in enumerate_rows(cl, lora))  # transformers/peft have no core-only checkpointing


def test_an_unfused_core_at_2048_tokens_is_advised_selective_recompute():
    """What Megatron users without flash attention run (Korthikanti et al. 2022 §4.2, the 2.7B at 2048 tokens on
    40 GB A100s): the scores are most of the activations, their replay is cheap."""
    r = rank(load_preset("dgx-a100-8x"), make_workload("gpt3-2.7b", seq_len=2048, attention_kernel="eager"), top=3)
    best = r.top[0].plan
    assert best.recompute_attention and not best.recompute
