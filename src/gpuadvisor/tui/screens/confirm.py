"""Step 5, Confirm: run short real trials of the top K plans, live progress, predicted vs measured.

States a study ends in: confirmed (every one of the top K plans got a verdict and one ran), not enough
trials to confirm (budget ran out or cancelled first: the cost model's pick stays the export), failed (no
trial ran, or the study could not start: shown as failure, not as a full bar), cancelled.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Iterable, Optional

from rich.text import Text
from textual import on, work
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Static

from ...cli.render import compact_plan, human_rate
from ..widgets import Field
from ..wording import error_line
from .base import StepScreen

#: Trial statuses that are a verdict on the plan (the others: skipped, stale, pending, cut by the budget).
VERDICTS = ("ok", "oom", "timeout", "crash", "rendezvous", "invalid_metrics")


def _rate(x: Any) -> str:
    return human_rate(float(x)) if x else "-"


def _error(pred: Any, meas: Any) -> str:
    """Measured vs predicted, as a signed percentage."""
    return f"{(float(meas) - float(pred)) / float(pred):+.0%}" if pred and meas else "-"


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


def study_outcome(result: Any, expected: int, cancelled: bool) -> tuple[str, str, bool]:
    """(state, message, confirmed) of a finished study; `expected` = how many top plans it was to compare.

    A winner is confirmed only when the study was not cancelled and every one of the `expected` top plans
    got a verdict (measured, or failed on its own); otherwise the best measured plan is "best so far".
    """
    rows = list(getattr(result, "trials", None) or [])
    ran = [r for r in rows if r.status in VERDICTS]
    judged = {r.plan_str for r in ran if r.seed_rank is not None}
    winner = getattr(result, "winner", None)
    keep = "Export writes the cost model's top plan."
    best = (f"best so far {compact_plan(winner)} at {human_rate(result.winner_measured_tokens_per_s or 0)}/s"
            if winner is not None else "")
    if cancelled:
        if winner is None:
            return "cancelled", f"Cancelled after {len(ran)} finished trial(s); nothing measured. {keep}", False
        return ("cancelled", f"Cancelled: not enough trials to confirm ({len(judged)} of {expected} top plans "
                f"judged; {best}). {keep}", False)
    if winner is None:
        failed = ", ".join(sorted({r.status for r in ran})) or "none ran"
        return "failed", f"✗ No trial succeeded ({failed}). {keep}", False
    if len(judged) < expected:
        return ("incomplete", f"Not enough trials to confirm: the budget ran out after {len(judged)} of "
                f"{expected} top plans ({best}). {keep} Start again with more budget to resume.", False)
    rate = human_rate(result.winner_measured_tokens_per_s or 0)
    if expected == 1:
        return ("done", f"✓ Measured {compact_plan(winner)} at {rate}/s (K=1: nothing to compare). Export writes it.",
                True)
    return ("done", f"✓ Confirmed winner: {compact_plan(winner)} at {rate}/s, best of {len(judged)} top plans. "
            "Export writes its launch files.", True)


class ConfirmScreen(StepScreen):
    """Start/cancel a trials study; rows arrive through the study's progress callback."""

    STEP = "confirm"
    AUTO_FOCUS = "#top-k"

    def __init__(self) -> None:
        super().__init__()
        self._cancel: Optional[threading.Event] = None
        self._rows: dict[str, Any] = {}
        self.running = False
        self.state = "idle"  # idle | running | cancelling | done | incomplete | cancelled | failed
        self._expected = 0
        self._budget_s = 0.0
        self._clock_at: tuple[float, float] = (0.0, 0.0)  # (study elapsed_s, monotonic) at the last event
        self._trial: Optional[str] = None  # key of the running trial's row

    def body(self) -> Iterable[Widget]:
        with Horizontal(classes="row top"):
            yield Label("Trials K", classes="rowlabel")
            yield Field("3", id="top-k", compact=True, type="integer")
            yield Label(" Budget", classes="inlinelabel")
            yield Field("15m", id="budget", compact=True)
            yield Label(" Steps", classes="inlinelabel")
            yield Field("20", id="steps", compact=True, type="integer")
        with Horizontal(classes="row"):
            yield Button("Start trials", id="start", variant="success", compact=True)
            yield Button("Cancel", id="cancel", variant="error", compact=True, disabled=True)
            yield ProgressBar(total=1, id="progress", show_eta=False)
            yield Static("", id="run-state")
        yield Static("Trials run the bundled trainer on this cluster; skip this step to export the "
                     "cost model's pick.", id="trial-status")
        table: DataTable = DataTable(id="trials", cursor_type="row", zebra_stripes=True)
        yield table

    def on_mount(self) -> None:
        self.query_one("#trials", DataTable).add_columns("#", "plan", "status", "predicted", "measured", "error")
        self.set_interval(1.0, self._tick)

    # ---- start / cancel -----------------------------------------------------------------------------
    @on(Button.Pressed, "#start")
    @on(Input.Submitted, "#top-k, #budget, #steps")
    def _start(self) -> None:
        from ...cli.suggest_cmd import parse_duration

        w = self.wizard
        if self.running:
            return
        try:
            top_k = int(self.query_one("#top-k", Input).value or 0)
            steps = int(self.query_one("#steps", Input).value or 0)
            if top_k < 1 or steps < 1:
                raise ValueError("Trials K and Steps must be at least 1")
            budget_s = parse_duration(self.query_one("#budget", Input).value)
        except ValueError as exc:
            w.show_error(exc, "Starting trials")
            return
        if w.suggestion is None:
            self.notify("Rank the plans first (Results).", severity="warning")
            return
        w.confirmed = None
        self._rows.clear()
        self._trial = None
        self._expected = max(1, min(top_k, w.suggestion.ranking.n_feasible))
        self._budget_s = budget_s
        self._clock_at = (0.0, time.monotonic())
        self.query_one("#trials", DataTable).clear()
        bar = self.query_one("#progress", ProgressBar)
        bar.display = True
        bar.update(total=budget_s, progress=0)
        self._cancel = threading.Event()
        self._set_running(True)
        self._set_state("running", "starting…")
        self.query_one("#trial-status", Static).update(f"Running up to {top_k} trials, budget {budget_s:.0f} s…")
        self.run_trials(top_k, budget_s, steps, self._cancel)

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self) -> None:
        if self.cancel_trials():
            self._set_state("cancelling", "cancelling…")
            self.query_one("#trial-status", Static).update("Cancelling: stopping the running trial…")
            self.query_one("#cancel", Button).disabled = True

    def cancel_trials(self) -> bool:
        """Stop a running study (its trial gets SIGTERM, then SIGKILL to its session); True if one ran."""
        c = self._cancel
        if c is None or c.is_set() or not self.running:
            return False
        c.set()  # the study stops the running trial (SIGTERM, then SIGKILL to its session) and returns
        return True

    def _set_running(self, running: bool) -> None:
        self.running = running
        self.query_one("#start", Button).disabled = running
        self.query_one("#cancel", Button).disabled = not running
        if not running and self.focused_is_disabled():
            self.query_one("#start", Button).focus()

    def focused_is_disabled(self) -> bool:
        """The focus sits on a control that just became disabled (Cancel after the study ended)."""
        f = self.focused
        return f is None or f.disabled

    def _set_state(self, state: str, label: str) -> None:
        """The word next to the bar; the bar's colour follows the state (app.tcss)."""
        self.state = state
        run_state = self.query_one("#run-state", Static)
        run_state.update(label)
        for s in ("running", "cancelling", "done", "incomplete", "cancelled", "failed"):
            run_state.set_class(s == state, f"-{s}")
            self.query_one("#progress", ProgressBar).set_class(s == state, f"-{s}")

    def on_unmount(self) -> None:
        self.cancel_trials()

    def _tick(self) -> None:
        """Once a second while a study runs: the bar and the clock advance between the study's events."""
        if not self.running:
            return
        elapsed = self._clock_at[0] + time.monotonic() - self._clock_at[1]
        self.query_one("#progress", ProgressBar).update(progress=min(elapsed, self._budget_s))
        what = f"trial {self._trial}" if self._trial else "starting"
        if self.state == "running":
            self._set_state("running", f"{what} · {_clock(elapsed)}")

    # ---- the study, off the UI thread ---------------------------------------------------------------
    @work(thread=True, exclusive=True, group="trials", exit_on_error=False)
    def run_trials(self, top_k: int, budget_s: float, steps: int, cancel: threading.Event) -> None:
        from ... import api

        w = self.wizard
        s = w.suggestion

        def progress(ev: dict[str, Any]) -> None:
            self.app.call_from_thread(self._event, dict(ev))

        result, error = None, None
        try:
            result = api.confirm(s.workload, cluster=s.cluster, top_k=top_k, budget_s=budget_s, steps=steps,
                                 progress=progress, cancel=cancel, **w.confirm_options)
        except Exception as exc:
            error = exc
        self.app.call_from_thread(self._finished, result, error)

    def _event(self, ev: dict[str, Any]) -> None:
        """One progress event of the study: start / trial (began) / result / note / done."""
        kind = ev.get("event")
        table = self.query_one("#trials", DataTable)
        if "elapsed_s" in ev:
            self._clock_at = (float(ev["elapsed_s"]), time.monotonic())
            self.query_one("#progress", ProgressBar).update(progress=min(float(ev["elapsed_s"]), self._budget_s))
        if kind == "trial":
            key = str(ev.get("n"))
            if key not in self._rows:
                table.add_row(key, str(ev.get("plan", "")), "running", _rate(ev.get("predicted")), "-", "-", key=key)
            self._rows[key] = ev
            self._trial = key
        elif kind == "result":
            key = str(ev.get("n"))
            row = (key, str(ev.get("plan", "")), str(ev.get("status", "")), _rate(ev.get("predicted")),
                   _rate(ev.get("measured")), _error(ev.get("predicted"), ev.get("measured")))
            if key in self._rows:
                for col, value in zip(table.columns, row):
                    table.update_cell(key, col, value)
            else:
                table.add_row(*row, key=key)
            self._rows[key] = ev
            if self._trial == key:
                self._trial = None
        elif kind in ("start", "note") and ev.get("message"):
            self.query_one("#trial-status", Static).update(Text(str(ev["message"])))

    def _finished(self, result: Any, exc: Optional[BaseException]) -> None:
        cancelled = self._cancel is not None and self._cancel.is_set()
        self._set_running(False)
        table = self.query_one("#trials", DataTable)
        status_col = list(table.columns)[2]
        for key in self._rows:  # a trial without a result event was stopped: never leave it "running"
            if str(table.get_cell(key, status_col)) == "running":
                table.update_cell(key, status_col, "cancelled" if cancelled else "stopped")
        self._trial = None
        status = self.query_one("#trial-status", Static)
        if exc is not None:
            self.query_one("#progress", ProgressBar).display = False  # a failed start is not a full bar
            self._set_state("failed", "✗ failed")
            self.wizard.show_error(exc, "Trials")
            status.update(Text(f"✗ Trials could not run: {error_line(exc)}", style="red"))
            return
        state, message, confirmed = study_outcome(result, self._expected, cancelled)
        self.wizard.confirmed = result if confirmed else None
        if state == "failed":
            self.query_one("#progress", ProgressBar).display = False
        labels = {"done": "✓ done", "incomplete": "not confirmed", "cancelled": "cancelled", "failed": "✗ failed"}
        self._set_state(state, labels[state])
        status.update(Text(message, style="red" if state == "failed" else ""))
