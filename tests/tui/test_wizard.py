"""Pilot tests: walk the wizard with keys and clicks, check state, errors and the exported files."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from textual.widgets import DataTable, Input, Select, Static

from gpuadvisor.cli import build_parser, main

from .conftest import MODEL, PRESET, goto, make_app, needs_pipeline, run_async, settle, text_of

SIZE = (80, 24)


def notifications(app) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


def test_tui_subcommand_registered():
    args = build_parser().parse_args(["tui", "--preset", PRESET, "--model", "350M"])
    assert args.command == "tui" and args.preset == PRESET and args.model == "350M"


@run_async
async def test_hardware_shows_the_preset_cluster():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.current_mode == "hardware"
        assert app.cluster is not None and app.cluster.source == f"preset:{PRESET}"
        text = text_of(app.screen.query_one("#cluster", Static))
        assert "A40" in text and "NICs:" in text and "SYS" in text
        assert app.screen.query_one("#preset", Select).value == PRESET


@run_async
async def test_missing_cluster_file_is_a_notification_not_a_crash(tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.screen.query_one("#path", Input).value = str(tmp_path / "nope.yaml")
        await pilot.click("#load")
        await settle(pilot)
        assert any("not found" in n for n in notifications(app))
        assert app.cluster is not None  # the preset is kept
        assert app.is_running


@run_async
async def test_save_and_load_cluster_file(tmp_path):
    path = tmp_path / "mine.yaml"
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        before = app.cluster
        app.screen.query_one("#path", Input).value = str(path)
        await pilot.click("#save")
        await settle(pilot)
        assert path.is_file(), notifications(app)
        await pilot.click("#load")
        await settle(pilot)
        assert app.cluster.num_devices == before.num_devices
        assert any("file" in n for n in app.cluster_notes)


@run_async
async def test_model_validation_is_inline():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+n")
        await settle(pilot)
        assert app.current_mode == "model"
        assert app.workload is not None and app.workload.model.name.startswith("gpt2-xl")
        field = app.screen.query_one("#model", Input)
        field.value = "no-such-model"
        await pilot.pause()
        status = app.screen.query_one("#workload-status", Static)
        assert status.has_class("error")
        assert "no-such-model" in text_of(status)
        assert app.workload is None
        await pilot.press("ctrl+n")  # blocked: stays on the model step with a warning
        await pilot.pause()
        assert app.current_mode == "model"
        field.value = "350M"
        app.screen.query_one("#seq-len", Input).value = "512"
        await pilot.pause()
        assert app.workload is not None and app.workload.training.seq_len == 512
        assert not status.has_class("error")


@run_async
async def test_goal_cost_needs_price_and_ranks_by_its_column():
    """The cost goal asks for a price; its results table adds what it sorts by (cli.render.objective_columns, as
    the CLI prints it)."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "goal")
        from textual.widgets import RadioSet

        radio = app.screen.query_one("#goal", RadioSet)
        radio.focus()
        await pilot.press("down", "down", "down", "enter")  # fastest -> memory -> time -> cost
        await pilot.pause()
        assert app.objective == "cost"
        status = app.screen.query_one("#goal-status", Static)
        assert status.has_class("error") and "price" in text_of(status)
        app.screen.query_one("#price", Input).value = "1.5"
        await pilot.pause()
        assert app.price_per_gpu_hour == 1.5
        await settle(pilot)
        await pilot.press("ctrl+n")
        await settle(pilot)
        assert app.current_mode == "results", notifications(app)
        table = app.screen.query_one("#ranking", DataTable)
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[:6] == ["#", "plan", "tok/s", "eff", "peak mem", "net/step"]
        key = labels[-1]
        assert key in ("GPU-h/Mtok", "cost/Mtok"), labels
        values = [float(table.get_cell(str(i), key)) for i in range(1, table.row_count + 1)]
        assert values and values == sorted(values)


@run_async
async def test_escape_goes_back_and_q_quits():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "goal")
        app.set_focus(None)
        await pilot.press("escape")
        await pilot.pause()
        assert app.current_mode == "model"
        app.set_focus(None)
        await pilot.press("escape")
        await pilot.press("escape")  # first step: stays, says so
        await pilot.pause()
        assert app.current_mode == "hardware"
        app.set_focus(None)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


@run_async
async def test_later_steps_wait_for_a_ranking():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("alt+6")
        await pilot.pause()
        assert app.current_mode == "hardware"
        assert any("ranked" in n.lower() or "ranking" in n.lower() for n in notifications(app))


@needs_pipeline
@run_async
async def test_results_table_detail_and_what_if():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "results")
        table = app.screen.query_one("#ranking", DataTable)
        assert table.row_count == len(app.suggestion.ranking.top) > 0
        detail = text_of(app.screen.query_one("#detail", Static))
        assert "Step time" in detail and "Memory" in detail
        best = app.suggestion.ranking.top[0].tokens_per_s
        if table.row_count > 1:
            await pilot.press("down")
            await pilot.pause()
            assert "#2 " in text_of(app.screen.query_one("#detail", Static))
        app.screen.query_one("#whatif-nic", Select).value = "nic=100gbe"
        await settle(pilot)
        assert app.what_if == ["nic=100gbe"]
        assert "what-if" in text_of(app.screen.query_one("#rank-status", Static))
        assert app.suggestion.ranking.top[0].tokens_per_s >= best


def _files(d: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(d.iterdir()) if p.is_file()}


@needs_pipeline
@run_async
async def test_walk_the_wizard_and_export_matches_suggest_emit(tmp_path, monkeypatch):
    tui_dir, cli_dir = tmp_path / "tui", tmp_path / "cli"
    tui_dir.mkdir()
    cli_dir.mkdir()
    monkeypatch.chdir(tui_dir)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for step in ("model", "goal", "results", "confirm", "export"):
            await pilot.press("ctrl+n")
            await settle(pilot)
            assert app.current_mode == step, notifications(app)
        app.screen.query_one("#out-dir", Input).value = "launch"
        await pilot.click("#write")
        await settle(pilot)
        shown = text_of(app.screen.query_one("#launch", Static))
        assert "launch.sh" in shown
    monkeypatch.chdir(cli_dir)
    assert main(["suggest", "--model", MODEL, "--preset", PRESET, "--emit", "launch"]) == 0
    tui_files, cli_files = _files(tui_dir / "launch"), _files(cli_dir / "launch")
    assert {"launch.sh", "job.json", "env.sh"} <= set(tui_files)
    assert tui_files == cli_files


class _FakeStudy:
    """Stands in for trials.study.confirm: reports one trial, then blocks until cancelled."""

    def __init__(self):
        self.cancelled = threading.Event()
        self.started = threading.Event()

    def __call__(self, workload, *, cluster=None, top_k=3, budget_s=900.0, steps=20, progress=None,
                 cancel=None, **kw):
        progress({"event": "start", "message": f"confirming the top {top_k} plans", "elapsed_s": 0,
                  "budget_s": budget_s})
        progress({"event": "trial", "n": 1, "plan": "pp=4,mb=1,m=8", "predicted": 1000.0, "elapsed_s": 1})
        progress({"event": "result", "n": 1, "plan": "pp=4,mb=1,m=8", "status": "ok", "predicted": 1000.0,
                  "measured": 900.0, "elapsed_s": 5})
        progress({"event": "trial", "n": 2, "plan": "dp=4,zero=3", "predicted": 800.0, "elapsed_s": 6})
        self.started.set()
        for _ in range(200):  # like confirm: the running trial is stopped and the study returns on cancel
            if cancel is not None and cancel.is_set():
                self.cancelled.set()
                return None
            time.sleep(0.05)
        return None


@needs_pipeline
@run_async
async def test_confirm_shows_progress_and_cancels(monkeypatch):
    from gpuadvisor import api

    fake = _FakeStudy()
    monkeypatch.setattr(api, "confirm", fake)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "results")
        await goto(pilot, "confirm")
        await pilot.click("#start")
        for _ in range(50):
            await pilot.pause(0.05)
            if fake.started.is_set():
                break
        await pilot.pause(0.1)
        table = app.screen.query_one("#trials", DataTable)
        assert table.row_count == 2
        assert [str(c) for c in table.get_row("1")][4] != "-"  # measured arrived
        await pilot.click("#cancel")
        await settle(pilot)
        assert fake.cancelled.is_set()
        assert "Cancelled" in text_of(app.screen.query_one("#trial-status", Static))
        assert not app.screen.query_one("#start").disabled


@needs_pipeline
@run_async
async def test_export_a_chosen_rank_like_suggest_emit_rank(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for step in ("model", "goal", "results", "confirm", "export"):
            await pilot.press("ctrl+n")
            await settle(pilot)
        app.screen.query_one("#out-dir", Input).value = "second"
        app.screen.query_one("#which", Input).value = "2"
        await pilot.click("#write")
        await settle(pilot)
        ranked = app.suggestion.ranking.top
    job = json.loads((tmp_path / "second" / "job.json").read_text())
    assert len(ranked) >= 2 and job["plan"] == ranked[1].plan.model_dump(mode="json")


@run_async
async def test_results_show_the_rankings_notes_in_tui_words(tmp_path):
    """The ranking's notes (here: offload priced on an undescribed host CPU) show under the status line."""
    bare = tmp_path / "bare.yaml"
    bare.write_text("name: bare\nnodes:\n  - name: box\n    gpus: 1x RTX 4090\n")
    app = make_app(preset=None, cluster_file=str(bare), model="7B")
    async with app.run_test(size=(120, 40)) as pilot:
        await goto(pilot, "results")
        status = text_of(app.screen.query_one("#rank-status", Static))
        assert "note: host CPU not described for node box" in status, status
        assert "pruned before timing" not in status  # the counts are on the status line already
