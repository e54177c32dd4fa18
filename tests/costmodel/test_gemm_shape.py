"""GEMM efficiency by shape: the narrow-side (width) term and the attention core's own rate, and the public rows
they were fitted on (knowledge/calibration.yaml gemm_efficiency, benchmarks/fit_gemm_family.py)."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.analytical.compute import (flops_per_token, gemm_width, layer_gemm_efficiency,
                                                     width_efficiency)
from gpuadvisor.costmodel.calibration import gemm_curve, load_calibration
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.publicruns import load_runs, to_inputs
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.specs import make_workload


def test_width_efficiency_halves_at_w_half_and_is_off_at_zero():
    w = np.array([256.0, 512.0, 4096.0, 1e9])
    assert width_efficiency(w, 512.0).tolist() == pytest.approx([1 / 3, 0.5, 4096 / 4608, 1.0], rel=1e-6)
    assert width_efficiency(w, 0.0).tolist() == [1.0, 1.0, 1.0, 1.0]
    # a tensor-parallel GEMM narrows only where its per-rank width falls below d_model
    assert gemm_width(4096, np.array([16384 / 8, 4096 / 8, 12288.0])).tolist() == [2048, 512, 4096]


def test_an_unsplit_gemm_pair_is_the_fitted_curve_and_a_tp_split_costs_one_pass_in_three():
    rows, h, x_half, w_half = 4096.0, 7168, 1.5, 256.0
    unsplit = (rows * h / 1e6) / (rows * h / 1e6 + x_half) * h / (h + w_half)
    # a per-rank width at or above h: the three passes are one GEMM shape, the curve fitted on FSDP runs
    assert layer_gemm_efficiency(rows, h, np.array([7168.0, 28672.0]), x_half, w_half).tolist() == pytest.approx(
        [unsplit, unsplit])
    # TP 8 of the projections (896 wide): only the pass that reduces over the split side, and the one writing the
    # narrow output, slow down; charging 896 to every pass (the curve's size and width at 896) is far slower
    tp8 = float(layer_gemm_efficiency(rows, h, np.array([896.0]), x_half, w_half)[0])
    all_narrow = (rows * 896 / 1e6) / (rows * 896 / 1e6 + x_half) * 896 / (896 + w_half)
    assert all_narrow < tp8 < unsplit
    assert tp8 > 1.3 * all_narrow
    # the harmonic mean of the passes lies between its slowest pass and the unsplit pair
    s = lambda w: (rows * w / 1e6) / (rows * w / 1e6 + x_half)  # noqa: E731
    k = lambda w: w / (w + w_half)  # noqa: E731
    slowest = min(s(896) * k(h), s(h) * k(896))
    assert tp8 == pytest.approx(3 / (1 / (s(896) * k(h)) + 1 / (s(h) * k(896)) + 1 / (s(h) * k(h))))
    assert slowest < tp8


def test_megatron_tp8_rows_are_not_slower_than_its_tp1_row_by_the_split():
    # Megatron-Core's H100 weak-scaling table: the TP-8 32B row (per-rank projection width 896) read 1.47
    # pred/meas and the TP-1 1.7B row 1.23 when every pass paid the split; pass by pass they read alike. Compared
    # without the data-parallel sync, which the split does not touch (the 32B row's DP group is one GPU per node
    # reduce-scattering fp32 gradients: test_megatron_grad_buffer.py)
    runs = {r.ref: r for r in load_runs() if r.source_id == "megatron_h100_weak_scaling_table"}
    ratio = {}
    for ref in ("megatron_lm:1", "megatron_lm:4"):
        inp = to_inputs(runs[ref], ("micro-batch", "recompute-unstated"))
        # one attention kernel for both (cuDNN's, which the rows ran, moves the TP-1 row's larger core share more)
        wl = inp.workload.model_copy(update={"training": inp.workload.training.model_copy(
            update={"attention_kernel": "flash"})})
        ctx = Context(inp.cluster, wl)
        ctx.tp_overlap_hidden = 1.0  # ... and the TP overlap the rows ran (Transformer Engine's userbuffers)
        e = evaluate(inp.plan, ctx)
        dp_sync = sum(v for k, v in e.comm.items() if k.startswith(("zero@", "dp@")))
        ratio[ref] = (e.step_s - dp_sync) / runs[ref].measured_iter_time_s
    assert ratio["megatron_lm:4"] < 1.3, ratio
    assert ratio["megatron_lm:4"] / ratio["megatron_lm:1"] < 1.15, ratio


def test_the_families_carry_their_fitted_shape_terms():
    cal = load_calibration()
    a100, h100 = gemm_curve("NVIDIA A100-SXM4-80GB", cal=cal), gemm_curve("NVIDIA H100 80GB HBM3", cal=cal)
    assert (a100.w_half, a100.attn_rel) == (512.0, 1.0)
    assert (h100.w_half, h100.attn_rel) == (256.0, 0.5)
    # families without public rows to fit have no width term: their constants were fitted on the seeds as they are
    assert gemm_curve("NVIDIA RTX A6000", cal=cal).w_half == 0.0


def _seconds_per_flop(model: str, preset: str = "dgx-a100-8x", seq: int = 1024, mb: int = 8) -> float:
    wl = make_workload(model, seq_len=seq, global_batch=mb)
    e = evaluate(parse_plan(f"dp=1,tp=1,pp=1,zero=0,mb={mb},m=1"), Context(load_preset(preset), wl))
    return e.compute_s / (flops_per_token(wl.model, seq) * seq * mb)


def test_rows_cannot_make_up_for_a_narrow_model():
    # the same number of tokens per micro-batch: GPT-2 124M (h 768) spends more time per FLOP than a 6.7B (h 4096)
    narrow, wide = _seconds_per_flop("124M"), _seconds_per_flop("6.7B")
    assert narrow > 1.2 * wide
    # and a bigger micro-batch does not close the gap (the width term does not depend on rows)
    assert _seconds_per_flop("124M", mb=64) > 1.2 * _seconds_per_flop("6.7B", mb=64)


def test_attention_core_rate_scales_only_the_core():
    ctx = Context(load_preset("hgx-h100-8x"), make_workload("1.3B", seq_len=1024, global_batch=8))
    plan = parse_plan("dp=1,tp=1,pp=1,zero=0,mb=8,m=1")
    base = evaluate(plan, ctx).compute_s
    cal = copy.deepcopy(load_calibration())
    cal["gemm_efficiency"]["families"]["hopper"]["attn_rel"] = 1.0
    ctx1 = Context(load_preset("hgx-h100-8x"), make_workload("1.3B", seq_len=1024, global_batch=8), calibration=cal)
    fast = evaluate(plan, ctx1).compute_s
    # the core is ~10 % of this model's layer FLOPs at seq 1024; at half the rate its time doubles, which adds
    # about that share (its GEMM-size rate is the projections' own), not more
    share = ctx.flops_split["core"] / sum(ctx.flops_split.values())
    assert 0.05 < share < 0.2
    assert 0.5 * share < (base - fast) / fast < 1.2 * share


def _ratios(model: str, gpu_prefix: str) -> list[float]:
    out = []
    for run in load_runs():
        if run.source_id == "llmfoundry_mpt_benchmarks" and run.model_name == model and run.gpu.startswith(gpu_prefix):
            try:
                inp = to_inputs(run)
            except Exception:
                continue
            e = evaluate(inp.plan, Context(inp.cluster, inp.workload))
            if e.feasible:
                out.append(e.step_s / run.measured_iter_time_s)
    return out


@pytest.mark.parametrize("model", ["MPT-125m", "MPT-350m", "MPT-1b", "MPT-7b"])
def test_llmfoundry_a100_rows_are_right_at_every_width(model):
    # before the width term, MPT-125m read 0.75 (too fast) and MPT-7b 1.01 at every micro-batch and seq length
    r = _ratios(model, "A100")
    assert len(r) >= 7
    med = sorted(r)[len(r) // 2]
    assert abs(math.log(med)) < math.log(1.1), (model, med)


def test_long_sequences_on_h100_price_the_attention_core_slower():
    # MPT-1b on 8 H100 from seq 2k to 64k: one level at every length (the 32k-64k rows read 0.70 at attn_rel 1)
    r = _ratios("MPT-1b", "H100")
    assert len(r) >= 8 and max(r) / min(r) < 1.3, r


def test_blackwell_is_a_catalog_gpu_with_a_stated_prior():
    from gpuadvisor.api import suggest
    from gpuadvisor.hardware.cluster_file import cluster_from_dict

    curve = gemm_curve("NVIDIA B200")
    assert curve.family == "blackwell" and curve.e_max == pytest.approx(0.63)
    # the prior keeps hopper's ratio to the maximum achievable matmul (mamf_matmul.csv: B200 1745, H100 794.5)
    assert curve.e_max == pytest.approx(0.65 * (1745 / 2250) / (794.5 / 989), abs=0.01)
    clus = cluster_from_dict({"nodes": [{"gpus": "8x B200", "topology": "NV18"}]}, name="hgx-b200")
    assert suggest("llama-7b", cluster=clus, seq_len=4096, global_batch=256).ranking.top  # ranks, no unknown GPU
    # 7B on 8 B200 at a plan both fit is faster than on 8 H100 by about the GEMM-rate ratio, not the peak ratio
    h100 = cluster_from_dict({"nodes": [{"gpus": "8x H100 SXM", "topology": "NV18"}]}, name="hgx-h100")
    from gpuadvisor.api import predict

    plan = "dp=8,zero=3,mb=1,m=32,recompute=true"
    b = predict("llama-7b", plan, cluster=clus, seq_len=4096, global_batch=256).tokens_per_s
    h = predict("llama-7b", plan, cluster=h100, seq_len=4096, global_batch=256).tokens_per_s
    assert h > 0 and 1.5 < b / h < 2250 / 989


def test_cudnn_attention_speeds_up_only_the_core_and_only_where_flashattention_2_lags():
    from gpuadvisor.errors import UserError

    plan = parse_plan("dp=8,zero=3,mb=1,m=4")
    def step(preset, kernel):
        # fused kernels for both (Transformer Engine's are): only the attention kernel differs
        wl = make_workload("llama-7b", seq_len=8192, global_batch=32, attention_kernel=kernel, kernels="fused")
        return evaluate(plan, Context(load_preset(preset), wl))
    flash, cudnn = step("hgx-h100-8x", "flash"), step("hgx-h100-8x", "cudnn")
    ctx = Context(load_preset("hgx-h100-8x"), make_workload("llama-7b", seq_len=8192, global_batch=32))
    share = ctx.flops_split["core"] / sum(ctx.flops_split.values())
    # the core at FlashAttention-2's fitted half rate costs ~2 x its FLOP share of the step, at cuDNN's 1.5 x the GEMM
    # rate (derived from the kernel's causal benchmark) ~2/3 x: the step saves about its share
    saved = (flash.compute_s - cudnn.compute_s) / flash.compute_s
    assert 0.5 * share < saved < 1.5 * share
    # A100: FlashAttention-2 already runs at the GEMM rate there (attn_rel 1): no change
    assert step("dgx-a100-8x", "cudnn").step_s == pytest.approx(step("dgx-a100-8x", "flash").step_s)
    with pytest.raises(UserError, match="unknown attention kernel 'fa2'; use one of flash, flash3, cudnn, eager"):
        make_workload("llama-7b", attention_kernel="fa2")


def test_transformer_engine_frameworks_map_to_cudnn_attention():
    kernels = {}
    for run in load_runs():
        if run.source_id in ("megatron_h100_weak_scaling_table", "llmfoundry_mpt_benchmarks", "fms_fsdp_readme"):
            try:
                inp = to_inputs(run, ("micro-batch", "recompute-unstated"))
            except Exception:
                continue
            kernels.setdefault(run.source_id, set()).add(inp.workload.training.attention_kernel)
    assert kernels == {"megatron_h100_weak_scaling_table": {"cudnn"}, "llmfoundry_mpt_benchmarks": {"flash"},
                       "fms_fsdp_readme": {"flash"}}
