"""Aggregation of per-rank results, exactly as the A6000 paper's Appendix F.

ExperimentSummary (one run):
- total tokens: sum over ranks for DP and ZeRO (each rank sees different tokens) and for PP (only
  the last stage counts, the others report 0); max over ranks for TP (every rank sees the same
  tokens). Hybrids combine the two: TP x DP sums over data-parallel replicas the max within each.
- total time = max rank time; throughput = total tokens / total time;
- average memory = mean of the ranks' averages; total memory = sum of the ranks' averages;
  peak memory = max of the ranks' peaks; utilisation = mean of the ranks' averages.
- network bytes: sum over ranks and non-loopback interfaces (one rank per node records them).
ComparisonSummary (a run against its single-device baseline):
- runtime overhead % = (T_multi / T_single - 1) * 100;
- scaling factor = throughput_multi / throughput_single; efficiency % = factor / N * 100;
- ideal throughput = throughput_single * N; memory ratios = multi / single for peak, avg, total.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Optional, Union

from ..schemas.plan import Plan
from ..schemas.trial import ComparisonSummary, ExperimentSummary, RunMetrics, TrainingResults
from .layout import coords_of


def total_tokens(results: list[TrainingResults], plan: Plan) -> int:
    """Appendix F token rule: sum for DP/ZeRO/PP, max for TP (max within each TP group, summed over replicas)."""
    if plan.tp == 1:
        return sum(r.tokens for r in results)
    per_replica: dict[int, int] = defaultdict(int)
    for r in results:
        d = coords_of(r.rank, plan)["dp"]
        per_replica[d] = max(per_replica[d], r.tokens)
    return sum(per_replica.values())


def summarize(results: list[TrainingResults], plan: Plan) -> ExperimentSummary:
    """ExperimentSummary of one run's per-rank results (Appendix F)."""
    if not results:
        raise ValueError("no per-rank results to summarize")
    if len(results) != plan.world_size:
        raise ValueError(f"{len(results)} rank results for a plan of world size {plan.world_size}")
    tokens = total_tokens(results, plan)
    time_s = max(r.time_s for r in results)
    if time_s <= 0:
        raise ValueError("total time is not positive; the timed window recorded nothing")
    utils = [r.avg_utilization_pct for r in results if r.avg_utilization_pct is not None]
    wire = [b for r in results for nic, b in r.nic_bytes.items() if nic != "lo"]
    return ExperimentSummary(
        total_tokens=tokens,
        total_time_s=time_s,
        throughput_tokens_per_s=tokens / time_s,
        avg_memory_bytes=sum(r.avg_memory_bytes for r in results) / len(results),
        total_memory_bytes=sum(r.avg_memory_bytes for r in results),
        peak_memory_bytes=max(r.peak_memory_bytes for r in results),
        avg_utilization_pct=sum(utils) / len(utils) if utils else None,
        network_tx_bytes=sum(b.tx_bytes for b in wire),
        network_rx_bytes=sum(b.rx_bytes for b in wire),
    )


Summaryish = Union[ExperimentSummary, RunMetrics, TrainingResults]


def _as_summary(x: Summaryish) -> ExperimentSummary:
    if isinstance(x, RunMetrics):
        return x.summary
    if isinstance(x, TrainingResults):  # the paper's baseline is a single-device TrainingResults
        return summarize([x], Plan())
    return x


def compare(summary: Summaryish, baseline: Summaryish, n_devices: Optional[int] = None) -> ComparisonSummary:
    """ComparisonSummary of a run against its single-device baseline (Appendix F).

    `summary` is a RunMetrics (N taken from its plan) or an ExperimentSummary with `n_devices` given;
    `baseline` is the single-device run as RunMetrics, ExperimentSummary or TrainingResults.
    """
    if n_devices is None:
        if not isinstance(summary, RunMetrics):
            raise ValueError("pass n_devices when comparing an ExperimentSummary (it does not record its world size)")
        n_devices = summary.plan.world_size
    if n_devices < 1:
        raise ValueError(f"n_devices must be >= 1, got {n_devices}")
    run, base = _as_summary(summary), _as_summary(baseline)
    if base.total_time_s <= 0 or base.throughput_tokens_per_s <= 0:
        raise ValueError("the baseline has no positive time/throughput")

    def ratio(a: float, b: float) -> float:
        return a / b if b else float("nan")

    factor = run.throughput_tokens_per_s / base.throughput_tokens_per_s
    return ComparisonSummary(
        runtime_overhead_pct=(run.total_time_s / base.total_time_s - 1.0) * 100.0,
        scaling_factor=factor,
        scaling_efficiency_pct=factor / n_devices * 100.0,
        ideal_throughput_tokens_per_s=base.throughput_tokens_per_s * n_devices,
        peak_memory_ratio=ratio(run.peak_memory_bytes, base.peak_memory_bytes),
        avg_memory_ratio=ratio(run.avg_memory_bytes, base.avg_memory_bytes),
        total_memory_ratio=ratio(run.total_memory_bytes, base.total_memory_bytes),
    )


def global_losses(metrics: RunMetrics) -> list[float]:
    """Per-step mean cross-entropy over the global batch: the mean of the losses the owning ranks recorded."""
    owned = [r.losses for r in metrics.ranks if r.losses]
    if not owned:
        return []
    n = min(len(l) for l in owned)
    return [sum(l[i] for l in owned) / len(owned) for i in range(n)]
