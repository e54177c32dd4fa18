"""gpuadvisor: probe a few GPUs, rank DP/TP/PP/ZeRO plans, confirm with trials, hand over a launch config.

Python API (returns pydantic models)::

    import gpuadvisor
    s = gpuadvisor.suggest("1.5B", preset="nano-cluster-2x2-a40-1gbe")
    s.ranking.top[0].plan, s.launch.nodes[0].argv
"""
__version__ = "0.1.0"

from .api import (Confirmation, Prediction, Suggestion, confirm, launch_config, make_workload,  # noqa: E402
                  predict, probe, resolve_cluster, suggest)
from .errors import UserError  # noqa: E402
from .schemas.workload import FineTune  # noqa: E402

__all__ = ["Confirmation", "FineTune", "Prediction", "Suggestion", "UserError", "__version__", "confirm",
           "launch_config", "make_workload", "predict", "probe", "resolve_cluster", "suggest"]
