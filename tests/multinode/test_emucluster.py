"""The emulated cluster itself: its shaped link behaves like a NIC at line rate, bursts included."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from .conftest import RATE
from .emucluster import tbf_burst

_RECV = r"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 5901)); s.listen(1)
c, _ = s.accept()
while True:
    hdr = c.recv(8, socket.MSG_WAITALL)
    if len(hdr) < 8:
        break
    n, got = int.from_bytes(hdr, "big"), 0
    while got < n:
        got += len(c.recv(min(1 << 20, n - got)))
    c.sendall(b"k")
"""

_SEND = r"""
import json, socket, sys, time
for _ in range(50):
    try:
        c = socket.create_connection((sys.argv[1], 5901)); break
    except OSError:
        time.sleep(0.1)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out = []
for _ in range(4):
    time.sleep(0.05)  # idle spell: a token bucket refills here, a NIC does not
    n = 1 << 20
    t = time.perf_counter(); c.sendall(n.to_bytes(8, "big") + b"x" * n); c.recv(1)
    out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


@pytest.mark.parametrize("rate, burst", [("50mbit", "2kb"), ("1gbit", "16kb"), ("10gbit", "153kb"),
                                         ("100kbit", "2kb")])
def test_tbf_burst_is_an_eighth_of_a_millisecond_at_least_one_frame(rate, burst):
    assert tbf_burst(rate) == burst


def test_tbf_burst_rejects_unknown_units():
    with pytest.raises(ValueError, match="unknown tc rate"):
        tbf_burst("1gbyte")


def test_message_after_idle_crosses_at_line_rate(emu, no_leftovers):
    """A 1 MiB message after 50 ms idle takes at least ~its line-rate time (8.4 ms at 1 Gbit/s); the old
    977 KiB bucket let it through in 1.2-1.8 ms, faster than any real 1 GbE NIC."""
    assert RATE == "1gbit"
    recv = subprocess.Popen(["ip", "netns", "exec", emu.names[1], sys.executable, "-c", _RECV])
    try:
        time.sleep(0.3)
        out = subprocess.run(["ip", "netns", "exec", emu.names[0], sys.executable, "-c", _SEND, emu.addresses[1]],
                             capture_output=True, text=True, timeout=60, check=True)
    finally:
        recv.kill()
        recv.wait()
    times = json.loads(out.stdout.strip().splitlines()[-1])
    line_s = (1 << 20) * 8 / 1e9
    assert min(times) >= 0.8 * line_s, f"1 MiB crossed in {min(times) * 1e3:.2f} ms, line rate needs {line_s * 1e3:.1f}"
