"""Public measured training runs (knowledge/measurements/public/) and how well the cost model predicts them.

    load_runs() -> PublicRun rows -> to_inputs() -> (Cluster, Workload, Plan) -> api.predict -> metrics

`benchmarks/calibration_accuracy.py` prints the figures; docs/calibration.md explains them. The nccl-tests rows go
through `collectives` (load_collectives -> evaluate_collectives: comm's collectives on the row's hardware), printed by
`benchmarks/nccl_accuracy.py`.
"""
from .load import TRAINING_FILES, PublicRun, load_runs, public_dir
from .mapping import LIMITS, RunInputs, Unsupported, to_inputs
from .metrics import kendall_tau, mape, megatron_flops_per_token, regret

__all__ = ["TRAINING_FILES", "PublicRun", "load_runs", "public_dir", "LIMITS", "RunInputs", "Unsupported",
           "to_inputs", "kendall_tau", "mape", "megatron_flops_per_token", "regret"]
