"""Measured results: per-rank trainer metrics (the A6000 paper's TrainingResults, Appendix F),
their aggregates, and the record of one trial run."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ._base import Frozen
from .plan import Plan


class NicBytes(Frozen):
    """Bytes through one NIC during the timed window (/proc/net/dev deltas)."""

    rx_bytes: int
    tx_bytes: int


class TrainingResults(Frozen):
    """Per-rank metrics of one run (the paper's TrainingResults)."""

    rank: int
    world_size: int
    device: str = Field(description="cuda:N or cpu")
    tokens: int = Field(description="Tokens this rank counts toward throughput (see Appendix F rules)")
    tokens_seen: int = Field(description="Tokens this rank processed (for TP every rank sees the batch)")
    time_s: float = Field(description="Timed-window wall time with device synchronisation")
    step_times_s: list[float]
    peak_memory_bytes: int
    avg_memory_bytes: float
    avg_utilization_pct: Optional[float] = None
    nic_bytes: dict[str, NicBytes] = Field(default_factory=dict)
    losses: list[float] = Field(default_factory=list)


class ExperimentSummary(Frozen):
    """Aggregate of the ranks of one run (Appendix F)."""

    total_tokens: int
    total_time_s: float
    throughput_tokens_per_s: float
    avg_memory_bytes: float
    total_memory_bytes: float
    peak_memory_bytes: int
    avg_utilization_pct: Optional[float] = None
    network_tx_bytes: int = 0
    network_rx_bytes: int = 0


class ComparisonSummary(Frozen):
    """A run compared with its single-device baseline (Appendix F)."""

    runtime_overhead_pct: float
    scaling_factor: float
    scaling_efficiency_pct: float
    ideal_throughput_tokens_per_s: float
    peak_memory_ratio: float
    avg_memory_ratio: float
    total_memory_ratio: float


class RunMetrics(Frozen):
    """The trainer's validated output file: one per run."""

    plan: Plan
    model_name: str
    seq_len: int
    global_batch: int
    precision: str
    steps: int
    warmup: int
    backend: str
    ranks: list[TrainingResults]
    summary: ExperimentSummary
    versions: dict[str, str] = Field(default_factory=dict)
    hostname: str = ""
    strategy: str = Field("", description="The bundled strategy that ran the plan: 'zero' (DeepSpeed), 'fsdp' "
                                          "(FSDP2), 'dp', 'tp', 'pp', 'fsdp-tp', ... ('' in files from before)")


#: "budget": stopped by the study's wall-clock budget, not judged (the plan stays runnable).
TrialStatus = Literal["ok", "oom", "timeout", "crash", "rendezvous", "invalid_metrics", "skipped", "running", "budget"]


class TrialRecord(Frozen):
    """One trial of a study: the plan, what was predicted, what happened."""

    trial_id: str
    study: str
    plan: Plan
    status: TrialStatus
    predicted_tokens_per_s: Optional[float] = None
    predicted_peak_memory_bytes: Optional[int] = None
    measured_tokens_per_s: Optional[float] = None
    measured_peak_memory_bytes: Optional[int] = None
    error: Optional[str] = None
    error_file: Optional[str] = None
    duration_s: float = 0.0
    metrics: Optional[RunMetrics] = None
