"""The confirm study as a rich table (predicted vs measured per trial), the verdict and the dashboard command."""
from __future__ import annotations

import shlex
from typing import Optional

from rich.console import RenderableType

from ..cli.console import Column, Group, Text, block, make_table, to_text
from ..cli.render import compact_plan, human_bytes, human_rate, human_time
from .schemas import ConfirmResult


# colour of a trial status on a terminal (piped output has none); anything else is a failure: red
# ("budget": cut by the study budget, not a verdict on the plan)
_STATUS_STYLE = {"ok": "green", "skipped": "dim", "pending": "yellow", "stale": "yellow", "budget": "yellow"}


def dashboard_command(storage: str) -> str:
    """The shell command that opens the study storage in optuna-dashboard (password stays masked)."""
    return f"optuna-dashboard {shlex.quote(storage)}"


def confirm_view(r: ConfirmResult) -> RenderableType:
    """Trials table (plan, status, predicted, measured, ratio, peak memory), errors, verdict and dashboard hint."""
    table = make_table(Column("#", justify="right", no_wrap=True), Column("plan", overflow="fold", min_width=16),
                       Column("status", no_wrap=True), Column("pred/s", justify="right", no_wrap=True),
                       Column("meas/s", justify="right", no_wrap=True), Column("m/p", justify="right", no_wrap=True),
                       Column("peak mem", justify="right", no_wrap=True))
    errors: list[str] = []
    for t in r.trials:
        pred = human_rate(t.predicted_tokens_per_s) if t.predicted_tokens_per_s else "-"
        meas = human_rate(t.measured_tokens_per_s) if t.measured_tokens_per_s else "-"
        ratio = f"{t.measured_over_predicted:.2f}" if t.measured_over_predicted else "-"
        mem = human_bytes(t.measured_peak_memory_bytes) if t.measured_peak_memory_bytes else "-"
        tag = "" if t.seed_rank is None else f"[top{t.seed_rank + 1}] "
        # spaces between the knobs let a long plan wrap inside its cell
        table.add_row(str(t.number), tag + compact_plan(t.plan).replace(",", " "),
                      Text(t.status, style=_STATUS_STYLE.get(t.status, "red")), pred, meas, ratio, mem)
        if t.error:
            what = "note" if t.status == "ok" else "error"
            errors.append(f"trial {t.number} {what}: {' '.join(t.error.split())[:300]}")
    head = (f"Confirm study '{r.study_name}' ({r.storage}); {human_time(r.elapsed_s)} of "
            f"{human_time(r.budget_s)} budget used")
    lines = list(errors)
    if r.winner is None:
        lines.append("No trial succeeded: see the errors above.")
    else:
        lines.append(f"Confirmed winner: {compact_plan(r.winner)} at "
                     f"{human_rate(r.winner_measured_tokens_per_s or 0)}/s measured")
        if r.first_pick_gap_pct is not None:
            verdict = ("the cost model's first pick won" if r.first_pick_gap_pct <= 0 else
                       f"the cost model's first pick measured {r.first_pick_gap_pct:.1f}% below the best")
            lines.append(f"First pick: {compact_plan(r.first_pick) if r.first_pick else '-'}; {verdict}")
    lines += [f"note: {n}" for n in r.notes]
    lines.append(f"Browse the trials: {dashboard_command(r.storage)}")
    return Group(Text(head, style="bold"), table, block(lines))


def render_confirm(r: ConfirmResult, width: Optional[int] = None) -> str:
    """confirm_view as plain text, `width` columns wide (default: the terminal's or COLUMNS)."""
    return to_text(confirm_view(r), width)
