"""The one terminal-output layer: rich consoles, tables and text blocks shared by every command.

- `make_console()` honours NO_COLOR (rich does), TERM=dumb (treated as "not a terminal": no colour, no live
  redraw, ASCII rules) and COLUMNS (rich reads it; otherwise the terminal's width, else 80 columns).
- `make_table()` builds a borderless table whose header rule is "─" on a terminal and "-" elsewhere, so piped
  output stays plain ASCII; plan columns wrap inside their cell instead of widening the line.
- `emit()` prints a renderable: styled on a terminal, plain lines (no escape codes, no trailing blanks) when piped.
- `to_text()` renders to a plain string at a given width (tests, files, the TUI).

Markup is off everywhere: plan strings such as "[top1] dp=2" must print as typed, never as rich markup.
"""
from __future__ import annotations

import io
import os
import sys
from typing import IO, Optional

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

__all__ = ["make_console", "make_table", "emit", "to_text", "block", "is_dumb", "Column", "Group", "Text"]

# header rule only (rich's SIMPLE_HEAD), in ASCII for plain output
_ASCII_HEAD = box.Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


class _HeadRule(box.Box):
    """SIMPLE_HEAD on a terminal; the ASCII rule when the output is not a terminal (or not UTF-8)."""

    def substitute(self, options: ConsoleOptions, safe: bool = True) -> box.Box:
        if not options.is_terminal or options.ascii_only:
            return _ASCII_HEAD
        return super().substitute(options, safe)


HEAD_RULE = _HeadRule("    \n    \n ── \n    \n    \n    \n    \n    \n")


def is_dumb(environ: Optional[dict[str, str]] = None) -> bool:
    """TERM=dumb (or unknown): a terminal that cannot redraw lines or show colour."""
    env = os.environ if environ is None else environ
    return env.get("TERM", "").strip().lower() in ("dumb", "unknown")


def make_console(file: Optional[IO[str]] = None, *, stderr: bool = False, width: Optional[int] = None,
                 force_terminal: Optional[bool] = None) -> Console:
    """A console for gpuadvisor output: markup, emoji and highlighting off; TERM=dumb counts as no terminal.

    file/stderr choose the stream (default: sys.stdout at print time); width fixes the width (default:
    COLUMNS, else the terminal's width, else 80); force_terminal overrides the TTY check (tests).
    """
    if force_terminal is None and is_dumb():
        force_terminal = False
    return Console(file=file, stderr=stderr, width=width, force_terminal=force_terminal, markup=False, emoji=False,
                   highlight=False, soft_wrap=False)


#: brand words NVML and the catalog put before the model ("NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB")
_BRANDS = ("NVIDIA ", "GeForce ", "Tesla ", "Quadro ")


def gpu_label(name: Optional[str]) -> str:
    """A GPU's name for a table cell, without the brand words ("NVIDIA GeForce RTX 4090" -> "RTX 4090"), so
    tables keep one line per GPU at 80 columns; JSON output keeps the full name."""
    if not name:
        return "?"
    for brand in _BRANDS:
        if name.startswith(brand) and len(name) > len(brand):
            name = name[len(brand):]
    return name


def make_table(*columns: Column | str, title: Optional[str] = None) -> Table:
    """A borderless table with a header rule; give wrapping columns `overflow="fold"` and numbers `no_wrap=True`."""
    return Table(*columns, box=HEAD_RULE, show_edge=False, pad_edge=False, header_style="bold", title=title,
                 title_justify="left", title_style="bold", collapse_padding=True)


def block(lines: list[str] | list[Text], indent: int = 0) -> RenderableType:
    """Lines of text as one renderable; each wraps at the console width, continuation lines keep `indent`."""
    group = Group(*(x if isinstance(x, Text) else Text(x) for x in lines))
    return Padding(group, (0, 0, 0, indent)) if indent else group


def _plain(renderable: RenderableType, width: int) -> str:
    """Render without a terminal at `width` columns: no escape codes, trailing blanks dropped."""
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None, markup=False,
                      emoji=False, highlight=False, soft_wrap=False)
    with console.capture() as cap:
        console.print(renderable)
    return "\n".join(line.rstrip() for line in cap.get().splitlines()) + "\n"


def to_text(renderable: RenderableType, width: Optional[int] = None) -> str:
    """The renderable as plain text, `width` columns wide (default: what make_console() would use)."""
    return _plain(renderable, width or make_console().width)


def emit(renderable: RenderableType, console: Optional[Console] = None) -> None:
    """Print through `console` (default stdout): styled on a terminal, plain lines otherwise."""
    console = console or make_console()
    if console.is_terminal:
        console.print(renderable)
        return
    stream = console.file or sys.stdout
    stream.write(_plain(renderable, console.width))
    stream.flush()
