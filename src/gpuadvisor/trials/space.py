"""The study's search space: the candidate enumerator's feasible plans, and the sampler over them.

Each plan knob that varies across candidates is one categorical Optuna parameter; a trial's
parameters name exactly one candidate plan. `PlanSampler` proposes the next untried plan near the
best measured ones (neighbours in knob space, ranked by predicted tokens/s times the
measured/predicted ratio of the nearest measured plan), never a plan already run, pending, or
one that ran out of memory (nor a larger micro-batch of the same layout).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Optional, Protocol

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.trial import FrozenTrial, TrialState

from ..schemas import Cluster, Estimate, Plan, Workload, check_plan_for

KNOBS = ("dp", "tp", "pp", "zero_stage", "zero_offload", "zero_offload_param", "micro_batch_size",
         "num_micro_batches", "pp_schedule", "pp_virtual_stages", "ddp_bucket_mb", "comm_hook",
         "zero_reduce_bucket_size", "zero_allgather_bucket_size", "zero_overlap_comm", "zero_hpz_partition_size",
         "recompute", "recompute_interval", "recompute_attention", "recompute_ops", "sequence_parallel", "nodes",
         "devices_per_node", "mesh_order", "ep", "tp_comm_overlap", "ep_overlap", "cp", "offload_activations")
FINAL = ("ok", "oom", "timeout", "crash", "rendezvous", "invalid_metrics", "skipped")
#: A trial stopped because the study's budget ran out: not a verdict on the plan, which stays runnable.
BUDGET = "budget"
LAYOUT = ("dp", "tp", "pp", "zero_stage", "zero_offload", "zero_offload_param", "recompute", "recompute_interval",
          "recompute_attention", "recompute_ops", "sequence_parallel", "nodes", "devices_per_node", "pp_virtual_stages",
          "ep", "offload_activations")


class Planner(Protocol):
    """Where the space comes from: the cost model's estimates of the candidate plans."""

    def estimates(self) -> list[Estimate]:
        """Estimates of every candidate plan (feasible or not)."""
        ...

    def top(self, k: int) -> list[Estimate]:
        """The cost model's k best feasible plans, best first."""
        ...


class DefaultPlanner:
    """The pipeline's own cost model: candidates.enumerate_plans + costmodel.combine.estimate + ranking.rank."""

    def __init__(self, cluster: Cluster, workload: Workload, correction: Any = None, objective: str = "throughput"):
        self.cluster, self.workload, self.correction, self.objective = cluster, workload, correction, objective

    def _runnable(self, plan: Plan) -> bool:
        """Can the bundled trainers run this plan on this cluster's devices?"""
        from ..trainers.support import unsupported_reason

        cuda = self.cluster.nodes[0].devices[0].kind == "gpu"
        return unsupported_reason(plan, self.workload, cuda=cuda) is None

    def estimates(self) -> list[Estimate]:
        from ..candidates import enumerate_plans
        from ..costmodel.combine import estimate

        return [estimate(p, self.cluster, self.workload, correction=self.correction)
                for p in enumerate_plans(self.cluster, self.workload) if self._runnable(p)]

    def top(self, k: int) -> list[Estimate]:
        from ..ranking import rank

        ranked = rank(self.cluster, self.workload, top=max(4 * k, 20), correction=self.correction,
                      objective=self.objective).top
        return [e for e in ranked if self._runnable(e.plan)][:k]


def _h(obj: Any) -> str:
    """sha256 of a JSON-able object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


class SearchSpace:
    """Feasible candidate plans keyed by plan string, with their estimates and the seed order."""

    def __init__(self, estimates: Iterable[Estimate], seeds: Iterable[Estimate], workload: Workload,
                 max_plans: int = 5000):
        feas: dict[str, Estimate] = {}
        for e in sorted(estimates, key=lambda e: -e.tokens_per_s):
            try:
                check_plan_for(e.plan, workload)
            except ValueError:
                continue
            if e.feasible and len(feas) < max_plans:
                feas.setdefault(e.plan.to_string(), e)
        self.seeds: list[str] = []
        for e in seeds:
            key = e.plan.to_string()
            feas.setdefault(key, e)
            if key not in self.seeds:
                self.seeds.append(key)
        if not feas:
            raise ValueError("no feasible plan to try: the cost model rules every candidate out")
        self.estimates = feas
        dumps = {k: e.plan.model_dump() for k, e in feas.items()}
        self.fields = [f for f in KNOBS if len({json.dumps(d[f]) for d in dumps.values()}) > 1] or ["dp"]
        self.by_params = {self.params(e.plan): k for k, e in feas.items()}

    def params(self, plan: Plan) -> tuple:
        """The plan's values of the varying knobs (the trial's parameters, in order)."""
        d = plan.model_dump()
        return tuple(d[f] for f in self.fields)

    def param_dict(self, plan: Plan) -> dict[str, Any]:
        """Parameters for enqueue_trial."""
        return dict(zip(self.fields, self.params(plan)))

    def distributions(self) -> dict[str, BaseDistribution]:
        """One categorical distribution per varying knob."""
        out: dict[str, BaseDistribution] = {}
        for i, f in enumerate(self.fields):
            vals = sorted({p[i] for p in self.by_params}, key=lambda v: (str(type(v)), v))
            out[f] = CategoricalDistribution(vals)
        return out

    def plan_for(self, params: dict[str, Any]) -> Optional[str]:
        """The candidate plan string these parameters name, or None."""
        try:
            return self.by_params.get(tuple(params[f] for f in self.fields))
        except KeyError:
            return None

    def fingerprint(self, steps: int, warmup: int) -> str:
        """Hash of the space (its plans and knobs) and the trial length."""
        return _h({"plans": sorted(self.estimates), "fields": self.fields, "steps": steps, "warmup": warmup})


def trial_status(t: FrozenTrial) -> str:
    """Our status of a stored trial: a final status, 'pending' (running/waiting) or 'stale'."""
    st = t.user_attrs.get("status")
    if st in FINAL or st == BUDGET:
        return st
    if t.state in (TrialState.RUNNING, TrialState.WAITING):
        return "pending"
    return "stale"


def _oom_blocks(oom: Plan, plan: Plan) -> bool:
    """An OOM at micro-batch b rules out the same layout at micro-batch >= b."""
    return (all(getattr(oom, f) == getattr(plan, f) for f in LAYOUT)
            and plan.micro_batch_size >= oom.micro_batch_size)


def blocked_plans(space: SearchSpace, trials: list[FrozenTrial]) -> set[str]:
    """Plans that must not run (again): tried, pending, twice stale, or ruled out by an OOM (a budget cut is none)."""
    done: set[str] = set()
    stale: dict[str, int] = {}
    ooms: list[Plan] = []
    for t in trials:
        key = t.user_attrs.get("plan") or space.plan_for(t.params)
        if key is None:
            continue
        st = trial_status(t)
        if st == BUDGET:  # cut by the budget: the plan was not judged
            continue
        if st == "stale":
            stale[key] = stale.get(key, 0) + 1
            continue
        done.add(key)
        if st == "oom" and key in space.estimates:
            ooms.append(space.estimates[key].plan)
    done |= {k for k, n in stale.items() if n >= 2}
    for key, e in space.estimates.items():
        if any(_oom_blocks(o, e.plan) for o in ooms):
            done.add(key)
    return done


def choose_next(space: SearchSpace, trials: list[FrozenTrial]) -> Optional[str]:
    """The next plan to try: unrun seeds first, then the best-scored neighbour of the best measured plans."""
    blocked = blocked_plans(space, trials)
    for key in space.seeds:
        if key not in blocked:
            return key
    pool = [k for k in space.estimates if k not in blocked]
    if not pool:
        return None
    measured = {}
    for t in trials:
        plan_key = t.user_attrs.get("plan")
        if trial_status(t) == "ok" and plan_key in space.estimates and t.value:
            measured[plan_key] = t.value
    if not measured:
        return max(pool, key=lambda k: (space.estimates[k].tokens_per_s, k))

    def dist(a: str, b: str) -> int:
        pa, pb = space.params(space.estimates[a].plan), space.params(space.estimates[b].plan)
        return sum(x != y for x, y in zip(pa, pb))

    best = sorted(measured, key=lambda k: -measured[k])[:2]
    near = [k for k in pool if min(dist(k, b) for b in best) <= 2] or pool

    def score(k: str) -> tuple[float, str]:
        nearest = min(measured, key=lambda m: (dist(k, m), m))
        ratio = measured[nearest] / max(space.estimates[nearest].tokens_per_s, 1e-9)
        return space.estimates[k].tokens_per_s * ratio, k

    return max(near, key=score)


class PlanSampler(BaseSampler):
    """Optuna sampler over the plan space: jointly samples every knob of one untried candidate plan."""

    def __init__(self, space: SearchSpace, seed: Optional[int] = None):
        self.space = space
        self._fallback = RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.space.distributions()

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if "fixed_params" in trial.system_attrs or trial.params:  # enqueued or retried: parameters are given
            return {}
        key = choose_next(self.space, study.get_trials(deepcopy=False))
        return self.space.param_dict(self.space.estimates[key].plan) if key else {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)
