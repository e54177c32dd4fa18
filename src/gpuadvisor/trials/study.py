"""`confirm`: an Optuna study that runs the cost model's top plans for real, then explores around them.

Flow: build the space (feasible candidates + estimates) -> open or resume the study (refusing a
fingerprint mismatch) -> fail stale trials of a crashed advisor and retry each once -> while budget
remains: ask for a plan (enqueued seeds first, then `PlanSampler`), run it with `run_trial`, store
the record and measurement rows, tell Optuna -> summarise predicted vs measured.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, cast

from ..launch.build import job_zero_impl
from ..launch.deepspeed import runs_on_deepspeed
from .. import __version__
from ..errors import UserError
from ..launch.build import TRAINER_MODULE
from ..paths import user_data_dir
from ..schemas import Cluster, TrainerJob, Workload
from .atomic import write_atomic
from .fingerprint import cluster_digest
from .progress import ProgressArg, make_progress
from .multinode import run_trial_on_cluster
from .runner import Launcher, TrialCancelled, reap_stale
from .schemas import ConfirmResult, TrialRow
from .hostcheck import refuse_unmeasurable, require_host, require_modules, trainer_modules
from .lock import StudyLock
from .space import (BUDGET, DefaultPlanner, PlanSampler, Planner, SearchSpace, blocked_plans, choose_next,
                    trial_status)
from .storage import GRACE_S
from .store import MeasurementStore, rows_from_trial
from .procs import alive, stat

MIN_TRIAL_S = 5.0
TRAINER = TRAINER_MODULE  # the bundled trainers: they need this host to match the cluster
MAX_BUDGET_S = 30 * 86400.0
LAUNCH_OVERHEAD_S = 10.0  # start of the launcher and ranks before the first step, when no trial measured it
METRIC = "tokens_per_s"  # the objective's name in Optuna (dashboard axis label)


def default_study_name(cluster: Cluster, workload: Workload, fingerprint: str) -> str:
    """A readable, stable study name: <model>-<cluster>-<8 hex of the fingerprint>, e.g. gpt-10m-cpu-2ranks-56e337e6.

    The fingerprint part keeps different settings apart; the same settings give the same name, so a rerun resumes.
    """
    def slug(text: str) -> str:
        return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")[:40].strip("-.")

    model = re.sub(r"\s*\(.*?\)", "", workload.model.name)  # 'gpt-10m (10M)' -> 'gpt-10m'
    return "-".join(x for x in (slug(model), slug(cluster.name), fingerprint[:8]) if x)


def _h(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def fingerprint_parts(cluster: Cluster, workload: Workload, space: SearchSpace, steps: int, warmup: int) -> dict:
    """Hashes of what a study's results depend on: hardware, workload, search space, version."""
    return {"hardware": cluster_digest(cluster), "workload": _h(workload.model_dump(mode="json")),
            "search space": space.fingerprint(steps, warmup), "gpuadvisor version": __version__}


def _open_study(name: str, storage: Any, sampler: PlanSampler, parts: dict, fp: str, masked: str):
    """Create the study, or resume it after checking its fingerprint (mismatch: one-line UserError)."""
    import optuna

    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="maximize",
                                load_if_exists=True)
    if study.metric_names is None:  # optuna-dashboard labels the objective axis with it
        study.set_metric_names([METRIC])
    attrs = study.user_attrs
    if "fingerprint" not in attrs:
        if study.trials:
            raise UserError(f"study '{name}' in {masked} was not made by gpuadvisor confirm; pick another "
                            "--study-name")
        study.set_user_attr("fingerprint", fp)
        study.set_user_attr("fingerprint_parts", parts)
        study.set_user_attr("elapsed_s", 0.0)
        return study, False
    if attrs["fingerprint"] != fp:
        old = attrs.get("fingerprint_parts", {})
        diff = [k for k in parts if old.get(k) != parts[k]] or ["fingerprint"]
        raise UserError(f"study '{name}' was made for a different {', '.join(diff)}; refusing to resume it "
                        f"(pick a new --study-name, or rerun with the original settings)")
    return study, True


def _finish_from_record(study: Any, storage: Any, t: Any, finish: Any) -> bool:
    """Complete a RUNNING trial whose advisor died after writing its record (the commit point): its
    measurement rows are appended (idempotent by id) and Optuna is told the recorded outcome, so the
    trial is neither lost nor run (and counted) a second time. False when there is no record."""
    from optuna.trial import TrialState

    from ..schemas import TrialRecord

    out_dir, trial_id = t.user_attrs.get("out_dir"), t.user_attrs.get("trial_id")
    if not out_dir or not trial_id or finish is None:
        return False
    try:
        rec = TrialRecord.model_validate_json((Path(out_dir).parent / "results" / f"{trial_id}.json").read_text())
    except (OSError, ValueError):
        return False
    finish(rec, t.user_attrs.get("plan"))
    for k, v in {"status": rec.status, "error": rec.error, "error_file": rec.error_file,
                 "duration_s": rec.duration_s, "measured_peak_memory_bytes": rec.measured_peak_memory_bytes,
                 "status_note": "finished from its record after gpuadvisor stopped"}.items():
        if v is not None:
            storage.set_trial_user_attr(t._trial_id, k, v)
    if rec.status == "ok" and rec.measured_tokens_per_s:
        storage.set_trial_state_values(t._trial_id, state=TrialState.COMPLETE, values=[rec.measured_tokens_per_s])
    else:
        storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
    return True


def _orphan(t: Any, local_only: bool) -> bool:
    """A RUNNING trial that no worker ever claimed (its advisor died between ask and naming itself).

    With a local storage (SQLite) every worker is on this host and we hold the study's lock, so such a
    trial is dead; with a shared database it is dead once older than the heartbeat grace period.
    """
    if t.user_attrs.get("worker"):
        return False
    if local_only:
        return True
    start = t.datetime_start
    return start is not None and (datetime.datetime.now() - start).total_seconds() > GRACE_S


def _recover_stale(study: Any, storage: Any, finish: Any = None, local_only: bool = False) -> list[int]:
    """Fail RUNNING trials whose advisor died (same host, dead pid; or heartbeat stale) and retry each once.

    A dead trial that had already written its record is completed from it instead (`finish(record, plan)`
    appends its measurement rows); one that was never claimed by a worker is failed (see `_orphan`).
    """
    import optuna
    from optuna.trial import TrialState

    host = socket.gethostname()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        w = t.user_attrs.get("worker") or {}
        mine_dead = w.get("host") == host and not alive(int(w.get("pid", 0)), w.get("pid_start"))
        if not (mine_dead or _orphan(t, local_only)):
            continue
        if t.user_attrs.get("out_dir"):
            reap_stale(t.user_attrs["out_dir"])
        try:
            if _finish_from_record(study, storage, t, finish):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        try:
            storage.set_trial_user_attr(t._trial_id, "status_note", "stale: gpuadvisor stopped during the trial")
            storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker failed it first
            continue
        failed.append(t.number)
        cb = storage.get_heartbeat_stale_trial_callback()
        if cb is not None:
            cb(study, storage.get_trial(t._trial_id))
    optuna.storages.fail_stale_trials(study)  # other hosts: heartbeat older than the grace period
    return failed


class _Heartbeat:
    """Record the trial's heartbeat while it runs (other workers fail it when this stops)."""

    def __init__(self, storage: Any, trial_id: int):
        self.storage, self.trial_id, self.stop = storage, trial_id, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        interval = self.storage.get_heartbeat_interval() or 10
        while not self.stop.is_set():
            try:
                self.storage.record_heartbeat(self.trial_id)
            except Exception:  # a transient DB error must not kill the trial
                pass
            self.stop.wait(interval)

    def __enter__(self) -> "_Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def _add_elapsed(study: Any, seconds: float) -> float:
    """Add to the study's elapsed time (counts across restarts) and return the total."""
    total = float(study.user_attrs.get("elapsed_s", 0.0)) + seconds
    study.set_user_attr("elapsed_s", round(total, 3))
    return total


def _expected_s(study: Any, est: Any, steps: int, warmup: int) -> float:
    """How long the next trial will likely take: the median of this study's finished trials, else the prediction."""
    done = sorted(float(t.user_attrs["duration_s"]) for t in study.get_trials(deepcopy=False)
                  if trial_status(t) == "ok" and t.user_attrs.get("duration_s"))
    if done:
        return max(MIN_TRIAL_S, done[len(done) // 2])
    return max(MIN_TRIAL_S, LAUNCH_OVERHEAD_S + est.step_time_s * (steps + warmup))


def _storage_key(masked: str) -> str:
    """A short name for a storage, so each storage's studies get their own trial folders."""
    return "storage-" + _h(masked)[:10]


def check_confirm_args(top_k: Any, budget_s: Any, steps: Any, warmup: Any) -> None:
    """One-line UserError for a confirm setting that cannot work (NaN/inf/negative budget, 0 steps...)."""
    import math

    for name, v, lo in (("top_k", top_k, 1), ("steps", steps, 1), ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise UserError(f"confirm: {name} must be a whole number >= {lo}, got {v!r}")
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not math.isfinite(budget_s) \
            or not 0 < budget_s <= MAX_BUDGET_S:
        raise UserError(f"confirm: budget_s must be a finite number of seconds > 0 and <= {MAX_BUDGET_S:.0f} "
                        f"(30 days), got {budget_s!r}; e.g. 900 for 15 minutes")


def _trial_timeout(est: Any, steps: int, warmup: int, override: Optional[float]) -> float:
    """Per-trial deadline: launch overhead plus a generous multiple of the predicted run time."""
    if override:
        return override
    return 120.0 + 5.0 * est.step_time_s * (steps + warmup)


def _rows(study: Any, space: SearchSpace) -> list[TrialRow]:
    """The result table from the stored trials."""
    out = []
    for t in study.get_trials(deepcopy=False):
        key = t.user_attrs.get("plan") or space.plan_for(t.params)
        if key is None or key not in space.estimates:
            continue
        if t.user_attrs.get("not_started"):
            continue
        est = space.estimates[key]
        meas = t.value if trial_status(t) == "ok" else None
        out.append(TrialRow(
            number=t.number, trial_id=t.user_attrs.get("trial_id", f"t{t.number:04d}"), plan=est.plan, plan_str=key,
            status=trial_status(t), seed_rank=space.seeds.index(key) if key in space.seeds else None,
            predicted_tokens_per_s=est.tokens_per_s, measured_tokens_per_s=meas,
            measured_over_predicted=(meas / est.tokens_per_s) if meas and est.tokens_per_s else None,
            predicted_peak_memory_bytes=est.memory.total,
            measured_peak_memory_bytes=t.user_attrs.get("measured_peak_memory_bytes"),
            error=t.user_attrs.get("error") or t.user_attrs.get("status_note"), error_file=t.user_attrs.get("error_file"),
            duration_s=float(t.user_attrs.get("duration_s", 0.0)), retry_of=t.system_attrs.get("failed_trial")))
    return out


def _summary(study: Any, space: SearchSpace, name: str, masked: str, fp: str, budget_s: float,
             exhausted: bool, notes: list[str]) -> ConfirmResult:
    """Build the ConfirmResult: winner, first pick and its gap to the measured best."""
    rows = _rows(study, space)
    ok = [r for r in rows if r.status == "ok"]
    best = max(ok, key=lambda r: r.measured_tokens_per_s or 0.0) if ok else None
    first = space.seeds[0] if space.seeds else None
    first_meas = next((r.measured_tokens_per_s for r in ok if r.plan_str == first), None)
    gap = None
    if best and first_meas:
        best_meas = best.measured_tokens_per_s or 0.0  # ok rows are measured
        gap = round(100.0 * (best_meas - first_meas) / best_meas, 3)
    elif first and best:
        notes.append("the cost model's first pick did not produce valid metrics")
    return ConfirmResult(
        study_name=name, storage=masked, fingerprint=fp, trials=rows, winner=best.plan if best else None,
        winner_estimate=space.estimates[best.plan_str] if best else None,
        winner_measured_tokens_per_s=best.measured_tokens_per_s if best else None,
        first_pick=space.estimates[first].plan if first else None, first_pick_measured_tokens_per_s=first_meas,
        first_pick_gap_pct=gap, elapsed_s=float(study.user_attrs.get("elapsed_s", 0.0)), budget_s=budget_s,
        exhausted=exhausted, notes=notes)


def _loop(study: Any, st: Any, space: SearchSpace, cluster: Cluster, workload: Workload, *, name: str, masked: str,
          base: Path, top_k: int, budget_s: float, steps: int, warmup: int, show: Any, notes: list[str],
          store: MeasurementStore, bundled: bool, trainer_module: str, trial_env: Optional[Mapping[str, str]],
          trial_timeout_s: Optional[float], grace_s: float, launcher: Launcher, cancel: Optional[threading.Event],
          max_trials: Optional[int]) -> bool:
    """Run trials while budget remains; returns True when the space is exhausted. Holds the study's lock."""
    import optuna

    me = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": getattr(stat(os.getpid()), "starttime", None)}
    show({"event": "start", "message": f"study '{name}' ({len(space.estimates)} feasible plans, top {top_k} first, "
                                       f"budget {budget_s:.0f}s, storage {masked})"})
    exhausted = False
    ran = 0
    while (max_trials is None or ran < max_trials) and not (cancel is not None and cancel.is_set()):
        elapsed = float(study.user_attrs.get("elapsed_s", 0.0))
        remaining = budget_s - elapsed
        trials = study.get_trials(deepcopy=False)
        waiting = any(t.state == optuna.trial.TrialState.WAITING for t in trials)
        if not waiting and choose_next(space, trials) is None:
            exhausted = True
            break
        if remaining < MIN_TRIAL_S:
            notes.append(f"the budget is spent ({elapsed:.0f}s of {budget_s:.0f}s); rerun with a larger --budget "
                         "to continue the study")
            break
        t0 = time.monotonic()
        trial = study.ask()
        dists = space.distributions()
        params = {f: trial.suggest_categorical(f, cast(optuna.distributions.CategoricalDistribution, dists[f]).choices)
                  for f in space.fields}
        key = space.plan_for(params)
        others = [t for t in study.get_trials(deepcopy=False) if t.number != trial.number]
        if key is None or key in blocked_plans(space, others):
            trial.set_user_attr("status", "skipped")
            trial.set_user_attr("plan", key)
            trial.set_user_attr("error", "not run: not a candidate, already tried, or ruled out by an earlier OOM")
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # not run, so not a failure
            continue
        est = space.estimates[key]
        need = _expected_s(study, est, steps, warmup)
        if need > remaining:  # would be cut by the budget: do not start it (and do not judge the plan)
            trial.set_user_attr("status", BUDGET)
            trial.set_user_attr("plan", key)
            trial.set_user_attr("not_started", True)
            trial.set_user_attr("error", f"not started: {remaining:.0f}s of budget left, the trial needs ~{need:.0f}s")
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # not run, so not a failure
            notes.append(f"stopped with {remaining:.0f}s of budget left: the next trial ({key}) needs ~{need:.0f}s; "
                         "rerun with a larger --budget to run it")
            break
        # DeepSpeed's one-time op build: a step of its own, not the trial's (pure-DP ZeRO only: hybrids are torch-native)
        if bundled and runs_on_deepspeed(est.plan):
            from .opbuild import ensure_ops

            ensure_ops({**os.environ, **(trial_env or {})},
                       progress=lambda msg: show({"event": "note", "message": msg}))
            t0 = time.monotonic()
        ran += 1
        trial_id = f"{name}-t{trial.number:04d}"
        out_dir = base / f"t{trial.number:04d}"
        for k, v in {"plan": key, "trial_id": trial_id, "worker": me, "out_dir": str(out_dir),
                     "predicted_tokens_per_s": est.tokens_per_s}.items():
            trial.set_user_attr(k, v)
        seed_rank = trial.user_attrs.get("seed_rank") if hasattr(trial, "user_attrs") else None
        best = study.best_value if any(trial_status(t) == "ok" for t in others) else None
        show({"event": "trial", "n": trial.number + 1, "plan": key, "seed_rank": seed_rank, "top_k": top_k,
              "elapsed_s": elapsed, "budget_s": budget_s, "best_tokens_per_s": best})
        job = TrainerJob(plan=est.plan, workload=workload, steps=steps, warmup=warmup,
                         trainer_model="resnet18" if "resnet" in workload.model.name.lower() else "gpt",
                         zero_impl=job_zero_impl(est.plan, workload))  # as handed over
        natural = _trial_timeout(est, steps, warmup, trial_timeout_s)
        timeout = min(natural, max(MIN_TRIAL_S, remaining))
        try:
            with _Heartbeat(st, trial._trial_id):
                rec = run_trial_on_cluster(job, cluster, out_dir, timeout_s=timeout, trainer_module=trainer_module,
                                           env=trial_env, trial_id=trial_id, study=name, grace_s=grace_s,
                                           estimate=est, launcher=launcher, cancel=cancel)
        except (KeyboardInterrupt, TrialCancelled) as exc:
            trial.set_user_attr("status_note", "stale: interrupted")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            cb = st.get_heartbeat_stale_trial_callback()
            if cb is not None:
                cb(study, study.get_trials(deepcopy=False)[trial.number])
            _add_elapsed(study, time.monotonic() - t0)
            if isinstance(exc, TrialCancelled):
                notes.append(f"cancelled during trial {trial.number}; it is retried once when the study resumes")
                break
            raise
        if rec.status == "timeout" and timeout < natural:  # the budget stopped it, not the plan
            why = (f"stopped by the study's budget after {timeout:.0f}s (not a verdict on the plan: it runs again "
                   "when the study resumes with budget left)")
            rec = rec.model_copy(update={"status": BUDGET, "error": why})
        write_atomic(base / "results" / f"{trial_id}.json", rec.model_dump_json(indent=1))
        for row in rows_from_trial(rec, cluster, workload, est):
            store.append(row)
        for k, v in {"status": rec.status, "error": rec.error, "error_file": rec.error_file,
                     "duration_s": rec.duration_s, "measured_peak_memory_bytes": rec.measured_peak_memory_bytes}.items():
            if v is not None:
                trial.set_user_attr(k, v)
        if rec.status == "ok":
            study.tell(trial, rec.measured_tokens_per_s)
        elif rec.status == BUDGET:  # stopped early by the budget (Optuna's "pruned"), not a failed run
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        total = _add_elapsed(study, time.monotonic() - t0)
        best = study.best_value if rec.status == "ok" or best else best
        show({"event": "result", "n": trial.number + 1, "plan": key, "status": rec.status,
              "measured": rec.measured_tokens_per_s, "predicted": est.tokens_per_s, "best_tokens_per_s": best,
              "elapsed_s": total, "budget_s": budget_s})
    return exhausted


def confirm(cluster: Cluster, workload: Workload, *, top_k: int = 3, budget_s: float = 900.0, steps: int = 20,
            warmup: int = 3, storage: Optional[str] = None, study_name: Optional[str] = None,
            trainer_module: str = "gpuadvisor.trainers", progress: ProgressArg = None,
            planner: Optional[Planner] = None, correction: Any = None, trial_timeout_s: Optional[float] = None,
            trial_env: Optional[Mapping[str, str]] = None, launcher: Launcher = "torchrun", grace_s: float = 5.0,
            store_path: Optional[str] = None, work_dir: Optional[str] = None, seed: int = 0,
            max_trials: Optional[int] = None, cancel: Optional[threading.Event] = None) -> ConfirmResult:
    """Confirm the cost model's top plans with short real runs; return predicted vs measured and the winner.

    The study is seeded with the cost model's `top_k` plans (enqueued), then explores plans near the best
    measured ones while `budget_s` (counted across restarts) remains. Every plan runs at most once; an OOM
    rules out the plan and larger micro-batches of its layout. `storage` is None (SQLite file
    <user data>/studies.db, this process the only writer), a SQLite path, or postgresql://... for several
    workers. Setting `cancel` (a threading.Event, e.g. from a UI) stops the running trial's processes
    and returns the results so far; the stopped trial is failed and retried once by a later run. The study
    name defaults to <model>-<cluster>-<fingerprint> (the fingerprint covers cluster, workload, search space
    and gpuadvisor version), so rerunning the same command resumes it; resuming a named study with a
    different fingerprint is refused. After a crash of gpuadvisor, its unfinished trials are failed and retried
    once. `max_trials` caps the trials run by this call. `planner`, `trial_env`, `launcher` and `trainer_module`
    let tests use fake cost models and trainers.

    Before any trial: the settings are checked (finite budget...), and with the bundled trainers the workload
    must not be fp8 nor assume cuDNN attention (they have neither: `refuse_unmeasurable`), this host must match
    the cluster and
    torch/DeepSpeed must be importable (one-line UserError otherwise). A second
    run of the same study on this host is refused while one runs (lock file). A trial that would not fit
    in the remaining budget is not started; one cut by the budget is recorded as 'budget' and rerun later.
    Trial folders live under <user data>/trials/<storage>/<study>, so two storages never share them.
    """
    check_confirm_args(top_k, budget_s, steps, warmup)
    bundled = trainer_module == TRAINER
    if bundled:  # the real trainers measure this host: it must be the hardware the plans are for
        refuse_unmeasurable(workload.training.precision, workload.training.attention_kernel, "confirm",
                            workload.core_kernel, workload.training.kernels)
        require_host(cluster)
    show = make_progress(progress)
    planner = planner or DefaultPlanner(cluster, workload, correction)
    space = SearchSpace(planner.estimates(), planner.top(top_k), workload)
    if bundled:
        require_modules(trainer_modules(e.plan for e in space.estimates.values()), "confirm (the bundled trainers)")
    parts = fingerprint_parts(cluster, workload, space, steps, warmup)
    fp = _h(parts)[:16]
    name = study_name or default_study_name(cluster, workload, fp)
    from .storage import open_storage

    st, masked = open_storage(storage)
    sampler = PlanSampler(space, seed=seed)
    study, resumed = _open_study(name, st, sampler, parts, fp, masked)
    if not resumed:
        for i, seed_key in enumerate(space.seeds):
            study.enqueue_trial(space.param_dict(space.estimates[seed_key].plan), user_attrs={"seed_rank": i},
                                skip_if_exists=True)
    base = Path(work_dir) if work_dir else user_data_dir() / "trials" / _storage_key(masked) / name
    with StudyLock(base / "run.lock", f"study '{name}' in {masked}"):
        store = MeasurementStore(store_path)

        def finish(rec: Any, key: Optional[str]) -> None:
            est = space.estimates.get(key) if key else None
            for row in rows_from_trial(rec, cluster, workload, est):
                store.append(row)

        stale = _recover_stale(study, st, finish, local_only=masked.startswith("sqlite"))
        notes = [f"resumed study '{name}'"] if resumed else []
        if stale:
            notes.append(f"trials {stale} were left unfinished by a stopped gpuadvisor; each is retried once")
        exhausted = _loop(study, st, space, cluster, workload, name=name, masked=masked, base=base, top_k=top_k,
                          budget_s=budget_s, steps=steps, warmup=warmup, show=show, notes=notes,
                          store=store, bundled=bundled, trainer_module=trainer_module,
                          trial_env=trial_env, trial_timeout_s=trial_timeout_s, grace_s=grace_s, launcher=launcher,
                          cancel=cancel, max_trials=max_trials)
    result = _summary(study, space, name, masked, fp, budget_s, exhausted, notes).model_copy(
        update={"work_dir": str(base)})
    show({"event": "done", "message": (f"winner {result.winner.to_string()} at {result.winner_measured_tokens_per_s:,.0f} "
                                       f"tok/s" if result.winner else "no trial produced valid metrics")})
    return result
