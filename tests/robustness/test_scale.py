"""Any cluster and batch the schema accepts ranks in seconds (issue 15, item 2), and a slow ranking says so.

Each case runs `gpuadvisor suggest` in a subprocess with a generous wall-clock bound: it catches work that grows
with the batch or the device count (the fuzz suite found `--global-batch 498968388` taking > 30 s: the
single-device baseline tried every divisor up to the batch), not a slow machine.
"""
from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest
from rich.console import Console

from gpuadvisor.cli.progress import DelayedProgress
from gpuadvisor.schemas.bounds import MAX_DEVICES
from gpuadvisor.schemas.workload import MAX_GLOBAL_BATCH

from .conftest import COUNTS

LIMIT_S = 30.0  # a CLI run, as in test_fuzz.py


def _suggest(args: list[str], limit_s: float = LIMIT_S) -> subprocess.CompletedProcess:
    COUNTS["inputs"] += 1
    try:
        return subprocess.run([sys.executable, "-m", "gpuadvisor", "suggest", "--top", "2", *args],
                              capture_output=True, text=True, timeout=limit_s, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"suggest {' '.join(args)} took more than {limit_s:.0f} s")


@pytest.mark.parametrize("batch", ["498968388", str(MAX_GLOBAL_BATCH)])
def test_large_batch_ranks_in_seconds(batch):
    # 10 s: the unbounded baseline took 16 s at 498968388 on a quiet machine (0.5 s now)
    r = _suggest(["--model", "125M", "--preset", "a6000-4x-pcie", "--global-batch", batch], limit_s=10)
    assert r.returncode == 0, r.stderr
    assert "dp=4" in r.stdout


def test_64_nodes_of_8_rank_in_seconds():
    r = _suggest(["--model", "7B", "--preset", "dgx-a100-8x", "--what-if", "gpus=64x8", "--global-batch", "1536"])
    assert r.returncode == 0, r.stderr
    assert "64 node(s) x 8" in r.stdout
    # the launch section: one command template for the 64 alike nodes, not one command per node
    text = " ".join(r.stdout.split())
    assert "Nodes 0-63 (dgx-0 ... dgx-63): the same command on each of the 64 nodes, with NODE_RANK = 0..63" in text
    assert text.count("$ torchrun") == 1 and "--node-rank $NODE_RANK" in text


def test_256_gpus_in_one_node_rank_in_seconds(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text("name: big\nnodes:\n  - name: n\n    gpus: 256x A40\n    topology: SYS\n")
    r = _suggest(["--model", "125M", "--cluster", str(f), "--global-batch", "512"], limit_s=15)
    assert r.returncode == 0, r.stderr


def test_the_largest_device_count_ranks_in_seconds():
    """Both rankings (baseline and 16,384 x 8) and the hand-over in ~5 s on 2 shared cores (25-47 s when every node
    printed its own command); the launch section is one template, not 16,384 commands."""
    assert 16384 * 8 == MAX_DEVICES
    r = _suggest(["--model", "7B", "--preset", "dgx-a100-8x", "--what-if", "gpus=16384x8",
                  "--global-batch", str(MAX_GLOBAL_BATCH)], limit_s=15)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "the same command on each of the 16384 nodes, with NODE_RANK = 0..16383" in text
    assert text.count("$ torchrun") == 1 and len(r.stdout) < 20_000


def test_the_largest_device_count_places_its_groups_in_seconds():
    """Topology on 16,384 alike nodes of 8 (the device bound): one link matrix, and every group placement the
    enumerator asks for and more (nodes 1..8 and powers of two, TP powers of two up to 8, PP up to 64 and all of
    the rest: ~20,000 placements; `suggest --what-if gpus=16384x8` asks for ~5,700) in seconds: ~3 s on 2 shared
    cores, minutes before placement ran over arrays."""
    from gpuadvisor.costmodel.analytical.comm import Topology
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.ranking import apply_what_if

    cluster = apply_what_if(load_preset("dgx-a100-8x"), "gpus=16384x8")
    t = time.monotonic()
    topo = Topology(cluster)
    assert time.monotonic() - t < 2
    shapes = [(nodes, gpn) for nodes in sorted(set(range(1, 9)) | {2 ** k for k in range(15)})
              for gpn in range(1, 9)]
    calls = 0
    t = time.monotonic()
    for nodes, gpn in shapes:
        world = nodes * gpn
        for tp in (x for x in (1, 2, 4, 8) if world % x == 0):
            for pp in (x for x in sorted({1, 2, 3, 4, 6, 8, 16, 32, 64, world // tp}) if (world // tp) % x == 0):
                for kind in ("tp", "dp", "pp"):
                    for order in ("tp-dp-pp", "tp-pp-dp"):
                        topo.group(kind, world // (tp * pp), tp, pp, nodes, gpn, order)
                        calls += 1
    dt = time.monotonic() - t
    assert calls > 15000 and dt < 15, f"{calls} placements took {dt:.1f} s"


def _plain() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=False, width=120), buf


def test_slow_ranking_shows_a_progress_line():
    console, buf = _plain()
    with DelayedProgress("gpuadvisor suggest", "ranking plans for 7B", after_s=0.01, console=console,
                         live=False) as p:
        t0 = time.monotonic()
        while not p.shown and time.monotonic() - t0 < 10:
            time.sleep(0.01)
    assert p.shown
    assert buf.getvalue().startswith("gpuadvisor suggest: ranking plans for 7B  (0s so far)")


def test_quick_ranking_prints_nothing():
    console, buf = _plain()
    with DelayedProgress("gpuadvisor suggest", "ranking", after_s=60, console=console, live=False) as p:
        pass
    time.sleep(0.05)
    assert not p.shown and buf.getvalue() == ""
