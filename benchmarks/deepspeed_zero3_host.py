"""DeepSpeed ZeRO-3's host bookkeeping per rank: the real engine on a fake process group of N ranks.

DeepSpeed ZeRO-3 walks every rank's shard in Python, for every parameter, at every gather and reduce:
- `AllGatherCoalescedHandle.wait` (runtime/zero/partition_parameters.py) narrows the gathered buffer once per rank
  per parameter and torch.cat's the pieces into the full parameter (forward, a replayed forward, backward);
- `reduce_scatter_coalesced` (runtime/comm/coalesced_collectives.py) slices every gradient of a reduce bucket into
  world_size chunks and interleaves them with torch.cat before the one reduce-scatter (a bucket of one tensor
  whose size world_size divides skips this).
So its host time per step grows with world_size x parameters, where FSDP (one flat buffer per block, copied out
with one split per block) does not. This script measures that slope on the machine it runs on: it builds the
real DeepSpeed engine (ZeRO-3, DS_ACCELERATOR=cpu) on torch.distributed's "fake" backend, which accepts any
world size in one process and makes every collective a no-op, so what grows with the world size is
DeepSpeed's own host work. The forward's slope is the gather's cost per (rank, parameter); the backward's
slope less the gather's is the reduce interleave's.

It also counts the parameter elements each forward and backward gathers (the coordinator's all-gathers of
parameters not yet available): DeepSpeed keeps a gathered parameter whose next use lies within
stage3_max_reuse_distance elements of the module trace (schemas.plan.DEEPSPEED_MAX_REUSE_DISTANCE), so a model
under the 1e9 default gathers nothing in its backward, and the backward's slope is the reduce interleave's alone.

Run: python benchmarks/deepspeed_zero3_host.py [--worlds 8,256,512,1024] [--layers 4] [--hidden 1024]
     [--repeats 3] (a child process per world size and repeat, round-robin; ~3 min on 2 cores). Prints the table and
     the fitted slopes, the figures `knowledge/calibration.yaml` (overheads.deepspeed_zero3_*) cite.
     python benchmarks/deepspeed_zero3_host.py --count [--layers 8] [--hidden 256] [--reuse-layers 0.25]
     [--recompute]: world 8, live-parameter cap and reuse distance set to that many layers' elements; prints the
     layers' worth of elements the forward and the backward gather (the checks cited at
     DEEPSPEED_MAX_REUSE_DISTANCE and Context.ds_replay_regather).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _child(world: int, layers: int, hidden: int, steps: int, reuse_layers: float = 0.0,
           recompute: bool = False) -> dict:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT="29533")
    import logging

    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.set_num_threads(1)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    import deepspeed

    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    deepspeed.init_distributed(dist_backend="fake")
    from deepspeed.runtime.zero import partitioned_param_coordinator as ppc

    h = hidden
    gathered = [0]  # parameter elements the coordinator gathers (those not available when fetched)
    coordinator = ppc.PartitionedParameterCoordinator
    all_gather = coordinator._PartitionedParameterCoordinator__all_gather_params  # type: ignore[attr-defined]

    def counting_all_gather(self, params, forward):
        gathered[0] += sum(p.ds_numel for p in params if p.ds_status == ppc.ZeroParamStatus.NOT_AVAILABLE)
        return all_gather(self, params, forward)

    coordinator._PartitionedParameterCoordinator__all_gather_params = counting_all_gather  # type: ignore[attr-defined]

    class Block(torch.nn.Module):  # a GPT-2 layer's 12 parameter tensors (fused QKV, biases, 2 LayerNorms)
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
            self.qkv, self.proj = torch.nn.Linear(h, 3 * h), torch.nn.Linear(h, h)
            self.fc1, self.fc2 = torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)

        def forward(self, x):
            x = x + self.proj(self.qkv(self.ln1(x))[..., :h])
            return x + self.fc2(torch.relu(self.fc1(self.ln2(x))))

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))

        def forward(self, x):
            for b in self.blocks:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False) if recompute else b(x)
            return x.pow(2).mean()

    zero: dict = {"stage": 3}
    layer = 12 * h * h + 13 * h  # the Block's parameter elements
    if reuse_layers:
        zero.update(stage3_max_reuse_distance=int(reuse_layers * layer), stage3_max_live_parameters=int(reuse_layers * layer),
                    stage3_param_persistence_threshold=0)
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": world,
           "zero_optimization": zero, "optimizer": {"type": "SGD", "params": {"lr": 1e-3}},
           "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9}
    with deepspeed.zero.Init(config_dict_or_path=cfg):
        model = Model()
    engine, *_ = deepspeed.initialize(model=model, config=cfg, model_parameters=model.parameters())
    x = torch.randn(1, 4, h, requires_grad=recompute)
    fwd, bwd, fwd_el, bwd_el = [], [], [], []
    for _ in range(steps):
        gathered[0] = 0
        t0 = time.perf_counter()
        loss = engine(x)
        t1 = time.perf_counter()
        fwd_el.append(gathered[0])
        engine.backward(loss)
        t2 = time.perf_counter()
        bwd_el.append(gathered[0] - fwd_el[-1])
        engine.step()
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
    tensors = sum(1 for _ in model.parameters())
    # the first step records the module trace and gathers everything; the steady state is from the second on
    return {"world": world, "tensors": tensors, "fwd_s": statistics.median(fwd[2:]),
            "bwd_s": statistics.median(bwd[2:]), "fwd_layers": statistics.median(fwd_el[2:]) / layer,
            "bwd_layers": statistics.median(bwd_el[2:]) / layer, "deepspeed": deepspeed.__version__,
            "torch": torch.__version__}


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", default="8,256,512,1024", help="world sizes (each <= --hidden, so no shard is empty)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3, help="child processes per world size (median of their medians)")
    ap.add_argument("--count", action="store_true", help="count the gathered elements at a scaled reuse distance")
    ap.add_argument("--reuse-layers", type=float, default=0.25, help="with --count: the distance, in layers")
    ap.add_argument("--recompute", action="store_true", help="with --count: checkpoint every layer")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.count:
        if a.layers == 4 and a.hidden == 1024:
            a.layers, a.hidden = 8, 256
        r = _child(8, a.layers, a.hidden, 5, a.reuse_layers, a.recompute)
        print(f"DeepSpeed {r['deepspeed']}: {a.layers} GPT layers of width {a.hidden}, reuse distance and live cap "
              f"{a.reuse_layers:g} layers, recompute {'on' if a.recompute else 'off'}: the forward gathers "
              f"{r['fwd_layers']:.2f} layers' elements, the backward {r['bwd_layers']:.2f}")
        return
    if a.child:
        print(json.dumps(_child(a.child, a.layers, a.hidden, a.steps)))
        return
    worlds = [int(s) for s in a.worlds.split(",")]
    if max(worlds) > a.hidden:
        sys.exit(f"world size {max(worlds)} is above --hidden {a.hidden}: LayerNorm shards would be empty; lower it")
    runs: dict[int, list[dict]] = {w: [] for w in worlds}
    for _ in range(a.repeats):  # round-robin, so host load drifts over every world size alike
        for w in worlds:
            out = subprocess.run([sys.executable, __file__, "--child", str(w), "--layers", str(a.layers), "--hidden",
                                  str(a.hidden), "--steps", str(a.steps)], capture_output=True, text=True)
            line = next((ln for ln in out.stdout.splitlines() if ln.startswith("{")), None)
            if out.returncode or line is None:
                sys.exit(f"world {w} failed (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
            runs[w].append(json.loads(line))
    rows = [dict(runs[w][0], fwd_s=statistics.median(r["fwd_s"] for r in runs[w]),
                 bwd_s=statistics.median(r["bwd_s"] for r in runs[w])) for w in worlds]
    r0 = rows[0]
    print(f"DeepSpeed {r0['deepspeed']}, torch {r0['torch']}, {a.layers} GPT layers of width {a.hidden} "
          f"({r0['tensors']} parameter tensors), fake process group, median of {a.repeats} runs of "
          f"{a.steps - 2} steps")
    print(f"{'world':>6} {'forward ms':>11} {'backward ms':>12} {'fwd gathers':>12} {'bwd gathers':>12}  (layers)")
    for r in rows:
        print(f"{r['world']:>6} {r['fwd_s'] * 1e3:>11.1f} {r['bwd_s'] * 1e3:>12.1f} {r['fwd_layers']:>12.2f} "
              f"{r['bwd_layers']:>12.2f}")
    pieces = [r["world"] * r["tensors"] for r in rows]
    gather = _slope(pieces, [r["fwd_s"] for r in rows])
    backward = _slope(pieces, [r["bwd_s"] for r in rows])
    # the backward's own gathers, as a share of the forward's (0 for a model under the reuse distance)
    regather = statistics.fmean(r["bwd_layers"] / r["fwd_layers"] for r in rows)
    print(f"gather: {gather * 1e6:.2f} us per (rank, parameter tensor)  (forward slope)")
    print(f"reduce interleave: {(backward - regather * gather) * 1e6:.2f} us per (rank, gradient tensor)  "
          f"(backward slope {backward * 1e6:.2f} less {regather:.2f} gathers)")


if __name__ == "__main__":
    main()
