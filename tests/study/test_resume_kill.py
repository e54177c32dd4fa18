"""kill -9 a real study after its first cell finished (the second one running), rerun it: the finished cell is
not recomputed (same run id, same files), the interrupted one is run again, nothing is lost, nothing survives."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TINY = "L2-H32-A4-V256-S16"


def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "gpuadvisor", "study", "--models", TINY, "--strategies", "dp", "--gpus", "1,2",
            "--preset", "cpu-2ranks", "--steps", "3", "--warmup", "1", "--global-batch", "8", "--out", str(out),
            "--no-plots"]


def _procs_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (every trial process names its run folder)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state not in ("Z", "X"):
            out.append(int(pid))
    return out


def _wait_for(pred, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_kill_9_then_resume(tmp_path):
    out = tmp_path / "study"
    first_id, second_id = f"{TINY}__single__1", f"{TINY}__dp__2"
    proc = subprocess.Popen(_cmd(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: (out / "cells" / f"{first_id}.json").exists() or proc.poll() is not None, 600,
                  "the first cell")
        _wait_for(lambda: (out / "runs" / second_id / "job.json").exists() or proc.poll() is not None, 120,
                  "the second cell to start")
        assert proc.poll() is None, "the study finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # the trial's watchdog notices its advisor died and stops every process of the trial
    _wait_for(lambda: not _procs_mentioning(str(out / "runs")), 60, "the orphaned trial to be stopped")
    assert not (out / "cells" / f"{second_id}.json").exists()
    first_result = out / "cells" / f"{first_id}.json"
    before = {"cell": first_result.stat().st_mtime_ns,
              "metrics": (out / "runs" / first_id / "metrics.json").stat().st_mtime_ns,
              "trial_id": json.loads(first_result.read_text())["record"]["trial_id"]}

    r = subprocess.run(_cmd(out), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming: 1 finished earlier" in r.stderr and "1 reused" in r.stdout
    after = {"cell": first_result.stat().st_mtime_ns,
             "metrics": (out / "runs" / first_id / "metrics.json").stat().st_mtime_ns,
             "trial_id": json.loads(first_result.read_text())["record"]["trial_id"]}
    assert after == before  # not recomputed
    rows = {r["strategy"]: r for r in csv.DictReader((out / "results.csv").open())}
    assert rows["single"]["status"] == rows["dp"]["status"] == "ok"  # nothing lost
    assert rows["single"]["trial_id"] == before["trial_id"]
    state = json.loads((out / "study.json").read_text())
    assert state["attempts"] == {first_id: 1, second_id: 2}
    assert float(rows["dp"]["efficiency_pct"]) > 0
