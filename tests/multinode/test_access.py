"""Node access: the argument lists per method, quoting, and running through a namespace prefix."""
from __future__ import annotations

import shlex
import sys
import time

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.remote.access import NodeTimeout, describe, node_command, run_on_node, spawn_on_node, stop_session
from gpuadvisor.schemas.hardware import Device, Node, NodeAccess


def node(**access) -> Node:
    dev = Device(index=0, kind="cpu", name="cpu", memory_bytes=2**30, peak_tflops_bf16=0.1, peak_tflops_fp32=0.1,
                 memory_bandwidth_gb_per_s=10)
    return Node(name="n1", devices=[dev], access=NodeAccess(**access))


def test_local_with_env():
    assert node_command(node(), ["python", "-V"], {"A": "1"}) == ["env", "A=1", "python", "-V"]


def test_prefix():
    n = node(method="prefix", prefix=["ip", "netns", "exec", "gpa-n1"])
    assert node_command(n, ["true"]) == ["ip", "netns", "exec", "gpa-n1", "true"]
    assert describe(n) == "n1 (ip netns exec gpa-n1)"


def test_ssh_quotes_the_remote_command():
    n = node(method="ssh", host="box", user="alice", port=2222, identity_file="/k/id")
    evil = ["echo", "a b; rm -rf /", "$(reboot)", "it's"]
    cmd = node_command(n, evil, {"X": "1 2"})
    assert cmd[:5] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    assert cmd[cmd.index("--") + 1] == "alice@box"
    assert ["-p", "2222"] == cmd[5:7] and "-i" in cmd
    assert shlex.split(cmd[-1]) == ["env", "X=1 2", *evil]  # the remote shell sees exactly the list


def test_slurm():
    cmd = node_command(node(method="slurm", host="gpu07"), ["hostname"])
    assert cmd[0] == "srun" and "--nodes=1" in cmd and "--ntasks=1" in cmd
    assert cmd[cmd.index("-w") + 1] == "gpu07" and cmd[-1] == "hostname"


@pytest.mark.parametrize("access,needle", [
    (dict(method="ssh"), "needs a host"), (dict(method="ssh", host="-oProxyCommand=x"), "needs a host"),
    (dict(method="prefix"), "empty prefix")])
def test_incomplete_access(access, needle):
    with pytest.raises(UserError, match=needle):
        node_command(node(**access), ["true"])


def test_bad_env_name():
    with pytest.raises(UserError, match="not valid"):
        node_command(node(), ["true"], {"A;B": "1"})


def test_run_and_timeout_local():
    done = run_on_node(node(), [sys.executable, "-c", "print('hi')"], 30)
    assert done.returncode == 0 and done.stdout.strip() == "hi"
    with pytest.raises(NodeTimeout, match="did not finish"):
        run_on_node(node(), [sys.executable, "-c", "import time; time.sleep(30)"], 0.5)


def test_run_in_namespace(emu, hosts, no_leftovers):
    n1 = hosts.nodes[1]
    done = run_on_node(n1, ["cat", f"/sys/class/net/{emu.ifname}/address"], 10)
    assert done.returncode == 0, done.stderr
    p = spawn_on_node(n1, [sys.executable, "-c", "import time; time.sleep(60)"])
    end = time.monotonic() + 10
    while not emu.leftover_pids() and time.monotonic() < end:  # ip netns exec enters, then execs
        time.sleep(0.05)
    assert emu.leftover_pids()
    stop_session(p, 1.0)
    assert p.returncode is not None
