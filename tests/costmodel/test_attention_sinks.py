"""Attention sinks (GPT-OSS's learned per-head softmax logit): FlashAttention-2 has no kernel for them, so on the
flash stack the core is priced unfused (Workload.core_kernel), its scores stored and scored against every key even
on sliding-window layers; Transformer Engine's cuDNN attention keeps it fused; the hand-over says so."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.analytical import compute as K
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch.build import attention_notes
from gpuadvisor.schemas import parse_plan

PLAN = "dp=16,tp=1,pp=4,zero=1,mb=1,m=80,nodes=8,gpn=8,ep=8"
PRESET = "hgx-h100-8x-8nodes-ib-ndr"


def _wl(model: str, kernel: str):
    return api.make_workload(model, seq_len=4096, global_batch=1280, attention_kernel=kernel, kernels="fused")


def test_gpt_oss_has_sinks_and_runs_its_core_unfused_on_the_flash_stack():
    flash, cudnn = _wl("gpt-oss-120b", "flash"), _wl("gpt-oss-120b", "cudnn")
    assert flash.model.attention_sinks and flash.core_kernel == "eager" and cudnn.core_kernel == "cudnn"
    assert _wl("llama-3.1-8b", "flash").core_kernel == "flash"  # no sinks: FlashAttention-2 as asked


def test_the_flash_stack_prices_what_an_unfused_core_costs():
    cluster = load_preset(PRESET)
    flash, eager, cudnn = (api.predict(_wl("gpt-oss-120b", k), PLAN, cluster=cluster) for k in ("flash", "eager",
                                                                                                 "cudnn"))
    assert flash.memory.activations == eager.memory.activations
    assert flash.step_time_s == pytest.approx(eager.step_time_s, rel=1e-9)
    # the scores of every head at 4,096 tokens: far above a fused core's activations, and slower
    assert flash.memory.activations > 3 * cudnn.memory.activations and flash.step_time_s > cudnn.step_time_s


def test_an_unfused_core_scores_every_key_of_a_sliding_window_layer():
    wl = _wl("gpt-oss-120b", "flash")
    ctx = Context(load_preset(PRESET), wl)
    windowed = K.layer_flops_split(wl.model, 4096)["core"]
    full = K.attention_flops_per_token(wl.model.model_copy(update={"sliding_window": 0,
                                                                   "sliding_window_layers": None}), 4096)
    # gpt-oss: 18 of 36 layers see 128 keys; the unfused core computes all 4,096 and masks them
    assert windowed == pytest.approx(full * (18 * 128 + 18 * 4096) / (36 * 4096))
    assert ctx.flops_split["core"] == pytest.approx(full)
    assert Context(load_preset(PRESET), _wl("gpt-oss-120b", "cudnn")).flops_split["core"] == pytest.approx(windowed)


def test_the_hand_over_names_the_sinks_and_the_way_out():
    wl = _wl("gpt-oss-120b", "flash")
    device = load_preset(PRESET).nodes[0].devices[0]
    (note,) = attention_notes(parse_plan(PLAN), wl, device)
    assert "attention sinks, which FlashAttention-2 cannot run" in note and "--attention-kernel cudnn" in note
    assert not any("sinks" in n for n in attention_notes(parse_plan(PLAN), _wl("gpt-oss-120b", "cudnn"), device))


def test_confirm_refuses_to_time_sinks_the_trainers_do_not_run():
    from gpuadvisor.errors import UserError

    with pytest.raises(UserError, match="attention sinks cannot be measured by the bundled trainers"):
        api.confirm("gpt-oss-120b", preset=PRESET, top_k=1)
