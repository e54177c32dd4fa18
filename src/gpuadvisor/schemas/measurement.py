"""One measured number with its provenance: rows of knowledge/measurements/*.jsonl and the local store.

The learned correction trains on these; `gpuadvisor validate` compares predictions with them.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ._base import Frozen
from .hardware import Cluster
from .plan import Plan
from .workload import Workload

Metric = Literal[
    "tokens_per_s", "samples_per_s", "step_time_s", "epoch_time_s", "peak_memory_bytes",
    "scaling_factor", "network_bytes_per_run", "allreduce_busbw_gb_per_s",
]


class MeasurementRow(Frozen):
    """A measured figure for one plan of one workload on one cluster."""

    id: str = Field(description="Unique, stable id, e.g. seed000-gpt2s-dp-1x2")
    source: str = Field(description="Seed file + slide/table, or 'measured on <hardware> by <command>'")
    source_group: str = Field(description="Group for leave-one-source-out CV: seed-000, seed-001, local-<host>...")
    preset: Optional[str] = Field(None, description="Cluster preset name (knowledge/presets), if any")
    cluster: Optional[Cluster] = Field(None, description="Embedded cluster when not a preset")
    workload: Workload
    plan: Plan
    metric: Metric
    value: float = Field(gt=0, allow_inf_nan=False, description="The measured number: positive and finite")
    unit: str
    tolerance: Optional[float] = Field(None, description="Relative tolerance the validation accepts")
    steps_per_epoch: Optional[int] = Field(None, description="For epoch_time_s rows")
    assumptions: list[str] = Field(default_factory=list, description="What the source left unstated and we assumed")
    notes: str = ""
