"""Predict every public run with the current cost model and summarise the accuracy per source.

The cost model is reached only through `gpuadvisor.api.predict`; inputs come from mapping.to_inputs.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import statistics
from typing import Collection, Iterable, Optional

from ..errors import UserError
from .load import PublicRun
from .mapping import Unsupported, to_inputs
from .metrics import kendall_tau, mape, megatron_flops_per_token, regret

#: Rows with the same key ran the same job (model, GPUs, batch, numeric recipe): their configs are ranked against
#: each other. Precision is part of the job: FP8 scaling recipes of one model are not configs the advisor ranks.
GROUP_FIELDS = ("source_id", "model_name", "gpu", "gpus", "global_batch", "seq_len", "precision")
MIN_GROUP = 3
GIB = 1024**3
TAU_GOOD = 0.8
#: Rows with the same key are one model at several GPU counts: how per-GPU throughput holds up with scale.
SCALING_FIELDS = ("source_id", "model_name", "gpu", "seq_len", "precision")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One run: skipped (reasons), or predicted (seconds per step, also where the model says it does not fit:
    infeasible_reason says so)."""

    run: PublicRun
    reasons: tuple[str, ...] = ()
    plan: str = ""
    predicted_s: Optional[float] = None
    infeasible_reason: Optional[str] = None
    assumptions: tuple[str, ...] = ()
    predicted_mem_gib: Optional[float] = None
    capacity_gib: Optional[float] = None

    @property
    def used(self) -> bool:
        return not self.reasons

    @property
    def timed(self) -> bool:
        """Predicted with a finite step time and the model thinks it fits."""
        return self.used and self.infeasible_reason is None and self.predicted_s is not None \
            and math.isfinite(self.predicted_s)

    @property
    def priced(self) -> bool:
        """Predicted with a finite step time, fitting or not (the time it would take if it fit)."""
        return self.used and self.predicted_s is not None and math.isfinite(self.predicted_s)

    @property
    def predicted(self) -> float:
        """predicted_s as a number: inf where there is no prediction (a timed row always has one)."""
        return math.inf if self.predicted_s is None else self.predicted_s

    @property
    def measured_s(self) -> float:
        return float(self.run.measured_iter_time_s or 0.0)

    @property
    def ratio(self) -> float:
        """predicted / measured step time."""
        return (self.predicted_s or math.inf) / self.measured_s


def evaluate_runs(runs: Iterable[PublicRun], approximate: Collection[str] = ()) -> list[Outcome]:
    """Map and predict every run (skipped ones keep their Unsupported reasons)."""
    from ..api import predict

    out = []
    for run in runs:
        try:
            inputs = to_inputs(run, approximate)
        except Unsupported as exc:
            out.append(Outcome(run, reasons=exc.reasons))
            continue
        try:
            est = predict(inputs.workload, inputs.plan, cluster=inputs.cluster)
        except (ValueError, UserError) as exc:
            out.append(Outcome(run, reasons=(f"cost model refuses: {str(exc).splitlines()[0][:80]}",),
                               plan=inputs.plan.to_string()))
            continue
        out.append(Outcome(run, plan=inputs.plan.to_string(), predicted_s=float(est.step_time_s),
                           infeasible_reason=None if est.feasible else est.infeasible_reason,
                           assumptions=inputs.assumptions, predicted_mem_gib=est.memory.total / GIB,
                           capacity_gib=est.memory_capacity_bytes / GIB))
    return out


def group_key(run: PublicRun) -> tuple:
    return tuple(getattr(run, f) for f in GROUP_FIELDS)


def _groups(outcomes: list[Outcome]) -> list[list[Outcome]]:
    by: dict[tuple, list[Outcome]] = collections.defaultdict(list)
    for o in outcomes:
        if o.used:
            by[group_key(o.run)].append(o)
    # repeats of one plan (the same config measured in several releases) rank nothing: at least two plans
    return [g for g in by.values() if len(g) >= MIN_GROUP and len({o.plan for o in g}) >= 2]


def _scaling_groups(outcomes: list[Outcome]) -> list[list[Outcome]]:
    by: dict[tuple, list[Outcome]] = collections.defaultdict(list)
    for o in outcomes:
        if o.used:
            by[tuple(getattr(o.run, f) for f in SCALING_FIELDS)].append(o)
    return [g for g in by.values() if len(g) >= MIN_GROUP and len({o.run.gpus for o in g}) >= 2]


def _tokens_per_gpu(o: Outcome, seconds: Optional[float]) -> float:
    r = o.run
    if not seconds or not math.isfinite(seconds):
        return 0.0
    return (r.global_batch or 0) * (r.seq_len or 0) / (seconds * (r.gpus or 1))


def scaling_scores(group: list[Outcome]) -> tuple[Optional[float], Optional[float]]:
    """(Kendall tau-b of tokens/s per GPU, predicted/measured retention) of one model across GPU counts.

    Retention = tokens/s/GPU at the largest GPU count / at the smallest (the best measured row at each);
    1.0 means the model loses per-GPU throughput with scale exactly as measured. None where one is OOM.
    """
    meas = [_tokens_per_gpu(o, o.measured_s) for o in group]
    pred = [_tokens_per_gpu(o, o.predicted_s if o.timed else None) for o in group]
    tau = kendall_tau(meas, pred)
    lo, hi = min(o.run.gpus or 0 for o in group), max(o.run.gpus or 0 for o in group)
    pick_lo = max((i for i, o in enumerate(group) if o.run.gpus == lo), key=lambda i: meas[i])
    pick_hi = max((i for i, o in enumerate(group) if o.run.gpus == hi), key=lambda i: meas[i])
    if not (pred[pick_lo] and pred[pick_hi]):
        return tau, None
    return tau, (pred[pick_hi] / pred[pick_lo]) / (meas[pick_hi] / meas[pick_lo])


def group_scores(group: list[Outcome]) -> tuple[Optional[float], Optional[float]]:
    """(Kendall tau-b, regret) of one group; rows the model calls out of memory rank last, never first."""
    meas = [o.measured_s for o in group]
    pred = [o.predicted if o.timed else math.inf for o in group]
    finite = [p for p in pred if math.isfinite(p)]
    big = 10.0 * max(finite) if finite else 1.0
    tau = kendall_tau(meas, [p if math.isfinite(p) else big for p in pred])
    reg = regret(meas, pred) if finite else None
    return tau, reg


def summarize(outcomes: list[Outcome], top_reasons: int = 3) -> dict:
    """Coverage and accuracy figures of a set of outcomes (one source, or all)."""
    used = [o for o in outcomes if o.used]
    timed = [o for o in used if o.timed]
    priced = [o for o in used if o.priced]
    reasons: collections.Counter = collections.Counter(r for o in outcomes for r in o.reasons)
    scores = [group_scores(g) for g in _groups(outcomes)]
    taus = [t for t, _ in scores if t is not None]
    regrets = [r for _, r in scores if r is not None]
    scaling = [scaling_scores(g) for g in _scaling_groups(outcomes)]
    s_taus = [t for t, _ in scaling if t is not None]
    retention = [r for _, r in scaling if r is not None]
    return {
        "rows": len(outcomes), "used": len(used), "skipped": len(outcomes) - len(used),
        "predicted_oom": len(used) - len(timed),
        "mape_pct": mape([o.measured_s for o in timed], [o.predicted for o in timed]) if timed else None,
        "median_ratio": statistics.median(o.ratio for o in timed) if timed else None,
        # the step time of every measured run, the ones the model calls out of memory included (they ran)
        "mape_all_pct": mape([o.measured_s for o in priced], [o.predicted for o in priced]) if priced else None,
        "groups": len(scores), "tau_median": statistics.median(taus) if taus else None,
        "tau_good_frac": sum(t >= TAU_GOOD for t in taus) / len(taus) if taus else None,
        "regret_max_pct": 100 * max(regrets) if regrets else None,
        "regret_median_pct": 100 * statistics.median(regrets) if regrets else None,
        "scaling_groups": len(scaling), "scaling_tau_median": statistics.median(s_taus) if s_taus else None,
        "retention_ratio_median": statistics.median(retention) if retention else None,
        "top_skip_reasons": reasons.most_common(top_reasons),
    }


def by_source(outcomes: list[Outcome]) -> dict[str, dict]:
    """summarize() per source_id (file order), then one node / more nodes (or not stated), then 'ALL'."""
    ids = list(dict.fromkeys(o.run.source_id for o in outcomes))
    out = {sid: summarize([o for o in outcomes if o.run.source_id == sid]) for sid in ids}
    out["ALL, 1 node"] = summarize([o for o in outcomes if (o.run.nodes or 0) == 1])
    out["ALL, more nodes"] = summarize([o for o in outcomes if (o.run.nodes or 0) != 1])
    out["ALL"] = summarize(outcomes, top_reasons=8)
    return out


def worst(outcomes: list[Outcome], n: int = 10) -> list[Outcome]:
    """The n timed rows with the largest |log(predicted / measured)|."""
    timed = [o for o in outcomes if o.timed]
    return sorted(timed, key=lambda o: -abs(math.log(o.ratio)))[:n]


def predicted_oom(outcomes: list[Outcome], n: int = 10) -> list[Outcome]:
    """Up to n measured runs the model calls infeasible, the largest predicted memory overshoot first."""
    oom = [o for o in outcomes if o.used and not o.timed]
    return sorted(oom, key=lambda o: -((o.predicted_mem_gib or 0) / (o.capacity_gib or 1)))[:n]


def memory_check(outcomes: list[Outcome]) -> list[dict]:
    """Predicted vs measured peak memory per GPU, for every predicted row that states its memory (torchtitan's
    reading is torch.cuda.max_memory_reserved: the caching allocator's reserve, at least the peak in use). The
    prediction is the model's peak with its framework share (CUDA context, NCCL, fragmentation); `fits` says
    whether the model thinks the run fits the card (every one of these ran)."""
    rows = []
    for o in outcomes:
        if o.used and o.run.mem_gib and o.predicted_mem_gib is not None:
            rows.append({"ref": o.run.ref, "model": o.run.model_name, "gpus": o.run.gpus, "plan": o.plan,
                         "measured_gib": o.run.mem_gib, "predicted_gib": o.predicted_mem_gib,
                         "ratio": o.predicted_mem_gib / o.run.mem_gib, "fits": o.infeasible_reason is None,
                         "approximated": any(a.startswith("approximation") for a in o.assumptions)})
    return rows


def loso_mape(outcomes: list[Outcome]) -> dict[str, Optional[float]]:
    """Leave-one-source-out: MAPE of each source after a multiplicative bias fitted on the other sources.

    The bias is the geometric mean of measured/predicted over the other sources' timed rows; it changes
    no ranking (tau, regret), only the level.
    """
    timed = [o for o in outcomes if o.timed]
    out: dict[str, Optional[float]] = {}
    for sid in dict.fromkeys(o.run.source_id for o in timed):
        rest = [o for o in timed if o.run.source_id != sid]
        mine = [o for o in timed if o.run.source_id == sid]
        if not rest:
            out[sid] = None
            continue
        bias = math.exp(statistics.fmean(-math.log(o.ratio) for o in rest))
        out[sid] = mape([o.measured_s for o in mine], [o.predicted * bias for o in mine])
    return out


MEGATRON_WEAK_SCALING = "megatron_h100_weak_scaling_table"


def megatron_tflops_check(outcomes: list[Outcome], tolerance: float = 0.15) -> list[dict]:
    """Predicted vs published TFLOP/s per GPU for the Megatron weak-scaling rows, with the row's FLOP count.

    Uses Megatron's num_floating_point_operations (the rows' metric_definition); a row whose published
    tokens/s and TFLOP/s disagree with that count by more than 1 % is reported without a verdict.
    """
    rows = []
    for o in outcomes:
        r = o.run
        if r.source_id != MEGATRON_WEAK_SCALING or "12*B*s*L*h^2" not in r.metric_definition.replace(" ", ""):
            continue
        if not (r.layers and r.hidden and r.heads and r.ffn_hidden and r.vocab and r.seq_len and r.gpus):
            continue
        fpt = megatron_flops_per_token(r.layers, r.hidden, r.heads, r.kv_heads or r.heads, r.ffn_hidden, r.vocab,
                                       r.seq_len)
        published = r.tflops_per_gpu
        consistent = bool(published and r.tokens_per_s_per_gpu
                          and abs(fpt * r.tokens_per_s_per_gpu / 1e12 / published - 1) <= 0.01)
        predicted = None
        if o.timed and r.global_batch:
            predicted = fpt * r.global_batch * r.seq_len / (o.predicted * r.gpus) / 1e12
        ratio = predicted / published if predicted and published else None
        rows.append({"ref": r.ref, "model": r.model_name, "gpus": r.gpus, "published_tflops": published,
                     "predicted_tflops": predicted, "ratio": ratio, "flop_count_consistent": consistent,
                     "within": bool(ratio and consistent and abs(ratio - 1) <= tolerance),
                     "status": "ok" if o.timed else ("; ".join(o.reasons) or o.infeasible_reason or "")})
    return rows
