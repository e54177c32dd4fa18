"""Host dispatch of an eager per-expert MoE loop, in dense layers: what `overheads.moe_expert_kernels` holds.

The bundled trainers' MoE layer (trainers/blocks.MoE) loops over its experts in Python, as HF transformers' MoE
blocks do: per expert a mask, a nonzero (a host sync on GPUs), an index_select, the expert MLP, a weighting and an
index_add, and their backward. At tiny sizes one forward + backward is all dispatch, so its time per expert,
divided by a dense transformer layer's, counts the expert in the unit the cost model already charges per dense
layer (`overheads.kernels_per_layer` x `launch_us`). Prints the ratio and the kernel-equivalents per expert for
both MLP kinds (best of `--repeats` timings, one thread).

With --trainer it also runs the bundled trainer (one CPU rank, fp32) on a 4-layer MoE model at 4 and 32 experts
and prints how the step time grows with the expert count, measured and predicted with and without the loop's
host term: absolute CPU times move with the host's load, the ratio less so.

    python benchmarks/moe_host_overhead.py [--repeats 7] [--experts 4,36] [--trainer]
"""
from __future__ import annotations

import argparse
import statistics
import time


def _best(module, repeats: int, iters: int = 100) -> float:
    """Best mean seconds of one forward + backward over `repeats` timed loops of `iters`."""
    import torch

    x = torch.randn(1, 32, 64, requires_grad=True)
    for _ in range(20):
        module(x).sum().backward()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iters):
            module(x).sum().backward()
        out.append((time.perf_counter() - t) / iters)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--experts", default="4,36", help="two expert counts, the per-expert time is their slope")
    ap.add_argument("--trainer", action="store_true", help="also time the bundled trainer at 4 and 32 experts")
    args = ap.parse_args()
    import torch

    from gpuadvisor.costmodel.calibration import load_calibration
    from gpuadvisor.schemas.workload import ModelSpec
    from gpuadvisor.trainers.blocks import Block, BlockConfig, MoE

    torch.set_num_threads(1)
    torch.manual_seed(0)
    lo, hi = (int(e) for e in args.experts.split(","))
    kpl = float(load_calibration()["overheads"]["kernels_per_layer"])
    ratios = []
    for mlp in ("swiglu", "gelu"):
        base = dict(name="t", n_layers=1, d_model=64, n_heads=4, d_ff=128, vocab_size=64, mlp=mlp)
        moe = dict(base, experts_per_token=2, expert_d_ff=32)
        dense = _best(Block(BlockConfig.from_spec(ModelSpec(**base), 0)), args.repeats)
        t_lo = _best(MoE(BlockConfig.from_spec(ModelSpec(**moe, n_experts=lo), 0)), args.repeats)
        t_hi = _best(MoE(BlockConfig.from_spec(ModelSpec(**moe, n_experts=hi), 0)), args.repeats)
        per = (t_hi - t_lo) / (hi - lo)
        ratios.append(per / dense)
        print(f"{mlp:6s}: dense layer {dense * 1e6:7.0f} us; MoE {lo} experts {t_lo * 1e6:7.0f} us, {hi} experts "
              f"{t_hi * 1e6:7.0f} us; per expert {per * 1e6:6.1f} us = {per / dense:.3f} dense layers "
              f"= {per / dense * kpl:.1f} of kernels_per_layer {kpl:g}")
    print(f"mean: {statistics.mean(ratios):.3f} dense layers per expert = "
          f"{statistics.mean(ratios) * kpl:.1f} kernel-equivalents (torch {torch.__version__})")
    if args.trainer:
        trainer(args.repeats)


def trainer(repeats: int) -> None:
    """Median step time of the bundled trainer at 4 and 32 experts against the cost model's, with and without
    the expert loop's host term (Context.moe_loop_kernels)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from gpuadvisor.costmodel.combine import make_context
    from gpuadvisor.costmodel.engine import evaluate
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.schemas import ModelSpec, Plan, TrainerJob
    from gpuadvisor.workload.specs import make_workload

    cluster, rows = load_preset("cpu-2ranks"), {}
    for experts in (4, 32):
        spec = ModelSpec(name=f"moe-{experts}", n_layers=4, d_model=64, n_heads=4, d_ff=128, vocab_size=512,
                         mlp="swiglu", n_experts=experts, experts_per_token=2, expert_d_ff=64, tied_embeddings=False)
        wl = make_workload(spec, seq_len=64, global_batch=8, precision="fp32")
        plan = Plan(micro_batch_size=8, devices_per_node=1)
        job = TrainerJob(plan=plan, workload=wl, steps=6, warmup=2, device="cpu")
        times = []
        for _ in range(max(3, repeats // 2)):
            with tempfile.TemporaryDirectory() as d:
                Path(d, "job.json").write_text(job.model_dump_json())
                subprocess.run([sys.executable, "-m", "gpuadvisor.trainers", "--plan", f"{d}/job.json", "--out", d],
                               check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True)
                metrics = json.loads(Path(d, "metrics.json").read_text())
            times.append(statistics.median(metrics["ranks"][0]["step_times_s"]))
        ctx = make_context(cluster, wl)
        with_loop = evaluate(plan, ctx).step_s
        ctx.moe_loop_kernels = 0.0
        rows[experts] = (statistics.median(times), with_loop, evaluate(plan, ctx).step_s)
        m, p, p0 = rows[experts]
        print(f"trainer, {experts:2d} experts: measured {m * 1e3:6.1f} ms; predicted {p * 1e3:6.1f} ms with the loop, "
              f"{p0 * 1e3:6.1f} ms without")
    (m4, p4, q4), (m32, p32, q32) = rows[4], rows[32]
    print(f"32 / 4 experts: measured {m32 / m4:.2f}x; predicted {p32 / p4:.2f}x with the loop, {q32 / q4:.2f}x without")


if __name__ == "__main__":
    main()
