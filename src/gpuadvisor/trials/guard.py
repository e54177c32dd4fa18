"""Watchdog that runs one trial's launcher: `python .../trials/guard.py [options] -- ARGV...`.

The runner starts the guard as a session leader. The guard starts the launcher (torchrun) in its
session, marks it with GPUADVISOR_TRIAL_TOKEN, becomes a child subreaper (orphaned ranks come
back to it), and stops the trial when the deadline passes, when it is signalled, or when the
advisor dies (its stdin pipe closes, even after `kill -9`): SIGTERM to the launcher, a grace
period, then SIGKILL to the session, the descendants and every process carrying the token.
It writes a small status JSON and exits with the launcher's code (124 on timeout).
Standard library only, so it starts in milliseconds.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Optional

if __package__:
    from .atomic import write_atomic
    from .procs import TOKEN_VAR, kill_all, reap_children
else:  # run as a script (fast: skips importing the gpuadvisor package); siblings are stdlib-only
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from atomic import write_atomic  # type: ignore[no-redef,import-not-found]
    from procs import TOKEN_VAR, kill_all, reap_children  # type: ignore[no-redef,import-not-found]

PR_SET_CHILD_SUBREAPER = 36
_stop_reason: Optional[str] = None


def _become_subreaper() -> bool:
    """Ask Linux to re-parent our orphaned descendants to us (best effort)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _on_signal(signum: int, _frame: object) -> None:
    """Record that we were asked to stop; the main loop does the stopping."""
    global _stop_reason
    _stop_reason = _stop_reason or f"signal-{signal.Signals(signum).name}"


def _parent_gone(watch_stdin: bool, parent: int) -> bool:
    """True when the advisor that started us died (stdin EOF or re-parenting)."""
    if os.getppid() != parent:
        return True
    if not watch_stdin:
        return False
    try:
        ready, _, _ = select.select([0], [], [], 0)
        return bool(ready) and os.read(0, 4096) == b""
    except (OSError, ValueError):
        return True


def _wait(child: subprocess.Popen, seconds: float) -> Optional[int]:
    """Wait up to `seconds` for the launcher; None if still running."""
    try:
        return child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def main(argv: Optional[list[str]] = None) -> int:
    """Run the launcher under the watchdog; see the module docstring."""
    global _stop_reason
    ap = argparse.ArgumentParser(prog="gpuadvisor.trials.guard")
    ap.add_argument("--token", required=True)
    ap.add_argument("--timeout", type=float, required=True, help="wall-clock seconds for the launcher")
    ap.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    ap.add_argument("--status", required=True, help="where to write the status JSON")
    ap.add_argument("--no-watch-stdin", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command after --")
    parent = os.getppid()
    subreaper = _become_subreaper()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    env = dict(os.environ, **{TOKEN_VAR: args.token})
    start = time.monotonic()
    child = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, shell=False)
    deadline = start + args.timeout
    code: Optional[int] = None
    while code is None and _stop_reason is None:
        code = _wait(child, 0.1)
        if code is None and time.monotonic() >= deadline:
            _stop_reason = "timeout"
        elif code is None and _parent_gone(not args.no_watch_stdin, parent):
            _stop_reason = "parent-gone"
    stopped = _stop_reason
    if code is None:  # stop: SIGTERM to the launcher, grace, then SIGKILL to everything of the trial
        try:
            child.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        code = _wait(child, args.grace)
    left = kill_all(args.token, sid=os.getsid(0), root=os.getpid(), exclude={os.getpid()})
    if code is None:
        code = _wait(child, 5.0)
    reap_children()
    duration = time.monotonic() - start
    if code is not None and code < 0:
        code = 128 - code
    status = {"reason": stopped or "exited", "exit_code": code, "duration_s": round(duration, 3),
              "survivors": sorted(left), "subreaper": subreaper, "launcher_pid": child.pid,
              "sid": os.getsid(0)}
    write_atomic(args.status, json.dumps(status))
    if stopped == "timeout":
        return 124
    return code if code is not None else 137


if __name__ == "__main__":
    sys.exit(main())
