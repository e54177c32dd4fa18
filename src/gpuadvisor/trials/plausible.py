"""Is a measured number possible on the hardware it claims? (imported rows must not move rankings with nonsense)

The schema already refuses NaN, infinite, zero and negative values. Here a row is checked against its
cluster: training cannot run faster than the devices' peak FLOPs allow (6 FLOPs per parameter per token
is a lower bound on a training step's work; SLACK covers measured CPU rates, untied embeddings and
counting conventions), and a measured peak memory cannot exceed the device's memory.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

from ..schemas import Cluster, MeasurementRow

SLACK = 3.0


@lru_cache(maxsize=64)
def _preset(name: str) -> Optional[Cluster]:
    from ..hardware.presets import load_preset

    try:
        return load_preset(name)
    except (ValueError, OSError):
        return None


def _cluster(row: MeasurementRow) -> Optional[Cluster]:
    return row.cluster if row.cluster is not None else (_preset(row.preset) if row.preset else None)


def _peak_flops(cluster: Cluster, ranks: int) -> float:
    """FLOP/s of the `ranks` fastest devices at their best dense rate."""
    rates = sorted((max(d.peak_tflops_bf16, d.peak_tflops_fp32, d.achieved_tflops or 0.0) * 1e12
                    for n in cluster.nodes for d in n.devices), reverse=True)
    return sum(rates[:max(1, ranks)])


def implausible(row: MeasurementRow) -> Optional[str]:
    """Why `row` cannot be a real measurement on its cluster, or None."""
    cluster = _cluster(row)
    if cluster is None:
        return None
    wl, plan = row.workload, row.plan
    m = wl.model
    # a frozen base (LoRA/QLoRA) skips weight gradients: 4N per token (workload.finetune), so the bound is looser
    n_flops = 4.0 if wl.finetune.adapters else 6.0
    flops_per_sample = (m.flops_per_sample if m.kind != "transformer"
                        else n_flops * m.active_params * wl.training.seq_len)
    peak = _peak_flops(cluster, plan.world_size)
    if not flops_per_sample or peak <= 0:
        return None
    per_token = flops_per_sample / (wl.training.seq_len if m.kind == "transformer" else 1)
    limit = {"tokens_per_s": SLACK * peak / per_token if m.kind == "transformer" else None,
             "samples_per_s": SLACK * peak / flops_per_sample}.get(row.metric)
    if limit is not None and row.value > limit:
        return (f"{row.metric} {row.value:.4g} is above what {plan.world_size} device(s) of '{cluster.name}' can "
                f"compute ({limit:.4g} at {SLACK:g}x their peak FLOPs)")
    if row.metric == "step_time_s":
        floor = flops_per_sample * wl.training.global_batch / (SLACK * peak)
        if row.value < floor:
            return f"step_time_s {row.value:.4g} is below the {floor:.4g} s the devices' peak FLOPs allow"
    if row.metric == "peak_memory_bytes":
        cap = max((d.memory_bytes for n in cluster.nodes for d in n.devices), default=0)
        if cap and row.value > cap * 1.05:
            return f"peak_memory_bytes {row.value:.4g} is above the device memory ({cap:.4g} bytes)"
    return None


__all__ = ["implausible", "SLACK"]
