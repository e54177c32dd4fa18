"""kill -9 at random points of `confirm` and `study`, then resume: nothing lost, nothing counted twice,
nothing left running. Fake trainers, 2 ranks, the local launcher: each round takes a few seconds."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from ..trials.conftest import FAKES, MARK, marked_pids
from .conftest import COUNTS, TINY

REPO = Path(__file__).resolve().parents[2]
ROUNDS = int(os.environ.get("GPUADVISOR_KILL_ROUNDS", "3"))

CONFIRM = textwrap.dedent("""
    import sys
    sys.path[:0] = [{repo!r} + "/src", {repo!r}]
    from gpuadvisor.schemas import Workload
    from gpuadvisor.trials.study import confirm
    from tests.trials.planner_fixture import FakePlanner, cpu_cluster
    wl = Workload.model_validate_json({wl!r})
    res = confirm(cpu_cluster(), wl, top_k=2, budget_s=600, steps=3, warmup=0, storage={storage!r},
                  study_name={name!r}, trainer_module={trainer!r}, progress=False,
                  planner=FakePlanner(wl, dps=(2,)), launcher="local", grace_s=1.0, trial_timeout_s=60,
                  max_trials={max_trials}, trial_env={{"FAKE_OOM_ABOVE_MB": "2", "FAKE_STEP_SLEEP_S": "0.2",
                                                      "FAKE_STARTED_FILE": {started!r}, {mark_var!r}: {mark!r}}})
    print("DONE", len(res.trials))
""")


def _wait_gone(mark: str, timeout: float = 30.0) -> set[int]:
    end = time.monotonic() + timeout
    while marked_pids(mark) and time.monotonic() < end:
        time.sleep(0.2)
    return marked_pids(mark)


def _workload_json() -> str:
    from gpuadvisor.schemas import ModelSpec, TrainingSettings, Workload

    return Workload(model=ModelSpec(name="tiny", n_layers=4, d_model=64, n_heads=4, d_ff=256, vocab_size=128),
                    training=TrainingSettings(seq_len=32, global_batch=8)).model_dump_json()


def test_kill9_at_random_points_of_confirm(tmp_path):
    rng = random.Random(15)
    mark = uuid.uuid4().hex
    home = tmp_path / "home"
    env = {**os.environ, "GPUADVISOR_HOME": str(home), MARK: mark}
    args = dict(repo=str(REPO), wl=_workload_json(), storage=str(tmp_path / "s.db"), name="kill-confirm",
                trainer=str(FAKES / "ok.py"), started=str(tmp_path / "started.txt"), mark_var=MARK, mark=mark)
    try:
        for _ in range(ROUNDS):
            proc = subprocess.Popen([sys.executable, "-c", CONFIRM.format(max_trials=4, **args)], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(rng.uniform(1.0, 6.0))  # start-up, ask, trial, record, store: anywhere
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                COUNTS["faults"] += 1
            proc.wait()
            assert not _wait_gone(mark), "trial processes survived kill -9 of confirm"
        final = subprocess.run([sys.executable, "-c", CONFIRM.format(max_trials=3, **args)], env=env,
                               capture_output=True, text=True, timeout=300)
        assert final.returncode == 0 and "DONE" in final.stdout, final.stderr[-3000:]
    finally:
        for pid in marked_pids(mark):
            os.kill(pid, signal.SIGKILL)
    import optuna

    study = optuna.load_study(study_name="kill-confirm", storage=f"sqlite:///{tmp_path / 's.db'}")
    ok = [t for t in study.trials if t.user_attrs.get("status") == "ok" and t.state.name == "COMPLETE"]
    rows = [json.loads(x) for x in (home / "measurements.jsonl").read_text().splitlines() if x.strip()]
    tps = [r for r in rows if r["metric"] == "tokens_per_s"]
    assert len({r["id"] for r in rows}) == len(rows)  # no row stored twice
    # nothing lost and nothing double-counted: exactly one throughput row per successful trial, one per plan
    assert sorted(r["id"] for r in tps) == sorted(f"{t.user_attrs['trial_id']}-tokens_per_s" for t in ok)
    plans = Counter(t.user_attrs["plan"] for t in ok)
    assert all(n == 1 for n in plans.values()), plans
    assert not any(t.state.name == "RUNNING" for t in study.trials)  # every killed trial was settled


STUDY = textwrap.dedent("""
    import sys
    sys.path[:0] = [{repo!r} + "/src", {repo!r}]
    from gpuadvisor.study.execute import run_study
    from gpuadvisor.study.spec import StudySpec, parse_gpus
    from tests.trials.planner_fixture import cpu_cluster
    spec = StudySpec(models=[{tiny!r}], strategies=["dp", "zero1"], gpus=parse_gpus("1,2"), steps=3, warmup=0,
                     global_batch=8)
    out = run_study(spec, cpu_cluster(), {out!r}, progress=False, trainer_module={trainer!r}, launcher="local",
                    env={{"FAKE_STEP_SLEEP_S": "0.3", {mark_var!r}: {mark!r}}}, grace_s=1.0, plots=False)
    print("DONE", len(out.rows), sum(r.status == "ok" for r in out.rows))
""")


def test_kill9_at_random_points_of_study(tmp_path):
    rng = random.Random(150)
    mark = uuid.uuid4().hex
    out = tmp_path / "study"
    args = dict(repo=str(REPO), tiny=TINY, out=str(out), trainer=str(FAKES / "ok.py"), mark_var=MARK, mark=mark)
    env = {**os.environ, MARK: mark}
    code = STUDY.format(**args)
    try:
        for _ in range(ROUNDS):
            proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            time.sleep(rng.uniform(1.0, 5.0))
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                COUNTS["faults"] += 1
            proc.wait()
            assert not _wait_gone(mark), "trial processes survived kill -9 of study"
        final = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert final.returncode == 0 and "DONE" in final.stdout, final.stderr[-3000:]
    finally:
        for pid in marked_pids(mark):
            os.kill(pid, signal.SIGKILL)
    rows = json.loads((out / "results.json").read_text())
    cells = rows["rows"] if isinstance(rows, dict) and "rows" in rows else rows
    ids = [c.get("cell_id") or c.get("id") for c in cells]
    assert len(ids) == len(set(ids))  # each cell once
    finished = sorted(p.stem for p in (out / "cells").glob("*.json"))
    runnable = [c for c in cells if c.get("status") not in ("skipped",)]
    assert len(finished) == len(runnable)  # nothing lost: every cell has its result
    for cid in finished:  # ok, or (by design) given up after two interruptions, saying so and how to retry
        res = json.loads((out / "cells" / f"{cid}.json").read_text())
        assert res["record"]["status"] == "ok" or "interrupted 2 times" in res["record"]["error"], res
        assert res["attempts"] <= 2


@pytest.mark.parametrize("point", ["after_ask", "after_record"])
def test_kill_between_record_and_tell_is_settled_from_the_record(point, tmp_path, monkeypatch):
    """The narrowest window: the record is written but Optuna was not told. The resume completes the trial
    from its record (rows appended once), instead of failing it and counting the plan a second time."""
    from gpuadvisor.schemas import ModelSpec, TrainingSettings, Workload
    from gpuadvisor.trials import study as study_mod
    from gpuadvisor.trials.store import MeasurementStore

    from ..trials.planner_fixture import FakePlanner, cpu_cluster

    monkeypatch.setenv("GPUADVISOR_HOME", str(tmp_path / "home"))
    wl = Workload(model=ModelSpec(name="tiny", n_layers=4, d_model=64, n_heads=4, d_ff=256, vocab_size=128),
                  training=TrainingSettings(seq_len=32, global_batch=8))
    mark = uuid.uuid4().hex
    kw = dict(top_k=2, budget_s=600.0, steps=2, warmup=0, storage=str(tmp_path / "s.db"), study_name="w",
              trainer_module=str(FAKES / "ok.py"), progress=False, planner=FakePlanner(wl, dps=(2,)),
              launcher="local", grace_s=1.0, trial_timeout_s=60, trial_env={"FAKE_OOM_ABOVE_MB": "99", MARK: mark})

    class Died(BaseException):
        pass

    real_write = study_mod.write_atomic

    def dying_write(path, data, *a, **k):
        real_write(path, data, *a, **k)
        if point == "after_record":
            raise Died()
        return path

    if point == "after_record":
        monkeypatch.setattr(study_mod, "write_atomic", dying_write)
    else:
        monkeypatch.setattr(study_mod, "run_trial_on_cluster", lambda *a, **k: (_ for _ in ()).throw(Died()))
    with pytest.raises(Died):
        study_mod.confirm(cpu_cluster(), wl, max_trials=1, **kw)
    monkeypatch.undo()
    monkeypatch.setenv("GPUADVISOR_HOME", str(tmp_path / "home"))
    # the dead advisor is "another process": pretend its pid is gone
    monkeypatch.setattr(study_mod, "alive", lambda pid, start=None: False)
    COUNTS["faults"] += 1
    res = study_mod.confirm(cpu_cluster(), wl, max_trials=1, **kw)
    first = next(t for t in res.trials if t.number == 0)
    rows = [r for r in MeasurementStore().rows() if r.metric == "tokens_per_s"]
    if point == "after_record":
        assert first.status == "ok"  # completed from its record, not failed and rerun
    else:
        assert first.status == "stale"  # nothing recorded: failed, and its plan retried once
    assert len(rows) == len(res.counted()) == len({r.plan.to_string() for r in rows})
    assert not _wait_gone(mark, 10)
