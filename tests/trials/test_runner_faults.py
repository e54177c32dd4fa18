"""Fault injection: every failure kind is classified and no process of a trial survives."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gpuadvisor.schemas import TrialRecord
from gpuadvisor.trials.classify import classify
from gpuadvisor.trials.runner import run_trial

from .conftest import MARK, fake, job_for, marked_pids, session_pids


def _run(tmp_path, workload, mark, mode, *, launcher="torchrun", timeout_s=40.0, mb=2, nproc=2):
    job = job_for(workload, dp=nproc, mb=mb)
    return run_trial(job, tmp_path / mode, timeout_s=timeout_s, nproc=nproc, trainer_module=fake(mode),
                     env={MARK: mark}, grace_s=1.0, launcher=launcher), tmp_path / mode


def _no_leftovers(out: Path, mark: str) -> None:
    """Nothing of the trial runs: neither the guard's session nor anything with the trial's env."""
    g = json.loads((out / "guard.json").read_text())
    assert not session_pids(g["sid"]), "processes left in the trial session"
    assert not marked_pids(mark), "processes left with the trial's environment"
    assert g["survivors"] == []


def test_ok_under_torchrun(tmp_path, workload, mark):
    rec, out = _run(tmp_path, workload, mark, "ok")
    assert rec.status == "ok", rec.error
    assert rec.measured_tokens_per_s and rec.measured_tokens_per_s > 0
    assert TrialRecord.model_validate_json((out / "record.json").read_text()) == rec
    assert len(rec.metrics.ranks) == 2
    _no_leftovers(out, mark)


def test_hang_is_timeout_and_killed(tmp_path, workload, mark):
    # rank 1 ignores SIGTERM: only the SIGKILL sweep can stop it (torchrun workers have their own sessions)
    t0 = time.monotonic()
    rec, out = _run(tmp_path, workload, mark, "hang", timeout_s=6.0)
    assert rec.status == "timeout"
    assert time.monotonic() - t0 < 30
    _no_leftovers(out, mark)


def test_oom_above_micro_batch(tmp_path, workload, mark):
    rec, out = _run(tmp_path, workload, mark, "oom", mb=4, launcher="local")
    assert rec.status == "oom" and "out of memory" in rec.error
    assert rec.error_file and Path(rec.error_file).name.startswith("error-rank")
    rec_small, _ = _run(tmp_path / "small", workload, mark, "oom", mb=1, launcher="local")
    assert rec_small.status == "ok"


def test_one_rank_crashes(tmp_path, workload, mark):
    rec, out = _run(tmp_path, workload, mark, "crash")
    assert rec.status == "crash"
    assert rec.error_file == str(out / "error-rank1.json")
    assert "fake failure" in rec.error
    _no_leftovers(out, mark)


def test_a_rank_dying_in_teardown_after_valid_metrics_keeps_the_measurement(tmp_path, workload, mark):
    """Every rank ran and rank 0 wrote metrics.json; then a rank aborted at exit ("terminate called without an
    active exception", seen once from a gloo rank of the bundled trainer): the plan measured, it is no crash."""
    rec, out = _run(tmp_path, workload, mark, "teardown")
    assert rec.status == "ok", rec.error
    assert rec.measured_tokens_per_s and rec.measured_tokens_per_s > 0
    assert "in teardown: terminate called without an active exception" in rec.error
    _no_leftovers(out, mark)
    # without valid metrics the same exit is a crash, and its message is the telling line, not torchrun's rules
    (out / "metrics.json").unlink()
    o = classify(out, rec_job(workload), 1, "exited", "terminate called without an active exception\n"
                 "=======================================================\n")
    assert o.status == "crash" and o.error.endswith("terminate called without an active exception")


def rec_job(workload):
    return job_for(workload, dp=2, mb=2)


def test_nan_metrics_are_invalid(tmp_path, workload, mark):
    rec, _ = _run(tmp_path, workload, mark, "nan", launcher="local")
    assert rec.status == "invalid_metrics" and "non-finite" in rec.error
    assert rec.measured_tokens_per_s is None


def test_too_few_steps_and_missing_metrics(tmp_path, workload):
    job = job_for(workload, dp=1, mb=2, steps=5)
    out = tmp_path / "x"
    out.mkdir()
    assert classify(out, job, 0, "exited", "").status == "invalid_metrics"  # no metrics file
    rec = run_trial(job, tmp_path / "ok", timeout_s=30, nproc=1, trainer_module=fake("ok"), launcher="local")
    good = json.loads((tmp_path / "ok" / "metrics.json").read_text())
    good["ranks"][0]["step_times_s"] = good["ranks"][0]["step_times_s"][:3]
    (out / "metrics.json").write_text(json.dumps(good))
    o = classify(out, job, 0, "exited", "")
    assert rec.status == "ok" and o.status == "invalid_metrics" and "fewer than 5" in o.error


def test_rendezvous_classified(tmp_path, workload):
    job = job_for(workload)
    stderr = ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d "
              "store has failed.\ntorch.distributed.DistNetworkError: The server socket has failed to listen on "
              "any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, "
              "message: address already in use")
    o = classify(tmp_path, job, 1, "exited", stderr)
    assert o.status == "rendezvous" and "rendezvous failed" in o.error
    assert classify(tmp_path, job, 1, "exited", "CUDA out of memory. Tried to allocate").status == "oom"


def test_keyboard_interrupt_stops_everything(tmp_path, workload, mark):
    """Ctrl-C in the advisor: SIGTERM -> grace -> SIGKILL, nothing survives, the interrupt propagates."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from tests.trials.conftest import job_for, fake
        from gpuadvisor.schemas import ModelSpec, TrainingSettings, Workload
        from gpuadvisor.trials.runner import run_trial
        wl = Workload.model_validate_json({workload.model_dump_json()!r})
        try:
            run_trial(job_for(wl), {str(tmp_path / 'int')!r}, timeout_s=120, nproc=2,
                      trainer_module=fake('hang'), grace_s=1.0, launcher='local')
        except KeyboardInterrupt:
            print('INTERRUPTED')
    """)
    p = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, MARK: mark}, stdout=subprocess.PIPE,
                         text=True)
    deadline = time.monotonic() + 20
    while len(marked_pids(mark) - {p.pid}) < 4 and time.monotonic() < deadline:  # guard, launcher, 2 ranks
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert "INTERRUPTED" in out
    assert not marked_pids(mark)
    assert not (tmp_path / "int" / "record.json").exists()
