"""Keyboard-only use with Pilot: focus order and a visible focus on every step, digits that never jump,
unambiguous step jumps (Alt+1..6, the focused step bar), and a walk from Hardware to Export by keys alone."""
from __future__ import annotations

import asyncio
import threading
import time

from textual.widgets import DataTable, Input, Select, Static

from .conftest import goto, make_app, needs_pipeline, run_async, settle, text_of

SIZE = (80, 24)

#: Each step's focus order (Tab) and the control that has the focus on arrival.
FOCUS_ORDER = {
    "hardware": (["StepBar", "preset", "probe", "path", "load", "save", "add-node", "nic-speed", "set-nic",
                  "cluster-view", "nav-next"], "preset"),
    "model": (["StepBar", "model", "seq-len", "global-batch", "precision", "attention", "kernels", "megatron-buffers",
               "token-budget", "finetune", "lora-rank", "nav-back", "nav-next"],
              "model"),
    "goal": (["StepBar", "goal", "price", "nav-back", "nav-next"], "goal"),
    "results": (["StepBar", "whatif-nic", "whatif-gpus", "ranking", "detail-view", "nav-back", "nav-next"],
                "ranking"),
    "confirm": (["StepBar", "top-k", "budget", "steps", "start", "trials", "nav-back", "nav-next"], "top-k"),
    "export": (["StepBar", "out-dir", "write", "which", "force", "launch-view", "nav-back"], "out-dir"),
}


def name(widget) -> str:
    return (widget.id or type(widget).__name__) if widget is not None else "-"


def look(widget) -> tuple:
    """What the focus may change in a widget's look (Select: its visible part, SelectCurrent)."""
    target = widget.query_one("SelectCurrent") if isinstance(widget, Select) else widget
    s = target.styles
    return (s.background, s.color, s.border, s.text_style, s.background_tint)


async def tab_walk(pilot) -> list[str]:
    """The ids the focus visits with Tab, starting from the arrival focus, one full round."""
    seen = []
    for _ in range(len(pilot.app.screen.focus_chain)):
        await pilot.press("tab")
        seen.append(name(pilot.app.focused))
    return seen


@needs_pipeline
@run_async
async def test_focus_order_and_a_visible_focus_on_every_step():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for step, (order, first) in FOCUS_ORDER.items():
            if step == "results":
                await goto(pilot, "results")
            else:
                await goto(pilot, step)
            assert app.current_mode == step
            assert [name(w) for w in app.screen.focus_chain] == order, step
            assert name(app.focused) == first, f"{step}: arrival focus"
            i = order.index(first)
            assert await tab_walk(pilot) == order[i + 1:] + order[:i + 1], f"{step}: Tab order"
            for widget in list(app.screen.focus_chain):
                widget.focus()
                await pilot.pause()
                focused = look(widget)
                app.set_focus(None)
                await pilot.pause()
                assert look(widget) != focused, f"{step}: focus on #{name(widget)} is not visible"
            assert app.current_mode == step


async def _press_digits_everywhere(pilot, step: str) -> None:
    """Focus every control of the step but the step bar and type digits: no jump, fields get the digits."""
    app = pilot.app
    for widget in list(app.screen.focus_chain):
        if name(widget) == "StepBar":
            continue
        before = widget.value if isinstance(widget, Input) else None
        widget.focus()
        await pilot.pause()
        await pilot.press("1", "6", "3")
        await pilot.pause()
        assert app.current_mode == step, f"digits on #{name(widget)} left the {step} step"
        if isinstance(widget, Input):
            assert widget.value.endswith("163"), (name(widget), widget.value)
            widget.value = before
            await pilot.pause()


@needs_pipeline
@run_async
async def test_digits_are_text_or_nothing_never_a_step_jump():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+n")
        await settle(pilot)
        # the report: typing "1e30" on arrival at the model step sent the user elsewhere
        await pilot.press("1", "e", "3", "0")
        await pilot.pause()
        assert app.current_mode == "model" and app.screen.query_one("#model", Input).value == "1e30"
        app.screen.query_one("#model", Input).value = "1.5B"
        for step in FOCUS_ORDER:
            await goto(pilot, step)
            await _press_digits_everywhere(pilot, step)


@run_async
async def test_step_jumps_alt_digits_and_the_focused_step_bar():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        path = app.screen.query_one("#path", Input)
        path.focus()
        await pilot.press("c", "l", "alt+2")  # Alt+digit jumps even from a text field, and types nothing
        await settle(pilot)
        assert app.current_mode == "model" and path.value == "cl"
        await pilot.press("shift+tab")  # from the first control back to the step bar
        assert name(app.focused) == "StepBar"
        await pilot.press("6")  # Export needs a ranked plan: refused with the reason, no jump
        await pilot.pause()
        assert app.current_mode == "model" and any("ranked plan" in n.message for n in app._notifications)
        await pilot.press("3")
        await settle(pilot)
        assert app.current_mode == "goal" and name(app.focused) == "StepBar"  # the focus stays on the bar
        await pilot.press("left")
        await settle(pilot)
        assert app.current_mode == "model" and name(app.focused) == "StepBar"
        await pilot.press("right", "right")
        await settle(pilot)
        assert app.current_mode == "results" and name(app.focused) == "StepBar"
        await pilot.press("alt+1")
        await settle(pilot)
        assert app.current_mode == "hardware" and name(app.focused) == "path"  # the step's last focus is kept
        await pilot.press("trade_mark_sign")  # Alt+2 from a terminal without the kitty protocol (ESC 2)
        await settle(pilot)
        assert app.current_mode == "model" and path.value == "cl"


class _StudyDouble:
    """api.confirm stand-in: reports trial 1 ok and trial 2 running, then waits for the cancel.

    Its result is a real ConfirmResult over the suggestion's plans: 1 of the 3 top plans measured.
    """

    def __init__(self, suggestion):
        self.top = suggestion.ranking.top
        self.started = threading.Event()

    def __call__(self, workload, *, cluster=None, top_k=3, budget_s=900.0, steps=20, progress=None, cancel=None,
                 **kw):
        from gpuadvisor.trials.schemas import ConfirmResult, TrialRow

        a, b = self.top[0], self.top[1]
        progress({"event": "start", "message": "study 'double'", "elapsed_s": 0})
        progress({"event": "trial", "n": 1, "plan": a.plan.to_string(), "elapsed_s": 0})
        progress({"event": "result", "n": 1, "plan": a.plan.to_string(), "status": "ok", "predicted": a.tokens_per_s,
                  "measured": a.tokens_per_s * 0.8, "elapsed_s": 5})
        progress({"event": "trial", "n": 2, "plan": b.plan.to_string(), "elapsed_s": 5})
        self.started.set()
        deadline = time.monotonic() + 30
        while not (cancel is not None and cancel.is_set()) and time.monotonic() < deadline:
            time.sleep(0.02)
        rows = [TrialRow(number=0, trial_id="t0000", plan=a.plan, plan_str=a.plan.to_string(), status="ok",
                         seed_rank=0, predicted_tokens_per_s=a.tokens_per_s,
                         measured_tokens_per_s=a.tokens_per_s * 0.8),
                TrialRow(number=1, trial_id="t0001", plan=b.plan, plan_str=b.plan.to_string(), status="stale",
                         seed_rank=1, predicted_tokens_per_s=b.tokens_per_s)]
        return ConfirmResult(study_name="double", storage="memory", fingerprint="x", trials=rows, winner=a.plan,
                             winner_estimate=a, winner_measured_tokens_per_s=a.tokens_per_s * 0.8,
                             budget_s=budget_s, elapsed_s=6.0)


async def _focus(pilot, widget_id: str, limit: int = 12) -> None:
    """Tab until `widget_id` has the focus (keys only)."""
    for _ in range(limit):
        if name(pilot.app.focused) == widget_id:
            return
        await pilot.press("tab")
    raise AssertionError(f"Tab never reached #{widget_id}")


@needs_pipeline
@run_async
async def test_keyboard_only_walk_from_hardware_to_export(tmp_path, monkeypatch):
    from gpuadvisor import api

    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+n")  # Hardware -> Model; the model field has the focus, its text selected
        await settle(pilot)
        await pilot.press(*"350M", "tab", *"512")
        await pilot.pause()
        assert app.workload.model.name.startswith("gpt2-medium") and app.workload.training.seq_len == 512
        await pilot.press("ctrl+n")  # Goal: the goals list has the focus
        await settle(pilot)
        await pilot.press("down", "enter")  # most memory headroom
        assert app.objective == "memory"
        await pilot.press("up", "enter")
        assert app.objective == "throughput"
        await pilot.press("ctrl+n")  # Results: the ranked table has the focus
        await settle(pilot)
        assert app.current_mode == "results" and name(app.focused) == "ranking"
        assert app.screen.query_one("#ranking", DataTable).row_count > 1
        await pilot.press("down")
        assert "#2 " in text_of(app.screen.query_one("#detail", Static))
        double = _StudyDouble(app.suggestion)
        monkeypatch.setattr(api, "confirm", double)
        await pilot.press("ctrl+n")  # Confirm: Trials K has the focus; Enter starts
        await settle(pilot)
        await pilot.press("enter")
        for _ in range(100):
            await pilot.pause(0.05)
            if double.started.is_set():
                break
        await pilot.pause(0.1)
        screen = app.screen
        assert screen.running and screen.state == "running"
        await _focus(pilot, "cancel")
        await pilot.press("enter")
        for _ in range(100):
            await pilot.pause(0.05)
            if not screen.running:
                break
        await settle(pilot)
        table = screen.query_one("#trials", DataTable)
        assert [str(c) for c in table.get_row("1")][2] == "ok"
        assert [str(c) for c in table.get_row("2")][2] == "cancelled"  # not "running" after Cancel
        status = text_of(screen.query_one("#trial-status", Static))
        assert screen.state == "cancelled" and "not enough trials to confirm" in status
        assert "Confirmed winner" not in status and app.confirmed is None
        assert name(app.focused) == "start"  # Cancel went disabled: the focus moved to Start
        await pilot.press("ctrl+n")  # Export: the folder field has the focus; Enter writes
        await settle(pilot)
        assert "cost model's top plan" in text_of(app.screen.query_one("#export-plan", Static))
        await pilot.press(*"out", "enter")
        await settle(pilot)
        assert (tmp_path / "out" / "launch.sh").is_file()
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert not app.is_running
    await asyncio.sleep(0)
