"""Progress of a confirm study: a live line on a terminal, plain log lines otherwise."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, TextIO, Union

ProgressArg = Union[None, bool, Callable[[dict[str, Any]], None]]


def _fmt_tps(x: Optional[float]) -> str:
    return f"{x:,.0f} tok/s" if x else "-"


class Progress:
    """Receives events {'event': 'start'|'trial'|'done'|'note', ...} and shows them."""

    def __init__(self, stream: Optional[TextIO] = None, live: Optional[bool] = None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._t0 = time.monotonic()

    def __call__(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        best = _fmt_tps(ev.get("best_tokens_per_s"))
        clock = f"{ev.get('elapsed_s', 0):.0f}s/{ev.get('budget_s', 0):.0f}s"
        if kind == "trial":
            seed = f" (cost-model pick {ev['seed_rank'] + 1} of {ev['top_k']})" if ev.get("seed_rank") is not None \
                else " (exploring)"
            line = f"trial {ev['n']}{seed}: {ev['plan']}  elapsed {clock}  best {best}"
            self._write(line, final=False)
        elif kind == "result":
            line = (f"trial {ev['n']} {ev['status']}: {ev['plan']}  measured {_fmt_tps(ev.get('measured'))} "
                    f"predicted {_fmt_tps(ev.get('predicted'))}  best {best}")
            self._write(line, final=True)
        elif kind in ("start", "done", "note"):
            self._write(ev.get("message", ""), final=True)

    def _write(self, line: str, final: bool) -> None:
        """Overwrite the live line on a TTY; one log line per event otherwise."""
        if self.live:
            self.stream.write("\r\033[K" + line + ("\n" if final else ""))
        elif final or not self.live:
            self.stream.write(f"gpuadvisor confirm: {line}\n")
        self.stream.flush()


def make_progress(progress: ProgressArg) -> Callable[[dict[str, Any]], None]:
    """None: auto (live on a TTY); False: silent; a callable: used as is."""
    if progress is False:
        return lambda ev: None
    if progress is None or progress is True:
        return Progress()
    return progress
