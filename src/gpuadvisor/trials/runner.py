"""Run one trial: the trainer under torchrun, inside a watchdog, classified and recorded atomically."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Literal, Mapping, Optional, Union

from ..schemas import Estimate, TrainerJob, TrialRecord
from .atomic import write_atomic
from .classify import classify
from .procs import kill_all, stat

Launcher = Literal["torchrun", "local"]
RECORD = "record.json"
HERE = Path(__file__).resolve().parent  # guard.py and locallaunch.py run as scripts: stdlib only, fast start
ACTIVE = "active.json"


def trainer_target(trainer_module: str) -> list[str]:
    """How the launcher names the trainer: `-m module`, or a script path for names ending in .py."""
    if trainer_module.endswith(".py") or os.sep in trainer_module:
        return [str(Path(trainer_module).resolve())]
    return ["-m", trainer_module]


def launcher_argv(job_file: Path, out_dir: Path, job: TrainerJob, *, nproc: int, trainer_module: str,
                  launcher: Launcher = "torchrun") -> list[str]:
    """The argument list of the launcher (no shell)."""
    trainer_args = ["--plan", str(job_file), "--steps", str(job.steps), "--warmup", str(job.warmup),
                    "--out", str(out_dir)]
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                "--max-restarts", "0", *trainer_target(trainer_module), *trainer_args]
    return [sys.executable, str(HERE / "locallaunch.py"), "--nproc", str(nproc), "--",
            sys.executable, *trainer_target(trainer_module), *trainer_args]


def prepare_trainer(job: TrainerJob, trainer_module: str, env: Mapping[str, str]) -> None:
    """Build DeepSpeed's JIT op once, before ranks start (two ranks building it at once abort).

    The build is not part of the trial's deadline (trials.opbuild: its own watchdog, stale-lock recovery);
    `confirm` runs it as a visible step before the first trial, so this is then a no-op.
    """
    if trainer_module != "gpuadvisor.trainers" or not job.plan.zero_stage:
        return
    from .opbuild import ensure_ops

    ensure_ops(env)


def _tail(path: Path, n: int = 20000) -> str:
    """The last n characters of a log file."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _stop_guard(guard: subprocess.Popen, token: str, grace_s: float) -> None:
    """Ask the guard to stop the trial (SIGTERM -> grace -> SIGKILL), then make sure nothing survives."""
    try:
        guard.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        guard.wait(timeout=grace_s + 10)
    except subprocess.TimeoutExpired:
        pass
    kill_all(token, sid=guard.pid, root=guard.pid)
    try:
        guard.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class TrialCancelled(Exception):
    """The trial was stopped because its `cancel` event was set; no process of it is left."""


def _wait_guard(guard: subprocess.Popen, timeout: float, cancel: Optional[threading.Event]) -> None:
    """Wait for the guard up to `timeout`; raise TrialCancelled as soon as `cancel` is set."""
    if cancel is None:
        guard.wait(timeout=timeout)
        return
    deadline = time.monotonic() + timeout
    while True:
        if cancel.is_set():
            raise TrialCancelled("trial cancelled")
        try:
            guard.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            return
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise


def run_trial(job: TrainerJob, out_dir: Union[str, Path], *, timeout_s: float, nproc: int,
              trainer_module: str = "gpuadvisor.trainers", env: Optional[Mapping[str, str]] = None,
              trial_id: Optional[str] = None, study: str = "", grace_s: float = 5.0,
              estimate: Optional[Estimate] = None, launcher: Launcher = "torchrun",
              cancel: Optional[threading.Event] = None) -> TrialRecord:
    """Run `job` once and return its classified TrialRecord (also written atomically to out_dir/record.json).

    The launcher runs under `gpuadvisor.trials.guard` in a new session with a wall-clock deadline of
    `timeout_s`. On the deadline or Ctrl-C the launcher gets SIGTERM, then after `grace_s` every
    process of the trial gets SIGKILL (session, descendants, env token); Ctrl-C is re-raised after.
    A trial is `ok` only when its metrics file validates; otherwise it is classified as oom,
    timeout, crash (with the rank's error file), rendezvous or invalid_metrics.

    `trainer_module` is a module run with `-m` (or a script path); tests pass fake trainers.
    `launcher="local"` starts the ranks directly (no torch import; for fast tests of nproc ranks).
    `cancel`, when set from another thread (a UI), stops the trial like Ctrl-C and raises TrialCancelled.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    trial_id = trial_id or out.name
    token = uuid.uuid4().hex
    job_file = write_atomic(out / "job.json", job.model_dump_json(indent=1))
    for stale in [*out.glob("error-rank*.json"), out / "metrics.json", out / RECORD, out / "guard.json"]:
        stale.unlink(missing_ok=True)
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    prepare_trainer(job, trainer_module, full_env)
    start = time.monotonic()
    argv = launcher_argv(job_file, out, job, nproc=nproc, trainer_module=trainer_module, launcher=launcher)
    remaining = max(1.0, timeout_s - (time.monotonic() - start))
    guard_argv = [sys.executable, str(HERE / "guard.py"), "--token", token, "--timeout", f"{remaining:.3f}",
                  "--grace", str(grace_s), "--status", str(out / "guard.json"), "--", *argv]
    with open(out / "stdout.log", "wb") as so, open(out / "stderr.log", "wb") as se:
        guard = subprocess.Popen(guard_argv, stdin=subprocess.PIPE, stdout=so, stderr=se, env=full_env,
                                 start_new_session=True, shell=False)
    st = stat(guard.pid)
    write_atomic(out / ACTIVE, json.dumps({"token": token, "guard_pid": guard.pid,
                                           "guard_start": st.starttime if st else None,
                                           "owner_pid": os.getpid(), "trial_id": trial_id}))
    try:
        try:
            _wait_guard(guard, remaining + grace_s + 30, cancel)
        except subprocess.TimeoutExpired:  # the guard itself is stuck: stop everything from here
            _stop_guard(guard, token, grace_s)
    except (KeyboardInterrupt, TrialCancelled):
        _stop_guard(guard, token, grace_s)
        (out / ACTIVE).unlink(missing_ok=True)
        raise
    finally:
        if guard.stdin:
            guard.stdin.close()
    survivors = kill_all(token, sid=guard.pid, root=guard.pid)
    try:
        gstatus = json.loads((out / "guard.json").read_text())
    except (OSError, ValueError):
        gstatus = {"reason": "timeout" if guard.returncode is None else "guard-failed",
                   "exit_code": guard.returncode}
    outcome = classify(out, job, gstatus.get("exit_code"), gstatus.get("reason", "exited"), _tail(out / "stderr.log"))
    error = outcome.error
    if survivors:
        error = f"{error or ''} (processes {sorted(survivors)} could not be stopped)".strip()
    metrics = outcome.metrics
    record = TrialRecord(
        trial_id=trial_id, study=study, plan=job.plan, status=outcome.status,  # type: ignore[arg-type]
        predicted_tokens_per_s=estimate.tokens_per_s if estimate else None,
        predicted_peak_memory_bytes=estimate.memory.total if estimate else None,
        measured_tokens_per_s=metrics.summary.throughput_tokens_per_s if metrics else None,
        measured_peak_memory_bytes=metrics.summary.peak_memory_bytes if metrics else None,
        error=error, error_file=outcome.error_file, duration_s=round(time.monotonic() - start, 3), metrics=metrics,
    )
    write_atomic(out / RECORD, record.model_dump_json(indent=1))
    (out / ACTIVE).unlink(missing_ok=True)
    return record


def reap_stale(out_dir: Union[str, Path]) -> bool:
    """Stop whatever is left of a trial whose advisor died (reads out_dir/active.json); True if it had one."""
    path = Path(out_dir) / ACTIVE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    gst = stat(int(info.get("guard_pid", 0))) if info.get("guard_pid") else None
    sid = info["guard_pid"] if gst and gst.starttime == info.get("guard_start") else None
    kill_all(str(info["token"]), sid=sid, root=sid)
    path.unlink(missing_ok=True)
    return True
