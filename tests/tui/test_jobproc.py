"""The TUI's job process: results and errors come back, cancel and close kill a busy job at once, and the
child never outlives the TUI (not even one killed by SIGKILL)."""
from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuadvisor.trials.procs import alive
from gpuadvisor.tui.jobproc import JobCancelled, JobProcess

from .slowjob import spin

ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def _busy_in_background(proc: JobProcess) -> tuple[threading.Thread, list]:
    """Run spin() in the job process from a thread; the list receives what run() raised."""
    out: list = []

    def call() -> None:
        try:
            proc.run(spin)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test
            out.append(exc)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while proc.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the job has been sent and is spinning
    return t, out


def test_results_and_errors_come_back_and_the_child_stays_warm():
    proc = JobProcess()
    try:
        assert proc.run(operator.add, 2, 3) == 5
        pid = proc.pid
        assert proc.run(operator.mul, 4, 5) == 20 and proc.pid == pid  # the same warm child
        with pytest.raises(ValueError, match="invalid literal"):
            proc.run(int, "x")
        assert proc.pid == pid  # an error in a job does not cost the child
    finally:
        proc.close()
    assert _gone(pid)


def test_cancel_kills_a_busy_job_and_the_next_job_runs():
    proc = JobProcess()
    try:
        t, out = _busy_in_background(proc)
        pid = proc.pid
        t0 = time.monotonic()
        proc.cancel()
        t.join(5)
        assert not t.is_alive() and isinstance(out[0], JobCancelled)
        assert time.monotonic() - t0 < 2.0
        assert _gone(pid), "the cancelled job's process still runs (a core stays busy)"
        assert proc.run(operator.add, 1, 1) == 2  # a fresh child
        assert proc.pid != pid
    finally:
        proc.close()


def test_close_stops_a_busy_job_and_refuses_new_ones():
    proc = JobProcess()
    t, out = _busy_in_background(proc)
    pid = proc.pid
    proc.close()
    t.join(5)
    assert not t.is_alive() and isinstance(out[0], JobCancelled)
    assert _gone(pid)
    with pytest.raises(JobCancelled):
        proc.run(operator.add, 1, 1)


def test_the_child_exits_when_the_tui_is_killed(tmp_path):
    """SIGKILL of the TUI mid-job: its job process notices the lost parent and exits within a second."""
    pid_file = tmp_path / "child.pid"
    script = (
        "import sys, time, threading\n"
        "from gpuadvisor.tui.jobproc import JobProcess\n"
        "from tests.tui.slowjob import spin\n"
        "p = JobProcess()\n"
        "threading.Thread(target=p.run, args=(spin,), daemon=True).start()\n"
        "while p.pid is None: time.sleep(0.05)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    tui = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        child = int(pid_file.read_text())
        time.sleep(0.5)
        assert alive(child)
    finally:
        tui.send_signal(signal.SIGKILL)
        tui.wait(10)
    assert _gone(child, within_s=5.0), "the job process outlived the killed TUI"
