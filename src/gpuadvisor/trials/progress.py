"""Progress of a confirm study, shown through the shared LiveProgress (ticking trial clock on a terminal)."""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

from ..cli.progress import LiveProgress, fmt_duration

ProgressArg = Union[None, bool, Callable[[dict[str, Any]], None]]


def _fmt_tps(x: Optional[float]) -> str:
    return f"{x:,.0f} tok/s" if x else "-"


class Progress:
    """Receives events {'event': 'start'|'trial'|'result'|'done'|'note', ...} and shows them.

    During a trial the live line reads "trial N (...): PLAN  trial 12s  budget 1m40s/15m00s  best ..." with both
    clocks ticking; without a terminal each event is one "gpuadvisor confirm: ..." line.
    """

    def __init__(self, view: Optional[LiveProgress] = None):
        self.view = view or LiveProgress("gpuadvisor confirm")

    def __call__(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        best = _fmt_tps(ev.get("best_tokens_per_s"))
        if kind == "trial":
            seed = f" (cost-model pick {ev['seed_rank'] + 1} of {ev['top_k']})" if ev.get("seed_rank") is not None \
                else " (exploring)"
            used, budget = float(ev.get("elapsed_s", 0)), float(ev.get("budget_s", 0))

            def tail(dt: float) -> str:
                return f"trial {fmt_duration(dt)}  budget {fmt_duration(used + dt)}/{fmt_duration(budget)}  best {best}"

            self.view.step(f"trial {ev['n']}{seed}: {ev['plan']}", tail)
        elif kind == "result":
            self.view.end_step()
            self.view.log(f"trial {ev['n']} {ev['status']}: {ev['plan']}  measured {_fmt_tps(ev.get('measured'))} "
                          f"predicted {_fmt_tps(ev.get('predicted'))}  best {best}")
        elif kind in ("start", "note"):
            self.view.log(ev.get("message", ""))
        elif kind == "done":
            self.view.close()
            self.view.log(ev.get("message", ""))


def make_progress(progress: ProgressArg) -> Callable[[dict[str, Any]], None]:
    """None: auto (live on a TTY); False: silent; a callable: used as is."""
    if progress is False:
        return lambda ev: None
    if progress is None or progress is True:
        return Progress()
    return progress
