"""The Results step's ranking as one picklable job (run in `tui.jobproc`'s child process, no textual here)."""
from __future__ import annotations

from typing import Any, Optional


def largest_fitting(cluster: Any, workload: Any) -> Any:
    """The largest catalog size (same training settings) for which api.suggest finds a feasible plan.

    Binary search over the sizes that take the seq len, assuming a larger model never fits where a smaller one
    does not.
    """
    from .. import api
    from ..workload import catalog

    t = workload.training

    def make(label: str) -> Any:
        try:
            return api.make_workload(label, seq_len=t.seq_len, global_batch=t.global_batch,
                                     precision=t.precision, token_budget=t.token_budget,
                                     attention_kernel=t.attention_kernel, kernels=t.kernels,
                                     grad_reduce_in_bf16=t.grad_reduce_in_bf16, fp8_param_gather=t.fp8_param_gather)
        except ValueError:
            return None  # seq_len beyond this model's learned position table (GPT-2's 1024): not a candidate

    # only the sizes that take this seq_len: a GPT-2 size refusing 2048 tokens says nothing about fitting
    candidates = [wl for wl in (make(label) for _, (label, _) in sorted(catalog.sizes().items())) if wl is not None]

    def fits(wl: Any) -> bool:
        return bool(api.suggest(wl, cluster=cluster, top=1).ranking.top)

    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(candidates[mid]):
            best, lo = candidates[mid], mid + 1
        else:
            hi = mid - 1
    if best is None:
        from ..errors import UserError

        smallest = candidates[0].model.name if candidates else "none takes this seq len"
        raise UserError(f"not even the smallest model ({smallest}) fits with seq len {t.seq_len} and "
                        f"global batch {t.global_batch}; lower them on the Model step")
    return best


def rank_job(cluster: Any, workload: Any, objective: str, price: Optional[float], specs: list[str],
             top: int) -> tuple[Any, Any]:
    """(baseline, result): api.suggest on the cluster, then on the what-if cluster (as `suggest --what-if`).

    The goal "largest" ranks, by throughput, the largest catalog model that fits.
    """
    from .. import api

    if objective == "largest":
        workload = largest_fitting(cluster, workload)
        objective = "throughput"
    base = api.suggest(workload, cluster=cluster, objective=objective, top=top, price_per_gpu_hour=price)
    result = base
    if specs:
        result = api.suggest(base.workload, cluster=base.cluster, what_if=specs, objective=objective, top=top,
                             price_per_gpu_hour=price)
    return base, result


__all__ = ["largest_fitting", "rank_job"]
