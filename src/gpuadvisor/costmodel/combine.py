"""Combine the engine's analytical physics and rules with the learned correction into an Estimate.

    engine (analytical physics + rules, every plan at once) -> learned factor (Correction.factor)

`estimate()` is the public one-plan entry (a batch of one); ranking evaluates every candidate in one batch
and calls `to_estimate()` only for the plans it shows.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..schemas import Cluster, Estimate, MemoryBreakdown, Plan, StepBreakdown, Workload, check_plan_for
from .analytical import Context
from .correction import Correction, NoCorrection
from .engine import Eval, evaluate, evaluate_batch, plan_row

__all__ = ["Context", "estimate", "fast_eval", "to_estimate", "single_device_best", "make_context"]

_CTX_CACHE: dict[tuple[int, int], Context] = {}


def make_context(cluster: Cluster, workload: Workload) -> Context:
    """The plan-independent precomputation for (cluster, workload), cached on object identity."""
    key = (id(cluster), id(workload))
    ctx = _CTX_CACHE.get(key)
    if ctx is None or ctx.cluster is not cluster or ctx.workload is not workload:
        if len(_CTX_CACHE) > 64:
            _CTX_CACHE.clear()
        ctx = _CTX_CACHE[key] = Context(cluster, workload)
    return ctx


def fast_eval(plan: Plan, ctx: Context, rules: Optional[tuple] = None) -> Eval:
    """Analytical evaluation plus rules of one plan (the engine on a batch of one)."""
    return evaluate(plan, ctx, rules)


def single_device_best(ctx: Context) -> Optional[float]:
    """The baseline of scaling efficiency: tokens/s of the best single-device plan with device memory set aside.

    Scaling efficiency = tokens/s ÷ (devices × this). A model that does not fit one device (or fits only with
    offload, whose host traffic sets its pace) is measured against what one device computes, not against the
    offload plan: dividing by a plan that memory slows down gave efficiencies above 1 (a 7B model on 8 A100s
    read 1.18). No plan on n devices beats n of these (TP splits GEMMs, PP adds a bubble), so it stays <= 1.
    """
    if ctx.single_best_tps is not None:
        return ctx.single_best_tps or None
    gb = ctx.gb
    plans = [Plan(micro_batch_size=mb, num_micro_batches=gb // mb, recompute=rc, nodes=1, devices_per_node=1)
             for mb in _single_micro_batches(gb) for rc in (False, True)]
    b = evaluate_batch([plan_row(p) for p in plans], ctx, rules=())
    tps = b.analytical_tps[np.isfinite(b.analytical_tps)]  # device memory set aside
    best = float(tps.max()) if len(tps) else 0.0
    ctx.single_best_tps = best
    return best or None


def _single_micro_batches(gb: int) -> list[int]:
    """Micro-batch sizes tried on one device: the divisors of gb up to 64 and the next one (O(sqrt gb) work)."""
    from ..candidates import divisors
    ds = divisors(gb)
    small = [d for d in ds if d <= 64]
    return small + [d for d in ds if d > 64][:1]


def to_estimate(e: Eval, ctx: Context, price_per_gpu_hour: Optional[float] = None) -> Estimate:
    """Convert a lean Eval into the schema Estimate (with run totals for the token budget)."""
    p = e.plan
    mem = e.mem
    mb = MemoryBreakdown(weights=int(mem.weights), gradients=int(mem.gradients), optimizer=int(mem.optimizer),
                         activations=int(mem.activations), logits=int(mem.logits),
                         comm_buffers=int(mem.comm_buffers), framework=int(mem.framework))
    step = StepBreakdown(compute_s=e.compute_s, comm_exposed_s=dict(e.comm), bubble_s=e.bubble_s,
                         offload_s=e.offload_s, optimizer_s=e.optimizer_s, overhead_s=e.overhead_s)
    base = single_device_best(ctx)
    eff = e.tps / (p.world_size * base) if base else None
    budget = ctx.workload.training.token_budget
    run_bytes = ttt = cost = None
    if budget:
        steps = budget / (p.global_batch() * ctx.s)
        run_bytes = e.nic_bytes * steps
        ttt = steps * e.step_s
        if price_per_gpu_hour is not None:
            cost = ttt / 3600.0 * p.world_size * price_per_gpu_hour
    return Estimate(
        plan=p, feasible=e.feasible, infeasible_reason=e.reason, step_time_s=e.step_s, tokens_per_s=e.tps,
        samples_per_s=p.global_batch() / e.step_s, step=step, memory=mb, memory_capacity_bytes=int(ctx.mem_cap),
        host_memory_bytes=int(mem.host * p.devices_per_node), scaling_efficiency=eff,
        network_bytes_per_step=e.nic_bytes, link_bytes_per_step=dict(e.link_bytes),
        network_bytes_per_run=run_bytes, time_to_train_s=ttt, cost=cost,
        rules=[r.hit() for r in e.rules], analytical_tokens_per_s=e.analytical_tps,
        learned_factor=e.learned, learned_uncertainty=e.uncertainty)


def apply_correction(est: Estimate, e: Eval, ctx: Context, correction: Correction,
                     price_per_gpu_hour: Optional[float] = None) -> Estimate:
    """Multiply throughput by the learned factor (measured/analytical) and refresh derived fields."""
    if isinstance(correction, NoCorrection):
        return est
    f, unc = correction.factor(e.plan, ctx.cluster, ctx.workload, est)
    f = float(f) if f and f > 0 else 1.0
    e.learned, e.uncertainty = f, unc
    e.tps *= f
    e.step_s /= f
    return to_estimate(e, ctx, price_per_gpu_hour)


def estimate(plan: Plan, cluster: Cluster, workload: Workload, *, correction: Optional[Correction] = None,
             price_per_gpu_hour: Optional[float] = None) -> Estimate:
    """Predict step time, throughput, memory and traffic of `plan` for `workload` on `cluster`.

    Raises ValueError (one line) if the plan does not fit the workload's shape or the cluster's size.
    """
    check_plan_for(plan, workload)
    if plan.nodes > len(cluster.nodes) or plan.devices_per_node > min(cluster.devices_per_node):
        raise ValueError(f"plan uses {plan.nodes} node(s) × {plan.devices_per_node} device(s) but cluster "
                         f"'{cluster.name}' has {len(cluster.nodes)} × {min(cluster.devices_per_node)}; "
                         "reduce nodes/devices_per_node")
    ctx = make_context(cluster, workload)
    e = fast_eval(plan, ctx)
    est = to_estimate(e, ctx, price_per_gpu_hour)
    return apply_correction(est, e, ctx, correction or NoCorrection(), price_per_gpu_hour)
