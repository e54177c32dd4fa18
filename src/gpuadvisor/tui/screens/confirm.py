"""Step 5, Confirm: run short real trials of the top K plans, live progress, predicted vs measured."""
from __future__ import annotations

import threading
from typing import Any, Iterable, Optional

from rich.text import Text
from textual import on, work
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Static

from ...cli.render import human_rate
from .base import StepScreen


def _rate(x: Any) -> str:
    return human_rate(float(x)) if x else "-"


def _error(pred: Any, meas: Any) -> str:
    """Measured vs predicted, as a signed percentage."""
    return f"{(float(meas) - float(pred)) / float(pred):+.0%}" if pred and meas else "-"


class ConfirmScreen(StepScreen):
    """Start/cancel a trials study; rows arrive through the study's progress callback."""

    STEP = "confirm"
    AUTO_FOCUS = "#start"

    def __init__(self) -> None:
        super().__init__()
        self._cancel: Optional[threading.Event] = None
        self._rows: dict[str, Any] = {}
        self.running = False

    def body(self) -> Iterable[Widget]:
        with Horizontal(classes="row top"):
            yield Label("Trials K", classes="rowlabel")
            yield Input("3", id="top-k", compact=True, type="integer")
            yield Label(" Budget", classes="inlinelabel")
            yield Input("15m", id="budget", compact=True)
            yield Label(" Steps", classes="inlinelabel")
            yield Input("20", id="steps", compact=True, type="integer")
        with Horizontal(classes="row"):
            yield Button("Start trials", id="start", variant="success", compact=True)
            yield Button("Cancel", id="cancel", variant="error", compact=True, disabled=True)
            yield ProgressBar(total=1, id="progress", show_eta=False)
        yield Static("Trials run the bundled trainer on this cluster; skip this step to export the "
                     "cost model's pick.", id="trial-status")
        table: DataTable = DataTable(id="trials", cursor_type="row", zebra_stripes=True)
        yield table

    def on_mount(self) -> None:
        self.query_one("#trials", DataTable).add_columns("#", "plan", "status", "predicted", "measured", "error")

    # ---- start / cancel -----------------------------------------------------------------------------
    @on(Button.Pressed, "#start")
    def _start(self) -> None:
        from ...cli.suggest_cmd import parse_duration

        w = self.wizard
        try:
            top_k = int(self.query_one("#top-k", Input).value or 0)
            steps = int(self.query_one("#steps", Input).value or 0)
            if top_k < 1 or steps < 1:
                raise ValueError("K and steps must be at least 1")
            budget_s = parse_duration(self.query_one("#budget", Input).value)
        except ValueError as exc:
            w.show_error(exc, "Starting trials")
            return
        if w.suggestion is None:
            self.notify("Rank the plans first (Results).", severity="warning")
            return
        w.steps = steps
        w.confirmed = None
        self._rows.clear()
        self.query_one("#trials", DataTable).clear()
        self.query_one("#progress", ProgressBar).update(total=budget_s, progress=0)
        self._cancel = threading.Event()
        self._set_running(True)
        self.query_one("#trial-status", Static).update(f"Running up to {top_k} trials, budget {budget_s:.0f} s…")
        self.run_trials(top_k, budget_s, steps, self._cancel)

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self) -> None:
        if self.cancel_trials():
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

    def on_unmount(self) -> None:
        self.cancel_trials()

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
            self.query_one("#progress", ProgressBar).update(progress=float(ev["elapsed_s"]))
        if kind == "trial":
            key = str(ev.get("n"))
            if key not in self._rows:
                table.add_row(key, str(ev.get("plan", "")), "running", _rate(ev.get("predicted")), "-", "-", key=key)
            self._rows[key] = ev
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
        elif kind in ("start", "note", "done") and ev.get("message"):
            self.query_one("#trial-status", Static).update(Text(str(ev["message"])))

    def _finished(self, result: Any, exc: Optional[BaseException]) -> None:
        self._set_running(False)
        cancelled = self._cancel is not None and self._cancel.is_set()
        status = self.query_one("#trial-status", Static)
        if cancelled and exc is None and getattr(result, "winner", None) is None:
            status.update("Cancelled: the running trial was stopped; Export writes the cost model's pick.")
            return
        if exc is not None:
            self.wizard.show_error(exc, "Trials")
            status.update(Text(f"✗ trials stopped: {' '.join(str(exc).split())}", style="red"))
            return
        self.wizard.confirmed = result
        winner = getattr(result, "winner", None)
        if winner is not None:
            text = f"✓ confirmed winner: {winner.to_string()} (Export writes its launch files)"
        else:
            text = "No trial succeeded; Export writes the cost model's pick."
        status.update(("Cancelled. " if cancelled else "") + text)
