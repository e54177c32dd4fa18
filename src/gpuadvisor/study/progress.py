"""Progress of a study through the shared LiveProgress: cell n of N, current cell, elapsed and ETA ticking."""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

from ..cli.progress import LiveProgress, fmt_duration

__all__ = ["StudyProgress", "make_progress", "fmt_duration", "ProgressArg"]

ProgressArg = Union[None, bool, Callable[[dict[str, Any]], None]]


class StudyProgress:
    """Receives study events and shows them; on a terminal the clocks keep moving during a cell.

    Events: {'event': 'start'|'cell'|'result'|'note'|'done', ...}; 'cell' carries n, total, label,
    elapsed_s, eta_s (seconds left for the whole study, from predictions scaled by what was measured so far).
    """

    def __init__(self, view: Optional[LiveProgress] = None, prefix: str = "gpuadvisor study"):
        self.view = view or LiveProgress(prefix)

    def __call__(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "cell":
            elapsed, eta = float(ev.get("elapsed_s") or 0.0), ev.get("eta_s")

            def tail(dt: float) -> str:
                left = None if eta is None else max(0.0, eta - dt)
                return f"cell {fmt_duration(dt)}  elapsed {fmt_duration(elapsed + dt)}  ETA {fmt_duration(left)}"

            if self.view.live:
                self.view.step(f"[{ev['n']}/{ev['total']}] {ev['label']}", tail)
            else:
                self.view.log(f"cell {ev['n']}/{ev['total']}: {ev['label']} (elapsed {fmt_duration(elapsed)}, "
                              f"ETA {fmt_duration(eta)})")
        elif kind == "result":
            self.view.end_step()
            tps = ev.get("tokens_per_s")
            what = f"{tps:,.0f} tokens/s" if tps else (ev.get("error") or "")
            self.view.log(f"cell {ev['n']}/{ev['total']} {ev['status']}: {ev['label']} {what} "
                          f"({fmt_duration(ev.get('duration_s'))})".rstrip())
        elif kind in ("start", "note", "done"):
            if kind == "done":
                self.close()
            self.view.log(ev.get("message", ""))

    def close(self) -> None:
        """Stop the live line."""
        self.view.close()


def make_progress(progress: ProgressArg) -> Callable[[dict[str, Any]], None]:
    """None/True: auto (live on a TTY); False: silent; a callable: used as is."""
    if progress is False:
        return lambda ev: None
    if progress is None or progress is True:
        return StudyProgress()
    return progress
