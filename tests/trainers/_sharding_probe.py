"""Run under torchrun: build each job's strategy, take one step, and write what every rank holds.

Usage: torchrun --nproc-per-node N tests/trainers/_sharding_probe.py OUT.json JOB.json [JOB.json ...]
Per job and rank: parameter elements held at rest (local shards), optimizer-state elements (the local
part of Adam's exp_avg), the (dp, tp, pp) coordinates, so a test can check that ZeRO shards, and the shapes a
pipeline stage hands to the next one.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from gpuadvisor.schemas import TrainerJob
from gpuadvisor.trainers.parallel import setup, teardown
from gpuadvisor.trainers.strategies import build_strategy


def local_numel(t) -> int:
    return (t.to_local() if hasattr(t, "to_local") else t).numel()


def optimizer_state_numel(opt) -> int:
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps the local optimizer in .optim
    return sum(local_numel(s["exp_avg"]) for s in inner.state.values() if "exp_avg" in s)


def probe(job: TrainerJob) -> dict:
    ctx = setup(job)
    strategy = build_strategy(ctx)
    handed_on: list = []  # shapes a pipeline stage hands to the next one (its output unless it is the last)
    for mod in getattr(strategy, "modules", []):
        if getattr(mod, "head", True) is None:
            mod.register_forward_hook(lambda _m, _i, out: handed_on.append(list(out.shape)))
    strategy.step(0)
    if hasattr(strategy, "engine"):
        raise ValueError("the probe inspects torch-native strategies, not DeepSpeed engines")
    # the optimizer's parameters: TP x DP's DDP swaps the module's DTensor parameters around each forward
    params = {id(p): p for g in strategy.optimizer.param_groups for p in g["params"]}
    return {"coords": ctx.coords, "param_numel": sum(local_numel(p) for p in params.values()),
            "state_numel": optimizer_state_numel(strategy.optimizer),
            "handed_on": handed_on,
            "dtensor_meshes": sorted({str(p.device_mesh.mesh_dim_names) for p in params.values()
                                      if hasattr(p, "device_mesh")})}


def main() -> None:
    out, jobs = Path(sys.argv[1]), sys.argv[2:]
    result = {}
    try:
        for path in jobs:
            mine = probe(TrainerJob.model_validate_json(Path(path).read_text()))
            gathered: list = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, mine)
            result[Path(path).stem] = gathered
        if dist.get_rank() == 0:
            out.write_text(json.dumps(result))
    finally:
        teardown(clean=True)


if __name__ == "__main__":
    main()
