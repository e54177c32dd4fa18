"""Small shared widgets: the step bar, the Back/Next row, and text bar charts for breakdowns."""
from __future__ import annotations

from typing import Callable, Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Input, Static

#: Colours of bar segments, cycled (breakdowns have at most ~8 parts).
BAR_COLOURS = ("#5fafff", "#ffaf5f", "#d75f5f", "#af87ff", "#5fd7af", "#d7d75f", "#87afaf", "#ff87d7")

#: Link-matrix cell colour per link class: fast (NVLink) green ... slow (across sockets) red.
LINK_COLOURS = {"X": "dim", "NV": "bold green", "PIX": "green", "PXB": "yellow", "PHB": "dark_orange",
                "NODE": "dark_orange", "SYS": "red", "SHM": "cyan", "unknown": "magenta"}


#: How terminals deliver Alt+1..6 without the kitty keyboard protocol: ESC+digit, which Textual reads as the
#: characters macOS's Option+digit types (¡ ™ £ ¢ ∞ §). Both spellings jump (app.py); those six characters
#: therefore cannot be typed into a field.
ALT_DIGIT_KEYS = ("inverted_exclamation_mark", "trade_mark_sign", "pound_sign", "cent_sign", "infinity",
                  "section_sign")


class Field(Input):
    """The wizard's text field: an Input that leaves the six Alt+digit characters to the step jumps."""

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return key not in ALT_DIGIT_KEYS and super().check_consume_key(key, character)


class StepBar(Static, can_focus=True):
    """`1 Hardware > 2 Model > ...` with the current step highlighted; each step is clickable.

    It is in the focus order (Shift+Tab from a step's first control): while it has the focus, Left/Right
    open the previous/next step and 1..6 jump, the focus staying on the bar. Elsewhere digits are text.
    """

    BINDINGS = [
        Binding("left", "app.prev_step(True)", "Previous step", show=False),
        Binding("right", "app.next_step(True)", "Next step", show=False),
        *(Binding(str(i), f"jump({i})", f"Step {i}", show=False) for i in range(1, 7)),
    ]

    def __init__(self, current: str) -> None:
        super().__init__(classes="stepbar")
        self.current = current

    def action_jump(self, number: int) -> None:
        from .app import STEPS

        if 1 <= number <= len(STEPS):
            self.app.action_goto(STEPS[number - 1][0], True)  # type: ignore[attr-defined]

    def on_mount(self) -> None:
        from .app import STEPS

        parts = []
        for i, (name, title) in enumerate(STEPS, 1):
            label = f"{i} {title}"
            if name == self.current:
                parts.append(f"[b reverse] {label} [/]")
            else:
                parts.append(f"[@click=app.goto('{name}')] {label} [/]")
        self.update("›".join(parts))


class NavBar(Horizontal):
    """Back / Next buttons at the bottom of a step (Tab reaches them; keys are Esc and Ctrl+N)."""

    def __init__(self, *, back: bool = True, next_label: str = "Next ▸") -> None:
        super().__init__(classes="navbar")
        self.back = back
        self.next_label = next_label

    def compose(self) -> ComposeResult:
        if self.back:
            yield Button("◂ Back", id="nav-back", classes="nav", compact=True)
        yield Static(classes="navspacer")
        if self.next_label:
            yield Button(self.next_label, id="nav-next", variant="primary", classes="nav", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "nav-back":
            event.stop()
            self.app.action_prev_step()  # type: ignore[attr-defined]
        elif event.button.id == "nav-next":
            event.stop()
            self.app.action_next_step()  # type: ignore[attr-defined]


def bar_lines(parts: Iterable[tuple[str, float]], total: float, fmt: Callable[[float], str],
              width: int = 30, label_width: int = 14) -> Text:
    """One line per non-zero part: label, a bar proportional to value/total, the value and its share."""
    out = Text()
    total = max(total, 1e-30)
    items = [(k, v) for k, v in parts if v > 0]
    for i, (label, value) in enumerate(items):
        share = value / total
        n = max(1, round(share * width)) if value > 0 else 0
        out.append(f"{label[:label_width]:<{label_width}} ")
        out.append("█" * n, style=BAR_COLOURS[i % len(BAR_COLOURS)])
        out.append("·" * (width - n), style="dim")
        out.append(f" {fmt(value):>9} {share:4.0%}")
        if i + 1 < len(items):
            out.append("\n")
    return out
