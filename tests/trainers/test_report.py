"""The run's progress line and final summary (measured beside predicted)."""
from __future__ import annotations

from gpuadvisor.launch import make_job
from gpuadvisor.schemas import Plan
from gpuadvisor.schemas.job import Predicted
from gpuadvisor.schemas.trial import ExperimentSummary, RunMetrics
from gpuadvisor.trainers.report import measured_mfu, progress_line, summary_lines
from gpuadvisor.workload.specs import make_workload


def _metrics(plan: Plan) -> RunMetrics:
    summary = ExperimentSummary(total_tokens=40_000, total_time_s=4.0, throughput_tokens_per_s=10_000.0,
                                avg_memory_bytes=1e9, total_memory_bytes=2e9, peak_memory_bytes=3 * 2**30,
                                network_tx_bytes=10 * 10**9, network_rx_bytes=10 * 10**9)
    return RunMetrics(plan=plan, model_name="gpt2", seq_len=1024, global_batch=4, precision="bf16", steps=10,
                      warmup=3, backend="nccl", ranks=[], summary=summary)


def test_progress_line():
    assert progress_line(10, 50, 6.91234, 0.4123, 4096) == "step 10/50  loss 6.9123  412.3 ms/step  9,935 tokens/s"
    assert "loss" not in progress_line(1, 2, None, 0.1, 10)


def test_summary_against_prediction():
    plan = Plan(dp=2, micro_batch_size=2, devices_per_node=2)
    wl = make_workload("gpt2", global_batch=4)
    job = make_job(plan, wl).model_copy(update={
        "peak_flops_per_device": 100e12, "model_flops_per_token": 1e9,
        "predicted": Predicted(tokens_per_s=20_000, step_time_s=0.2, peak_memory_bytes=2 * 2**30,
                               network_bytes_per_step=1e9, mfu=0.1)})
    m = _metrics(plan)
    assert abs(measured_mfu(m, job) - 10_000 * 1e9 / 200e12) < 1e-12
    text = "\n".join(summary_lines(m, job))
    assert "tokens/s     10,000  (predicted 20,000, measured/predicted 0.50)" in text
    assert "peak memory  3.00 GiB  (predicted 2.00 GiB, measured/predicted 1.50)" in text
    assert "MFU          5.0%  (predicted 10.0%, measured/predicted 0.50)" in text
    assert "on the wire  2.000 GB/step  (predicted 1.000 GB/step" in text
    bare = "\n".join(summary_lines(m, make_job(plan, wl)))
    assert "predicted" not in bare.split("(measured:")[0] and "MFU          n/a" in bare
