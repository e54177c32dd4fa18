"""FP8 training (--precision fp8): the Linears at the FP8 tensor rate, the attention core at bf16, the casts as HBM
traffic (knowledge/calibration.yaml `fp8`), and the public FP8 rows it is checked on."""
from __future__ import annotations

import copy
import math

import pytest

from gpuadvisor.api import predict
from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.calibration import load_calibration
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.publicruns import load_runs, to_inputs
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.specs import make_workload

PLAN = "dp=8,zero=3,mb=2,m=8"


def _step(model: str, precision: str, seq: int = 4096, cal=None, plan: str = PLAN) -> float:
    wl = make_workload(model, seq_len=seq, global_batch=128, precision=precision)
    e = evaluate(parse_plan(plan), Context(load_preset("hgx-h100-8x"), wl, calibration=cal))
    assert e.feasible, e.reason
    return e.step_s


def test_fp8_is_refused_on_gpus_without_fp8_tensor_cores():
    with pytest.raises(UserError) as exc:
        predict("llama-7b", PLAN, preset="dgx-a100-8x", seq_len=4096, precision="fp8")
    msg = str(exc.value)
    assert "\n" not in msg and "no FP8 tensor cores" in msg and "--precision bf16" in msg


def test_fp8_speeds_up_the_linears_not_the_whole_step_twofold():
    bf16, fp8 = _step("llama-7b", "bf16"), _step("llama-7b", "fp8")
    # the Linears run at twice the peak (less: the FP8 maximum achievable matmul's share is 0.95 of bf16's, and
    # small GEMMs fall off earlier); attention, norms, casts and communication do not speed up
    assert 1.15 < bf16 / fp8 < 1.8
    # where the attention core dominates (64k tokens), FP8 gains less
    long = "dp=8,zero=3,mb=1,m=16,recompute=true"
    long_bf16, long_fp8 = (_step("llama-7b", p, seq=32768, plan=long) for p in ("bf16", "fp8"))
    assert long_bf16 / long_fp8 < bf16 / fp8


def test_the_casts_cost_hbm_time():
    cal = copy.deepcopy(load_calibration())
    cal["fp8"].update(cast_traffic_per_h=0, weight_cast_bytes_per_param=0)
    free = _step("llama-7b", "fp8", cal=cal)
    priced = _step("llama-7b", "fp8")
    assert priced > free * 1.01


def test_transformer_engine_casts_weights_once_per_step_torchao_per_pass():
    """torchao's float8 Linear casts each weight in every pass of every micro-batch (forward, transposed for the
    backward, a replayed forward); Transformer Engine casts both copies on a step's first micro-batch and reuses
    its cached workspace: the weight-cast time of a step is m x (2 + recompute) passes against 2."""
    cal = copy.deepcopy(load_calibration())
    cal["fp8"].update(weight_cast_bytes_per_param=0)
    plan = parse_plan("dp=2,tp=4,zero=1,mb=1,m=16,recompute=true")
    cast_s = {}
    for kernel in ("flash", "cudnn"):
        wl = make_workload("llama-7b", seq_len=4096, global_batch=32, precision="fp8", attention_kernel=kernel)
        ctx = Context(load_preset("hgx-h100-8x"), wl)
        priced = evaluate(plan, ctx).compute_s
        free = evaluate(plan, Context(load_preset("hgx-h100-8x"), wl, calibration=cal)).compute_s
        # 5 B per parameter per cast over HBM, each device's TP shard of every layer
        one_cast = 5.0 * ctx.L * ctx.w_layer_bytes / ctx.weight_bytes / 4 / ctx.mem_bw
        cast_s[kernel] = (priced - free) / one_cast
    assert cast_s["flash"] == pytest.approx(16 * 3)
    assert cast_s["cudnn"] == pytest.approx(2)


def test_bf16_predictions_do_not_change_with_the_fp8_constants():
    cal = copy.deepcopy(load_calibration())
    cal["fp8"].update(large_gemm_ratio=0.5, cast_traffic_per_h=500)
    assert _step("llama-7b", "bf16", cal=cal) == _step("llama-7b", "bf16")


def test_llmfoundry_fp8_rows_on_h100_are_right():
    ratios = []
    for run in load_runs():
        if run.source_id == "llmfoundry_mpt_benchmarks" and "fp8" in run.precision.lower():
            inp = to_inputs(run)
            assert inp.workload.training.precision == "fp8"
            e = evaluate(inp.plan, Context(inp.cluster, inp.workload))
            if e.feasible:
                ratios.append(e.step_s / run.measured_iter_time_s)
    assert len(ratios) >= 5
    med = sorted(ratios)[len(ratios) // 2]
    assert abs(math.log(med)) < math.log(1.1), ratios



@pytest.mark.parametrize("preset", ["cpu-2ranks", "hgx-h100-8x"])
def test_without_fp8_the_attention_core_and_head_share_the_linears_curve(preset):
    # the 16-bit curve is taken after the CPU ranks' own constants (cpu_ranks e_max/x_half): taking it before them
    # priced CPU ranks' attention and head on the GPU-family curve, twice as slow for the 10M model
    ctx = Context(load_preset(preset), make_workload("gpt2", seq_len=64, global_batch=2))
    assert ctx.bf16_curve == ctx.linear_curve
    if preset == "cpu-2ranks":
        assert ctx.linear_curve[1] == pytest.approx(float(load_calibration()["cpu_ranks"]["x_half"]))


def test_fp8_moves_only_the_linears_curve():
    bf16, fp8 = (Context(load_preset("hgx-h100-8x"), make_workload("llama-7b", seq_len=1024, global_batch=8,
                                                                   precision=p)) for p in ("bf16", "fp8"))
    assert fp8.bf16_curve == bf16.bf16_curve == bf16.linear_curve
    assert fp8.linear_curve[0] == pytest.approx(bf16.linear_curve[0] * 1979 / 989.5 * 0.95)


def _kernel(workload, kernel: str):
    return workload.model_copy(update={"training": workload.training.model_copy(update={"attention_kernel": kernel})})


def test_megatron_bridge_70b_fp8_h100_plan_fits_as_it_ran():
    # NeMo's Llama 3 70B FP8 pretraining on 64 H100 (TP 4, PP 8, VP 5, one 8k sequence per micro-batch, no
    # recompute stated) ran; priced with eager-PyTorch activations it needed 90 GiB of 80
    run = next(r for r in load_runs() if r.ref == "megatron_bridge_perf:80")
    inp = to_inputs(run, approximate=("recompute-unstated",))
    assert inp.workload.training.attention_kernel == "cudnn" and inp.workload.training.precision == "fp8"
    te = evaluate(inp.plan, Context(inp.cluster, inp.workload))
    assert te.feasible and 0.85 < te.memory_fraction < 1.0
    torchao = evaluate(inp.plan, Context(inp.cluster, _kernel(inp.workload, "flash")))
    assert not torchao.feasible  # torchao keeps the bf16 inputs and the eager SwiGLU's four tensors
    assert te.mem.activations < 0.75 * torchao.mem.activations


def test_transformer_engine_caches_two_bytes_of_fp8_weight_per_linear_parameter():
    wl = make_workload("llama-7b", seq_len=4096, global_batch=64, precision="fp8", attention_kernel="cudnn")
    ctx = Context(load_preset("hgx-h100-8x"), wl)
    bf16 = Context(load_preset("hgx-h100-8x"), make_workload("llama-7b", seq_len=4096, global_batch=64,
                                                             attention_kernel="cudnn"))
    plan = parse_plan("dp=4,tp=2,zero=1,mb=1,m=16")
    extra = evaluate(plan, ctx).mem.weights - evaluate(plan, bf16).mem.weights
    assert extra == pytest.approx(2.0 * ctx.L * ctx.p_layer / 2)
    # under ZeRO-3 the cache is sharded over the group like the weights; torchao recasts per pass, caches nothing
    z3 = parse_plan("dp=8,zero=3,mb=1,m=8")
    z3_extra = evaluate(z3, ctx).mem.weights - evaluate(z3, bf16).mem.weights
    assert z3_extra == pytest.approx(2.0 * ctx.L * ctx.p_layer / 8)
    torchao = Context(load_preset("hgx-h100-8x"), _kernel(wl, "flash"))
    assert evaluate(plan, torchao).mem.weights == evaluate(plan, bf16).mem.weights
