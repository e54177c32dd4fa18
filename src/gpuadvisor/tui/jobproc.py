"""A warm child process for CPU-heavy work the TUI must be able to abandon (the ranking).

A Textual thread worker cannot be stopped: an abandoned ranking keeps a core busy until it ends, and
because asyncio waits for its executor threads at exit, a running one also keeps the process alive after
Ctrl+Q. A job run here instead is stopped by killing the child: the core is freed at once, and the next
job starts a fresh child. The child is started early and stays warm between jobs, so what it loaded (the
knowledge files) is reused as in a thread.

`JobProcess.run` blocks; call it from a thread worker. Functions and arguments travel by pickle, so the
function must be importable at module level (see `tui.rankjob`).
"""
from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, Optional, Sequence

#: How often a waiting `run` looks for a cancel (seconds).
POLL_S = 0.05


class JobCancelled(Exception):
    """The job was cancelled (its process killed) before it finished."""


def _die_with_parent(parent: int, interval_s: float = 0.5) -> None:
    """Exit when the TUI (pid `parent`) is gone, even killed by SIGKILL mid-job: a daemon thread watches."""
    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(0)
            time.sleep(interval_s)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def serve(read_fd: int, write_fd: int, preload: Sequence[str], parent: int) -> None:
    """The child's loop: run (fn, args, kwargs) messages, send back ("ok", result) or ("error", exc)."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the TUI owns Ctrl+C; the parent stops this child
    conn_in, conn_out = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # the job itself will report the import problem
            pass
    while True:
        try:
            fn, args, kwargs = conn_in.recv()
        except (EOFError, OSError):
            return  # the TUI closed the pipe (or died)
        try:
            reply: tuple[str, Any] = ("ok", fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            reply = ("error", exc)
        try:
            conn_out.send(reply)
        except (EOFError, OSError):
            return
        except Exception as exc:  # an unpicklable result or exception
            conn_out.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))


class JobProcess:
    """Run picklable jobs one at a time in a warm child process; `cancel` abandons the running one.

    The child is a plain `python -c` subprocess (not multiprocessing: its spawn needs real stdio file
    descriptors, which Textual replaces while it runs) talking pickled messages over two pipes.

    Args:
        preload: modules the child imports right after it starts (so the first job is not slower).
    """

    def __init__(self, preload: Sequence[str] = ()) -> None:
        self.preload = tuple(preload)
        self._lock = threading.Lock()  # one job at a time
        self._state = threading.Lock()  # guards the fields below
        self._proc: Optional[subprocess.Popen] = None
        self._send: Optional[Connection] = None
        self._recv: Optional[Connection] = None
        self._generation = 0  # bumped by cancel(); a run() started before the bump is cancelled
        self._closed = False

    # ---- life cycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child now (it is also started on demand by `run`)."""
        with self._state:
            if self._closed:
                raise JobCancelled("the job process was closed")
            if self._proc is not None and self._proc.poll() is None:
                return
            to_child_r, to_child_w = os.pipe()
            from_child_r, from_child_w = os.pipe()
            code = (f"import sys; sys.path[:0] = {sys.path!r}; from gpuadvisor.tui.jobproc import serve; "
                    f"serve({to_child_r}, {from_child_w}, {list(self.preload)!r}, {os.getpid()})")
            try:
                proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(to_child_r, from_child_w),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
            finally:
                os.close(to_child_r)
                os.close(from_child_w)
            self._proc = proc
            self._send = Connection(to_child_w, readable=False)
            self._recv = Connection(from_child_r, writable=False)

    def _kill(self) -> None:
        """Kill the child (if any) and forget it; the next run starts a new one. Caller holds _state."""
        proc, send, recv = self._proc, self._send, self._recv
        self._proc = self._send = self._recv = None
        for conn in (send, recv):
            if conn is not None:
                conn.close()
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not take this long
                pass

    def close(self) -> None:
        """Kill the child and refuse further jobs (the TUI is exiting)."""
        with self._state:
            self._closed = True
            self._generation += 1
            self._kill()

    @property
    def pid(self) -> Optional[int]:
        """The child's process id while it runs (for tests and diagnostics)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    # ---- jobs ---------------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Abandon the running job and any job waiting for it: they raise JobCancelled and the child is killed."""
        with self._state:
            self._generation += 1

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) in the child; its exception is raised here. Raises JobCancelled after `cancel`."""
        generation = self._generation
        with self._lock:
            if generation != self._generation or self._closed:
                raise JobCancelled("cancelled before it started")
            self.start()
            send, recv = self._send, self._recv
            assert send is not None and recv is not None
            try:
                send.send((fn, args, kwargs))
                while not recv.poll(POLL_S):
                    if generation != self._generation:
                        with self._state:
                            self._kill()  # frees the core at once
                        raise JobCancelled("cancelled")
                status, value = recv.recv()
            except (EOFError, OSError):
                cancelled = generation != self._generation
                with self._state:
                    code = self._proc.poll() if self._proc is not None else None
                    self._kill()
                if cancelled:
                    raise JobCancelled("cancelled") from None
                raise RuntimeError(f"the background process stopped unexpectedly (exit code {code})") from None
        if status == "error":
            raise value
        return value


__all__ = ["JobCancelled", "JobProcess"]
