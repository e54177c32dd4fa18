"""Step 3, Goal: what "best" means (throughput, memory headroom, cost for the budget, largest model)."""
from __future__ import annotations

from typing import Iterable, Optional

from rich.text import Text
from textual import on
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, Label, RadioButton, RadioSet, Static

from ..widgets import Field
from .base import StepScreen

#: (objective passed to api.suggest, label). "largest" asks for the largest preset model that fits.
GOALS: tuple[tuple[str, str], ...] = (
    ("throughput", "Fastest: most tokens per second"),
    ("memory", "Most memory headroom: lowest peak memory per GPU"),
    ("time", "Shortest time to train the token budget"),
    ("cost", "Cheapest for the token budget (price per GPU-hour)"),
    ("largest", "Largest model that fits (sizes 10M..175B, your seq len and batch)"),
)


class GoalScreen(StepScreen):
    """Pick the ranking objective; cost needs a price and a token budget."""

    STEP = "goal"
    AUTO_FOCUS = "#goal"

    def body(self) -> Iterable[Widget]:
        form = VerticalScroll(id="goal-form")
        form.can_focus = False
        with form:
            with RadioSet(id="goal"):
                for i, (_, label) in enumerate(GOALS):
                    yield RadioButton(label, value=i == 0)
            with Horizontal(classes="row"):
                yield Label("Price $/GPU-hour", classes="formlabel")
                yield Field(placeholder="e.g. 1.10 (for cost)", id="price", compact=True, type="number",
                            valid_empty=True)
            yield Static(id="goal-status", classes="panel")

    def on_mount(self) -> None:
        self.validate_goal()

    def on_screen_resume(self) -> None:
        self.validate_goal()

    @on(RadioSet.Changed)
    @on(Input.Changed, "#price")
    def _changed(self) -> None:
        self.validate_goal()

    def selected(self) -> str:
        idx = self.query_one("#goal", RadioSet).pressed_index
        return GOALS[max(idx, 0)][0]

    def validate_goal(self) -> None:
        """Store the objective on the app; explain what it still needs."""
        w = self.wizard
        status = self.query_one("#goal-status", Static)
        goal = self.selected()
        text = self.query_one("#price", Input).value.strip()
        price: Optional[float] = None
        problem = None
        if text:
            try:
                price = float(text)
                if price <= 0:
                    raise ValueError
            except ValueError:
                problem = f"price must be a positive number, got '{text}'"
        budget = w.workload.training.token_budget if w.workload else None
        if goal == "cost" and price is None and not problem:
            problem = "cheapest needs a price per GPU-hour"
        if goal in ("cost", "time") and not budget:
            problem = (problem + "; " if problem else "") + "set a token budget on the Model step"
        w.objective, w.price_per_gpu_hour = goal, price
        status.set_class(bool(problem), "error")
        if problem:
            status.update(Text(f"✗ {problem}"))
        else:
            status.update(Text(f"✓ ranking by {goal}" + (f" at ${price:g}/GPU-hour" if price else "")))
