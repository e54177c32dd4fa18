"""What a run prints for its user: a progress line per logging interval and a final summary, measured beside
predicted (tokens/s, MFU, peak memory, bytes on the wire). Torch-free, so it is tested without a run."""
from __future__ import annotations

from typing import Optional

from ..schemas.job import TrainerJob
from ..schemas.trial import RunMetrics

GiB = 2**30


def progress_line(step: int, total: int, loss: Optional[float], step_time_s: float, tokens_per_step: int) -> str:
    """'step 10/50  loss 6.912  412.3 ms/step  9,936 tokens/s'."""
    rate = tokens_per_step / step_time_s if step_time_s > 0 else 0.0
    lo = f"loss {loss:.4f}  " if loss is not None else ""
    return f"step {step}/{total}  {lo}{step_time_s * 1e3:.1f} ms/step  {rate:,.0f} tokens/s"


def measured_mfu(metrics: RunMetrics, job: TrainerJob) -> Optional[float]:
    """Model FLOPs utilisation of the run (PaLM appendix B): tokens/s x FLOPs/token / (devices x peak)."""
    if not job.model_flops_per_token or not job.peak_flops_per_device:
        return None
    return (metrics.summary.throughput_tokens_per_s * job.model_flops_per_token
            / (job.peak_flops_per_device * metrics.plan.world_size))


def _vs(measured: Optional[float], predicted: Optional[float], fmt: str) -> str:
    m = fmt.format(measured) if measured is not None else "n/a"
    if predicted is None:
        return m
    ratio = f", measured/predicted {measured / predicted:.2f}" if measured is not None and predicted else ""
    return f"{m}  (predicted {fmt.format(predicted)}{ratio})"


def summary_lines(metrics: RunMetrics, job: TrainerJob) -> list[str]:
    """The final summary of a run, each figure next to the advisor's prediction when the job carries one."""
    s, p = metrics.summary, job.predicted
    steps = max(1, metrics.steps)
    wire = (s.network_tx_bytes + s.network_rx_bytes) / steps
    mfu = measured_mfu(metrics, job)
    pct = "{:.1%}"
    return [
        f"summary: plan {metrics.plan.to_string()}, {metrics.steps} timed steps after {metrics.warmup} warm-up, "
        f"backend {metrics.backend}",
        f"  tokens/s     {_vs(s.throughput_tokens_per_s, p.tokens_per_s if p else None, '{:,.0f}')}",
        f"  step time    {_vs(s.total_time_s / steps, p.step_time_s if p else None, '{:.3f} s')}",
        f"  MFU          {_vs(mfu, p.mfu if p else None, pct)}",
        f"  peak memory  {_vs(s.peak_memory_bytes / GiB, p.peak_memory_bytes / GiB if p else None, '{:.2f} GiB')}",
        "  on the wire  " + _vs(wire / 1e9, p.network_bytes_per_step / 1e9 if p else None, "{:.3f} GB/step")
        + "  (measured: rx+tx of all nodes' NICs; predicted: tx of the busiest NIC)",
    ]
