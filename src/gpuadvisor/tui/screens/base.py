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
    """A wizard step. Subclasses set STEP and implement body()."""

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

    def body(self) -> Iterable[Widget]:  # pragma: no cover - abstract
        raise NotImplementedError
