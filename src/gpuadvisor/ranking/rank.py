"""Rank candidate plans: filter infeasible ones (counted per reason), sort by objective, explain."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np

from ..costmodel.calibration import load_calibration
from ..costmodel.combine import apply_correction, make_context, to_estimate
from ..costmodel.correction import Correction, NoCorrection
from ..costmodel.rules import load_rules
from ..candidates import COLUMNS, SearchSpace, enumerate_rows
from ..candidates.enumerate import ZERO_IMPLS
from ..costmodel.engine import MEMORY_TIGHT, REASONS, evaluate_batch, offload_host_buffers, unique_rows
from ..errors import UserError
from ..schemas import Cluster, Estimate, FineTune, Ranking, Workload

OBJECTIVES = ("throughput", "memory", "time", "cost")
_CP = COLUMNS.index("cp")


def _shape(p) -> tuple:
    """Plans that differ only in minor knobs share a shape; the top list shows the best of each."""
    return (p.dp, p.tp, p.pp, p.zero_stage, p.offload_code, p.nodes, p.devices_per_node, p.cp)


def complexity(dp: float, tp: float, pp: float, zero: float, offload: float, hpz: float = 1, cp: float = 1) -> float:
    """Operational complexity of a plan shape: DDP 0 < ZeRO-1 1 < ZeRO-2 2 < ZeRO-3 3 < ZeRO-3 + offload of the
    optimizer 6 < of the parameters too 7, +2 for each of TP, PP and CP, +1 for hpZ. `offload` is the offload code
    (candidates.OFFLOADS: 0 none, 1 optimizer, 2 optimizer and parameters). DeepSpeed's guidance orders speed DDP >=
    ZeRO-1 >= ZeRO-2 >= ZeRO-3 >= offload_optimizer >= offload_param when the model fits (DeepSpeed ZeRO tutorial /
    config docs). A ZeRO stage is a config switch; TP and PP each
    rewrite the model (Megatron layers or DTensor parallelize plans; a split into stages with its schedule) and add a
    dimension to tune and debug (torchtitan enables them one at a time: FSDP first, then TP, then PP), so each
    counts two steps: PP + ZeRO-1 (3) is no simpler than ZeRO-3 (3), and a 2-D hybrid with ZeRO-1 (5) no simpler
    than ZeRO-2 + offload (5). Context parallelism swaps the attention for ring attention and splits every batch
    along the sequence: a dimension as TP is."""
    return (zero + 3.0 * (offload > 0) + 1.0 * (offload > 1) + 2.0 * (tp > 1) + 2.0 * (pp > 1) + (hpz > 1)
            + 2.0 * (cp > 1))


def _simpler_margin() -> float:
    """Throughput a plan gives up per step of complexity before a simpler plan ranks above it."""
    return float(load_calibration().get("ranking", {}).get("simpler_margin_per_step", 0.0))


def _scores(b, ok: np.ndarray, objective: str) -> tuple[np.ndarray, np.ndarray]:
    """(primary, secondary) sort keys of the feasible rows `ok`, lower first.

    Plans above MEMORY_TIGHT of device memory sort after every plan below it; then by the objective, where the
    throughput (and time) objective handicaps each step of `complexity` by the simpler-plan margin, so a simpler
    plan within the model's uncertainty ranks first.
    """
    a = b.a[ok]
    tps = b.tps[ok]
    tight = b.tight[ok].astype(float)
    if objective == "memory":
        return b.mem_total[ok], -tps
    if objective == "cost":
        return tight, (a[:, 0] * a[:, 1] * a[:, 2] * a[:, _CP]) / tps
    c = complexity(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 15], a[:, _CP])
    return tight, -tps * (1.0 - _simpler_margin()) ** c


def _best_per_shape(b, ok: np.ndarray, objective: str) -> tuple[list[int], dict]:
    """([row index of each shape's best plan], {row index: sort key} of those rows).

    Within a shape the first of equal keys in enumeration order wins. The key ends with the position in
    enumeration order, so sorting the winners by it gives one order whatever order they come in. Vectorised:
    276k feasible rows on 16,384 x 8 GPUs (Python loops over them took ~0.5 s).
    """
    if not len(ok):
        return [], {}
    k1, k2 = _scores(b, ok, objective)
    _, sid = unique_rows(b.a[ok][:, [0, 1, 2, 3, 4, 16, 17, _CP]])
    order = np.lexsort((np.arange(len(ok)), k2, k1, sid))  # by shape, then key, then enumeration order
    first = np.ones(len(order), dtype=bool)
    first[1:] = sid[order][1:] != sid[order][:-1]
    best = order[first]  # position in ok of each shape's winner
    keys = {int(ok[j]): (float(k1[j]), float(k2[j]), int(j)) for j in best.tolist()}
    return [int(ok[j]) for j in best.tolist()], keys


def _count_reasons(b, bad: np.ndarray) -> dict[str, int]:
    """{reason: infeasible rows} in order of each reason's first row (as counting row by row gives), without a
    Python call per row: forbid-rule reasons from the few rows a rule forbade, the rest by reason code."""
    forbid = {int(i): f for i, f in enumerate(b.forbid) if f}
    code = b.reason[bad].copy()
    if forbid:
        code[np.isin(bad, np.fromiter(forbid, dtype=np.int64, count=len(forbid)))] = 0
    first: dict[str, tuple[int, int]] = {}  # reason -> (first row, count)
    # the reason codes present, ascending (np.bincount, not 1-D np.unique: that imports numpy.ma, ~8 ms of suggest)
    for c in (np.flatnonzero(np.bincount(code, minlength=1)[1:]) + 1).tolist():
        rows = bad[code == c]
        first[REASONS[c]] = (int(rows[0]), len(rows))
    for i in sorted(forbid):
        if not b.feasible[i]:
            r = forbid[i]
            row, n = first.get(r, (i, 0))
            first[r] = (row, n + 1)
    return {r: n for r, (_, n) in sorted(first.items(), key=lambda kv: kv[1][0])}


def _key(objective: str, e, price: Optional[float], margin: float = 0.0) -> tuple:
    """_scores for one Eval (after the learned correction): memory-tight plans last, then the objective."""
    p = e.plan
    tight = float(e.memory_fraction > MEMORY_TIGHT)
    if objective == "memory":
        return (e.mem.total, -e.tps)
    if objective == "cost":
        return (tight, p.world_size / e.tps)
    c = complexity(p.dp, p.tp, p.pp, p.zero_stage, p.offload_code, p.zero_hpz_partition_size, p.cp)
    return (tight, -e.tps * (1.0 - margin) ** c)


def rank(cluster: Cluster, workload: Workload, *, objective: str = "throughput", top: int = 10,
         price_per_gpu_hour: Optional[float] = None, correction: Optional[Correction] = None,
         allow_fewer_devices: bool = True, allow_tp_across_nodes: bool = False,
         allow_comm_hooks: bool = False, space: Optional[SearchSpace] = None) -> Ranking:
    """Enumerate, estimate and sort every plan for `workload` on `cluster`.

    objective: throughput (tokens/s), time (time to train the token budget), memory (lowest peak),
    cost (GPU-hours per token, × price if given). Returns the top plans (one per dp/tp/pp/ZeRO/
    placement shape) with one-sentence reasons, counts of infeasible plans per reason, and — when
    nothing fits — the smallest change that would.
    """
    if objective not in OBJECTIVES:
        raise UserError(f"unknown objective '{objective}'; use one of {', '.join(OBJECTIVES)}")
    if top < 1:
        raise UserError(f"top must be at least 1, got {top}")
    ctx = make_context(cluster, workload)
    rules = load_rules()
    space = space or SearchSpace()
    space.memory_limit_bytes = float(ctx.mem_cap)
    # every candidate as a row, evaluated in one vectorised pass (costmodel/engine.py); Plans and Estimates are
    # built only for the plans shown
    rows = enumerate_rows(cluster, workload, allow_fewer_devices=allow_fewer_devices,
                          allow_tp_across_nodes=allow_tp_across_nodes, allow_comm_hooks=allow_comm_hooks,
                          space=space)
    b = evaluate_batch(rows, ctx, rules)
    n_timed = len(rows)
    bad = np.flatnonzero(~b.feasible)
    reasons = _count_reasons(b, bad)
    smallest = b.eval(int(bad[np.argmin(b.mem_total[bad])])) if len(bad) else None
    host_ckpt = _checkpoints_in_host_ram(b.a, ctx, workload, rules) if n_timed and len(bad) == n_timed else None
    if host_ckpt is not None:  # nothing fits with the checkpoints on the device: rank what fits with them in RAM
        rows, b = host_ckpt
    ok = np.flatnonzero(b.feasible)
    n_ok = len(ok)
    best, keys = _best_per_shape(b, ok, objective)
    pruned = sum(space.pruned.values())
    for k, v in space.pruned.items():  # plans cut by the enumerator's model-state bound
        reasons[k] = reasons.get(k, 0) + v
    n = n_timed + pruned
    corr = correction or NoCorrection()
    pool_n = top * 3 if not isinstance(corr, NoCorrection) else top
    # order the shape winners (stable: ties keep enumeration order); Evals only for the pool shown
    winners = sorted(best, key=lambda i: keys[i])[:pool_n]
    pool = [b.eval(i) for i in winners]
    ests = [(apply_correction(to_estimate(e, ctx, price_per_gpu_hour), e, ctx, corr, price_per_gpu_hour), e)
            for e in pool]
    if not isinstance(corr, NoCorrection):
        margin = _simpler_margin()
        ests.sort(key=lambda pe: _key(objective, pe[1], price_per_gpu_hour, margin))
    ests = ests[:top]
    tops = [est.model_copy(update={"reasons": _reasons(est, ests[i + 1][0] if i + 1 < len(ests) else None,
                                                        objective)})
            for i, (est, _) in enumerate(ests)]
    fits = None if n_ok else _fits_nowhere(smallest, ctx, n, _least_host_need(b, bad))
    same_space = dict(objective=objective, allow_fewer_devices=allow_fewer_devices,
                      allow_tp_across_nodes=allow_tp_across_nodes, allow_comm_hooks=allow_comm_hooks,
                      space=dataclasses.replace(space, pruned={}))
    if fits and workload.finetune.method == "full":
        fits += _adapter_hint(cluster, workload, **same_space)
    notes = []
    if host_ckpt is not None:
        how = ("train_lora.py runs each step inside DeepSpeed's CheckpointHiddenStatesOffload"
               if workload.finetune.adapters else "ds_config.json's cpu_checkpointing; your model must checkpoint "
               "through deepspeed.checkpointing for it")
        notes.append(f"nothing fits with the activation checkpoints on the device: {len(ok)} plans fit with them in "
                     f"host RAM (offload_activations: {how}; docs/cost-model.md, 'Activation checkpoints in host "
                     "RAM')")
    if tops and workload.finetune.method == "full" and objective in ("throughput", "time"):
        note = _idle_note(tops[0], cluster, workload, **same_space)
        if note:
            notes.append(note)
    if pruned:
        notes.append(f"{n} candidates: {pruned} pruned before timing because weights, gradients and optimizer "
                     f"states alone exceed {ctx.mem_cap / 2**30:.1f} GiB per device; {n_timed} evaluated, "
                     f"{len(bad)} of them infeasible")
    blind = [nd.name for nd in cluster.nodes if nd.cpu.ram_bytes == 0 and nd.cpu.cores <= 1]
    if blind and len(rows) and np.any(b.a[:, COLUMNS.index("zero_offload")] > 0):
        notes.append(f"host CPU not described for {_names(blind)} (no cpu: in the cluster file): ZeRO-Offload "
                     "plans are priced with CPU Adam on 1 core per node and host RAM is not checked; add "
                     "cpu: {cores: N, ram_gib: M} to the node or probe it")
    if tops and tops[0].plan.zero_offload and ctx.host_ram:
        note = _host_tight_note(tops[0], ctx, workload)
        if note:
            notes.append(note)
    if n_ok and tops and tops[0].plan.world_size < cluster.num_devices:
        notes.append(f"the best plan uses {tops[0].plan.world_size} of {cluster.num_devices} devices: "
                     "more would be slower on these links")
    return Ranking(cluster_name=cluster.name, cluster_source=cluster.source, workload_name=workload.model.name,
                   objective=objective, n_candidates=n, n_feasible=n_ok, top=tops, infeasible_reasons=reasons,
                   fits_nowhere=fits, notes=notes)


def _checkpoints_in_host_ram(a: np.ndarray, ctx, workload: Workload, rules) -> Optional[tuple[np.ndarray, Any]]:
    """(rows, their batch) of the candidates (`a`: the evaluated rows' array) that fit once their activation
    checkpoints live in host RAM (Plan.offload_activations: DeepSpeed's cpu_checkpointing, train_lora.py's
    CheckpointHiddenStatesOffload), or None. Asked only when no candidate fits: the copies cost host-link time, so
    the enumeration does not propose them beside plans that fit (candidates module docstring). Eligible (the Plan's
    rules, check_plan_for): recomputing rows of a transformer with pure data parallelism, not on FSDP, with ZeRO
    unless adapters train."""
    if workload.model.kind != "transformer":
        return None
    c = COLUMNS.index
    ok = ((a[:, c("tp")] == 1) & (a[:, c("pp")] == 1) & (a[:, c("cp")] == 1) & (a[:, c("ep")] == 1)
          & (a[:, c("recompute")] > 0) & (a[:, c("zero_impl")] != ZERO_IMPLS.index("fsdp"))
          & ((a[:, c("zero_stage")] > 0) | bool(workload.finetune.adapters)))
    if not ok.any():
        return None
    sub = a[ok].copy()
    sub[:, c("offload_activations")] = 1.0
    b2 = evaluate_batch(sub, ctx, rules)
    return (sub, b2) if b2.feasible.any() else None


def _names(names: list[str]) -> str:
    """'node a', 'nodes a, b' or 'nodes a, b and 3 more'."""
    if len(names) == 1:
        return f"node {names[0]}"
    shown = ", ".join(names[:2])
    return f"nodes {shown}" + (f" and {len(names) - 2} more" if len(names) > 2 else "")


def plan_label(p) -> str:
    """A plan as the notes name it: strategy on nodes x devices (mb, m)."""
    s = p.strategy
    where = f"{p.nodes}x{p.devices_per_node}"
    return f"{s} on {where}" + (f" (mb={p.micro_batch_size}, m={p.num_micro_batches})")


def _parts(est: Estimate) -> dict[str, float]:
    d = {"compute": est.step.compute_s, "pipeline bubble": est.step.bubble_s, "offload": est.step.offload_s,
         "optimizer": est.step.optimizer_s}
    for k, v in est.step.comm_exposed_s.items():
        kind, _, link = k.partition("@")
        d[f"exposed {kind.upper()} communication over {link}"] = v
    return d


def _reasons(a: Estimate, b: Optional[Estimate], objective: str) -> list[str]:
    """One sentence on why `a` ranks above `b`, from the largest per-token breakdown difference."""
    if b is None:
        return []
    if objective == "memory":
        return [f"{plan_label(a.plan)} needs {a.memory.total / 2**30:.1f} GiB per device vs "
                f"{b.memory.total / 2**30:.1f} GiB for {plan_label(b.plan)}."]
    ta, tb = a.tokens_per_s, b.tokens_per_s
    # compare seconds per token of each component (batches may differ)
    pa = {k: v / max(a.step_time_s * ta, 1e-12) for k, v in _parts(a).items()}
    pb = {k: v / max(b.step_time_s * tb, 1e-12) for k, v in _parts(b).items()}
    diffs = sorted(((pb.get(k, 0.0) - pa.get(k, 0.0), k) for k in set(pa) | set(pb)), reverse=True)
    gain, what = diffs[0]
    pct = (ta / tb - 1) * 100 if tb else float("inf")
    why = f"less {what}" if gain > 0 else "a similar breakdown"
    ca = complexity(a.plan.dp, a.plan.tp, a.plan.pp, a.plan.zero_stage, a.plan.offload_code,
                    a.plan.zero_hpz_partition_size, a.plan.cp)
    cb = complexity(b.plan.dp, b.plan.tp, b.plan.pp, b.plan.zero_stage, b.plan.offload_code,
                    b.plan.zero_hpz_partition_size, b.plan.cp)
    frac_b = b.memory.total / b.memory_capacity_bytes if b.memory_capacity_bytes else 0.0
    if ta < tb and frac_b > MEMORY_TIGHT:
        why = (f"{plan_label(b.plan)} needs {frac_b:.0%} of device memory, too close to the limit to run reliably "
               f"(over {MEMORY_TIGHT:.0%} is ranked last)")
    elif ta < tb and ca < cb:
        why = (f"it is simpler ({a.plan.strategy} rather than {b.plan.strategy}) and within "
               f"{_simpler_margin():.0%} per step of complexity, inside the model's uncertainty")
    elif ca < cb and gain <= 0:
        why = f"a similar breakdown and a simpler plan ({a.plan.strategy} rather than {b.plan.strategy})"
    if objective == "cost" and a.plan.world_size < b.plan.world_size:
        why = f"{b.plan.world_size - a.plan.world_size} fewer GPUs for {ta / tb:.2f}x the throughput"
    return [f"{_compare(plan_label(a.plan), plan_label(b.plan), pct, objective)}: {why}."]


def _compare(a: str, b: str, pct: float, objective: str) -> str:
    """How `a` (ranked above `b`) compares in tokens/s: faster, as fast (within 0.5%), or slower but ranked first."""
    if abs(pct) < 0.5:
        return f"{a} runs as fast as {b} (within 0.5% in tokens/s)"
    amount = f"{abs(pct):.1f}%" if abs(pct) < 10 else f"{abs(pct):.0f}%"
    if pct > 0:
        return f"{a} beats {b} by {amount} in tokens/s"
    return f"{a} ranks above {b} by {objective} despite {amount} fewer tokens/s"


_ADAPTERS = {"lora": "LoRA", "qlora": "QLoRA"}


def _adapter_best(cluster: Cluster, workload: Workload, **kw: Any) -> Optional[tuple[str, Estimate]]:
    """(method, best plan) of LoRA, else QLoRA, for `workload`'s model and batch, ranked for real; None when
    neither fits or adapters do not apply (a model without linear layers to adapt, FP8)."""
    for method in ("lora", "qlora"):
        try:
            adapted = Workload(model=workload.model, training=workload.training, finetune=FineTune(method=method))
        except ValueError:  # adapters need a transformer; LoRA/QLoRA with fp8 is refused
            return None
        r = rank(cluster, adapted, top=1, **kw)
        if r.top:
            return method, r.top[0]
    return None


def _adapter_flag(method: str) -> str:
    return f"--finetune {method} (API: finetune='{method}')"


def _adapter_hint(cluster: Cluster, workload: Workload, **kw: Any) -> str:
    """When full training fits nowhere: whether LoRA, else QLoRA, would fit (ranked for real), as a sentence.

    Fine-tuning a frozen base with adapters drops the base's gradients and optimizer states (LoRA) and stores the
    base in 4 bits (QLoRA), so a model that cannot be trained in full often fits: say which one, and its best plan.
    Empty when neither fits or adapters do not apply (a model without linear layers to adapt, FP8)."""
    found = _adapter_best(cluster, workload, **kw)
    if found is None:
        return ""
    method, best = found
    return (f"; if fine-tuning is the goal, {_ADAPTERS[method]} fits: {_adapter_flag(method)}, best plan "
            f"{plan_label(best.plan)} at {best.tokens_per_s:,.0f} tokens/s")


#: Scaling efficiency (Estimate.scaling_efficiency: the share of the devices' compute the plan keeps busy) below
#: which the best full-training plan is said to be bound by something other than compute, with the adapters'
#: alternative when it is at least ADAPTER_GAIN times faster. Seed 000 measured TP over 1 GbE at 1-2 % and the
#: papers' "poor" band is below ~50 %; at a quarter, three of every four GPU-seconds wait on links or the host.
IDLE_EFFICIENCY = 0.25
ADAPTER_GAIN = 1.5


def _idle_note(best: Estimate, cluster: Cluster, workload: Workload, **kw: Any) -> str:
    """A note when the best full-training plan leaves most of the devices' compute idle: what holds it back and,
    where LoRA/QLoRA trains at least ADAPTER_GAIN times faster on the same cluster, that alternative."""
    eff = best.scaling_efficiency
    if eff is None or eff >= IDLE_EFFICIENCY or best.plan.world_size == 1:
        return ""
    parts = {k: v for k, v in _parts(best).items() if k != "compute"}
    what, t = max(parts.items(), key=lambda kv: kv[1])
    held = (f"the best plan keeps {eff:.0%} of the devices' compute busy ({what} takes "
            f"{t / best.step_time_s:.0%} of its step)")
    found = _adapter_best(cluster, workload, **kw)
    if found is None or found[1].tokens_per_s < ADAPTER_GAIN * best.tokens_per_s:
        return held
    method, alt = found
    return (f"{held}; if fine-tuning is the goal, {_ADAPTERS[method]} trains "
            f"{alt.tokens_per_s / best.tokens_per_s:.1f}x faster on this cluster: {_adapter_flag(method)}, best plan "
            f"{plan_label(alt.plan)} at {alt.tokens_per_s:,.0f} tokens/s")


#: Host RAM share of the usable above which an offload pick gets a warning: DeepSpeed's own estimators
#: (estimate_zero2/zero3_model_states_mem_needs) put 1.5x the states' bytes in host RAM (additional_buffer_factor),
#: for its pinned staging buffers and the model's load, which the cost model does not count.
HOST_TIGHT = 0.8


def _host_tight_note(best, ctx, workload: Workload) -> str:
    """A warning when the best plan's offloaded states take most of the usable host RAM (HOST_TIGHT)."""
    need, usable = best.host_memory_bytes, ctx.host_ram * ctx.host_usable
    if need <= HOST_TIGHT * usable:
        return ""
    lora = " or fine-tune with --finetune lora" if workload.finetune.method == "full" else ""
    # DeepSpeed's estimators count the states alone (not the gradient buffers the copies go through,
    # engine.offload_host_buffers) and put 1.5x those in host RAM
    p = best.plan
    n_opt = np.array([0.0 if ctx.adapters else ctx.params / p.dp])
    _, bufs = offload_host_buffers(ctx, n_opt, np.array([p.num_micro_batches]), np.array([p.zero_stage]),
                                    np.array([p.zero_offload]))
    states = need - float(bufs[0]) * p.devices_per_node
    return (f"the best plan pins {need / 2**30:.0f} GiB of host RAM per node for its offloaded states, "
            f"{need / usable:.0%} of the {usable / 2**30:.0f} GiB usable (DeepSpeed's own estimator asks "
            f"{1.5 * states / 2**30:.0f} GiB with its 1.5x margin on the states alone); if it fails to allocate host "
            f"memory at start-up, close other processes, add RAM{lora}")


def _least_host_need(b, bad: np.ndarray) -> float:
    """The least host RAM per node any plan out of host memory (fitting its devices) asks, 0 without such plans."""
    rows = bad[b.reason[bad] == 2]
    return float(np.min(b.parts["host"][rows] * b.a[rows, COLUMNS.index("devices_per_node")])) if len(rows) else 0.0


def _fits_nowhere(e, ctx, n: int, host_need: float = 0.0) -> str:
    """The smallest change that would make some plan fit."""
    if e is None and n:
        world = ctx.cluster.num_devices
        need = ctx.params * 16.0 / world  # mixed-precision Adam, fully sharded (ZeRO §3.1: 2+2+12 bytes)
        return (f"nothing fits: even sharded over all {world} devices the model states need {need / 2**30:.1f} GiB "
                f"per device of {ctx.mem_cap / 2**30:.1f} GiB; use about {math.ceil(ctx.params * 16.0 / ctx.mem_cap * 1.3)}"
                " such GPUs, or ZeRO-3 with CPU offload if host RAM allows")
    if e is None:
        return (f"no valid plan for {ctx.workload.model.name} on {ctx.cluster.name} ({n} candidates): "
                "check that the global batch is divisible by the data-parallel degree")
    need, cap = e.mem.total, ctx.mem_cap
    if e.reason and "host" in e.reason:
        need = host_need or e.mem.host * e.plan.devices_per_node
        return (f"even ZeRO-3 offload needs {need / 2**30:.0f} GiB of host RAM per node, above the "
                f"{ctx.host_ram * ctx.host_usable / 2**30:.0f} GiB usable of "
                f"{ctx.host_ram / 2**30:.0f} GiB "
                f"({ctx.host_usable:.0%}: the OS and other processes keep the rest); add host memory or GPUs")
    more = math.ceil(need / cap * e.plan.world_size)
    return (f"nothing fits: the leanest plan ({e.plan.to_string()}) needs {need / 2**30:.1f} GiB per device but "
            f"{cap / 2**30:.1f} GiB are available; use about {more} such GPUs (ZeRO-3/pipeline shard the model "
            f"further), a smaller micro-batch or sequence length, or ZeRO-3 with CPU offload and recompute")
