"""One run at a time per study: an flock'ed lock file that names its owner.

Two runs of one study on one host would share its devices: each would measure about half the
throughput, store those contended numbers as clean measurements, and add its wall time to the same
budget. `StudyLock` refuses the second run in one line naming the first (pid, host, since when).
The kernel drops an flock when its owner dies, even after `kill -9`, so a lock is never stale; the
owner file is only there to say who holds it.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Optional, Union

from ..errors import UserError


class StudyLock:
    """Context manager: hold `path` exclusively for the life of the run, or raise UserError at once."""

    def __init__(self, path: Union[str, Path], what: str):
        self.path, self.what = Path(path), what
        self.fd: Optional[int] = None

    def owner(self) -> dict:
        """What the lock file says about its holder ({} if unreadable)."""
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "StudyLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            who = self.owner()
            since = time.strftime("%H:%M:%S", time.localtime(who["since"])) if who.get("since") else "?"
            raise UserError(f"{self.what} is already running (pid {who.get('pid', '?')} on {who.get('host', '?')}, "
                            f"since {since}); two runs at once would share the devices and halve each other's "
                            "measurements: wait for it to finish or stop it first") from None
        info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "StudyLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


__all__ = ["StudyLock"]
