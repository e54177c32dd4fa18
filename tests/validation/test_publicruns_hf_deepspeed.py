"""ml-engineering's HF + DeepSpeed Llama 3.1 8B rows (H200 / B200, 8k-256k tokens): their time from the benchmark's
own FLOP count, the global batch its script fixes, the optimizer-only offload, the unstated host CPU, and the stack
its script runs (FlashAttention-3/4, Liger-Kernel)."""
from __future__ import annotations

import pytest

from gpuadvisor.publicruns import LIMITS, Unsupported, load_runs, to_inputs
from gpuadvisor.publicruns.evaluate import evaluate_runs, memory_check
from gpuadvisor.publicruns.metrics import causal_model_flops_per_iteration

SOURCE = "mleng_h200_vs_b200_llama8b"


@pytest.fixture(scope="module")
def rows():
    return {r.row: r for r in load_runs() if r.source_id == SOURCE}


def test_the_causal_count_is_the_public_parameter_count_less_one_vocabulary_and_the_norms():
    """benchmark.py's estimate_tflos: 6·N·tokens with N the Linears and one V·h, plus 6·s²·q·L (causal)."""
    # Llama 3.1 8B: 8,030,261,248 parameters = N + the second V·h (untied head) + 65 RMSNorm weights of 4,096
    n = 8_030_261_248 - 128_256 * 4096 - 65 * 4096
    s = 8192
    expect = 6 * n * s + 6 * s * s * 4096 * 32
    assert causal_model_flops_per_iteration(1, s, 32, 4096, 32, 8, 14336, 128256) == expect
    assert expect == pytest.approx(421.64e12, rel=1e-4)
    # attention counted causally: half of PaLM's 12·s·q per token
    assert causal_model_flops_per_iteration(2, s, 32, 4096, 32, 8, 14336, 128256) == 2 * expect


def test_time_comes_from_the_tflops_and_the_scripts_batch(rows):
    first = rows[123]  # H200, 8k, ZeRO-3 + offload + checkpointing, 141 TFLOPS
    assert first.iter_time_s is None and first.tflops_per_gpu == 141
    assert first.measured_iter_time_s == pytest.approx(421.64e12 / 141e12, rel=1e-3)
    # the ZeRO-2 and software-sweep rows leave the global batch empty: benchmark.py's one micro-step of one sequence
    zero2 = rows[135]
    assert (zero2.micro_batch, zero2.grad_accum, zero2.global_batch) == (1, 1, 8)
    assert zero2.measured_iter_time_s == pytest.approx(421.64e12 / 461e12, rel=1e-3)


def test_optimizer_only_offload_and_an_unstated_cpu_is_refused_unless_approximated(rows):
    with pytest.raises(Unsupported) as exc:
        to_inputs(rows[123])
    assert exc.value.reasons == ("host CPU of an offload run not stated",)
    inputs = to_inputs(rows[123], approximate=["cpu-unstated"])
    plan = inputs.plan
    assert plan.zero_stage == 3 and plan.zero_offload and not plan.zero_offload_param  # "optimizer states offloaded"
    assert to_inputs(rows[137], approximate=["cpu-unstated"]).plan.zero_offload_param is False  # "optimizer offload"
    cpu = inputs.cluster.nodes[0].cpu
    assert (cpu.cores, cpu.sockets) == (112, 2)  # DGX H100's 2x Xeon 8480C, the H200 board's system
    assert any("DGX H100 datasheet" in n for n in inputs.assumptions)
    # without offload the CPU does not matter: the ZeRO-2 rows map strictly
    strict = to_inputs(rows[135])
    assert strict.plan.zero_stage == 2 and not strict.plan.zero_offload


def test_the_scripts_stack_is_flash_attention_3_and_liger(rows):
    for row in (123, 134, 135, 140):
        training = to_inputs(rows[row], approximate=list(LIMITS)).workload.training
        assert (training.attention_kernel, training.kernels) == ("flash3", "liger"), row


def test_long_context_rows_fit_and_their_memory_follows_the_measured_slope(rows):
    """With Liger's chunked loss the 192k-256k rows fit (the whole fp32 logits, 125 GiB at 256k, made them 'out of
    memory'); beyond 64k the predicted peak is within 5 % of max_memory_reserved. At 8k the measurement carries the
    process's start (max_memory_reserved is never reset in benchmark.py): the prediction stays below it."""
    outcomes = evaluate_runs([rows[r] for r in (123, 127, 129, 131, 133, 134)], approximate=list(LIMITS))
    assert all(o.infeasible_reason is None for o in outcomes)
    check = {c["ref"]: c for c in memory_check(outcomes)}
    for row in (127, 129, 131, 133, 134):
        assert 0.95 < check[f"deepspeed_fsdp:{row}"]["ratio"] < 1.05, check
    assert check["deepspeed_fsdp:123"]["ratio"] < 1.0
    # time: every row within 25 %, the 8k H200 row (offload-bound) within 15 %
    ratios = {o.run.row: o.ratio for o in outcomes}
    assert all(0.75 < v < 1.25 for v in ratios.values()), ratios
    assert 0.85 < ratios[123] < 1.15, ratios
