"""Step 6, Export: write launch.sh, job.json, ds_config.json and env.sh, and show how to start training."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from rich.text import Text
from textual import on
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Static

from ...cli.render import human_rate, plan_label
from ..widgets import Field
from .base import StepScreen

DEFAULT_DIR = "gpuadvisor-launch"


class ExportScreen(StepScreen):
    """Choose a folder and a plan, write the files exactly as `gpuadvisor suggest --emit DIR [--rank N | --plan
    SPEC] [--force]` does."""

    STEP = "export"
    AUTO_FOCUS = "#out-dir"
    NEXT_LABEL = ""

    def body(self) -> Iterable[Widget]:
        with Horizontal(classes="row top"):
            yield Label("Folder", classes="rowlabel")
            yield Field(DEFAULT_DIR, id="out-dir", compact=True)
            yield Button("Write files", id="write", variant="success", compact=True)
        with Horizontal(classes="row"):
            yield Label("Plan", classes="rowlabel")
            yield Input(placeholder="empty = top plan; 2 = the 2nd ranked; or dp=2,pp=2,mb=4,m=8", id="which",
                        compact=True)
            yield Checkbox("Overwrite my edits", id="force", compact=True)
        yield Static(id="export-plan")
        with VerticalScroll(id="launch-view", classes="panel"):
            yield Static(id="launch")

    def on_screen_resume(self) -> None:
        self.show_plan()

    def show_plan(self) -> None:
        """Which plan will be exported, and its launch commands."""
        w = self.wizard
        s = w.suggestion
        if s is None or s.launch is None:
            self.query_one("#export-plan", Static).update(Text("Nothing to export: no plan fits.", style="red"))
            return
        winner = getattr(w.confirmed, "winner", None) if w.confirmed is not None else None
        which = (f"winner confirmed by trials: {winner.to_string()}, measured "
                 f"{human_rate(w.confirmed.winner_measured_tokens_per_s or 0)}/s" if winner is not None
                 else f"cost model's top plan: {plan_label(s.ranking.top[0])}")
        self.query_one("#export-plan", Static).update(Text(f"Exporting the {which}", style="bold"))
        try:
            from ...cli.suggest_cmd import export_launch
            from ...launch import render_launch

            self.query_one("#launch", Static).update(Text(render_launch(export_launch(s, w.confirmed))))
        except Exception as exc:
            self.query_one("#launch", Static).update(Text(f"cannot render the launch config: {exc}", style="red"))

    @on(Button.Pressed, "#write")
    @on(Input.Submitted, "#out-dir")
    def _write(self) -> None:
        w = self.wizard
        text = self.query_one("#out-dir", Input).value.strip()
        if not text:
            self.notify("Type a folder to write the launch files to.", severity="warning")
            return
        if w.suggestion is None:
            self.notify("Rank the plans first (Results).", severity="warning")
            return
        out = Path(text).expanduser()
        which = self.query_one("#which", Input).value.strip()
        rank = int(which) if which.isdecimal() else None
        plan = which if which and rank is None else None
        try:
            from ...cli.suggest_cmd import _emit  # the same writer as `gpuadvisor suggest --emit`

            _emit(w.suggestion, out, w.confirmed, rank=rank, plan=plan,
                  force=self.query_one("#force", Checkbox).value)
        except Exception as exc:
            w.show_error(exc, "Writing the launch files")
            return
        files = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        nodes = w.suggestion.launch.nodes if w.suggestion.launch is not None else []
        if len(nodes) > 1:
            starts = [f"  on {n.node}: NODE_RANK={n.node_rank} bash {out}/launch.sh\n" for n in nodes]
            command = f"NODE_RANK=<i> bash {out}/launch.sh"
        else:
            starts = [f"  bash {out}/launch.sh\n"]
            command = f"bash {out}/launch.sh"
        self.query_one("#launch", Static).update(Text.assemble(
            ("✓ wrote ", "green"), (f"{', '.join(files)} to {out}/\n\n", ""),
            ("Start training (on every node at once):\n", "bold"), *((line, "bold cyan") for line in starts)))
        self.notify(f"Start training with: {command}", title="Launch files written", markup=False)
