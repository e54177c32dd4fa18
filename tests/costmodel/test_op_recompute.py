"""Op-level selective checkpointing (Plan.recompute_ops; torchtitan's selective_ac_option 'op'): a layer keeps every
other matmul's output and the attention core's, so it stores and costs between none and full recompute; the plan
text, its one-choice rule and the hand-over say what runs it."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.costmodel.analytical.memory import op_checkpoint_bytes
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch.build import recompute_notes
from gpuadvisor.schemas import Plan, check_plan_for, parse_plan
from gpuadvisor.workload.shapes import layer_shape

PRESET = "hgx-h100-8x"


def _wl(model: str = "llama-3.1-8b", **kw):
    return api.make_workload(model, seq_len=8192, global_batch=16, kernels="fused", **kw)


def _est(plan: str, wl=None):
    return api.predict(wl or _wl(), plan, cluster=load_preset(PRESET))


def test_plan_word_and_the_one_choice_rule():
    p = parse_plan("dp=2,mb=1,recompute=op")
    assert p.recompute_ops and not p.recompute and "recompute_ops=true" in p.to_string()
    with pytest.raises(ValueError, match="one recompute choice"):
        Plan(recompute=True, recompute_ops=True)
    with pytest.raises(ValueError, match="one recompute choice"):
        Plan(recompute_attention=True, recompute_ops=True)
    moe = api.make_workload("mixtral-8x7b", seq_len=1024, global_batch=8)
    with pytest.raises(ValueError, match="mixture-of-experts"):
        check_plan_for(parse_plan("dp=8,mb=1,recompute=op"), moe)
    lora = api.make_workload("llama-3.1-8b", seq_len=1024, global_batch=8, finetune="lora")
    with pytest.raises(ValueError, match="adapter"):
        check_plan_for(parse_plan("dp=8,mb=1,recompute=op"), lora)


def test_llama_keeps_q_v_gate_down_and_the_core():
    """Llama 3.1 8B: the input, Q, V, the core's output, gate and down: 2 x (4096 + 4096 + 1024 + 4096 + 14336 +
    4096) = 63,488 bytes per token per layer (15.5 d), against the ~73 d it stores without recompute."""
    shape = layer_shape(_wl().model)
    assert op_checkpoint_bytes(shape, 2) == 2 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096)
    # TP 2 with SP: the input, Q, V, the core and gate split; down's partial sum whole; two reduce-scatters split
    assert op_checkpoint_bytes(shape, 2, 2, True) == 2 * ((4096 + 4096 + 1024 + 4096 + 14336) / 2 + 4096 + 4096)


def test_between_none_and_full_in_memory_and_time():
    base = "dp=8,zero=3,mb=2,m=1"
    none, op, full = (_est(f"{base},recompute={r}") for r in ("none", "op", "full"))
    per_layer = 2 * 8192 * op_checkpoint_bytes(layer_shape(_wl().model), 2)
    assert full.memory.activations < op.memory.activations < none.memory.activations
    assert op.memory.activations == pytest.approx(32 * per_layer + (none.memory.activations / 32 - per_layer),
                                                  rel=0.01)  # 31 layers kept op by op, one replayed whole
    assert none.step_time_s < op.step_time_s < full.step_time_s


def test_tp_replays_the_collectives_it_does_not_keep():
    """Under SP the forward's two all-gathers replay (the reduce-scatters are kept): half of full recompute's extra
    TP traffic; without SP both all-reduces replay, as with full recompute."""
    sp = "dp=4,tp=2,mb=2,m=2,sequence_parallel=true"
    nvl = {r: _est(f"{sp},recompute={r}").link_bytes_per_step["nvlink"] for r in ("none", "op", "full")}
    assert nvl["op"] - nvl["none"] == pytest.approx((nvl["full"] - nvl["none"]) / 2, rel=0.05)


def test_the_hand_over_names_the_files_that_run_it():
    (note,) = recompute_notes(parse_plan("dp=8,mb=2,recompute=op"))
    assert "launch.sh's trainer and torchtitan.toml run it" in note and "megatron_args.txt" in note
    assert recompute_notes(parse_plan("dp=8,mb=2,recompute=full")) == []
