"""Find and stop the processes of one trial by /proc scanning (session id, env token, parentage).

torchrun starts every worker in a session of its own, so a trial's processes are found three ways:
the guard's session, descendants of the guard, and the `GPUADVISOR_TRIAL_TOKEN` environment marker
each of them inherits. Processes are never selected by name.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Iterable, NamedTuple, Optional

TOKEN_VAR = "GPUADVISOR_TRIAL_TOKEN"
PROC = "/proc"


class ProcStat(NamedTuple):
    """Fields of /proc/<pid>/stat that identify a process and its place in the tree."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    sid: int
    starttime: int


def stat(pid: int) -> Optional[ProcStat]:
    """Parse /proc/<pid>/stat, or None if the process is gone."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = raw[raw.rfind(")") + 2:].split()  # comm may contain spaces and parentheses
    try:
        return ProcStat(pid, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]))
    except (IndexError, ValueError):
        return None


def all_pids() -> list[int]:
    """Every pid visible in /proc."""
    return [int(p) for p in os.listdir(PROC) if p.isdigit()]


def alive(pid: int, starttime: Optional[int] = None) -> bool:
    """True if pid runs (not a zombie) and, when given, started at `starttime` (guards pid reuse)."""
    st = stat(pid)
    if st is None or st.state in ("Z", "X"):
        return False
    return starttime is None or st.starttime == starttime


def has_token(pid: int, token: str) -> bool:
    """True if the process's initial environment carries GPUADVISOR_TRIAL_TOKEN=token."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return False
    return f"{TOKEN_VAR}={token}".encode() in env.split(b"\0")


def descendants(root: int, stats: Optional[Iterable[ProcStat]] = None) -> set[int]:
    """Pids whose parent chain reaches `root` (root excluded)."""
    table = list(stats) if stats is not None else [s for s in map(stat, all_pids()) if s]
    children: dict[int, list[int]] = {}
    for s in table:
        children.setdefault(s.ppid, []).append(s.pid)
    out: set[int] = set()
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def trial_pids(token: str, sid: Optional[int] = None, root: Optional[int] = None,
               exclude: Iterable[int] = ()) -> set[int]:
    """Live (non-zombie) processes of a trial: same session, descendants of root, or carrying the token."""
    skip = set(exclude) | {os.getpid()}
    table = [s for s in map(stat, all_pids()) if s and s.state not in ("Z", "X")]
    found = {s.pid for s in table if sid is not None and s.sid == sid}
    if root is not None:
        found |= descendants(root, table)
    found |= {s.pid for s in table if has_token(s.pid, token)}
    return found - skip


def signal_pids(pids: Iterable[int], sig: int) -> None:
    """Send sig to each pid, ignoring ones that already exited."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def reap_children() -> None:
    """Collect exited children (the guard is a subreaper: orphaned ranks become its children)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_all(token: str, sid: Optional[int] = None, root: Optional[int] = None,
             exclude: Iterable[int] = (), timeout_s: float = 10.0) -> set[int]:
    """SIGKILL every process of the trial until none is left; returns the pids still alive (ideally none)."""
    deadline = time.monotonic() + timeout_s
    left = trial_pids(token, sid, root, exclude)
    while left and time.monotonic() < deadline:
        signal_pids(left, signal.SIGKILL)
        time.sleep(0.05)
        reap_children()
        left = trial_pids(token, sid, root, exclude)
    return left
