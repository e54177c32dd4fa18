"""The confirm study on SQLite and on PostgreSQL: seeding, OOM and dedupe rules, resume, crash recovery."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.schemas import TrialRecord
from gpuadvisor.trials.store import MeasurementStore
from gpuadvisor.trials.study import confirm

from .conftest import FAKES, MARK, marked_pids
from .planner_fixture import FakePlanner, cpu_cluster

REPO = Path(__file__).resolve().parents[2]
PG_VAR = "GPUADVISOR_TEST_POSTGRES_URL"


class SecretURL(str):
    """A URL whose repr (pytest tracebacks) hides the password."""

    def __repr__(self) -> str:
        from gpuadvisor.trials.storage import mask_url

        return repr(mask_url(str(self)))


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request, tmp_path):
    """A study storage URL: a SQLite file, or the PostgreSQL server of .ci/postgres.sh."""
    if request.param == "sqlite":
        return str(tmp_path / "studies.db")
    url = os.environ.get(PG_VAR)
    if not url:
        pytest.skip(f"{PG_VAR} is unset: run `eval \"$(.ci/postgres.sh)\"` (root) to test on PostgreSQL")
    return SecretURL(url)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUADVISOR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _started(path: Path) -> list[str]:
    """Plans of the runs so far, in start order (one entry per run, whatever its number of ranks)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [ln.split("\t")[0] for ln in dict.fromkeys(lines)]


def _run(workload, storage, name, started, mark, **kw):
    env = {"FAKE_OOM_ABOVE_MB": "2", "FAKE_STARTED_FILE": str(started), MARK: mark, **kw.pop("env", {})}
    return confirm(cpu_cluster(), workload, top_k=3, budget_s=kw.pop("budget_s", 600), steps=3, warmup=1,
                   storage=storage, study_name=name, trainer_module=str(FAKES / "ok.py"), progress=False,
                   planner=FakePlanner(workload, dps=(2,)), launcher=kw.pop("launcher", "local"), trial_env=env,
                   grace_s=1.0, trial_timeout_s=60, **kw)


def test_seeds_oom_and_dedupe(storage, home, tmp_path, workload, mark):
    started = tmp_path / "started.txt"
    name = f"t-{uuid.uuid4().hex[:8]}"
    res = _run(workload, storage, name, started, mark, max_trials=4)
    seeds = [r for r in res.trials if r.seed_rank is not None]
    assert [r.seed_rank for r in sorted(seeds, key=lambda r: r.number)] == [0, 1, 2]
    assert res.trials[0].status == "oom" and res.trials[0].plan.micro_batch_size == 4  # first pick OOMs (mb > 2)
    # the OOM rules out the same layout at mb >= 4: the second seed (bucket 50) is skipped, never run
    assert res.trials[1].status == "skipped"
    runs = _started(started)
    assert len(runs) == len(set(runs)) == 4, runs  # no plan ran twice
    assert not any("zero_stage=1,micro_batch_size=4" in r for r in runs[1:])
    ok = res.counted()
    assert ok and res.winner is not None and res.winner_estimate.plan == res.winner
    assert res.winner_measured_tokens_per_s == max(r.measured_tokens_per_s for r in ok)
    # records keyed by trial id, written atomically; store rows unique, one throughput row per ok trial
    for r in res.trials:
        if r.status not in ("skipped",):
            rec = TrialRecord.model_validate_json(
                (Path(res.work_dir) / "results" / f"{r.trial_id}.json").read_text())
            assert rec.status == r.status
    rows = MeasurementStore().rows()
    assert len({r.id for r in rows}) == len(rows)
    assert sum(r.metric == "tokens_per_s" for r in rows) == len(ok)
    assert all(r.source_group.startswith("local-") and "gpuadvisor confirm" in r.source for r in rows)
    assert "***" in res.storage or storage.startswith("/")
    if "@" in storage:
        assert storage.split(":")[2].split("@")[0] not in res.model_dump_json()  # password never stored


def test_resume_continues_and_refuses_mismatch(storage, home, tmp_path, workload, mark):
    started = tmp_path / "started.txt"
    name = f"t-{uuid.uuid4().hex[:8]}"
    first = _run(workload, storage, name, started, mark, max_trials=2)
    second = _run(workload, storage, name, started, mark, max_trials=2)
    assert any("resumed" in n for n in second.notes)
    assert second.elapsed_s > first.elapsed_s  # budget counts across restarts
    runs = _started(started)
    assert len(runs) == len(set(runs)) == 4
    assert len([t for t in second.trials if t.status != "skipped"]) == 4
    other = workload.model_copy(update={"training": workload.training.model_copy(update={"seq_len": 64})})
    with pytest.raises(UserError) as err:
        _run(other, storage, name, started, mark, max_trials=1)
    msg = str(err.value)
    assert "different workload" in msg and "\n" not in msg
    spent = _run(workload, storage, f"t-{uuid.uuid4().hex[:8]}", started, mark, budget_s=1)
    assert not spent.trials or all(t.status == "pending" for t in spent.trials)


def test_optuna_conventions(home, tmp_path, workload, mark):
    """Readable default study name, metric name for the dashboard, skipped plans PRUNED (not FAIL)."""
    import optuna

    db = tmp_path / "studies.db"
    res = _run(workload, str(db), None, tmp_path / "started.txt", mark, max_trials=2)
    assert res.study_name.endswith(res.fingerprint[:8]) and res.study_name.startswith("tiny")
    assert all(c.isalnum() or c in ".-" for c in res.study_name), res.study_name
    study = optuna.load_study(study_name=res.study_name, storage=f"sqlite:///{db}")
    assert study.metric_names == ["tokens_per_s"]
    states = {r.status: study.trials[r.number].state for r in res.trials}
    assert states["skipped"] == optuna.trial.TrialState.PRUNED and states["oom"] == optuna.trial.TrialState.FAIL
    from gpuadvisor.trials.render import render_confirm

    assert f"optuna-dashboard sqlite:///{db}" in " ".join(render_confirm(res, width=200).split())
    other = workload.model_copy(update={"training": workload.training.model_copy(update={"seq_len": 64})})
    with pytest.raises(UserError, match="pick a new --study-name"):
        _run(other, str(db), res.study_name, tmp_path / "started.txt", mark, max_trials=1)


SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from tests.trials.test_study import _run
from gpuadvisor.schemas import Workload
wl = Workload.model_validate_json({wl!r})
_run(wl, {storage!r}, {name!r}, __import__('pathlib').Path({started!r}), {mark!r}, launcher='torchrun',
     env={{'FAKE_STEP_SLEEP_S': '1', 'FAKE_SLEEP_IF': 'micro_batch_size=2'}})
"""


@pytest.mark.slow
def test_kill9_mid_trial_then_resume(storage, home, tmp_path, workload, mark):
    """kill -9 of gpuadvisor during a torchrun trial: nothing survives, results kept, the trial retried once."""
    started = tmp_path / "started.txt"
    name = f"t-{uuid.uuid4().hex[:8]}"
    code = SCRIPT.format(repo=str(REPO), wl=workload.model_dump_json(), storage=str(storage), name=name,
                         started=str(started), mark=mark)
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, MARK: mark},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    # trials 0, 2, 3 (mb=4) OOM, trial 1 is skipped, trial 4 (mb=2) sleeps 1 s per step: kill it there
    try:
        while not any("micro_batch_size=2" in r for r in _started(started)):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the slow trial never started"
            time.sleep(0.2)
        time.sleep(1.0)
        assert len(marked_pids(mark) - {proc.pid}) >= 4  # guard, torchrun, 2 ranks
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    proc.stderr.close()
    end = time.monotonic() + 20
    while marked_pids(mark) and time.monotonic() < end:
        time.sleep(0.2)
    assert not marked_pids(mark), "trial processes survived kill -9 of gpuadvisor"
    before = _started(started)
    res = _run(workload, storage, name, started, mark, max_trials=2)
    by_num = {t.number: t for t in res.trials}
    assert by_num[0].status == "oom"  # results so far kept
    stale = [t for t in res.trials if t.status == "stale"]
    assert len(stale) == 1 and stale[0].plan.micro_batch_size == 2
    retry = [t for t in res.trials if t.retry_of == stale[0].number]
    assert len(retry) == 1 and retry[0].status == "ok" and retry[0].plan == stale[0].plan
    runs = _started(started)
    counts = Counter(runs)
    assert counts[before[-1]] == 2 and all(n == 1 for r, n in counts.items() if r != before[-1])
    rows = [r for r in MeasurementStore().rows() if r.metric == "tokens_per_s"]
    assert len(rows) == len({r.plan.to_string() for r in rows}) == len(res.counted())  # nothing counted twice
