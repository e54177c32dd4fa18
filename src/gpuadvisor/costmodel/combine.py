"""Combine the analytical model, the seed rules and the learned correction into an Estimate.

    analytical (evaluate) -> rules (penalty/forbid) -> learned factor (Correction.factor)

`estimate()` is the public one-plan entry; ranking uses `fast_eval()` on every candidate and
`to_estimate()` only for the plans it shows.
"""
from __future__ import annotations

from typing import Optional

from ..schemas import Cluster, Estimate, MemoryBreakdown, Plan, StepBreakdown, Workload, check_plan_for
from .analytical import Context, Eval, evaluate
from .correction import Correction, NoCorrection
from .rules import apply_rules, load_rules

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
    """Analytical evaluation plus rules (penalties scale throughput, forbid makes it infeasible)."""
    e = evaluate(plan, ctx)
    fired, factor, forbid = apply_rules(plan, ctx, load_rules() if rules is None else rules)
    e.rules, e.factor = fired, factor
    if factor != 1.0:
        e.tps *= factor
        e.step_s /= factor
    if forbid and e.feasible:
        e.feasible, e.reason = False, f"forbidden by rule: {forbid}"
    return e


def single_device_best(ctx: Context) -> Optional[float]:
    """Tokens/s of the best feasible single-device plan (the baseline of scaling efficiency).

    Tries the micro-batch sizes dividing the global batch up to 64 and the first one above (the plans
    `candidates` enumerates for one device, and one size more), with and without recompute, plain and
    ZeRO-offload: at most 2·64 + 2 sizes whatever the batch (`candidates.small_divisors`, O(√gb) integer
    steps). Larger micro-batches only add activation memory, so none is tried after them.
    """
    if ctx.single_best_tps is not None:
        return ctx.single_best_tps or None
    from ..candidates.enumerate import small_divisors

    best = 0.0
    gb = ctx.gb
    for mb in small_divisors(gb, 64, one_more=True):
        for rc in (False, True):
            for zero, off in ((0, False), (1, True)):
                p = Plan(micro_batch_size=mb, num_micro_batches=gb // mb, recompute=rc, zero_stage=zero,
                         zero_offload=off, nodes=1, devices_per_node=1)
                e = evaluate(p, ctx)
                if e.feasible and e.tps > best:
                    best = e.tps
    ctx.single_best_tps = best
    return best or None


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
