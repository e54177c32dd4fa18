"""Regression tests of issue 15's trial and study faults: isolation, host and dependency checks, budget
arithmetic, stable fingerprints, concurrent runs, imported measurements, the DeepSpeed op build."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.trials import hostcheck, opbuild
from gpuadvisor.trials.fingerprint import cluster_digest
from gpuadvisor.trials.lock import StudyLock
from gpuadvisor.trials.store import MeasurementStore
from gpuadvisor.trials.study import confirm

from ..trials.conftest import FAKES, MARK, marked_pids
from ..trials.planner_fixture import FakePlanner, cpu_cluster
from .conftest import COUNTS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workload():
    from gpuadvisor.schemas import ModelSpec, TrainingSettings, Workload

    return Workload(model=ModelSpec(name="tiny", n_layers=4, d_model=64, n_heads=4, d_ff=256, vocab_size=128),
                    training=TrainingSettings(seq_len=32, global_batch=8))


@pytest.fixture
def mark():
    m = uuid.uuid4().hex
    yield m
    left = marked_pids(m)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes survived the test: {left}"


def _confirm(workload, storage, mark, *, name=None, trainer="ok", env=None, **kw):
    env = {"FAKE_OOM_ABOVE_MB": "2", MARK: mark, **(env or {})}
    kw.setdefault("budget_s", 600.0)
    kw.setdefault("trial_timeout_s", 60)
    return confirm(cpu_cluster(), workload, top_k=2, steps=2, warmup=0, storage=storage, study_name=name,
                   trainer_module=str(FAKES / f"{trainer}.py"), progress=False, planner=FakePlanner(workload, dps=(2,)),
                   launcher="local", trial_env=env, grace_s=1.0, **kw)


def test_a_second_storage_never_overwrites_the_first_studys_trials(home, tmp_path, workload, mark):
    """Same study (same name), two storages: each keeps its own trial folders and records."""
    a = _confirm(workload, str(tmp_path / "a.db"), mark, max_trials=1)
    rec_a = Path(a.work_dir) / "results" / f"{a.trials[0].trial_id}.json"
    before = rec_a.read_bytes()
    b = _confirm(workload, str(tmp_path / "b.db"), mark, max_trials=1)
    assert a.study_name == b.study_name and a.work_dir != b.work_dir
    assert rec_a.read_bytes() == before and Path(b.work_dir, "results").is_dir()
    COUNTS["inputs"] += 2


@pytest.mark.parametrize("budget", [math.nan, math.inf, -5.0, 0.0, 1e12])
def test_non_finite_or_negative_budget_is_refused_before_anything(budget, home, tmp_path, workload, mark):
    COUNTS["inputs"] += 1
    with pytest.raises(UserError, match="budget_s"):
        _confirm(workload, str(tmp_path / "s.db"), mark, budget_s=budget)
    assert not (tmp_path / "s.db").exists()


def test_a_trial_that_cannot_fit_the_budget_is_not_started_and_not_blamed(home, tmp_path, workload, mark):
    """Budget 8 s, each trial sleeps ~2 s per step: the first runs, later ones are cut or not started;
    none is recorded as a plan failure, and a resume with more budget runs them."""
    storage, name = str(tmp_path / "s.db"), f"b-{uuid.uuid4().hex[:6]}"
    env = {"FAKE_STEP_SLEEP_S": "2", "FAKE_OOM_ABOVE_MB": "99"}
    res = _confirm(workload, storage, mark, name=name, env=env, budget_s=8.0)
    statuses = [t.status for t in res.trials]
    assert "timeout" not in statuses, statuses
    assert any("budget" in n for n in res.notes), res.notes
    first_ok = [t.plan_str for t in res.trials if t.status == "ok"]
    res2 = _confirm(workload, storage, mark, name=name, env=env, budget_s=60.0, max_trials=2)
    ran2 = [t for t in res2.trials if t.number >= len(res.trials)]
    # the plan the budget stopped (or did not start) runs now: the budget cut did not block it
    assert any(t.status == "ok" and t.plan_str not in first_ok for t in ran2), [(t.plan_str, t.status)
                                                                               for t in res2.trials]
    COUNTS["faults"] += 1


def test_budget_cut_of_a_running_trial_is_recorded_as_budget_not_timeout(home, tmp_path, workload, mark):
    storage, name = str(tmp_path / "s.db"), f"c-{uuid.uuid4().hex[:6]}"
    # the prediction says the trial is quick (so it starts), but the fake trainer sleeps past the budget
    res = _confirm(workload, storage, mark, name=name, env={"FAKE_STEP_SLEEP_S": "30", "FAKE_OOM_ABOVE_MB": "99"},
                   budget_s=12.0)
    cut = [t for t in res.trials if t.status == "budget"]
    assert cut and all(t.status != "timeout" for t in res.trials)
    assert "not a verdict" in (cut[0].error or "")
    COUNTS["faults"] += 1


def test_missing_trainer_dependencies_refuse_before_any_trial(home, tmp_path, workload, mark, monkeypatch):
    monkeypatch.setattr(hostcheck, "missing", lambda mods: [m for m in mods if m in ("torch", "deepspeed")])
    with pytest.raises(UserError, match=r"pip install 'gpuadvisor\[train\]'.*no plan was blamed"):
        confirm(cpu_cluster(), workload, top_k=1, budget_s=60.0, storage=str(tmp_path / "s.db"), progress=False,
                planner=FakePlanner(workload, dps=(2,)))
    assert not (tmp_path / "s.db").exists()
    COUNTS["faults"] += 1


def test_study_without_matplotlib_or_deepspeed_is_one_line(tmp_path, monkeypatch, capsys):
    from gpuadvisor.cli import main

    monkeypatch.setattr(hostcheck, "missing", lambda mods: [m for m in mods if m == "matplotlib"])
    rc = main(["study", "--models", "L2-H32-A4", "--preset", "cpu-2ranks", "--strategies", "dp", "--gpus", "1",
               "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "matplotlib" in err and "--no-plots" in err
    assert not (tmp_path / "s").exists()
    COUNTS["faults"] += 1


def test_gpu_cluster_with_more_gpus_than_this_host_is_refused(monkeypatch):
    from gpuadvisor.hardware.presets import load_preset

    monkeypatch.setattr(hostcheck, "local_gpu_count", lambda: 2)
    assert "4 GPUs per node but this host has 2" in hostcheck.host_mismatch(load_preset("a6000-4x-pcie"))
    monkeypatch.setattr(hostcheck, "local_gpu_count", lambda: 0)
    assert hostcheck.host_mismatch(load_preset("cpu-2ranks")) is None  # CPU ranks run anywhere


def test_fingerprint_ignores_volatile_readings():
    c = cpu_cluster()
    node = c.nodes[0]
    changed = c.model_copy(update={"name": "other-name", "notes": ["probed at noon"], "nodes": [node.model_copy(
        update={"cpu": node.cpu.model_copy(update={"ram_available_bytes": 123456789})})]})
    assert cluster_digest(changed) == cluster_digest(c)
    faster = c.model_copy(update={"nodes": [node.model_copy(update={"devices": [
        d.model_copy(update={"peak_tflops_fp32": 9.0}) for d in node.devices]})]})
    assert cluster_digest(faster) != cluster_digest(c)


def test_study_resume_is_not_refused_when_free_ram_changed(tmp_path):
    from gpuadvisor.study.spec import StudySpec, parse_gpus
    from gpuadvisor.study.state import StudyDir

    spec = StudySpec(models=["L2-H32-A4"], strategies=["dp"], gpus=parse_gpus("1,2"), steps=2, warmup=0)
    c = cpu_cluster()
    sd = StudyDir(tmp_path)
    sd.open(c, spec, [])
    node = c.nodes[0]
    later = c.model_copy(update={"nodes": [node.model_copy(update={"cpu": node.cpu.model_copy(
        update={"ram_available_bytes": 42})})]})
    _, resumed = sd.open(later, spec, [])
    assert resumed


def test_concurrent_run_on_one_study_is_refused_with_the_owner(home, tmp_path, workload, mark):
    storage, name = str(tmp_path / "s.db"), f"l-{uuid.uuid4().hex[:6]}"
    res = _confirm(workload, storage, mark, name=name, max_trials=1)
    lock_path = Path(res.work_dir) / "run.lock"
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / 'src')!r})
        from gpuadvisor.trials.lock import StudyLock
        with StudyLock({str(lock_path)!r}, "x"):
            print("held", flush=True)
            time.sleep(60)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        n_rows = len(MeasurementStore().rows())
        with pytest.raises(UserError, match=rf"already running \(pid {holder.pid}"):
            _confirm(workload, storage, mark, name=name, max_trials=1)
        assert len(MeasurementStore().rows()) == n_rows  # nothing stored by the refused run
    finally:
        holder.kill()  # kill -9: the kernel drops the flock, the next run proceeds
        holder.wait()
    COUNTS["faults"] += 1
    res2 = _confirm(workload, storage, mark, name=name, max_trials=1)
    assert len(res2.trials) > len(res.trials)


def test_lock_is_free_after_the_holder_is_killed(tmp_path):
    path = tmp_path / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / 'src')!r})
        from gpuadvisor.trials.lock import StudyLock
        StudyLock({str(path)!r}, "x").acquire(); print("held", flush=True); time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(UserError, match="already running"):
        StudyLock(path, "study").acquire()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with StudyLock(path, "study"):
        pass
    COUNTS["faults"] += 1


# ------------------------------------------------------------------ imported measurements


def _row(**upd) -> str:
    from gpuadvisor.schemas import Plan

    from ..trials.planner_fixture import cpu_cluster as cc

    wl = {"model": {"name": "tiny", "n_layers": 4, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab_size": 128},
          "training": {"seq_len": 32, "global_batch": 8}}
    row = {"id": f"r-{uuid.uuid4().hex[:6]}", "source": "test", "source_group": "test", "cluster":
           cc().model_dump(mode="json"), "workload": wl,
           "plan": Plan(dp=2, micro_batch_size=4, devices_per_node=2).model_dump(mode="json"),
           "metric": "tokens_per_s", "value": 1000.0, "unit": "tokens/s"}
    row.update(upd)
    return json.dumps(row).replace("NaN", "NaN")


@pytest.mark.parametrize("value, needle", [
    ("NaN", "finite"), ("Infinity", "finite"), (-5.0, "greater than 0"), (0.0, "greater than 0"),
    (1e300, "peak FLOPs"),
])
def test_import_refuses_impossible_throughputs(value, needle, home, tmp_path):
    f = tmp_path / "rows.jsonl"
    good = _row()
    bad = _row(value=value) if not isinstance(value, str) else _row().replace('"value": 1000.0',
                                                                               f'"value": {value}')
    f.write_text(good + "\n" + bad + "\n")
    COUNTS["inputs"] += 1
    with pytest.raises(UserError, match=rf"line 2 .*{needle}"):
        MeasurementStore().import_file(f)
    assert MeasurementStore().rows() == []  # nothing imported from an invalid file


def test_impossible_peak_memory_is_refused(home, tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text(_row(metric="peak_memory_bytes", value=1e15, unit="bytes") + "\n")
    with pytest.raises(UserError, match="above the device memory"):
        MeasurementStore().import_file(f)


def test_implausible_rows_already_in_the_store_are_ignored(home):
    store = MeasurementStore()
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text(_row() + "\n" + _row(value=1e300) + "\n")
    assert len(store.rows()) == 1


# ------------------------------------------------------------------ DeepSpeed op build


def test_stale_build_lock_is_removed_and_a_live_one_kept(tmp_path):
    build = tmp_path / "deepspeed_shm_comm"
    build.mkdir()
    lock = build / "lock"
    lock.write_text("")
    os.utime(lock, (time.time() - 600, time.time() - 600))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=build)
    try:
        assert not opbuild.clear_stale_lock(build)  # a process works in the build folder: the build is live
    finally:
        live.kill()
        live.wait()
    assert opbuild.clear_stale_lock(build) and not lock.exists()  # its owner is gone: removed
    lock.write_text("")
    assert not opbuild.clear_stale_lock(build)  # a fresh lock (a build just starting) is kept
    COUNTS["faults"] += 2


def test_op_build_helper_does_not_outlive_a_killed_advisor(tmp_path, mark):
    """kill -9 of the process waiting on the build: the build (and its children) stop too."""
    fake = tmp_path / "fakebuild.py"
    fake.write_text("import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(300)\n")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / 'src')!r})
        from gpuadvisor.trials import opbuild
        import gpuadvisor.trials.opbuild as ob
        real = ob.subprocess.Popen
        def popen(argv, **kw):
            argv = [a if a != "gpuadvisor.trials.opbuild" else "fakebuild" for a in argv]
            kw["cwd"] = {str(tmp_path)!r}
            return real(argv, **kw)
        ob.subprocess.Popen = popen
        opbuild.ensure_ops(dict(__import__("os").environ), progress=print)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, MARK: mark, "PYTHONPATH": str(tmp_path)})
    end = time.monotonic() + 30
    while len(marked_pids(mark) - {proc.pid}) < 3 and time.monotonic() < end:  # guard, builder, its child
        time.sleep(0.2)
    assert len(marked_pids(mark) - {proc.pid}) >= 3
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    end = time.monotonic() + 20
    while marked_pids(mark) and time.monotonic() < end:
        time.sleep(0.2)
    assert not marked_pids(mark), "the op build outlived kill -9 of gpuadvisor"
    COUNTS["faults"] += 1


def test_op_build_failure_is_one_line_and_blames_no_plan(tmp_path, monkeypatch):
    fake = tmp_path / "failbuild.py"
    fake.write_text("import sys\nprint('error: ninja: command not found')\nsys.exit(1)\n")
    real = opbuild.subprocess.Popen

    def popen(argv, **kw):
        argv = [a if a != "gpuadvisor.trials.opbuild" else "failbuild" for a in argv]
        kw["env"] = {**kw.get("env", {}), "PYTHONPATH": str(tmp_path)}
        return real(argv, **kw)

    monkeypatch.setattr(opbuild.subprocess, "Popen", popen)
    with pytest.raises(UserError, match="ninja: command not found.*no plan was blamed"):
        opbuild.ensure_ops({"HOME": str(tmp_path), "PATH": os.environ["PATH"]})
    COUNTS["faults"] += 1
