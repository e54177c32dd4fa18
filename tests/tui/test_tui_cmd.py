"""`gpuadvisor tui` as a process: refused without a terminal, and Ctrl+Q in a real terminal ends it whole."""
from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from gpuadvisor.trials.procs import all_pids, alive, stat

from .conftest import MODEL, PRESET

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TERM="xterm-256color", COLUMNS="80", LINES="24")


def test_without_a_terminal_it_says_so_and_exits_2():
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "gpuadvisor", "tui", "--preset", PRESET], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs an interactive terminal" in lines[0] and "stdin and stdout" in lines[0]
    assert time.monotonic() - t0 < 60


def _children(pid: int) -> list[int]:
    return [p for p in all_pids() if (st := stat(p)) is not None and st.ppid == pid and alive(p)]


def _drain(fd: int, seconds: float, until: bytes = b"") -> bytes:
    """Read the terminal's output for up to `seconds` (stop early once `until` was seen)."""
    out = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            if until and until in out:
                break
    return out


def test_ctrl_q_in_a_terminal_ends_the_process_and_its_ranking_process(tmp_path):
    """Ctrl+Q during a long ranking (128 GPUs in one node ranked for minutes when this was written)."""
    big = tmp_path / "big.yaml"
    big.write_text("name: big\nnodes:\n  - name: n0\n    gpus: 128x A40\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the TUI on a pseudo terminal
        os.execve(sys.executable, [sys.executable, "-m", "gpuadvisor", "tui", "--cluster", str(big), "--model", MODEL],
                  ENV)
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        screen = _drain(fd, 90, until=b"(128x)")  # the cluster is loaded and shown (0-127 (128x) A40)
        assert b"(128x)" in screen, screen[-2000:]
        deadline = time.monotonic() + 60
        while not _children(pid) and time.monotonic() < deadline:
            _drain(fd, 0.2)
        helpers = _children(pid)
        assert helpers, "the ranking process did not start"
        os.write(fd, b"\x1b4")  # Alt+4 as terminals send it (ESC 4): Results, a ranking starts
        assert b"Ranking" in _drain(fd, 30, until=b"Ranking")
        _drain(fd, 1.0)
        t0 = time.monotonic()
        os.write(fd, b"\x11")  # Ctrl+Q
        rc = None
        while time.monotonic() - t0 < 30:
            _drain(fd, 0.2)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
        assert rc == 0, "Ctrl+Q did not end the process within 30 s"
        for helper in helpers:
            deadline = time.monotonic() + 5
            while alive(helper) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not alive(helper), "the ranking process outlived the TUI"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
