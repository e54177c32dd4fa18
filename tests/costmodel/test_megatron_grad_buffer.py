"""Megatron's gradient buffer: fp32 with bf16 (arguments.py accumulate_allreduce_grads_in_fp32), reduced in place.

Megatron's own estimate (megatron/training/theoretical_memory_usage.py) counts 18 bytes per parameter, 6 + 12/dp with
the distributed optimizer: bf16 weights, fp32 gradients, fp32 master weights and Adam's two states sharded over dp.
With --grad-reduce-in-bf16 (TrainingSettings.grad_reduce_in_bf16) the gradients are 2 bytes, as with fp16.
"""
from __future__ import annotations

import pytest

from gpuadvisor.costmodel.combine import estimate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch.megatron import megatron_args
from gpuadvisor.launch.readback import read_megatron
from gpuadvisor.publicruns.load import load_runs
from gpuadvisor.publicruns.mapping import LIMITS, Unsupported, to_inputs
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.specs import make_workload


def _megatron_workload(precision="bf16", bf16_reduce=False, kernels="fused"):
    wl = make_workload("gpt3-1.3b", global_batch=64, seq_len=1024, precision=precision, kernels=kernels)
    return wl.model_copy(update={"training": wl.training.model_copy(update={"grad_reduce_in_bf16": bf16_reduce})})


def _states_per_param(plan_spec, **kw):
    """(weights + gradients + optimizer) / parameters on the device, and the comm buffers, of a plan on one
    DGX A100 node (the weights part is the parameters' 16-bit bytes)."""
    cl = load_preset("dgx-a100-8x")
    plan = parse_plan(plan_spec, nodes=1, devices_per_node=8)
    m = estimate(plan, cl, _megatron_workload(**kw)).memory
    return (m.weights + m.gradients + m.optimizer) / (m.weights / 2), m.comm_buffers


@pytest.mark.parametrize("spec,dp", [("dp=4,tp=2,zero=1,mb=1,m=16", 4), ("dp=2,tp=2,pp=2,zero=1,mb=1,m=32", 2)])
def test_distributed_optimizer_model_states_are_megatrons_estimate(spec, dp):
    per, buf = _states_per_param(spec)
    assert per == pytest.approx(6 + 12 / dp)  # theoretical_memory_usage: 6 + 12 / data_parallel_size
    assert buf == 0  # Megatron-Core reduces and gathers in place on its contiguous buffers
    per16, _ = _states_per_param(spec, bf16_reduce=True)
    assert per16 == pytest.approx(4 + 12 / dp)
    per_fp16, _ = _states_per_param(spec, precision="fp16")  # fp16 keeps the fp16 buffer (the flag stays off)
    assert per_fp16 == pytest.approx(4 + 12 / dp)


def test_megatron_ddp_model_states_are_18_bytes():
    per, buf = _states_per_param("dp=4,tp=2,mb=1,m=16")
    assert per == pytest.approx(18.0) and buf == 0
    assert _states_per_param("dp=4,tp=2,mb=1,m=16", bf16_reduce=True)[0] == pytest.approx(16.0)


def test_the_bundled_trainers_are_not_megatron():
    """Eager (autocast) TP plans run on the bundled trainers: Megatron's flag changes nothing there."""
    plan = parse_plan("dp=4,tp=2,zero=1,mb=1,m=16", nodes=1, devices_per_node=8)
    cl = load_preset("dgx-a100-8x")
    a = estimate(plan, cl, _megatron_workload(kernels="eager"))
    b = estimate(plan, cl, _megatron_workload(kernels="eager", bf16_reduce=True))
    assert a.memory == b.memory and a.step_time_s == b.step_time_s


def test_distributed_optimizer_sends_fp32_gradients_and_bf16_parameters():
    """TP 8 inside each node, the distributed optimizer over 4 nodes: the network carries the reduce-scatter of the
    gradient buffer and the all-gather of the bf16 parameters, (4 + 2) bytes per parameter against (2 + 2)."""
    cl = load_preset("dgx-a100-8x-4nodes-ib-hdr")
    plan = parse_plan("dp=4,tp=8,zero=1,mb=1,m=16", nodes=4, devices_per_node=8)
    fp32 = estimate(plan, cl, _megatron_workload())
    bf16 = estimate(plan, cl, _megatron_workload(bf16_reduce=True))
    assert fp32.link_bytes_per_step["network"] / bf16.link_bytes_per_step["network"] == pytest.approx(1.5)
    assert fp32.step_time_s > bf16.step_time_s


def test_megatron_arguments_carry_the_gradient_dtype():
    plan = parse_plan("dp=4,tp=2,zero=1,mb=1,m=16", nodes=1, devices_per_node=8)
    default = megatron_args(plan, _megatron_workload(), steps=10)
    assert "--grad-reduce-in-bf16" not in default
    assert read_megatron(default, world=8).grad_reduce_in_bf16 is False
    flagged = megatron_args(plan, _megatron_workload(bf16_reduce=True), steps=10)
    assert "--grad-reduce-in-bf16" in flagged
    rb = read_megatron(flagged, world=8)
    assert rb.grad_reduce_in_bf16 is True and "--grad-reduce-in-bf16" not in rb.ignored
    # fp16 has no bf16 buffer to keep: the flag is read with a note, not applied
    rb = read_megatron(["--fp16", "--grad-reduce-in-bf16"], world=1)
    assert rb.grad_reduce_in_bf16 is False and any("--grad-reduce-in-bf16" in n for n in rb.notes)


def test_public_rows_reduce_as_their_recipes_do():
    """Megatron-Bridge's performance recipes set grad_reduce_in_fp32 = False; Megatron-LM's scripts keep fp32."""
    seen = set()
    for run in load_runs():
        if run.source_id not in ("megatron_bridge_perf_summary", "megatron_h100_weak_scaling_table"):
            continue
        try:
            inp = to_inputs(run, tuple(LIMITS))
        except Unsupported:  # rows the mapping cannot price (MoE shapes it lacks, ...)
            continue
        bridge = run.source_id == "megatron_bridge_perf_summary"
        assert inp.workload.training.grad_reduce_in_bf16 is bridge, run.ref
        seen.add(bridge)
    assert seen == {True, False}


def test_megatron_ddp_all_reduces_its_buffer_dtype():
    """Megatron's DDP all-reduces the buffer as it is: fp32 with bf16, fp16 with fp16 (PyTorch AMP's DDP sends fp32
    whatever the training dtype, as the eager rows still do)."""
    cl = load_preset("dgx-a100-8x-4nodes-ib-hdr")
    plan = parse_plan("dp=4,tp=8,mb=1,m=16", nodes=4, devices_per_node=8)
    bf16 = estimate(plan, cl, _megatron_workload()).link_bytes_per_step["network"]
    fp16 = estimate(plan, cl, _megatron_workload(precision="fp16")).link_bytes_per_step["network"]
    assert bf16 / fp16 == pytest.approx(2.0)
    eager = estimate(plan, cl, _megatron_workload(precision="fp16", kernels="eager")).link_bytes_per_step["network"]
    assert eager == pytest.approx(bf16)


def test_expert_parallel_plans_run_as_megatron():
    """A fused MoE plan with expert parallelism and no TP/PP is Megatron-Core's parallel folding: its buffers are in
    place (no DeepSpeed buckets), its gradients fp32 with bf16. Megatron-Bridge's GPT-OSS 120B rows on 64 B200
    (dp 64, ep 8, distributed optimizer) ran; with DeepSpeed's 3 GB of buckets the model called them out of memory
    by 1.1 GiB."""
    cl = load_preset("dgx-a100-8x")
    wl = make_workload("qwen3-30b-a3b", global_batch=64, seq_len=2048, kernels="fused")
    plan = parse_plan("dp=8,ep=8,zero=1,mb=1,m=8", nodes=1, devices_per_node=8)
    m = estimate(plan, cl, wl).memory
    assert m.comm_buffers == 0
    eager = estimate(plan, cl, make_workload("qwen3-30b-a3b", global_batch=64, seq_len=2048)).memory
    assert eager.comm_buffers > 0  # the bundled trainers' ZeRO-1 keeps DeepSpeed-style buckets
    refs = {"megatron_bridge_perf:95", "megatron_bridge_perf:141", "megatron_bridge_perf:185"}
    for run in load_runs():
        if run.ref in refs:
            inp = to_inputs(run, tuple(LIMITS))
            assert estimate(inp.plan, inp.cluster, inp.workload).feasible, run.ref
