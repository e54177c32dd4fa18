"""Helpers for driving the TUI wizard with Pilot."""
from __future__ import annotations

import asyncio
import functools
import importlib

import pytest

PRESET = "nano-cluster-2x2-a40-1gbe"
MODEL = "1.5B"


def pipeline_ready() -> bool:
    """True once ranking and launch (built by other stages) are importable."""
    try:
        return hasattr(importlib.import_module("gpuadvisor.ranking"), "rank") and \
            hasattr(importlib.import_module("gpuadvisor.launch"), "emit")
    except ImportError:
        return False


needs_pipeline = pytest.mark.skipif(not pipeline_ready(), reason="gpuadvisor.ranking / launch not built yet")


def make_app(**kw):
    from gpuadvisor.tui.app import GpuAdvisorApp

    kw.setdefault("preset", PRESET)
    kw.setdefault("model", MODEL)
    kw.setdefault("probe_on_start", False)
    return GpuAdvisorApp(**kw)


async def settle(pilot) -> None:
    """Wait until every worker (cluster load, ranking) has finished and the screen has refreshed."""
    for _ in range(3):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.2)
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


async def goto(pilot, step: str) -> None:
    """Open a step through the app's own action (what the number keys do), then settle."""
    await settle(pilot)
    pilot.app.action_goto(step)
    await settle(pilot)


def run_async(fn):
    """Run an async test with asyncio.run (no pytest async plugin needed)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))
    return wrapper


def text_of(widget) -> str:
    """The plain text a Static shows (its content rendered by Rich, no styles)."""
    import io

    from rich.console import Console

    console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()
