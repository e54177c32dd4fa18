"""Shared fixtures of the trials tests: a tiny workload, plans, fake trainers, /proc leak checks."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from gpuadvisor.schemas import ModelSpec, Plan, TrainerJob, TrainingSettings, Workload
from gpuadvisor.trials import procs

FAKES = Path(__file__).resolve().parents[1] / "fixtures" / "fake_trainers"
MARK = "GPUADVISOR_TEST_MARK"


def fake(name: str) -> str:
    """Path of a fake trainer script."""
    return str(FAKES / f"{name}.py")


@pytest.fixture
def workload() -> Workload:
    return Workload(model=ModelSpec(name="tiny", n_layers=4, d_model=64, n_heads=4, d_ff=256, vocab_size=128),
                    training=TrainingSettings(seq_len=32, global_batch=8))


def job_for(workload: Workload, *, dp: int = 2, mb: int = 2, steps: int = 5, warmup: int = 1) -> TrainerJob:
    """A DP job with global batch 8 on dp ranks."""
    plan = Plan(dp=dp, micro_batch_size=mb, num_micro_batches=8 // (dp * mb), devices_per_node=dp)
    return TrainerJob(plan=plan, workload=workload, steps=steps, warmup=warmup)


def marked_pids(mark: str) -> set[int]:
    """Live processes whose environment carries GPUADVISOR_TEST_MARK=mark (every trial process inherits it)."""
    out = set()
    for pid in procs.all_pids():
        st = procs.stat(pid)
        if not st or st.state in ("Z", "X"):
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in env:
            out.add(pid)
    return out


def session_pids(sid: int) -> set[int]:
    """Live processes of session sid."""
    return {s.pid for s in map(procs.stat, procs.all_pids()) if s and s.sid == sid and s.state not in ("Z", "X")}


@pytest.fixture
def mark():
    """A unique marker env for one test; asserts at teardown that nothing carrying it survives."""
    m = uuid.uuid4().hex
    yield m
    left = marked_pids(m)
    for pid in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert not left, f"processes survived the test: {left}"
