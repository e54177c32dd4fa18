"""The learned-correction hook: a multiplicative factor on the analytical throughput.

The cost model calls `correction.factor(...)` for every estimate. `NoCorrection` (the default,
used when no model is trained) returns 1.0, so the analytical model is used as is.
"""
from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

from ..schemas import Cluster, Estimate, Plan, Workload


@runtime_checkable
class Correction(Protocol):
    """Predicts measured/analytical throughput for a plan; returns (factor, relative uncertainty)."""

    def factor(self, plan: Plan, cluster: Cluster, workload: Workload,
               estimate: Estimate) -> tuple[float, Optional[float]]:
        ...


class NoCorrection:
    """No learned model: factor 1.0, unknown uncertainty."""

    def factor(self, plan: Plan, cluster: Cluster, workload: Workload,
               estimate: Estimate) -> tuple[float, Optional[float]]:
        return 1.0, None
