"""Step 4, Results: the ranked plans, the selected plan's breakdowns, and live what-if re-ranking.

The ranking runs in the app's job process (tui.jobproc), waited for by a thread worker: leaving the step
or changing a what-if while it runs kills it, so an abandoned ranking never keeps a core busy.
"""
from __future__ import annotations

import re
import time
from typing import Any, Iterable, Optional, Sequence

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import DataTable, Input, Label, Select, Static

from ...cli.render import human_bytes, human_rate, human_time, objective_columns, plan_label
from ...schemas import Estimate
from ..jobproc import JobCancelled
from ..widgets import Field, bar_lines
from ..wording import error_line, tui_wording
from .base import StepScreen

#: The ranking note that counts pruned plans: the status line already gives the counts.
_PRUNED_NOTE = re.compile(r"\d+ candidates: ")

#: What-if NIC choices: (label, spec for api.suggest(what_if=...)); "" keeps the cluster's NIC.
NIC_CHOICES: tuple[tuple[str, str], ...] = (
    ("NIC as is", ""), ("10 GbE", "nic=10gbe"), ("25 GbE", "nic=25gbe"), ("100 GbE", "nic=100gbe"),
    ("RoCE 200G", "nic=roce-200g"), ("IB HDR 200G", "nic=ib-hdr"), ("IB NDR 400G", "nic=ib-ndr"),
)


def render_detail(e: Estimate, rank: int, baseline: Optional[Estimate] = None) -> Group:
    """Step-time and memory breakdowns as bars, traffic, rules that fired and why the plan ranks here."""
    s, m = e.step, e.memory
    parts: list[Any] = [Text(f"#{rank} {plan_label(e)}", style="bold"), Text(e.plan.to_string(), style="dim")]
    head = f"{human_rate(e.tokens_per_s)}/s, step {s.total_s * 1e3:.1f} ms"
    if e.time_to_train_s is not None:
        head += f", train the budget in {human_time(e.time_to_train_s)}"
    if e.cost is not None:
        head += f", cost {e.cost:.2f}"
    parts.append(Text(head))
    steps = [("compute", s.compute_s), *((f"comm {k}", v) for k, v in s.comm_exposed_s.items()),
             ("bubble", s.bubble_s), ("offload", s.offload_s), ("optimizer", s.optimizer_s),
             ("overhead", s.overhead_s)]
    parts += [Text("\nStep time", style="bold underline"),
              bar_lines(steps, s.total_s, lambda v: f"{v * 1e3:.1f} ms")]
    mem = [("weights", m.weights), ("grads", m.gradients), ("optimizer", m.optimizer),
           ("activations", m.activations), ("logits", m.logits), ("comm buffers", m.comm_buffers),
           ("framework", m.framework), ("free", max(0, e.memory_capacity_bytes - m.total))]
    parts += [Text(f"\nMemory: peak {human_bytes(m.total)} of {human_bytes(e.memory_capacity_bytes)}",
                   style="bold underline"),
              bar_lines(mem, max(e.memory_capacity_bytes, m.total), human_bytes)]
    if e.host_memory_bytes:
        parts.append(Text(f"host memory for offload: {human_bytes(e.host_memory_bytes)} per node"))
    if e.link_bytes_per_step:
        parts.append(Text("\nBytes per step: " + ", ".join(
            f"{k} {human_bytes(v)}" for k, v in e.link_bytes_per_step.items())))
    if e.network_bytes_per_run is not None:
        parts.append(Text(f"over the network for the token budget: {human_bytes(e.network_bytes_per_run)}"))
    if e.learned_factor != 1.0:
        parts.append(Text(f"learned correction x{e.learned_factor:.2f} "
                          f"(analytical {human_rate(e.analytical_tokens_per_s)}/s)"))
    if e.rules:
        parts.append(Text("\nRules that fired", style="bold underline"))
        colour = {"info": "cyan", "warn": "yellow", "penalty": "dark_orange", "forbid": "red"}
        for r in e.rules:
            line = Text(f"[{r.severity}] ", style=colour.get(r.severity, ""))
            line.append(r.message)
            line.append(f" ({r.source})", style="dim")
            parts.append(line)
    if e.reasons:
        parts.append(Text("\nWhy", style="bold underline"))
        parts.extend(Text(f"• {r}") for r in e.reasons)
    return Group(*parts)


RANKING_COLUMNS = ("#", "plan", "tok/s", "eff", "peak mem", "net/step")


def fill_table(table: DataTable, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Replace the table's content; column widths are set from the content, so the header is drawn at its final
    widths at once (DataTable's own sizing happens later, on idle, and a header drawn before it stays stale)."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    table.clear(columns=True)
    for label, width in zip(columns, widths):
        table.add_column(label, width=width, key=label)
    for i, row in enumerate(rows, 1):
        table.add_row(*row, key=str(i))


class ResultsScreen(StepScreen):
    """Ranked table on top, the selected plan below; what-if controls re-rank in a worker."""

    STEP = "results"
    AUTO_FOCUS = "#ranking"

    def __init__(self) -> None:
        super().__init__()
        self._ranked_key: Any = None  # what the shown (or running) ranking was made for
        self._ranking_since: Optional[float] = None  # monotonic start of the running ranking
        self.baseline: Any = None  # Suggestion without what-ifs, to show the gain

    def body(self) -> Iterable[Widget]:
        with Horizontal(classes="row top"):
            yield Label("What-if", classes="rowlabel")
            yield Select([(k, v) for k, v in NIC_CHOICES], value="", allow_blank=False, id="whatif-nic",
                         compact=True)
            yield Label(" GPUs", classes="inlinelabel")
            yield Field(placeholder="nodes x GPUs, e.g. 2x4", id="whatif-gpus", compact=True)
        yield Static("Ranking…", id="rank-status")
        table: DataTable = DataTable(id="ranking", cursor_type="row", zebra_stripes=True)
        yield table
        with VerticalScroll(id="detail-view", classes="panel"):
            yield Static(id="detail")

    def on_mount(self) -> None:
        fill_table(self.query_one("#ranking", DataTable), RANKING_COLUMNS, [])
        self.set_interval(1.0, self._tick)

    def on_screen_resume(self) -> None:
        self.rerank_if_stale()

    def on_screen_suspend(self) -> None:
        """Leaving the step abandons a running ranking (its inputs may change before the user is back)."""
        self.cancel_ranking()

    def cancel_ranking(self) -> bool:
        """Stop a running ranking (its process is killed); the next visit ranks again. True if one ran."""
        if self._ranking_since is None:
            return False
        self._ranking_since = None
        self._ranked_key = None
        self.wizard.ranker.cancel()
        self.query_one("#rank-status", Static).update("Ranking stopped.")
        return True

    def _tick(self) -> None:
        """A running ranking shows its age (every second) and how to stop it."""
        if self._ranking_since is not None:
            age = time.monotonic() - self._ranking_since
            self.query_one("#rank-status", Static).update(
                f"Ranking… {age:.0f} s (Esc goes back and stops it; a what-if change restarts it)")

    def what_if(self) -> list[str]:
        """The what-if specs from the controls, in the form `suggest --what-if` takes."""
        specs = []
        nic = self.query_one("#whatif-nic", Select).value
        if nic:
            specs.append(str(nic))
        gpus = self.query_one("#whatif-gpus", Input).value.strip().lower().replace(" ", "")
        if gpus:
            specs.append(f"gpus={gpus}")
        return specs

    @on(Select.Changed, "#whatif-nic")
    @on(Input.Submitted, "#whatif-gpus")
    def _what_if_changed(self) -> None:
        self.rerank_if_stale()

    def rerank_if_stale(self) -> None:
        """Re-rank when the cluster, workload, goal or what-ifs changed since the last ranking."""
        w = self.wizard
        if w.cluster is None or w.workload is None:
            return
        specs = self.what_if()
        key = (w.cluster, w.workload, w.objective, w.price_per_gpu_hour, tuple(specs), w.top)
        if key == self._ranked_key:
            return
        if self._ranking_since is not None:
            w.ranker.cancel()  # the running ranking is for other inputs: stop it, its result would be dropped
        self._ranked_key = key
        self._ranking_since = time.monotonic()
        w.what_if = specs
        self.query_one("#rank-status", Static).update("Ranking…")
        self.rank(w.cluster, w.workload, w.objective, w.price_per_gpu_hour, specs, w.top, key)

    @work(thread=True, group="rank", exit_on_error=False)
    def rank(self, cluster, workload, objective: str, price: Optional[float], specs: list[str], top: int,
             key: Any) -> None:
        """The app's rank_job (tui.rankjob) in the job process; this thread only waits (a cancel returns at once)."""
        try:
            w = self.wizard
            base, result = w.ranker.run(w.rank_job, cluster, workload, objective, price, specs, top)
        except JobCancelled:
            return  # abandoned: a newer ranking, or the user left the step
        except Exception as exc:
            self.app.call_from_thread(self._failed, exc, key)
            return
        self.app.call_from_thread(self._ranked, base, result, key)

    def _failed(self, exc: BaseException, key: Any) -> None:
        if key != self._ranked_key:
            return  # an abandoned ranking's error
        self._ranking_since = None
        self._ranked_key = None
        self.wizard.suggestion = None
        self.wizard.show_error(exc, "Ranking")
        self.query_one("#rank-status", Static).update(Text(f"✗ {error_line(exc)}", style="red"))
        self.query_one("#ranking", DataTable).clear()
        self.query_one("#detail", Static).update("")

    def _ranked(self, base: Any, result: Any, key: Any) -> None:
        if key != self._ranked_key:
            return  # a newer ranking is on its way
        self._ranking_since = None
        w = self.wizard
        self.baseline = base
        w.suggestion = result
        w.confirmed = None
        r = result.ranking
        status = f"{r.n_candidates} plans, {r.n_feasible} feasible, by {r.objective}"
        if w.objective == "largest":
            status = f"largest model that fits: {result.workload.model.name}; " + status
        if w.what_if:
            b = base.ranking.top[0].tokens_per_s if base.ranking.top else 0.0
            a = r.top[0].tokens_per_s if r.top else 0.0
            gain = f" (x{a / b:.2f})" if b > 0 else ""
            status += f"; what-if best {human_rate(b)} → {human_rate(a)}/s{gain}"
        # the ranking's notes, as the CLI prints them under "Ranked ..." (best plan on fewer devices, host CPU)
        notes = [tui_wording(f"note: {n}") for n in r.notes if not _PRUNED_NOTE.match(n)]
        self.query_one("#rank-status", Static).update("\n".join([status, *notes]))
        table = self.query_one("#ranking", DataTable)
        extra = objective_columns(r, RANKING_COLUMNS[2])  # what a time or cost ranking sorts by, as the CLI shows
        rows = [(str(i), plan_label(e), human_rate(e.tokens_per_s),
                 f"{e.scaling_efficiency:.2f}" if e.scaling_efficiency is not None else "-",
                 human_bytes(e.memory.total), human_bytes(e.network_bytes_per_step), *(f(e) for _, f in extra))
                for i, e in enumerate(r.top, 1)]
        fill_table(table, (*RANKING_COLUMNS, *(name for name, _ in extra)), rows)
        if not r.top:
            why = [tui_wording(f"Nothing fits. {r.fits_nowhere or ''}".rstrip())]
            if r.infeasible_reasons:
                why.append("Rejected: " + "; ".join(f"{k} ({v})" for k, v in r.infeasible_reasons.items()))
            self.query_one("#detail", Static).update(Text("\n".join(why), style="yellow"))
            return
        table.move_cursor(row=0)
        self._show_detail(0)

    @on(DataTable.RowHighlighted, "#ranking")
    def _row(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail(event.cursor_row)

    def _show_detail(self, row: int) -> None:
        s = self.wizard.suggestion
        if s is None or not (0 <= row < len(s.ranking.top)):
            return
        self.query_one("#detail", Static).update(render_detail(s.ranking.top[row], row + 1))
