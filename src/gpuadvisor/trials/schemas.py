"""Results of `confirm`: the trials table (predicted vs measured) and the confirmed winner."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from ..schemas import Estimate, Plan
from ..schemas._base import Frozen
from ..schemas.trial import TrialStatus


class TrialRow(Frozen):
    """One trial of the study, as the result table shows it."""

    number: int = Field(description="Optuna trial number")
    trial_id: str
    plan: Plan
    plan_str: str
    status: str = Field(description="ok, oom, timeout, crash, rendezvous, invalid_metrics, skipped, stale, pending")
    seed_rank: Optional[int] = Field(None, description="0-based rank in the cost model's top K, None if explored")
    predicted_tokens_per_s: Optional[float] = None
    measured_tokens_per_s: Optional[float] = None
    measured_over_predicted: Optional[float] = None
    predicted_peak_memory_bytes: Optional[int] = None
    measured_peak_memory_bytes: Optional[int] = None
    error: Optional[str] = None
    error_file: Optional[str] = None
    duration_s: float = 0.0
    retry_of: Optional[int] = Field(None, description="Trial number this one retries (after a crash of gpuadvisor)")


class ConfirmResult(Frozen):
    """What `confirm` found: every trial, the measured winner, and how good the cost model's first pick was."""

    study_name: str
    storage: str = Field(description="Storage URL with the password masked")
    fingerprint: str
    trials: list[TrialRow]
    winner: Optional[Plan] = Field(None, description="Best measured plan (None if no trial succeeded)")
    winner_estimate: Optional[Estimate] = None
    winner_measured_tokens_per_s: Optional[float] = None
    first_pick: Optional[Plan] = Field(None, description="The cost model's top plan")
    first_pick_measured_tokens_per_s: Optional[float] = None
    first_pick_gap_pct: Optional[float] = Field(
        None, description="(best measured - first pick measured) / best measured * 100; 0 when the first pick won")
    elapsed_s: float = Field(0.0, description="Study time spent so far, across restarts")
    budget_s: float
    exhausted: bool = Field(False, description="Every candidate plan was tried or ruled out")
    notes: list[str] = Field(default_factory=list)
    work_dir: Optional[str] = Field(None, description="Folder of this study's trial folders and records")

    def counted(self) -> list[TrialRow]:
        """Trials that count: metrics validated."""
        return [t for t in self.trials if t.status == "ok"]


__all__ = ["ConfirmResult", "TrialRow", "TrialStatus"]
