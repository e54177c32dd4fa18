"""Multi-node trial faults: a node dying mid-trial, the deadline, pre-flight refusals. Nothing may survive."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.hardware.cluster_file import load_cluster
from gpuadvisor.remote.access import spawn_on_node, stop_session
from gpuadvisor.schemas import ModelSpec, Plan, TrainerJob, TrainingSettings, Workload
from gpuadvisor.trials.multinode import run_trial_multinode

from .emucluster import kill_namespace_pids

PORT = 29631
TINY = Workload(model=ModelSpec(name="tiny", n_layers=4, d_model=64, n_heads=4, d_ff=256, vocab_size=128),
                training=TrainingSettings(seq_len=32, global_batch=8, precision="fp32"))


def _job(steps: int) -> TrainerJob:
    plan = Plan(dp=2, micro_batch_size=4, nodes=2, devices_per_node=1)
    return TrainerJob(plan=plan, workload=TINY, steps=steps, warmup=1, device="cpu", init_timeout_s=60)


def test_node_dies_mid_trial(emu, hosts, no_leftovers, tmp_path):
    out = tmp_path / "t"
    result = {}
    t = threading.Thread(target=lambda: result.update(rec=run_trial_multinode(
        _job(2000), hosts, out, timeout_s=170, port=PORT, env={"OMP_NUM_THREADS": "1"})))
    t.start()
    end = time.monotonic() + 120
    log = out / "trial-n1.stderr.log"
    while time.monotonic() < end and t.is_alive():  # wait until the ranks have joined (rendezvous done)
        if log.exists() and log.read_text(errors="replace").count("hostname of the client socket") >= 2:
            break
        time.sleep(0.2)
    time.sleep(3)
    killed = kill_namespace_pids(emu.names[1])  # node n1 "dies": every process in it gets SIGKILL
    assert killed
    t.join(timeout=170)
    rec = result["rec"]
    assert rec.status == "crash"
    assert rec.error.startswith(f"node n1 (ip netns exec {emu.names[1]}): its processes were killed"), rec.error
    assert "processes left" not in rec.error
    assert not emu.leftover_pids()


def test_deadline_stops_every_node(emu, hosts, no_leftovers, tmp_path):
    rec = run_trial_multinode(_job(2000), hosts, tmp_path / "t", timeout_s=12, port=PORT, grace_s=2,
                              env={"OMP_NUM_THREADS": "1"})
    assert rec.status == "timeout", rec.error
    assert "processes left" not in (rec.error or "")
    assert not emu.leftover_pids()


def test_port_in_use_refused_before_launch(emu, hosts, no_leftovers, tmp_path):
    code = ("import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen();"
            "print('up', flush=True); time.sleep(60)")
    holder = spawn_on_node(hosts.nodes[0], [sys.executable, "-c", code, str(PORT)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"up"
        with pytest.raises(UserError, match=rf"node n0 .*port {PORT} is in use"):
            run_trial_multinode(_job(3), hosts, tmp_path / "t", timeout_s=60, port=PORT)
        assert not (tmp_path / "t" / "trial-n0.stderr.log").exists()  # nothing was launched
    finally:
        stop_session(holder, 1.0)


def test_unreachable_node_refused(emu, tmp_path):
    path = emu.write_cluster_file(tmp_path / "h.yaml",
                                  access_override={1: {"prefix": ["ip", "netns", "exec", "gpa-missing-n9"]}})
    with pytest.raises(UserError, match=r"^node n1 \(ip netns exec gpa-missing-n9\): unreachable"):
        run_trial_multinode(_job(3), load_cluster(path), tmp_path / "t", timeout_s=60, port=PORT)


def test_wrong_interface_without_preflight_is_classified(emu, tmp_path, no_leftovers):
    """With pre-flight skipped, a wrong ifname fails inside gloo; the record still names the node."""
    path = emu.write_cluster_file(tmp_path / "h.yaml", access_override={1: {"ifname": "eth9"}})
    rec = run_trial_multinode(_job(3), load_cluster(path), tmp_path / "t", timeout_s=120, port=PORT,
                              check=False, env={"OMP_NUM_THREADS": "1"})
    assert rec.status in ("crash", "rendezvous"), rec
    assert rec.error and rec.error.startswith("node n"), rec.error
    assert not emu.leftover_pids()
