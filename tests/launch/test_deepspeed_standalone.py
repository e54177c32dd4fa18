"""Every DeepSpeed config the advisor can emit works standalone: DeepSpeed's own DeepSpeedConfig loads it and
deepspeed.initialize accepts it with a client optimizer on 2 CPU ranks (DS_ACCELERATOR=cpu, gloo)."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuadvisor.launch import deepspeed_config
from gpuadvisor.schemas import Plan
from gpuadvisor.workload.specs import make_workload

pytest.importorskip("deepspeed")
pytest.importorskip("torch")


def emitted_configs() -> dict[str, dict]:
    """The ds_config.json of every ZeRO variant a plan can express on 2 ranks."""
    out = {}
    # offload: none, the optimizer and (at stage 3) the parameters, the optimizer only (stage 3's offload_optimizer
    # without offload_param)
    for stage, off, hpz, prec, m in itertools.product((1, 2, 3), ("", "-off", "-offopt"), (1, 2),
                                                      ("bf16", "fp16", "fp32"), (1, 2)):
        if (hpz > 1 or off == "-offopt") and stage != 3:
            continue
        plan = Plan(dp=2, zero_stage=stage, zero_offload=bool(off), zero_offload_param=off != "-offopt",
                    zero_hpz_partition_size=hpz, micro_batch_size=2, num_micro_batches=m, devices_per_node=2)
        wl = make_workload("10M", seq_len=64, global_batch=plan.global_batch(), precision=prec)
        out[f"z{stage}{off}{'-hpz' if hpz > 1 else ''}-{prec}-m{m}"] = deepspeed_config(plan, wl)
    return out


def test_offload_config_accepts_client_optimizer_flags():
    cfg = emitted_configs()["z3-off-bf16-m1"]
    assert cfg["zero_force_ds_cpu_optimizer"] is False and cfg["zero_allow_untested_optimizer"] is True
    assert "offload_param" in cfg["zero_optimization"]
    only = emitted_configs()["z3-offopt-bf16-m1"]["zero_optimization"]
    assert "offload_optimizer" in only and "offload_param" not in only
    assert "offload_param" not in emitted_configs()["z2-off-bf16-m1"]["zero_optimization"]


@pytest.mark.slow
def test_every_emitted_config_initialises_with_deepspeed(tmp_path):
    configs = emitted_configs()
    src = tmp_path / "configs.json"
    src.write_text(json.dumps(configs))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    # build DeepSpeed's JIT op once before two ranks need it (DESIGN.md section 6)
    subprocess.run([sys.executable, "-c", "from gpuadvisor.trainers import ensure_deepspeed_ops as e; e()"],
                   env=env, check=True, timeout=600)
    worker = Path(__file__).with_name("ds_init_worker.py")
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(worker), str(src), str(tmp_path / "out.json")], env=env, capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads((tmp_path / "out.json").read_text())
    assert set(results) == set(configs)
    bad = {k: v for k, v in results.items() if v != "ok" and not v.startswith("config-only")}
    assert not bad, bad
    assert sum(v == "ok" for v in results.values()) == 40  # every non-fp16 variant (of 60) really ran a step
