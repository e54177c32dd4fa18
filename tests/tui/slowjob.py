"""A ranking job that never ends (for the cancellation tests: it runs in the TUI's job process)."""
from __future__ import annotations

from typing import Any


def spin(*_args: Any) -> None:
    """Keep one core busy until the process is killed, as an unbounded ranking does."""
    x = 0
    while True:
        x += 1
