"""emit(): the files, a bash-valid launch.sh, atomic writes and refusing to clobber foreign files."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.launch import build_launch, emit, launch_steps, make_job, render_launch
from gpuadvisor.schemas import Plan, TrainerJob
from gpuadvisor.workload import make_workload

BASH = shutil.which("bash")


def _bash_ok(path) -> None:
    if BASH:
        out = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def test_emit_two_node_zero(tmp_path, two_nodes):
    wl = make_workload("gpt2", global_batch=8)
    plan = Plan(dp=4, zero_stage=2, micro_batch_size=1, num_micro_batches=2, nodes=2, devices_per_node=2)
    lc = build_launch(plan, two_nodes, wl, steps=5)
    paths = emit(lc, make_job(plan, wl, steps=5), tmp_path / "out")
    names = sorted(p.name for p in paths)
    assert names == ["README.txt", "accelerate.yaml", "ds_config.json", "env.sh", "hostfile", "job.json", "launch.sh",
                     "megatron_args.txt", "slurm.sbatch", "torchtitan.toml"]
    out = tmp_path / "out"
    script = (out / "launch.sh").read_text()
    _bash_ok(out / "launch.sh")
    _bash_ok(out / "env.sh")
    assert os.access(out / "launch.sh", os.X_OK)
    assert "set NODE_RANK to the index of this node" in script and "  0)" in script and "  1)" in script
    assert "export NCCL_SOCKET_IFNAME=eno1" in script
    assert "# n0 reaches the other nodes through the IP interface eno1" in script
    assert "exec torchrun --nnodes 2" in script and "--ds-config ds_config.json" in script
    assert "export NCCL_IB_DISABLE=1" in (out / "env.sh").read_text()
    job = TrainerJob.model_validate_json((out / "job.json").read_text())
    assert job.plan == plan and job.steps == 5
    assert json.loads((out / "ds_config.json").read_text()) == lc.deepspeed_config
    assert "n0 slots=2" in (out / "hostfile").read_text()
    readme = (out / "README.txt").read_text()
    assert "NODE_RANK=1 bash launch.sh" in readme and "zero2" in readme


def test_emit_single_node_runs_dry(tmp_path, one_node):
    """launch.sh is valid bash and, with torchrun replaced by echo, runs the node-0 section."""
    wl = make_workload("gpt2", global_batch=8)
    plan = Plan(dp=4, micro_batch_size=2, devices_per_node=4)
    lc = build_launch(plan, one_node, wl)
    paths = emit(lc, make_job(plan, wl), tmp_path)
    assert sorted(p.name for p in paths) == ["README.txt", "accelerate.yaml", "env.sh", "job.json", "launch.sh",
                                             "megatron_args.txt", "slurm.sbatch", "torchtitan.toml"]
    _bash_ok(tmp_path / "launch.sh")
    if BASH:
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "torchrun").write_text('#!/bin/sh\necho "torchrun $* OMP=$OMP_NUM_THREADS"\n')
        (fake / "torchrun").chmod(0o755)
        env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
        out = subprocess.run([BASH, str(tmp_path / "launch.sh")], capture_output=True, text=True, env=env,
                             cwd="/")
        assert out.returncode == 0, out.stderr
        assert "--standalone" in out.stdout and "OMP=8" in out.stdout
        bad = subprocess.run([BASH, str(tmp_path / "launch.sh")], capture_output=True, text=True,
                             env=dict(env, NODE_RANK="3"))
        assert bad.returncode == 2 and "NODE_RANK must be 0..0" in bad.stderr


def test_emit_refuses_foreign_files_and_reemits_own(tmp_path, one_node):
    wl = make_workload("gpt2", global_batch=8)
    plan = Plan(dp=4, micro_batch_size=2, devices_per_node=4)
    lc = build_launch(plan, one_node, wl)
    job = make_job(plan, wl)
    emit(lc, job, tmp_path)
    emit(lc, job, tmp_path)  # our own files: overwritten
    other = tmp_path / "mine"
    other.mkdir()
    (other / "job.json").write_text('{"user": "data"}')
    with pytest.raises(UserError, match="was not written by gpuadvisor") as exc:
        emit(lc, job, other)
    assert "\n" not in str(exc.value)
    assert (other / "job.json").read_text() == '{"user": "data"}'
    assert not (other / "launch.sh").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_emit_keeps_user_edits_unless_forced(tmp_path, one_node):
    wl = make_workload("gpt2", global_batch=8)
    plan = Plan(dp=4, micro_batch_size=2, devices_per_node=4)
    lc = build_launch(plan, one_node, wl)
    job = make_job(plan, wl)
    emit(lc, job, tmp_path)
    manifest = json.loads((tmp_path / ".gpuadvisor-manifest.json").read_text())["files"]
    assert set(manifest) >= {"launch.sh", "env.sh", "job.json"} and all(len(h) == 64 for h in manifest.values())
    edited = (tmp_path / "launch.sh").read_text() + "# my change\n"
    (tmp_path / "launch.sh").write_text(edited)  # the marker line is still there: the hash tells the edit
    with pytest.raises(UserError, match="launch.sh exists and was edited since gpuadvisor wrote it.*--force"):
        emit(lc, job, tmp_path)
    assert (tmp_path / "launch.sh").read_text() == edited
    emit(lc, job, tmp_path, force=True)
    assert "# my change" not in (tmp_path / "launch.sh").read_text()
    emit(lc, job, tmp_path)  # unedited again: no --force needed


def test_emit_to_unwritable_path_is_one_line(tmp_path, one_node):
    wl = make_workload("gpt2", global_batch=8)
    plan = Plan(dp=4, micro_batch_size=2, devices_per_node=4)
    lc = build_launch(plan, one_node, wl)
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="cannot create the --emit folder"):
        emit(lc, make_job(plan, wl), tmp_path / "f" / "sub")


def test_emit_rejects_mismatched_job_and_file_target(tmp_path, one_node):
    wl = make_workload("gpt2", global_batch=8)
    plan = Plan(dp=4, micro_batch_size=2, devices_per_node=4)
    lc = build_launch(plan, one_node, wl)
    with pytest.raises(UserError, match="plan differs"):
        emit(lc, make_job(Plan(dp=1, micro_batch_size=8), wl), tmp_path)
    with pytest.raises(UserError, match="8 steps differ from the 20 steps launch.sh runs"):
        emit(lc, make_job(plan, wl, steps=8), tmp_path)
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(UserError, match="is not a folder"):
        emit(lc, make_job(plan, wl), f)


def test_readme_job_and_launch_sh_state_one_step_count(tmp_path, one_node):
    """README.txt once said 8 timed steps while launch.sh passed 20: all three now read launch_steps()."""
    wl = make_workload("gpt2", global_batch=8, token_budget=8 * 1024 * 8)
    plan = Plan(dp=4, micro_batch_size=2, devices_per_node=4)
    lc = build_launch(plan, one_node, wl)
    assert launch_steps(lc) == 8  # the token budget's steps
    emit(lc, make_job(plan, wl, steps=launch_steps(lc)), tmp_path)
    assert "--steps 8 " in (tmp_path / "launch.sh").read_text()
    assert "Run     : 8 timed steps" in (tmp_path / "README.txt").read_text()
    assert TrainerJob.model_validate_json((tmp_path / "job.json").read_text()).steps == 8


def test_measured_throughput_is_stated_next_to_the_prediction(tmp_path, one_node):
    from gpuadvisor.schemas import Estimate, MemoryBreakdown, StepBreakdown

    wl = make_workload("gpt2", global_batch=8)
    plan = Plan(dp=4, micro_batch_size=2, devices_per_node=4)
    est = Estimate(plan=plan, feasible=True, step_time_s=0.25, tokens_per_s=32768, samples_per_s=32,
                   step=StepBreakdown(compute_s=0.2), memory=MemoryBreakdown(weights=2 * 2**30),
                   memory_capacity_bytes=48 * 2**30, analytical_tokens_per_s=32768)
    lc = build_launch(plan, one_node, wl, est, measured_tokens_per_s=16384.0)
    emit(lc, make_job(plan, wl), tmp_path)
    readme = (tmp_path / "README.txt").read_text()
    assert "prediction: 0.250 s/step, 32,768 tokens/s" in readme
    assert "measured in a trial run: 16,384 tokens/s (50% of the prediction)" in readme
    assert "measured" not in render_launch(build_launch(plan, one_node, wl, est))


def test_render_launch_text(two_nodes):
    wl = make_workload("gpt2", global_batch=8)
    plan = Plan(pp=2, dp=2, micro_batch_size=1, num_micro_batches=4, nodes=2, devices_per_node=2)
    text = render_launch(build_launch(plan, two_nodes, wl))
    assert "Plan    : pp2xdp2" in text and "Node 1 (n1): NODE_RANK=1 bash launch.sh" in text
    assert "NCCL_SOCKET_IFNAME=eno1    #" in text and "$ torchrun" in text and "Notes:" in text
