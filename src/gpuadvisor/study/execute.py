"""Run a study: plan the grid, run each cell through the trial runner (resumable), aggregate, write outputs."""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Mapping, Optional, Union

from pydantic import Field

from ..launch.deepspeed import runs_on_deepspeed
from .. import __version__
from ..schemas import Cluster, TrialRecord, Workload
from ..schemas._base import Frozen
from ..trials.hostcheck import host_mismatch
from ..trials.lock import StudyLock
from ..trials.runner import Launcher, reap_stale, run_trial
from .grid import Cell, build_grid, cell_wall_s, study_wall_s
from .progress import ProgressArg, make_progress
from .results import StudyRow, build_rows, write_results
from .spec import StudySpec, resolve_workload
from .state import MAX_ATTEMPTS, CellResult, StudyDir


class StudyOutcome(Frozen):
    """What `run_study` returns: the grid, the rows, and where the files are."""

    out_dir: str
    cells: list[Cell]
    rows: list[StudyRow]
    predicted_wall_s: float
    resumed: bool = False
    ran: list[str] = Field(default_factory=list, description="Cell ids launched by this invocation")
    reused: list[str] = Field(default_factory=list, description="Cell ids finished earlier and not run again")
    files: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def resolve_workloads(spec: StudySpec, cluster: Optional[Cluster] = None,
                      notes: Optional[list[str]] = None) -> dict[str, Workload]:
    """The Workload of every model of the study; on a `cluster` of GPUs without bf16 (V100, T4) and no
    `spec.precision`, in fp16 mixed precision, as `suggest` does (api.training_precision appends its note to
    `notes`); otherwise each model's own precision."""
    precision = None
    if spec.precision is None and cluster is not None:
        from ..api import training_precision

        chosen = training_precision(None, cluster, notes)
        precision = None if chosen == "bf16" else chosen
    return {m: resolve_workload(m, spec, precision) for m in spec.models}


def plan_study(spec: StudySpec, cluster: Cluster, workloads: Optional[dict[str, Workload]] = None) -> list[Cell]:
    """The grid of the study with predictions (nothing runs)."""
    return build_grid(spec, cluster, workloads or resolve_workloads(spec, cluster))


def trial_env(cluster: Cluster) -> dict[str, str]:
    """Environment of the trials: CPU ranks need DeepSpeed's CPU accelerator."""
    if all(d.kind == "cpu" for n in cluster.nodes for d in n.devices):
        return {"DS_ACCELERATOR": "cpu"}
    return {}


def _timeout(cell: Cell, spec: StudySpec, override: Optional[float]) -> float:
    """Per-cell deadline: generous over the prediction (shared machines are noisy)."""
    if override:
        return override
    w = cell_wall_s(cell, spec.steps, spec.warmup)
    return 300.0 + 10.0 * (w or 60.0)


def _failed_record(cell: Cell, study: str, error: str) -> TrialRecord:
    return TrialRecord(trial_id=cell.id, study=study, plan=cell.plan, status="crash", error=error)  # type: ignore[arg-type]


def meta_of(spec: StudySpec, cluster: Cluster, workloads: dict[str, Workload], predicted_wall_s: float) -> dict:
    """The study's description for results.json and the report."""
    return {
        "gpuadvisor_version": __version__, "host": socket.gethostname(), "cluster": cluster.name,
        "cluster_source": cluster.source, "devices": cluster.num_devices,
        "device_kinds": sorted({d.name for n in cluster.nodes for d in n.devices}),
        "device_kind": "cpu" if all(d.kind == "cpu" for n in cluster.nodes for d in n.devices) else "gpu",
        "nodes": len(cluster.nodes), "steps": spec.steps, "warmup": spec.warmup,
        "strategies": spec.strategies, "gpus": [g.label for g in spec.gpus], "pp_microbatches": spec.pp_microbatches,
        "predicted_wall_s": predicted_wall_s,
        "models": {m: {"name": w.model.name, "params": w.model.params, "layers": w.model.n_layers,
                       "hidden": w.model.d_model, "heads": w.model.n_heads, "seq_len": w.training.seq_len,
                       "global_batch": w.training.global_batch, "precision": w.training.precision,
                       "tokens_per_cell": spec.steps * w.training.global_batch * w.training.seq_len}
                   for m, w in workloads.items()},
    }


def run_study(spec: StudySpec, cluster: Cluster, out_dir: Union[str, Path], *,
              workloads: Optional[dict[str, Workload]] = None, progress: ProgressArg = None,
              trainer_module: str = "gpuadvisor.trainers", launcher: Launcher = "torchrun",
              env: Optional[Mapping[str, str]] = None, trial_timeout_s: Optional[float] = None,
              grace_s: float = 5.0, plots: bool = True) -> StudyOutcome:
    """Run every runnable cell of the study (resuming DIR), then write results, plots and the report.

    Finished cells (DIR/cells/<id>.json with the same key) are never run again; a cell interrupted by
    a crash of gpuadvisor is stopped and rerun at most once more. results.csv/json are rewritten after
    every cell; plots and report.md/.html at the end.
    """
    if plots:
        from .plots import require_matplotlib

        require_matplotlib()
    show = make_progress(progress)
    workloads = workloads or resolve_workloads(spec, cluster)
    cells = build_grid(spec, cluster, workloads)
    out = Path(out_dir).resolve()
    with StudyLock(out / "run.lock", f"the study in {out}"):
        return _run_locked(spec, cluster, out, cells, workloads, show=show, trainer_module=trainer_module,
                           launcher=launcher, env=env, trial_timeout_s=trial_timeout_s, grace_s=grace_s, plots=plots)


def _run_locked(spec: StudySpec, cluster: Cluster, out: Path, cells: list[Cell], workloads: dict[str, Workload], *,
                show, trainer_module: str, launcher: Launcher, env: Optional[Mapping[str, str]],  # noqa: ANN001
                trial_timeout_s: Optional[float], grace_s: float, plots: bool) -> StudyOutcome:
    """The body of run_study, run while holding the folder's lock (one run per study folder at a time)."""
    sd = StudyDir(out)
    state, resumed = sd.open(cluster, spec, cells)
    name = f"study-{state.fingerprint[:8]}"
    results: dict[str, CellResult] = {}
    for c in cells:
        r = sd.result(c) if c.runnable else None
        if r is not None:
            results[c.id] = r
    reused = sorted(results)
    todo = [c for c in cells if c.runnable and c.id not in results]
    predicted = study_wall_s(todo, spec.steps, spec.warmup)
    meta = meta_of(spec, cluster, workloads, study_wall_s(cells, spec.steps, spec.warmup))
    run_dirs = {c.id: os.path.relpath(sd.run_dir(c.id), out) for c in cells if c.runnable}
    n_run = sum(c.runnable for c in cells)
    msg = (f"{len(cells)} cells ({n_run} to run, {len(cells) - n_run} skipped); "
           f"{'resuming: ' + str(len(reused)) + ' finished earlier, ' if resumed else ''}"
           f"{len(todo)} left, predicted {predicted / 60:.1f} min; results in {out}")
    show({"event": "start", "message": msg})
    envs = {**trial_env(cluster), **(env or {})}
    t0 = time.monotonic()
    done_pred = done_real = 0.0
    ran: list[str] = []
    order = [c for c in cells if c.runnable]
    for i, c in enumerate(order, 1):
        if c.id in results:
            continue
        attempts = state.attempts.get(c.id, 0)
        run_dir = sd.run_dir(c.id)
        reap_stale(run_dir)  # a trial left running by a killed gpuadvisor
        if attempts >= MAX_ATTEMPTS:
            rec = _failed_record(c, name, f"interrupted {attempts} times (gpuadvisor stopped during the cell); "
                                          f"delete {sd.cells_dir / (c.id + '.json')} or the folder to retry")
            results[c.id] = sd.save_result(c, rec, attempts)
            continue
        state = state.model_copy(update={"attempts": {**state.attempts, c.id: attempts + 1}})
        sd.save(state)
        remaining = [x for x in todo if x.id not in results]
        scale = done_real / done_pred if done_pred > 0 else 1.0
        eta = study_wall_s(remaining, spec.steps, spec.warmup) * scale
        show({"event": "cell", "n": i, "total": len(order), "label": c.label, "elapsed_s": time.monotonic() - t0,
              "eta_s": eta})
        if run_dir.exists() and attempts:
            shutil.rmtree(run_dir, ignore_errors=True)  # partial files of the interrupted attempt
        from ..launch.build import make_job

        # DeepSpeed's one-time op build, as a step (only plans the bundled trainer runs on DeepSpeed)
        if c.plan is not None and runs_on_deepspeed(c.plan) and trainer_module == "gpuadvisor.trainers":
            from ..trials.opbuild import ensure_ops

            ensure_ops({**os.environ, **envs}, progress=lambda m: show({"event": "note", "message": m}))
        job = make_job(c.plan, workloads[c.model], steps=spec.steps, warmup=spec.warmup)  # type: ignore[arg-type]
        start = time.monotonic()
        rec = run_trial(job, run_dir, timeout_s=_timeout(c, spec, trial_timeout_s), nproc=c.plan.devices_per_node,  # type: ignore[union-attr]
                        trainer_module=trainer_module, env=envs, trial_id=f"{c.id}-{int(time.time())}", study=name,
                        grace_s=grace_s, estimate=c.predicted, launcher=launcher)
        results[c.id] = sd.save_result(c, rec, attempts + 1)
        ran.append(c.id)
        done_real += time.monotonic() - start
        done_pred += cell_wall_s(c, spec.steps, spec.warmup) or 0.0
        show({"event": "result", "n": i, "total": len(order), "label": c.label, "status": rec.status,
              "tokens_per_s": rec.measured_tokens_per_s, "error": rec.error, "duration_s": rec.duration_s})
        rows = build_rows(cells, results, workloads, spec.steps, run_dirs)
        write_results(out, rows, meta)
    rows = build_rows(cells, results, workloads, spec.steps, run_dirs)
    write_results(out, rows, meta)
    files = ["results.csv", "results.json"]
    if plots:
        from .report import write_report

        files += write_report(out, rows, meta)
    where = f"report {out / 'report.md'}" if "report.md" in files else f"results {out / 'results.csv'}"
    show({"event": "done", "message": f"study done in {time.monotonic() - t0:.0f}s: "
                                      f"{sum(r.status == 'ok' for r in rows)} ok of {len(rows)} cells; {where}"})
    return StudyOutcome(out_dir=str(out), cells=cells, rows=rows, predicted_wall_s=predicted, resumed=resumed,
                        ran=ran, reused=reused, files=files)


def dump_grid(cells: list[Cell]) -> str:
    """The grid as JSON (for --dry-run --json)."""
    return json.dumps([c.model_dump(mode="json", exclude={"predicted"}) | {
        "predicted_tokens_per_s": c.predicted.tokens_per_s if c.predicted else None,
        "predicted_peak_memory_bytes": c.predicted.memory.total if c.predicted else None} for c in cells], indent=1)


def check_host(cluster: Cluster) -> list[str]:
    """Notes when the cluster describes other hardware than this host (trials run here)."""
    why = host_mismatch(cluster, "use --dry-run to plan it")
    return [why] if why else []


__all__ = ["StudyOutcome", "run_study", "plan_study", "resolve_workloads", "dump_grid", "check_host"]
