"""The probe runner: output parsing, deadlines that leave no process behind, failures, the real probes."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.paths import probes_dir
from gpuadvisor.probe import measure
from gpuadvisor.probe.measure import (ProbeError, ProbeTimeout, parse_probe_output, run_measurements,
                                      run_probe)

REPORT = {"hostname": "h", "device_kind": "cpu", "world_size": 1, "torch_version": "x", "warnings": ["w"]}


def _alive(pid: int) -> bool:
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_pids(path, count, timeout=10.0):
    """The pids a hanging script wrote to `path`, once it wrote `count` of them."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            pids = [int(x) for x in path.read_text().split()]
            if len(pids) >= count:
                return pids
        time.sleep(0.05)
    raise AssertionError(f"script never wrote {count} pids to {path}")


def test_parse_ignores_launcher_noise():
    text = "W1122 torchrun warning\n{not json}\n" + json.dumps(REPORT) + "\n"
    rep = parse_probe_output(text)
    assert rep.hostname == "h" and rep.warnings == ["w"]


def test_parse_without_report_is_one_line_error():
    with pytest.raises(ProbeError, match="no JSON report") as exc:
        parse_probe_output("Traceback ...\nRuntimeError: boom\n")
    assert "\n" not in str(exc.value) and "boom" in str(exc.value)


def test_parse_rejects_wrong_shape():
    bad = dict(REPORT, collectives=[{"op": "broadcast"}])
    with pytest.raises(ProbeError, match="does not match MeasureReport"):
        parse_probe_output(json.dumps(bad))


# Leader ignores SIGTERM and starts a child in its process group and a grandchild in a session of
# its own (as torchrun does with its ranks); both ignore SIGTERM too. Only SIGKILL of all three
# by group *and* by the inherited token ends them.
HANG = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sleeper = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
    a = subprocess.Popen(sleeper)
    b = subprocess.Popen(sleeper, start_new_session=True)
    with open(sys.argv[1], "w") as f:
        f.write(f"{os.getpid()} {a.pid} {b.pid}")
    time.sleep(600)
""")


def test_timeout_kills_every_process_it_started(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "TERM_GRACE_S", 0.5)
    pidfile = tmp_path / "pids"
    start = time.monotonic()
    with pytest.raises(ProbeTimeout, match="did not finish within") as exc:
        run_measurements(nproc=2, timeout_s=2.0, commands={"hang": [sys.executable, "-c", HANG, str(pidfile)]})
    assert time.monotonic() - start < 15
    assert "\n" not in str(exc.value)
    pids = _wait_pids(pidfile, 3, timeout=0.1)
    # SIGKILL is delivered, but a process finishes exiting when the kernel next schedules it: on two loaded cores the
    # runner can return (its token no longer readable in /proc/PID/environ) a moment before /proc/PID/stat says Z
    end = time.monotonic() + 3.0
    while [p for p in pids if _alive(p)] and time.monotonic() < end:
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)], "processes survived the timeout"


def test_sigterm_suffices_for_a_well_behaved_probe(tmp_path):
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    start = time.monotonic()
    with pytest.raises(ProbeTimeout):
        run_probe([sys.executable, "-c", code], timeout_s=1.0, grace_s=5.0)
    assert time.monotonic() - start < 4  # ended by SIGTERM, not by waiting out the grace period


def test_a_failing_probe_becomes_a_warning():
    ok = [sys.executable, "-c", f"print({json.dumps(json.dumps(REPORT))})"]
    bad = [sys.executable, "-c", "import sys; print('RuntimeError: no backend', file=sys.stderr); sys.exit(3)"]
    rep = run_measurements(commands={"bad": bad, "ok": ok}, timeout_s=30)
    assert rep.hostname == "h"
    assert any(w.startswith("bad: ") and "status 3" in w and "no backend" in w for w in rep.warnings)
    assert "ok: w" in rep.warnings
    assert rep.command.startswith(sys.executable)


def test_all_probes_failing_raises_the_first_error():
    bad = [sys.executable, "-c", "import sys; sys.exit(1)"]
    with pytest.raises(ProbeError, match="exited with status 1"):
        run_measurements(commands={"bad": bad}, timeout_s=30)


def test_missing_torch_is_a_one_line_user_error(monkeypatch):
    real = measure.importlib.util.find_spec
    monkeypatch.setattr(measure.importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(UserError, match=r"pip install 'gpuadvisor\[train\]'") as exc:
        run_measurements(nproc=2)
    assert "\n" not in str(exc.value)


def test_unknown_probe_name():
    with pytest.raises(UserError, match="unknown probe"):
        run_measurements(nproc=2, probes=("nccl",))


def test_runner_and_health_do_not_import_torch():
    code = "import sys, gpuadvisor.probe.measure, gpuadvisor.probe.health; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_commands_use_torchrun_module_without_shell():
    cmds = measure.probe_commands(4, quick=True)
    assert cmds["collectives"][:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                       "--nproc-per-node", "4"]
    assert cmds["collectives"][-1] == "--quick"
    assert all(os.path.isfile(c[-2] if c[-1] == "--quick" else c[-1]) for c in cmds.values())


def test_matmul_probe_on_cpu():
    out = run_probe([sys.executable, str(probes_dir() / "matmul.py"), "--device", "cpu", "--quick",
                     "--max-dim", "512", "--min-time", "0.01"], timeout_s=120)
    rep = parse_probe_output(out)
    (curve,) = rep.matmul
    assert curve.device == "cpu" and curve.dtype == "float32" and curve.threads >= 1
    assert [p.m for p in curve.points if p.m == p.n == p.k] == [256, 512]
    assert all(p.time_s > 0 and p.tflops > 0 for p in curve.points)
    assert curve.best_tflops == max(p.tflops for p in curve.points)


def test_hostcopy_probe_without_gpu_says_why():
    rep = parse_probe_output(run_probe([sys.executable, str(probes_dir() / "hostcopy.py"), "--quick"], 120))
    if rep.device_kind == "gpu":
        assert {(c.direction, c.pinned) for c in rep.copies} == {("h2d", False), ("h2d", True),
                                                                 ("d2h", False), ("d2h", True)}
    else:
        assert rep.copies == [] and "no CUDA device" in rep.warnings[0]


@pytest.mark.slow
def test_real_measurements_two_gloo_ranks():
    rep = run_measurements(nproc=2, quick=True, timeout_s=240)
    assert rep.world_size == 2 and rep.torch_version
    assert "torch.distributed.run" in rep.command and "--nproc-per-node 2" in rep.command
    ops = {c.op for c in rep.collectives}
    assert ops == {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}
    for c in rep.collectives:
        sizes = [p.size_bytes for p in c.points]
        assert c.world_size == 2 and c.nodes == 1 and len(sizes) >= 4
        assert sizes[0] > 0 and sizes == sorted(set(sizes))
        assert all(p.time_s > 0 and p.algbw_gb_per_s > 0 and p.busbw_gb_per_s > 0 for p in c.points)
        assert c.alpha_us is not None and c.alpha_us >= 0
        assert c.busbw_gb_per_s is None or c.busbw_gb_per_s > 0
    (ar,) = [c for c in rep.collectives if c.op == "all_reduce"]
    assert all(p.busbw_gb_per_s == pytest.approx(p.algbw_gb_per_s) for p in ar.points)  # 2(n-1)/n = 1
    assert rep.matmul and rep.matmul[0].best_tflops > 0
    if rep.device_kind == "cpu":
        assert ar.backend == "gloo"
        assert any("reduce_scatter" in w for w in rep.warnings)


def test_one_rank_cannot_sweep_collectives():
    with pytest.raises(UserError, match="need at least 2 ranks"):
        run_measurements(nproc=1, probes=("collectives",))
