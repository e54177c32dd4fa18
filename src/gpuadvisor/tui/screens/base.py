"""The frame every step shares: header, step bar, body, Back/Next row, footer."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header

from ..widgets import NavBar, StepBar

if TYPE_CHECKING:
    from ..app import GpuAdvisorApp


class StepScreen(Screen[None]):
    """A wizard step. Subclasses set STEP, AUTO_FOCUS (the step's first control) and implement body().

    Focus order: step bar, the step's controls top to bottom, Back, Next. On arrival the focus is on the
    first control (typing goes there), or on the step bar when the jump was made from the step bar.
    """

    STEP = ""
    NEXT_LABEL = "Next ▸"

    @property
    def wizard(self) -> "GpuAdvisorApp":
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header(icon="▣")
        yield StepBar(self.STEP)
        yield from self.body()
        yield NavBar(back=self.STEP != "hardware", next_label=self.NEXT_LABEL)
        yield Footer()

    def on_screen_resume(self) -> None:
        if self.wizard.focus_stepbar:
            self.wizard.focus_stepbar = False
            bar = self.query_one(StepBar)
            self.call_after_refresh(bar.focus)

    def body(self) -> Iterable[Widget]:  # pragma: no cover - abstract
        raise NotImplementedError
