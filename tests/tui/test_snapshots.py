"""Snapshots of every step at 80x24 and 120x40 on the nano-cluster preset with model 1.5B.

Regenerate after a deliberate UI change: pytest tests/tui --snapshot-update (then commit __snapshots__).
"""
from __future__ import annotations

import pytest
from textual.widgets import Input

from .conftest import goto, make_app, needs_pipeline

STEPS = ("hardware", "model", "goal", "results", "confirm", "export")


@needs_pipeline
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@pytest.mark.parametrize("step", STEPS)
def test_step_snapshot(snap_compare, step, size):
    async def open_step(pilot):
        if step == "results":
            await goto(pilot, "results")
        elif step in ("confirm", "export"):
            await goto(pilot, "results")  # the later steps need a ranking
            await goto(pilot, step)
        else:
            await goto(pilot, step)
        pilot.app.clear_notifications()
        for field in pilot.app.screen.query(Input):  # the focused field's blinking cursor: shown, not blinking
            field.cursor_blink = False
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=size, run_before=open_step)
