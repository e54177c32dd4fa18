"""The one progress component: a rich live line with a spinner and ticking time, or plain log lines.

Used by `probe --measure`, `confirm` (suggest --confirm) and `study`; `DelayedProgress` wraps work that
is usually quick (`suggest`'s ranking) and shows the line only once it has run for a while. On a terminal
(and not TERM=dumb) the current step shows as one redrawn line: spinner, text, then `tail(seconds since the
step began)` refreshed four times a second, so the clock moves while a trial or a probe runs; finished
events print as permanent lines above it. Anywhere else (pipes, CI logs, TERM=dumb) each step and log line
is one plain line "<prefix>: <text>" on stderr, with no escape codes.
"""
from __future__ import annotations

import atexit
import threading
import time
from typing import Callable, Optional

from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TaskID
from rich.text import Text

from .console import make_console

__all__ = ["DelayedProgress", "LiveProgress", "fmt_duration"]

Tail = Callable[[float], str]


def fmt_duration(s: Optional[float]) -> str:
    """90 -> '1m30s'; None -> '?'."""
    if s is None:
        return "?"
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


class _Line(ProgressColumn):
    """The step text followed by its tail, both recomputed at every refresh; wraps to the console width."""

    def render(self, task: Task) -> Text:
        tail: Optional[Tail] = task.fields.get("tail")
        dt = time.monotonic() - task.fields.get("t0", time.monotonic())
        text = task.description + (f"  {tail(dt)}" if tail else "")
        return Text(text, overflow="ellipsis", no_wrap=True)


class LiveProgress:
    """Show steps of a long operation; `step()` starts one (its clock restarts), `log()` prints a line.

    Args:
        prefix: the plain-line prefix, e.g. "gpuadvisor study".
        console: where to draw (default: stderr through make_console()).
        live: force live redraw on/off (default: on when the console is a terminal and not TERM=dumb).
    """

    def __init__(self, prefix: str, *, console: Optional[Console] = None, live: Optional[bool] = None):
        self.prefix = prefix
        self.console = console or make_console(stderr=True)
        self.live = (self.console.is_terminal and not self.console.is_dumb_terminal) if live is None else live
        self._progress: Optional[Progress] = None
        self._task: Optional[TaskID] = None
        self._atexit = False

    def _bar(self) -> Progress:
        if self._progress is None:
            self._progress = Progress(SpinnerColumn(), _Line(), console=self.console, transient=True,
                                      refresh_per_second=4)
            self._progress.start()
            if not self._atexit:  # an interrupted run must not leave the cursor hidden
                atexit.register(self.close)
                self._atexit = True
        return self._progress

    def step(self, text: str, tail: Optional[Tail] = None) -> None:
        """Begin a step: live, it replaces the current line and its clock starts at 0; plain, one line."""
        if not self.live:
            self.log(text + (f"  {tail(0.0)}" if tail else ""))
            return
        bar = self._bar()
        t0 = time.monotonic()
        if self._task is None:
            self._task = bar.add_task(text, total=None, tail=tail, t0=t0)
        else:
            bar.reset(self._task, description=text, tail=tail, t0=t0)
        bar.refresh()

    def log(self, text: str) -> None:
        """A permanent line (above the live line when there is one)."""
        if self.live:
            self.console.print(Text(text))
        else:
            self.console.file.write(f"{self.prefix}: {text}\n")
            self.console.file.flush()

    def end_step(self) -> None:
        """The current step finished: hide the live line until the next step."""
        if self._progress is not None and self._task is not None:
            self._progress.remove_task(self._task)
            self._task = None

    def close(self) -> None:
        """Stop redrawing and remove the live line."""
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._task = None, None

    def __enter__(self) -> "LiveProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DelayedProgress:
    """A `LiveProgress` step that appears only if the work inside the `with` lasts longer than `after_s`.

    Ranking is usually well under a second; on a cluster of thousands of devices it can take a few, and a
    silent terminal then looks hung. The line (live: redrawn with the elapsed time; plain: one line on stderr)
    is started by a timer thread and removed when the block ends.
    """

    def __init__(self, prefix: str, text: str, *, after_s: float = 2.0, console: Optional[Console] = None,
                 live: Optional[bool] = None):
        self.prefix, self.text, self.after_s = prefix, text, after_s
        self._console, self._live = console, live
        self._lock = threading.Lock()
        self._done = False
        self._progress: Optional[LiveProgress] = None
        self._timer = threading.Timer(after_s, self._show)
        self._timer.daemon = True

    @property
    def shown(self) -> bool:
        """Whether the line was shown (the work outlasted `after_s`)."""
        return self._progress is not None

    def _show(self) -> None:
        with self._lock:
            if self._done:
                return
            self._progress = LiveProgress(self.prefix, console=self._console, live=self._live)
            after = self.after_s
            self._progress.step(self.text, tail=lambda dt: f"({fmt_duration(after + dt)} so far)")

    def __enter__(self) -> "DelayedProgress":
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
            if self._progress is not None:
                self._progress.close()
