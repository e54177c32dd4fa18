"""Cancelling trials from the Confirm step stops every trial process (the trials API's stop path)."""
from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path

from textual.widgets import DataTable, Static

from gpuadvisor import api
from gpuadvisor.schemas import ModelSpec, Ranking, TrainingSettings, Workload

from .conftest import make_app, run_async, settle, text_of


@run_async
async def test_cancel_stops_the_running_trial_processes(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: reuse the trials fixtures
    from trials.conftest import MARK, fake, marked_pids  # tests/trials: fake trainers and /proc checks
    from trials.planner_fixture import FakePlanner, cpu_cluster

    mark = uuid.uuid4().hex
    wl = Workload(model=ModelSpec(name="tiny", n_layers=4, d_model=64, n_heads=4, d_ff=256, vocab_size=128),
                  training=TrainingSettings(seq_len=32, global_batch=8))
    cluster, planner = cpu_cluster(2), FakePlanner(wl)
    top = planner.top(3)
    ranking = Ranking(cluster_name=cluster.name, cluster_source="test", workload_name="tiny", objective="throughput",
                      n_candidates=len(planner.plans), n_feasible=len(top), top=top)
    app = make_app(preset=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.cluster, app.workload = cluster, wl
        app.suggestion = api.Suggestion(ranking=ranking, cluster=cluster, workload=wl, launch=None)
        app.confirm_options = dict(planner=planner, trainer_module=fake("hang"), launcher="local",
                                   storage=str(tmp_path / "study.db"), work_dir=str(tmp_path / "work"),
                                   store_path=str(tmp_path / "rows.jsonl"), trial_env={MARK: mark}, grace_s=1.0)
        app.switch_mode("confirm")
        await pilot.pause()
        await pilot.click("#start")
        deadline = time.monotonic() + 60
        while len(marked_pids(mark)) < 3 and time.monotonic() < deadline:  # guard + the hanging ranks
            await asyncio.sleep(0.2)
        assert len(marked_pids(mark)) >= 3, (text_of(app.screen.query_one("#trial-status", Static)), [n.message for n in app._notifications])
        assert app.screen.query_one("#trials", DataTable).row_count == 1  # the 'trial' event arrived
        await pilot.click("#cancel")
        deadline = time.monotonic() + 30
        while app.screen.query_one("#start").disabled and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await settle(pilot)
        assert not marked_pids(mark), "trial processes survived the cancel"
        assert "Cancelled" in text_of(app.screen.query_one("#trial-status", Static))
        assert app.is_running
