"""`suggest --emit DIR --rank N / --plan SPEC / --force`, and launch.sh's exit status when a rank fails."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuadvisor.cli import main

ARGS = ["suggest", "--model", "10M", "--preset", "cpu-2ranks", "--global-batch", "4", "--seq-len", "32",
        "--steps", "2"]


def _plan(folder) -> str:
    return json.loads((folder / "job.json").read_text())["plan"]


def test_emit_rank_and_plan(tmp_path, capsys):
    assert main([*ARGS, "--emit", str(tmp_path / "a"), "--rank", "2", "--json"]) == 0
    ranking = json.loads(capsys.readouterr().out)["ranking"]["top"]
    assert _plan(tmp_path / "a") == ranking[1]["plan"]
    assert main([*ARGS, "--emit", str(tmp_path / "b"), "--plan", "dp=2,mb=1,m=2"]) == 0
    job = json.loads((tmp_path / "b" / "job.json").read_text())
    assert job["plan"]["num_micro_batches"] == 2 and job["predicted"]["tokens_per_s"] > 0
    assert f"--steps {job['steps']} " in (tmp_path / "b" / "launch.sh").read_text()


@pytest.mark.parametrize("extra,msg", [
    (["--rank", "99", "--emit", "X"], "only"), (["--rank", "0", "--emit", "X"], "out of range"),
    (["--plan", "dp=3,mb=1"], "add --emit"), (["--plan", "", "--emit", "X"], "empty"),
    (["--plan", "dp=2,mb=4", "--emit", "X"], "global batch")])
def test_emit_choice_errors(tmp_path, capsys, extra, msg):
    extra = [str(tmp_path / "x") if a == "X" else a for a in extra]
    assert main([*ARGS, *extra]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_emit_force(tmp_path, capsys):
    out = tmp_path / "o"
    assert main([*ARGS, "--emit", str(out)]) == 0
    (out / "env.sh").write_text((out / "env.sh").read_text() + "export MINE=1\n")
    assert main([*ARGS, "--emit", str(out)]) == 2
    assert "was edited since gpuadvisor wrote it" in capsys.readouterr().err
    assert main([*ARGS, "--emit", str(out), "--force"]) == 0
    assert "MINE" not in (out / "env.sh").read_text()


@pytest.mark.slow
def test_launch_sh_runs_and_fails_loudly(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    assert main([*ARGS, "--emit", str(out), "--plan", "dp=2,mb=2"]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    ok = subprocess.run(["bash", str(out / "launch.sh")], env=env, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "step 20/20" in ok.stdout and "summary: plan" in ok.stdout and "(predicted" in ok.stdout
    job = json.loads((out / "job.json").read_text())
    job["workload"]["training"]["global_batch"] = 999  # every rank refuses the job
    (out / "job.json").write_text(json.dumps(job))
    bad = subprocess.run(["bash", str(out / "launch.sh")], env=env, capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0
