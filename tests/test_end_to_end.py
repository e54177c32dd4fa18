"""The hand-over works for real: an emitted launch.sh trains with the bundled trainer on 2 (TP x PP: 4) CPU ranks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch import build_launch, emit, make_job
from gpuadvisor.schemas import Plan, RunMetrics
from gpuadvisor.workload.specs import make_workload, model_from_args

pytest.importorskip("torch")
pytest.importorskip("deepspeed")


@pytest.mark.slow
@pytest.mark.parametrize("plan", [
    Plan(dp=2, zero_stage=2, micro_batch_size=2, num_micro_batches=2, devices_per_node=2),
    Plan(pp=2, micro_batch_size=2, num_micro_batches=4, pp_schedule="1f1b", devices_per_node=2),
    Plan(tp=2, pp=2, micro_batch_size=2, num_micro_batches=2, pp_schedule="1f1b", devices_per_node=4),
], ids=["zero2", "pp-1f1b", "tp2xpp2"])
def test_emitted_launch_script_trains(tmp_path, plan):
    """On 2 CPU ranks (the cpu-2ranks preset), and on 4 for the TP x PP plan (`--cpu-ranks 4`)."""
    from gpuadvisor.api import resolve_cluster

    cluster = load_preset("cpu-2ranks") if plan.world_size == 2 else resolve_cluster(cpu_ranks=plan.world_size)[0]
    model = model_from_args(layers=2, hidden=32, heads=4, ffn=64, vocab=128, seq=16, name="tiny")
    wl = make_workload(model, seq_len=16, global_batch=plan.global_batch(), precision="fp32")
    launch = build_launch(plan, cluster, wl, steps=2)
    out = tmp_path / "emit"
    emit(launch, make_job(plan, wl, steps=2, warmup=1), out)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    res = subprocess.run(["bash", str(out / "launch.sh")], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    metrics_files = list(out.rglob("metrics.json"))
    assert len(metrics_files) == 1
    m = RunMetrics.model_validate(json.loads(metrics_files[0].read_text()))
    assert m.plan == plan and m.steps == 2 and m.summary.throughput_tokens_per_s > 0
    assert m.summary.total_tokens == 2 * plan.global_batch() * 16
