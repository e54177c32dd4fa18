"""Progress of a study: a live line on a terminal (cell n of N, current cell, elapsed, ETA), plain lines otherwise."""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Optional, TextIO, Union

ProgressArg = Union[None, bool, Callable[[dict[str, Any]], None]]


def fmt_duration(s: Optional[float]) -> str:
    """90 -> '1m30s'; None -> '?'."""
    if s is None:
        return "?"
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


class StudyProgress:
    """Receives study events and shows them; on a TTY a ticker keeps elapsed/ETA moving during a cell.

    Events: {'event': 'start'|'cell'|'result'|'note'|'done', ...}; 'cell' carries n, total, label,
    elapsed_s, eta_s (seconds left for the whole study, from predictions scaled by what was measured so far).
    """

    def __init__(self, stream: Optional[TextIO] = None, live: Optional[bool] = None, prefix: str = "gpuadvisor study"):
        self.stream = stream or sys.stderr
        self.live = bool(self.stream.isatty()) if live is None else live
        self.prefix = prefix
        self._cell: Optional[dict[str, Any]] = None
        self._t_cell = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None

    def __call__(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "cell":
            with self._lock:
                self._cell, self._t_cell = ev, time.monotonic()
            if self.live:
                self._start_ticker()
                self._render()
            else:
                self._line(f"cell {ev['n']}/{ev['total']}: {ev['label']} (elapsed {fmt_duration(ev.get('elapsed_s'))}, "
                           f"ETA {fmt_duration(ev.get('eta_s'))})")
        elif kind == "result":
            with self._lock:
                self._cell = None
            tps = ev.get("tokens_per_s")
            what = f"{tps:,.0f} tokens/s" if tps else (ev.get("error") or "")
            self._line(f"cell {ev['n']}/{ev['total']} {ev['status']}: {ev['label']} {what} "
                       f"({fmt_duration(ev.get('duration_s'))})".rstrip())
        elif kind in ("start", "note", "done"):
            if kind == "done":
                self.close()
            self._line(ev.get("message", ""))

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._render()

    def _render(self) -> None:
        """Redraw the live line: cell n/N, label, elapsed in the cell and in the study, ETA."""
        with self._lock:
            ev, t0 = self._cell, self._t_cell
            if ev is None:
                return
            dt = time.monotonic() - t0
            eta = None if ev.get("eta_s") is None else max(0.0, ev["eta_s"] - dt)
            line = (f"[{ev['n']}/{ev['total']}] {ev['label']}  cell {fmt_duration(dt)}  "
                    f"elapsed {fmt_duration(ev.get('elapsed_s', 0) + dt)}  ETA {fmt_duration(eta)}")
            self.stream.write("\r\033[K" + line)
            self.stream.flush()

    def _line(self, text: str) -> None:
        with self._lock:
            if self.live:
                self.stream.write("\r\033[K" + text + "\n")
            else:
                self.stream.write(f"{self.prefix}: {text}\n")
            self.stream.flush()

    def close(self) -> None:
        self._stop.set()


def make_progress(progress: ProgressArg) -> Callable[[dict[str, Any]], None]:
    """None/True: auto (live on a TTY); False: silent; a callable: used as is."""
    if progress is False:
        return lambda ev: None
    if progress is None or progress is True:
        return StudyProgress()
    return progress
