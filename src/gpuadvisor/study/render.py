"""Terminal rendering of the study grid for `--dry-run`: plans, predictions, estimated wall time."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.console import RenderableType

from ..cli.console import Column, Group, Text, block, make_table, to_text
from ..schemas import Cluster
from .grid import DEEPSPEED_OVERHEAD_S, LAUNCH_OVERHEAD_S, Cell, cell_wall_s, study_wall_s
from .progress import fmt_duration
from .spec import StudySpec
from .state import StudyDir


def _gib(x: float) -> str:
    return f"{x / 2**30:.2f} GiB" if x >= 2**30 else f"{x / 2**20:.0f} MiB"


def grid_view(cells: list[Cell], spec: StudySpec, cluster: Cluster, out: Path) -> RenderableType:
    """The grid as a table, skipped cells with reasons, and the study's predicted wall time."""
    sd = StudyDir(out)
    ranks = "CPU ranks" if cluster.nodes and all(d.kind == "cpu" for n in cluster.nodes for d in n.devices) else "GPUs"
    # two-line headers keep the numeric columns narrow, so the text columns keep room at 80 columns
    table = make_table(Column("#", justify="right", no_wrap=True), Column("model", overflow="fold"),
                       Column("strategy", overflow="fold"), Column(ranks.replace(" ", "\n"), justify="right"),
                       Column("plan", overflow="fold"), Column("pred\ntok/s", justify="right", no_wrap=True),
                       Column("pred\npeak", justify="right", no_wrap=True),
                       Column("pred\ns/step", justify="right", no_wrap=True),
                       Column("est.\nwall", justify="right", no_wrap=True), Column("status", overflow="fold"))
    reasons: dict[str, list[str]] = {}
    todo: list[Cell] = []
    for i, c in enumerate(cells, 1):
        est = c.predicted
        done = c.runnable and sd.result(c) is not None
        if c.skip_reason:
            status = "skip"
            reasons.setdefault(c.skip_reason, []).append(f"#{i}")
        else:
            status = "done earlier" if done else "run"
            if not done:
                todo.append(c)
        wall = cell_wall_s(c, spec.steps, spec.warmup)
        gl = str(c.gpus) if c.nodes == 1 else f"{c.nodes}x{c.devices_per_node}"
        table.add_row(*[str(i), c.model, c.strategy, gl,
                     f"mb={c.plan.micro_batch_size} m={c.plan.num_micro_batches}" if c.plan else "-",
                     f"{est.tokens_per_s:,.0f}" if est else "-", _gib(est.memory.total) if est else "-",
                     f"{est.step_time_s:.4f}" if est else "-",
                     fmt_duration(wall) if c.runnable and not done else "-", status])
    head = Text(f"study grid on cluster '{cluster.name}' ({cluster.num_devices} devices): {len(spec.models)} "
                f"model(s), {spec.steps} timed + {spec.warmup} warm-up steps per cell, folder {out}")
    lines: list[str] = []
    if reasons:
        lines += ["", "skipped:"] + [f"  {','.join(ids)}: {why}" for why, ids in reasons.items()]
    notes = [c for c in cells if c.runnable and c.note]
    if notes:
        lines += ["", "notes:"] + [f"  {c.label}: {c.note}" for c in notes]
    total = study_wall_s(todo, spec.steps, spec.warmup)
    n_ds = sum(1 for c in todo if c.plan and c.plan.zero_stage)
    lines += ["", f"{len(todo)} cell(s) to run, estimated wall time {fmt_duration(total)} (predicted step time x "
                  f"{spec.steps + spec.warmup} steps + {LAUNCH_OVERHEAD_S:g} s per launch"
                  + (f" + {DEEPSPEED_OVERHEAD_S:g} s DeepSpeed start-up for {n_ds} ZeRO cell(s)" if n_ds else "")
                  + "); nothing has run (drop --dry-run to start)."]
    return Group(head, table, block(lines))


def render_grid(cells: list[Cell], spec: StudySpec, cluster: Cluster, out: Path, width: Optional[int] = None) -> str:
    """grid_view as plain text, `width` columns wide (default: the terminal's or COLUMNS)."""
    return to_text(grid_view(cells, spec, cluster, out), width)
