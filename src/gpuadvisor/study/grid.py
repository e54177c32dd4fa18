"""Plan the study grid: per model and GPU count one Plan per strategy, built the papers' way.

Seed 001, sec. II-A and Table II: the global batch is fixed per model; DP and ZeRO split it across
the ranks, TP gives every rank the whole batch, PP cuts it into m = p (and, when asked, m = 4p)
micro-batches; each model gets a 1-GPU baseline. A cell that the memory model says cannot fit, that
is invalid (heads not divisible by tp, batch not divisible), that the bundled trainers cannot run
(trainers/support.unsupported_reason, e.g. QLoRA under ZeRO), or that needs more GPUs than the
cluster has is kept in the grid as skipped, with the reason.
"""
from __future__ import annotations

import hashlib
import json
from typing import Optional

from pydantic import Field

from .. import __version__
from ..launch.deepspeed import runs_on_deepspeed
from ..schemas import Cluster, Estimate, Plan, Workload, check_plan_for
from ..schemas._base import Frozen
from ..trainers.support import unsupported_reason
from .spec import PP_FACTORS, GpuCount, StudySpec, model_slug

#: Start-up cost of one torchrun launch of the trainers on a CPU host (DESIGN.md sec. 6, measured: ~6.5 s).
LAUNCH_OVERHEAD_S = 6.5
#: Extra start-up of a DeepSpeed (ZeRO) launch: importing deepspeed and building the engine (rough).
DEEPSPEED_OVERHEAD_S = 6.0


class Cell(Frozen):
    """One experiment of the study: a model, a strategy, a world size, its plan and prediction."""

    id: str = Field(description="Stable id: <model>__<strategy>__<gpus>; names the run folder")
    model: str = Field(description="The model as typed on the command line")
    model_name: str = Field(description="Resolved model name")
    strategy: str = Field(description="single, dp, tp, pp, pp-4p, zero1, zero2, zero2-offload, zero3, "
                          "zero3-offload-optim, zero3-offload")
    gpus: int
    nodes: int
    devices_per_node: int
    plan: Optional[Plan] = None
    pp_microbatches: Optional[str] = Field(None, description="'p' or '4p' for pipeline cells")
    key: str = Field("", description="Hash of what the measurement depends on (plan, workload, run length)")
    skip_reason: Optional[str] = Field(None, description="Why the cell is not run (None: it runs)")
    predicted: Optional[Estimate] = None
    note: Optional[str] = Field(None, description="E.g. gradient accumulation chosen to fit memory")

    @property
    def runnable(self) -> bool:
        return self.skip_reason is None and self.plan is not None

    @property
    def label(self) -> str:
        return f"{self.model} {self.strategy} x{self.gpus}" + (f" ({self.nodes} nodes)" if self.nodes > 1 else "")


def cell_key(plan: Plan, workload: Workload, steps: int, warmup: int) -> str:
    """What a measured cell depends on: a finished cell with the same key is never run again."""
    blob = json.dumps({"plan": plan.model_dump(mode="json"), "workload": workload.model_dump(mode="json"),
                       "steps": steps, "warmup": warmup, "version": __version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def placement(g: GpuCount, cluster: Cluster) -> tuple[Optional[tuple[int, int]], Optional[str]]:
    """(nodes, devices per node) for a GPU count on the cluster, or a reason why it does not fit."""
    per = min(cluster.devices_per_node)
    n_nodes = len(cluster.nodes)
    if g.gpus > cluster.num_devices:
        return None, f"needs {g.gpus} devices, cluster '{cluster.name}' has {cluster.num_devices}"
    if g.nodes:
        if g.nodes > n_nodes or g.gpus // g.nodes > per:
            return None, f"{g.label} does not fit cluster '{cluster.name}' ({n_nodes} node(s) x {per} device(s))"
        return (g.nodes, g.gpus // g.nodes), None
    for n in range(1, n_nodes + 1):
        if g.gpus % n == 0 and g.gpus // n <= per:
            return (n, g.gpus // n), None
    return None, f"{g.gpus} devices cannot be spread evenly over {n_nodes} node(s) of {per}"


def _divisors_desc(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def _strategy_plan(strategy: str, g: int, nodes: int, per: int, batch: int, m_factor: int,
                   mb: Optional[int] = None) -> tuple[Optional[Plan], Optional[str]]:
    """The Plan of one strategy at g devices with the model's fixed global batch, or why none exists.

    `mb` (micro-batch per rank) below the batch share means gradient accumulation (same tokens per step).
    """
    place = dict(nodes=nodes, devices_per_node=per)
    if strategy == "single":
        mb = mb or batch
        return Plan(micro_batch_size=mb, num_micro_batches=batch // mb, **place), None
    if strategy == "tp":
        mb = mb or batch
        return Plan(tp=g, micro_batch_size=mb, num_micro_batches=batch // mb, **place), None
    if strategy.startswith("pp"):
        m = m_factor * g
        if batch % m:
            return None, f"global batch {batch} is not divisible into m={m} micro-batches; use --global-batch {m * max(1, batch // m)}"
        return Plan(pp=g, micro_batch_size=batch // m, num_micro_batches=m, **place), None
    if batch % g:
        return None, f"global batch {batch} does not split over {g} ranks; use --global-batch {g * max(1, batch // g)}"
    share = batch // g
    mb = mb or share
    if strategy == "dp":
        return Plan(dp=g, micro_batch_size=mb, num_micro_batches=share // mb, **place), None
    stage = int(strategy[4])  # zero<k>[-offload[-optim]]
    return Plan(dp=g, zero_stage=stage, zero_offload="offload" in strategy,
                zero_offload_param=not strategy.endswith("-optim"), micro_batch_size=mb,
                num_micro_batches=share // mb, **place), None


def _predict(plan: Plan, cluster: Cluster, workload: Workload) -> tuple[Optional[Estimate], Optional[str]]:
    """The cost model's Estimate (None with a note when the cost model is unavailable)."""
    try:
        from ..costmodel.combine import estimate
    except ImportError as exc:  # pragma: no cover - the cost model ships with the package
        return None, f"no prediction (cost model unavailable: {exc})"
    try:
        return estimate(plan, cluster, workload), None
    except ValueError as exc:
        return None, str(exc)


def _one_cell(model: str, workload: Workload, strategy: str, g: GpuCount, cluster: Cluster, spec: StudySpec,
              m_key: Optional[str] = None) -> Cell:
    """Build, validate and predict one cell; try gradient accumulation when the batch share does not fit."""
    label = strategy if m_key in (None, "p") else f"pp-{m_key}"
    base = dict(id=f"{model_slug(model)}__{label}__{g.label}", model=model, model_name=workload.model.name,
                strategy=label, gpus=g.gpus, nodes=g.nodes or 1, devices_per_node=g.gpus // (g.nodes or 1),
                pp_microbatches=m_key)
    where, why = placement(g, cluster)
    if where is None:
        return Cell(**base, skip_reason=why)
    nodes, per = where
    base.update(nodes=nodes, devices_per_node=per)
    batch = workload.training.global_batch
    plan, why = _strategy_plan(strategy, g.gpus, nodes, per, batch, PP_FACTORS.get(m_key or "p", 1))
    if plan is None:
        return Cell(**base, skip_reason=why)
    try:
        check_plan_for(plan, workload)
    except ValueError as exc:
        return Cell(**base, plan=plan, skip_reason=str(exc))
    cannot = unsupported_reason(plan, workload, cuda=cluster.nodes[0].devices[0].kind == "gpu")
    if cannot:  # e.g. QLoRA under ZeRO: a trial would only crash on it
        return Cell(**base, plan=plan, skip_reason=f"the bundled trainers cannot run it: {cannot}")
    est, why = _predict(plan, cluster, workload)
    note = None
    if est is not None and not est.feasible and not strategy.startswith("pp"):
        # same tokens per step with smaller micro-batches (gradient accumulation), as the paper's ZeRO runs (App. H)
        for mb in _divisors_desc(plan.micro_batch_size)[1:]:
            alt, _ = _strategy_plan(strategy, g.gpus, nodes, per, batch, 1, mb=mb)
            if alt is None:  # cannot happen: mb divides the share that already made a plan
                continue
            alt_est, _ = _predict(alt, cluster, workload)
            if alt_est is not None and alt_est.feasible:
                plan, est = alt, alt_est
                note = f"micro-batch {mb} x {alt.num_micro_batches} accumulation steps to fit memory"
                break
    key = cell_key(plan, workload, spec.steps, spec.warmup)
    if est is not None and not est.feasible:
        return Cell(**base, plan=plan, key=key, predicted=est,
                    skip_reason=f"predicted not to fit: {est.infeasible_reason or 'memory'}")
    if plan.nodes > 1:
        return Cell(**base, plan=plan, key=key, predicted=est, note=why,
                    skip_reason="multi-node cell: the study runs trials on this host only; run the launch "
                                "config from `gpuadvisor suggest --emit` on each node")
    return Cell(**base, plan=plan, key=key, predicted=est, note=note or why)


def build_grid(spec: StudySpec, cluster: Cluster, workloads: dict[str, Workload]) -> list[Cell]:
    """Every cell of the study, model by model: the 1-GPU baseline first, then strategies by GPU count.

    An fp8 workload is refused (one-line UserError, trials/hostcheck.refuse_fp8): the cells run the bundled
    trainers, which have no FP8 kernels; so is a bf16 one on GPUs without bf16 tensor cores
    (analytical.check_bf16_devices: resolve_workloads chooses fp16 there unless the study's precision says bf16)."""
    from ..costmodel.analytical import check_bf16_devices
    from ..trials.hostcheck import refuse_fp8

    devices = [d for n in cluster.nodes for d in n.devices]
    for model in spec.models:
        refuse_fp8(workloads[model].training.precision, "study")
        check_bf16_devices(workloads[model], devices)
    cells: list[Cell] = []
    for model in spec.models:
        wl = workloads[model]
        cells.append(_one_cell(model, wl, "single", GpuCount(gpus=1), cluster, spec))
        for g in spec.gpus:
            if g.gpus == 1:
                continue
            for strategy in spec.strategies:
                if strategy == "pp":
                    for m_key in spec.pp_microbatches:
                        cells.append(_one_cell(model, wl, "pp", g, cluster, spec, m_key))
                else:
                    cells.append(_one_cell(model, wl, strategy, g, cluster, spec))
    return cells


def cell_wall_s(cell: Cell, steps: int, warmup: int) -> Optional[float]:
    """Predicted wall time of one cell: launch overhead + predicted step time x (steps + warm-up)."""
    if not cell.runnable:
        return 0.0
    over = LAUNCH_OVERHEAD_S + (DEEPSPEED_OVERHEAD_S if cell.plan and runs_on_deepspeed(cell.plan) else 0.0)
    if cell.predicted is None:
        return None
    return over + cell.predicted.step_time_s * (steps + warmup)


def study_wall_s(cells: list[Cell], steps: int, warmup: int) -> float:
    """Predicted wall time of the cells that will run (cells without a prediction count their overhead only)."""
    total = 0.0
    for c in cells:
        w = cell_wall_s(c, steps, warmup)
        total += LAUNCH_OVERHEAD_S if w is None else w
    return total
