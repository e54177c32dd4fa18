"""Pre-flight on the emulated cluster: a healthy cluster passes; each bad input gives its own line."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.hardware.cluster_file import load_cluster
from gpuadvisor.remote.access import spawn_on_node, stop_session
from gpuadvisor.remote.preflight import node_facts, preflight, require_ok

PORT = 29611


def test_healthy(hosts, no_leftovers):
    checks = preflight(hosts, port=PORT)
    require_ok(checks)
    assert [c.node for c in checks] == ["n0", "n1"]
    assert checks[0].facts["port"]["free"] is True
    assert checks[1].facts["interfaces"]["gpaeth0"]["ipv4"] == "10.213.7.11"


def test_unreachable_node(emu, tmp_path):
    path = emu.write_cluster_file(tmp_path / "h.yaml",
                                  access_override={1: {"prefix": ["ip", "netns", "exec", "gpa-missing-n9"]}})
    with pytest.raises(UserError) as err:
        require_ok(preflight(load_cluster(path), port=PORT))
    msg = str(err.value)
    assert msg.count("\n") == 0, msg  # only n1 fails
    assert msg.startswith("node n1 (ip netns exec gpa-missing-n9): unreachable") and "namespace" in msg


def test_wrong_interface(emu, tmp_path):
    path = emu.write_cluster_file(tmp_path / "h.yaml", access_override={0: {"ifname": "eth9"}})
    with pytest.raises(UserError, match=r"^node n0 .*interface eth9 does not exist \(has gpaeth0\)"):
        require_ok(preflight(load_cluster(path), port=PORT))


def test_wrong_address(emu, tmp_path):
    path = emu.write_cluster_file(tmp_path / "h.yaml", access_override={1: {"address": "10.213.7.99"}})
    with pytest.raises(UserError, match=r"node n1 .*address 10.213.7.99 is not on gpaeth0"):
        require_ok(preflight(load_cluster(path), port=PORT))


def test_port_in_use(hosts, no_leftovers):
    code = ("import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen();"
            "print('up', flush=True); time.sleep(60)")
    holder = spawn_on_node(hosts.nodes[0], [sys.executable, "-c", code, str(PORT)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"up"
        with pytest.raises(UserError, match=rf"^node n0 .*rendezvous port {PORT} is in use on the master"):
            require_ok(preflight(hosts, port=PORT))
    finally:
        stop_session(holder, 1.0)


def test_mismatched_torch(hosts):
    def fake(node, bind_port):
        facts = node_facts(node, bind_port)
        if node.name == "n1":
            facts["versions"]["torch"] = "2.12.0"
        return facts

    with pytest.raises(UserError) as err:
        require_ok(preflight(hosts, port=PORT, facts_probe=fake))
    want = f"node n1 (ip netns exec {hosts.nodes[1].access.prefix[-1]}): torch 2.12.0 != "
    assert str(err.value).startswith(want) and "on n0; install the same version" in str(err.value)
