"""Stopping a trials study that runs in a worker thread, through the trials API's own stop path.

`trials.study.confirm` stops on Ctrl-C: `run_trial` catches KeyboardInterrupt, sends SIGTERM to the
trial's launcher, then SIGKILL to its whole session, marks the trial failed and re-raises. A study
running in a TUI worker thread never sees the terminal's Ctrl-C, so cancelling raises the same
KeyboardInterrupt in that thread. If `confirm` grows a `cancel` event parameter, that is used instead.
"""
from __future__ import annotations

import ctypes
import inspect
import threading
from typing import Optional


def accepts_cancel_event() -> bool:
    """Does the study entry point take a `cancel` threading.Event?"""
    try:
        from ..trials.study import confirm

        return "cancel" in inspect.signature(confirm).parameters
    except (ImportError, TypeError, ValueError):
        return False


class StudyCanceller:
    """Cancels one study run in one worker thread; safe to call from the UI thread, idempotent."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[int] = None  # ident of the worker while it is inside the study

    def enter(self) -> None:
        """Called by the worker right before it calls the study."""
        with self._lock:
            self._thread = threading.get_ident()

    def leave(self) -> None:
        """Called by the worker as soon as the study returned or raised."""
        with self._lock:
            self._thread = None

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()

    def cancel(self, use_event: bool) -> None:
        """Ask the study to stop: set the event, or raise KeyboardInterrupt in the worker thread."""
        with self._lock:
            if self.event.is_set():
                return
            self.event.set()
            if not use_event and self._thread is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread),
                                                           ctypes.py_object(KeyboardInterrupt))
