"""What the cost model predicts for one plan, and what ranking returns."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ._base import Frozen
from .plan import Plan


class RuleHit(Frozen):
    """A rule from knowledge/rules.yaml that fired for a plan."""

    id: str
    severity: Literal["info", "warn", "penalty", "forbid"]
    message: str
    source: str = Field(description="Seed document and slide/table the rule is distilled from")
    factor: float = Field(1.0, description="Throughput multiplier applied (penalty rules), 1.0 otherwise")


class StepBreakdown(Frozen):
    """Predicted time of one optimizer step, split by cause (seconds)."""

    compute_s: float
    comm_exposed_s: dict[str, float] = Field(
        default_factory=dict, description="Exposed (not overlapped) communication per link kind"
    )
    bubble_s: float = 0.0
    offload_s: float = 0.0
    optimizer_s: float = 0.0
    overhead_s: float = Field(0.0, description="Per-step fixed costs (launch latencies, framework)")

    @property
    def total_s(self) -> float:
        return (self.compute_s + sum(self.comm_exposed_s.values()) + self.bubble_s + self.offload_s
                + self.optimizer_s + self.overhead_s)


class MemoryBreakdown(Frozen):
    """Predicted peak memory of the most loaded device (bytes)."""

    weights: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0
    logits: int = 0
    comm_buffers: int = 0
    framework: int = Field(0, description="CUDA context, allocator fragmentation, workspace")

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.optimizer + self.activations + self.logits
                + self.comm_buffers + self.framework)


class Estimate(Frozen):
    """The cost model's prediction for one plan on one cluster."""

    plan: Plan
    feasible: bool
    infeasible_reason: Optional[str] = None
    step_time_s: float = Field(description="Seconds per optimizer step; where the plan does not fit (feasible "
                                           "false), the time it would take if it did")
    tokens_per_s: float = Field(description="Tokens (or samples, for generic models) per second, whole job (as "
                                            "step_time_s where the plan does not fit)")
    samples_per_s: float
    step: StepBreakdown
    memory: MemoryBreakdown
    memory_capacity_bytes: int = Field(description="Usable memory of the most loaded device")
    host_memory_bytes: int = Field(0, description="Host RAM needed per node (offload)")
    scaling_efficiency: Optional[float] = Field(None, description="tokens/s / (n * single-device tokens/s)")
    network_bytes_per_step: float = Field(0.0, description="Bytes through the busiest node NIC per step (tx)")
    link_bytes_per_step: dict[str, float] = Field(default_factory=dict, description="Bytes per link kind per step")
    network_bytes_per_run: Optional[float] = Field(None, description="For the token budget, if given")
    time_to_train_s: Optional[float] = None
    cost: Optional[float] = Field(None, description="Price for the token budget at the given price per GPU-hour")
    rules: list[RuleHit] = Field(default_factory=list)
    analytical_tokens_per_s: float = Field(description="Before rule penalties and learned correction")
    learned_factor: float = Field(1.0, description="measured/analytical ratio from the learned correction")
    learned_uncertainty: Optional[float] = None
    reasons: list[str] = Field(default_factory=list, description="One-sentence reasons (filled by ranking)")


class Ranking(Frozen):
    """The result of `suggest`: ranked feasible plans and what was filtered out."""

    cluster_name: str
    cluster_source: str
    workload_name: str
    objective: str
    n_candidates: int
    n_feasible: int
    top: list[Estimate]
    infeasible_reasons: dict[str, int] = Field(default_factory=dict, description="Count of rejected plans per reason")
    fits_nowhere: Optional[str] = Field(None, description="Message with the smallest change that would fit")
    notes: list[str] = Field(default_factory=list)
