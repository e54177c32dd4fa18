"""What the TUI tells: trial states (confirmed, not enough trials, cancelled, failed), a ranking that can be
abandoned, hints in the TUI's words, and which fields are drawn red."""
from __future__ import annotations

import time

import pytest
from textual.widgets import Input, ProgressBar, Static

from gpuadvisor.errors import UserError
from gpuadvisor.schemas import Plan
from gpuadvisor.trials.procs import alive
from gpuadvisor.trials.schemas import ConfirmResult, TrialRow
from gpuadvisor.tui.screens.confirm import study_outcome
from gpuadvisor.tui.wording import tui_wording

from .conftest import goto, make_app, needs_pipeline, run_async, settle, text_of

SIZE = (80, 24)
PLANS = [Plan(dp=2, micro_batch_size=4, devices_per_node=2), Plan(dp=2, zero_stage=2, micro_batch_size=4,
                                                                    devices_per_node=2),
         Plan(pp=2, micro_batch_size=2, num_micro_batches=4, devices_per_node=2)]


def result(*statuses: str, winner: int | None = None, budget_s: float = 60.0) -> ConfirmResult:
    """A study result whose i-th trial ran the i-th top plan with statuses[i]."""
    rows = [TrialRow(number=i, trial_id=f"t{i:04d}", plan=PLANS[i], plan_str=PLANS[i].to_string(), status=st,
                     seed_rank=i, predicted_tokens_per_s=1000.0,
                     measured_tokens_per_s=900.0 - i if st == "ok" else None) for i, st in enumerate(statuses)]
    w = PLANS[winner] if winner is not None else None
    return ConfirmResult(study_name="s", storage="memory", fingerprint="f", trials=rows, winner=w,
                         winner_measured_tokens_per_s=900.0 - winner if w is not None else None, budget_s=budget_s)


@pytest.mark.parametrize("res, expected, cancelled, state, words, confirmed", [
    (result("ok", "ok", "oom", winner=0), 3, False, "done", "Confirmed winner", True),
    (result("ok", winner=0), 1, False, "done", "K=1: nothing to compare", True),
    (result("ok", winner=0), 3, False, "incomplete", "Not enough trials to confirm: the budget ran out after 1 of 3",
     False),
    (result("ok", "stale", winner=0), 3, True, "cancelled", "not enough trials to confirm (1 of 3", False),
    (result("ok", "ok", "ok", winner=1), 3, True, "cancelled", "not enough trials to confirm", False),
    (result("stale"), 3, True, "cancelled", "nothing measured", False),
    (result("timeout"), 3, False, "failed", "No trial succeeded (timeout)", False),
    (result(), 3, False, "failed", "No trial succeeded (none ran)", False),
], ids=["all-judged", "k1", "budget-ran-out", "cancelled-after-one", "cancelled-after-all", "cancelled-first",
        "timeout", "nothing-ran"])
def test_study_outcome(res, expected, cancelled, state, words, confirmed):
    got_state, message, got_confirmed = study_outcome(res, expected, cancelled)
    assert (got_state, got_confirmed) == (state, confirmed)
    assert words in message
    if not confirmed:
        assert "Confirmed winner" not in message and "Export writes the cost model's top plan" in message


class _Study:
    """api.confirm stand-in: emits the events of `events` and returns `result` (or raises `error`)."""

    def __init__(self, events=(), result=None, error=None):
        self.events, self.result, self.error = events, result, error

    def __call__(self, workload, *, progress=None, **kw):
        for ev in self.events:
            progress(ev)
        if self.error is not None:
            raise self.error
        return self.result


async def _run_study(pilot, study, monkeypatch, k: str = "3"):
    from gpuadvisor import api

    monkeypatch.setattr(api, "confirm", study)
    app = pilot.app
    await goto(pilot, "results")
    await goto(pilot, "confirm")
    app.screen.query_one("#top-k", Input).value = k
    await pilot.click("#start")
    for _ in range(100):
        await pilot.pause(0.05)
        if not app.screen.running:
            break
    await settle(pilot)
    return app.screen


@needs_pipeline
@run_async
async def test_a_failed_start_is_shown_as_failure_not_as_a_full_bar(monkeypatch):
    study = _Study(error=UserError("this host has no GPU; pass --cpu-ranks N to use CPU ranks, or --preset NAME"))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _run_study(pilot, study, monkeypatch)
        assert screen.state == "failed" and not screen.query_one("#progress", ProgressBar).display
        assert "failed" in text_of(screen.query_one("#run-state", Static))
        status = text_of(screen.query_one("#trial-status", Static))
        assert "Trials could not run" in status and "--" not in status and "a preset (Hardware step)" in status


@needs_pipeline
@run_async
async def test_no_trial_succeeded_is_failure_even_with_the_budget_spent(monkeypatch):
    """The report: a trial that never started timed out at the budget and the bar stood at 100 %."""
    plan = PLANS[0].to_string()
    events = [{"event": "trial", "n": 1, "plan": plan, "elapsed_s": 0},
              {"event": "result", "n": 1, "plan": plan, "status": "timeout", "predicted": 1000.0, "elapsed_s": 60},
              {"event": "done", "message": "no trial produced valid metrics"}]
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _run_study(pilot, _Study(events, result("timeout", budget_s=60.0)), monkeypatch)
        assert screen.state == "failed" and not screen.query_one("#progress", ProgressBar).display
        assert "No trial succeeded (timeout)" in text_of(screen.query_one("#trial-status", Static))
        assert app.confirmed is None


@needs_pipeline
@run_async
async def test_a_confirmed_winner_is_exported_with_its_measured_throughput(monkeypatch, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "results")
        top = app.suggestion.ranking.top
        rows = [TrialRow(number=i, trial_id=f"t{i}", plan=e.plan, plan_str=e.plan.to_string(), status="ok",
                         seed_rank=i, predicted_tokens_per_s=e.tokens_per_s, measured_tokens_per_s=500.0 + i)
                for i, e in enumerate(top[:3])]
        res = ConfirmResult(study_name="s", storage="memory", fingerprint="f", trials=rows, winner=top[2].plan,
                            winner_estimate=top[2], winner_measured_tokens_per_s=502.0, budget_s=60.0)
        screen = await _run_study(pilot, _Study(result=res), monkeypatch)
        assert screen.state == "done" and app.confirmed is res
        assert "Confirmed winner" in text_of(screen.query_one("#trial-status", Static))
        await goto(pilot, "export")
        assert "winner confirmed by trials" in text_of(app.screen.query_one("#export-plan", Static))
        app.screen.query_one("#out-dir", Input).value = str(tmp_path / "out")
        await pilot.click("#write")
        await settle(pilot)
        readme = (tmp_path / "out" / "README.txt").read_text()
        script = (tmp_path / "out" / "launch.sh").read_text()
        assert "measured in a trial run: 502 tokens/s" in readme and "prediction: " in readme
        steps = int(script.split("--steps ")[1].split()[0])
        assert f"Run     : {steps} timed steps" in readme  # one step count (README once said 8, launch.sh 20)


def _job_pid(app, within_s: float = 30.0) -> int:
    deadline = time.monotonic() + within_s
    while app.ranker.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert app.ranker.pid is not None
    return app.ranker.pid


async def _gone(pilot, pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return not alive(pid)


@run_async
async def test_an_abandoned_ranking_is_stopped_and_ctrl_q_exits_during_one():
    from .slowjob import spin

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.rank_job = spin  # a ranking that never ends, as `gpus: 256x A40` once did
        await goto(pilot, "model")
        await pilot.press("alt+4")
        await pilot.pause(1.0)
        first = _job_pid(app)
        assert "Ranking" in text_of(app.screen.query_one("#rank-status", Static))
        await pilot.press("escape")  # leaving the step (back to Goal) stops it
        assert app.current_mode == "goal"
        assert await _gone(pilot, first), "the abandoned ranking still runs"
        await pilot.press("alt+4")  # back: it ranks again, in a new process
        await pilot.pause(1.0)
        second = _job_pid(app)
        assert second != first
        gpus = app.screen.query_one("#whatif-gpus", Input)
        gpus.focus()
        await pilot.press(*"1x2", "enter")  # a what-if change while ranking: the old one is stopped
        await pilot.pause(1.0)
        assert await _gone(pilot, second)
        third = _job_pid(app)
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert not app.is_running
    assert await _gone(pilot, third), "Ctrl+Q left the ranking process running"


def test_hints_use_the_tui_words_not_cli_flags():
    messages = [
        "cluster file 'x.yaml' not found; write one (docs/cluster-file.md) or use --preset NAME",
        "this host has no GPU; pass --cpu-ranks N to use CPU ranks, or --preset NAME",
        "(seed 000's nano-cluster: 2 nodes x 2 A40, PCIe, 1 GbE). Use --preset NAME or --cluster FILE to choose.",
        "seq_len 4096 is beyond the 1024 positions of 'gpt2'; use --seq-len 1024 or less",
        "give only one of --global-batch and --tokens-per-step",
        "config.json is not a GPT-2 or Llama-style config); give --layers/--hidden/--heads instead",
        "unknown GPU 'Z9': add it to knowledge/gpus.yaml or pass --gpu-spec ...",
        "out/launch.sh exists and was not written by gpuadvisor; remove it or choose another --emit directory",
        "--some-new-flag is new",
        "if fine-tuning is the goal, LoRA fits: --finetune lora (API: finetune='lora'), best plan dp on 1x2",
    ]
    for m in messages:
        assert "--" not in tui_wording(m), m
    assert tui_wording(messages[3]).endswith("use Seq length 1024 or less")
    assert "or pick a preset (Hardware step)" in tui_wording(messages[0])
    assert "choose another folder" in tui_wording(messages[7])
    assert tui_wording(messages[9]).endswith("LoRA fits: Fine-tuning lora, best plan dp on 1x2")  # no API aside


@run_async
async def test_cluster_notes_and_errors_are_worded_for_the_tui(tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.screen.query_one("#path", Input).value = str(tmp_path / "nope.yaml")
        await pilot.click("#load")
        await settle(pilot)
        shown = [n.message for n in app._notifications]
        assert shown and all("--" not in m for m in shown), shown


@run_async
async def test_only_invalid_fields_are_red_not_empty_optional_ones():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "model")
        for field_id in ("#seq-len", "#global-batch"):
            field = app.screen.query_one(field_id, Input)
            field.focus()
            await pilot.press("5", "backspace")  # typed and cleared: empty again, which means "default"
            await pilot.pause()
            assert field.value == "" and not field.has_class("-invalid"), field_id
            await pilot.press("-")  # a lone sign is not a number: red
            await pilot.pause()
            assert field.has_class("-invalid"), field_id
            field.value = ""
        await goto(pilot, "goal")
        price = app.screen.query_one("#price", Input)
        price.focus()
        await pilot.press("1", "backspace")
        await pilot.pause()
        assert not price.has_class("-invalid")


@run_async
async def test_a_node_with_many_gpus_is_summarised_and_shown_quickly(tmp_path):
    """128 GPUs in one node: grouped devices and link counts, not a 128x128 matrix (which took minutes)."""
    big = tmp_path / "big.yaml"
    big.write_text("name: big\nnodes:\n  - name: n0\n    gpus: 128x A40\n")
    app = make_app(preset=None, cluster_file=str(big))
    async with app.run_test(size=SIZE) as pilot:
        t0 = time.monotonic()
        await settle(pilot)
        text = text_of(app.screen.query_one("#cluster", Static))
        assert "0-127 (128x)" in text and "links: unknown: 8128 pairs" in text, text
        assert time.monotonic() - t0 < 30


def test_the_model_hint_folds_families_and_keeps_every_name():
    from gpuadvisor.tui.screens.model import compact_names, model_hint
    from gpuadvisor.workload import catalog

    assert compact_names(["gpt2", "gpt2-medium", "gpt2-xl", "mistral-7b", "gpt3-125m", "gpt3-1.3b", "resnet18"]) == \
        ["gpt2", "gpt2-{medium,xl}", "mistral-7b", "gpt3-{125m,1.3b}", "resnet18"]
    hint = model_hint()
    # every preset can be read back from the hint
    for name in catalog.preset_names():
        head, _, tail = name.rpartition("-")
        assert f"{name}," in hint + "," or (head and f"{head}-{{" in hint and tail in hint), name
    assert len(hint) < 500  # two lines of a 120-column screen, not five
