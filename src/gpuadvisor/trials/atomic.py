"""Crash-safe file writes: whole files via temp + fsync + rename, JSONL lines under flock + fsync."""
from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import Optional, Union


def _fsync_dir(path: Path) -> None:
    """fsync a directory so a rename in it survives a power cut."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_atomic(path: Union[str, Path], data: Union[str, bytes], mode: Optional[int] = None) -> Path:
    """Write `data` to `path` so readers see the old file or the whole new one, never a part.

    The file gets `mode`, by default the usual 0666 minus the umask (mkstemp alone would leave 0600).
    """
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # name the file the caller asked for, not the temp file
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, (0o666 & ~_umask()) if mode is None else mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)
    return path


def append_line(path: Union[str, Path], line: str) -> None:
    """Append one line under an exclusive flock, then fsync: concurrent writers never interleave.

    A torn last line (crash mid-write) is repaired by starting the new line on a fresh line.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if "\n" in line:
        raise ValueError("a JSONL record must not contain a newline")
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            fh.seek(0, os.SEEK_END)
            prefix = b""
            if fh.tell() > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    prefix = b"\n"
            fh.write(prefix + line.encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
