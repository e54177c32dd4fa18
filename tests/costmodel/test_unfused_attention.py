"""attention_kernel "eager": an unfused attention core (HF eager, Megatron's local layers, Megatron-DeepSpeed without
--use-flash-attn) stores the b·a·s² scores and moves them through HBM; fused kernels do neither."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.costmodel.analytical import compute as K
from gpuadvisor.costmodel.analytical.memory import activation_terms
from gpuadvisor.costmodel.combine import make_context
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import Plan
from gpuadvisor.trials.hostcheck import refuse_unmeasurable
from gpuadvisor.workload.shapes import layer_shape
from gpuadvisor.workload.specs import make_workload


def test_score_bytes_per_element_pass_by_pass():
    # bf16 with dropout: S (2) + softmax (4) + dropout (2 + 2 + 1 mask) + P·V's read (2) forward; dP (2), P for dV
    # (2), dropout backward (2 + 1 + 2), softmax backward (6), dS read twice (4) backward
    assert K.unfused_attention_bytes(2, True) == (13.0, 19.0)
    assert K.unfused_attention_bytes(2, False) == (8.0, 14.0)
    assert K.unfused_attention_bytes(4, False) == (16.0, 28.0)


def test_stored_scores_are_5_bytes_with_dropout_and_2_without():
    gpt = layer_shape(make_workload("gpt3-1.3b").model)            # GPT: dropout
    llama = layer_shape(make_workload("llama-7b").model)           # Llama: none
    assert activation_terms(gpt, 2).scores_per_s == 5.0 * 16        # softmax output, dropout output, mask
    assert activation_terms(llama, 2).scores_per_s == 2.0 * 32      # the softmax output alone feeds P·V


def _est(kernel, plan="dp=8,zero=1,mb=2,m=32", model="1.3B", seq=2048):
    wl = api.make_workload(model, seq_len=seq, global_batch=512, attention_kernel=kernel)
    return api.predict(wl, plan, cluster=load_preset("dgx-a100-8x"))


def test_eager_costs_the_score_traffic_and_memory_fused_kernels_do_not():
    flash, eager = _est("flash"), _est("eager")
    assert flash.feasible and eager.feasible
    wl = make_workload("1.3B", seq_len=2048, global_batch=512)
    ctx = make_context(load_preset("dgx-a100-8x"), wl)
    s, a, L = 2048, 16, 24
    # stored: 5 bytes per score element per layer and sequence on top of flash's activations (mb 2)
    extra_mem = eager.memory.activations - flash.memory.activations
    assert extra_mem == pytest.approx(L * 2 * s * s * a * 5, rel=0.01)
    # time: 32 bytes per score element over HBM, 64 micro-batches of 2 per step (m 32 x mb 2), every layer
    per_step = 32 * L * 2 * s * s * a * 32 / ctx.mem_bw
    assert eager.step.compute_s - flash.step.compute_s == pytest.approx(per_step, rel=0.15)
    assert eager.step.compute_s > 1.2 * flash.step.compute_s        # seq 2048, h 2048: +28 % on an A100 at mb 2


def test_tp_splits_the_scores_and_recompute_replays_their_forward():
    flash, eager = _est("flash", "tp=2,dp=4,zero=1,mb=2,m=64"), _est("eager", "tp=2,dp=4,zero=1,mb=2,m=64")
    one = _est("eager").step.compute_s - _est("flash").step.compute_s
    # per GPU: half the heads, twice the micro-batches per step -> the same score seconds per step
    assert eager.step.compute_s - flash.step.compute_s == pytest.approx(one, rel=0.05)
    rc_f, rc_e = _est("flash", "dp=8,zero=1,mb=2,m=32,recompute=true"), _est("eager", "dp=8,zero=1,mb=2,m=32,recompute=true")
    assert rc_e.step.compute_s - rc_f.step.compute_s == pytest.approx(one * 45 / 32, rel=0.05)
    # recompute stores the layer input only: no scores kept between passes
    assert rc_e.memory.activations < 0.2 * eager.memory.activations


def test_eager_moves_the_pick_to_smaller_micro_batches():
    cl = load_preset("dgx-a100-8x")
    top = {k: api.suggest(api.make_workload("1.3B", attention_kernel=k), cluster=cl, top=1).ranking.top[0].plan
           for k in ("flash", "eager")}
    assert top["eager"].micro_batch_size * (1 if top["eager"].recompute else 2) <= top["flash"].micro_batch_size * 2
    assert top["eager"].micro_batch_size < top["flash"].micro_batch_size or top["eager"].recompute


def test_the_bundled_trainers_cannot_measure_it():
    with pytest.raises(UserError, match="--attention-kernel eager cannot be measured") as exc:
        refuse_unmeasurable("bf16", "eager", "confirm")
    assert "\n" not in str(exc.value)


def test_an_eager_plan_on_a_generic_model_or_cpu_costs_nothing_new():
    cpu = load_preset("cpu-2ranks")
    wl = {k: make_workload("L2-H64-A4", seq_len=64, global_batch=8, attention_kernel=k) for k in ("flash", "eager")}
    t = {k: evaluate(Plan(dp=2, micro_batch_size=4, devices_per_node=2), make_context(cpu, w)).analytical_tps
         for k, w in wl.items()}
    assert t["flash"] == pytest.approx(t["eager"])   # CPU ranks: fitted on the whole step, scores already stored
