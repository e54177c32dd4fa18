"""Fit the cost model's CPU-rank constants (knowledge/calibration.yaml, section cpu_ranks) on this machine.

Runs the bundled trainer single-process (one CPU rank, OMP_NUM_THREADS=1, fp32) for several GPT shapes,
measures seconds per optimizer step, and least-squares fits the CPU terms of the analytical model:

    t_step = flops / (R * e_max * x / (x + x_half)) + layers * kernels_per_layer * launch_us + step_overhead

R is the single-thread matmul rate measured here and now by the matmul probe (`gpuadvisor probe --measure
--probes matmul --quick` with OMP_NUM_THREADS=1: its best_tflops), the same rate `probe --cluster --measure`
gives each CPU rank, so e_max is "trainer GEMM rate / probe rate" and carries over to other CPUs. Each shape
is timed --repeats times (median). Prints the fitted values and predicted vs measured per shape.
Usage: python benchmarks/cpu_calibration.py [--steps 6] [--repeats 3]

With --distributed it fits the host costs of the distributed strategies instead, on this host's 2 CPU ranks
(gloo over loopback, so the network costs little): each plan below is run --repeats times round robin through
the trial runner, and for each the per-call constant that makes the model's step time equal the measured
median is solved (the model is linear in it): ddp_step_us from DDP (one bucket per step), tp_call_us
from tensor parallelism (4 collectives per layer), p2p_call_us from the pipeline (exchanges per micro-batch).
Prints every solution and the median per constant (knowledge/calibration.yaml cpu_ranks).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from gpuadvisor.costmodel.analytical import evaluate
from gpuadvisor.costmodel.combine import make_context
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import Plan, TrainerJob
from gpuadvisor.workload.specs import make_workload, model_from_args

SHAPES = [  # layers, hidden, heads, ffn, vocab, seq, micro-batch
    (2, 32, 4, 128, 256, 16, 8),
    (2, 128, 4, 512, 1024, 64, 4),
    (4, 256, 4, 1024, 2048, 128, 4),
    (4, 320, 8, 1536, 8000, 128, 16),  # the A6000 paper's 10M shape (Table I)
    (4, 512, 8, 2048, 4096, 128, 4),
    (4, 64, 4, 256, 512, 64, 8),  # benchmarks/advice_quality.py tiny-0.3M (one rank; DP micro-batch 4)
    (4, 64, 4, 256, 512, 64, 4),
    (4, 256, 4, 1024, 512, 64, 8),  # advice_quality small-3M
    (4, 256, 4, 1024, 512, 64, 4),
]


def measure(shape, steps: int) -> tuple[float, object]:
    """Seconds per step of the single-rank trainer for one shape (timed window / steps)."""
    L, h, a, f, v, s, mb = shape
    wl = make_workload(model_from_args(layers=L, hidden=h, heads=a, ffn=f, vocab=v, seq=s, name=f"L{L}h{h}"),
                       seq_len=s, global_batch=mb, precision="fp32")
    job = TrainerJob(plan=Plan(micro_batch_size=mb), workload=wl, steps=steps, warmup=2, device="cpu")
    with tempfile.TemporaryDirectory() as d:
        Path(d, "job.json").write_text(job.model_dump_json())
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, "-m", "gpuadvisor.trainers", "--plan", f"{d}/job.json", "--out", d],
                       check=True, env=env, capture_output=True)
        m = json.loads(Path(d, "metrics.json").read_text())
    return m["summary"]["total_time_s"] / steps, wl


def probe_rate() -> float:
    """best_tflops of the matmul probe on one thread (what `probe --cluster --measure` gives a CPU rank)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "gpuadvisor", "probe", "--json", "--measure", "--quick",
                          "--probes", "matmul"], check=True, env=env, capture_output=True, text=True).stdout
    return float(json.loads(out)["measure"]["matmul"][0]["best_tflops"])


#: (constant, context attribute, plan) fitted by --distributed, on the two advice-benchmark GPT shapes
DIST_PLANS = [("ddp_step_us", "ddp_step_s", "dp=2,mb=4,m=1"),
              ("tp_call_us", "tp_call_s", "tp=2,mb=8,m=1"),
              ("p2p_call_us", "p2p_call_s", "pp=2,mb=8,m=1,schedule=gpipe"),
              ("p2p_call_us", "p2p_call_s", "pp=2,mb=2,m=4,schedule=1f1b")]
DIST_SHAPES = [(4, 64, 4, 256, 512, 64), (4, 256, 4, 1024, 512, 64)]


def distributed(cluster, args) -> None:
    """Solve each distributed host-cost constant from measured 2-rank runs (see the module docstring)."""
    from gpuadvisor.schemas import parse_plan
    from gpuadvisor.trials.runner import run_trial

    cases = []
    for L, h, a, f, v, s in DIST_SHAPES:
        wl = make_workload(model_from_args(layers=L, hidden=h, heads=a, ffn=f, vocab=v, seq=s, name=f"L{L}h{h}"),
                           seq_len=s, global_batch=8, precision="fp32")
        cases += [(name, attr, parse_plan(text), wl) for name, attr, text in DIST_PLANS]
    times: dict[int, list[float]] = {i: [] for i in range(len(cases))}
    for _ in range(args.repeats):  # round robin over the cases: a slow spell hits all alike
        for i, (_, _, plan, wl) in enumerate(cases):
            job = TrainerJob(plan=plan, workload=wl, steps=args.steps, warmup=2, device="cpu")
            with tempfile.TemporaryDirectory() as d:
                rec = run_trial(job, d, timeout_s=600, nproc=plan.world_size, env={"OMP_NUM_THREADS": "1"})
            if rec.status != "ok":
                raise SystemExit(f"{plan.to_string()}: {rec.status}: {rec.error}")
            times[i].append(statistics.median(statistics.median(r.step_times_s) for r in rec.metrics.ranks))
    solved: dict[str, list[float]] = {}
    for i, (name, attr, plan, wl) in enumerate(cases):
        ctx = make_context(cluster, wl)
        setattr(ctx, attr, 0.0)
        t0 = evaluate(plan, ctx).step_s
        setattr(ctx, attr, 1e-3)
        per_ms = evaluate(plan, ctx).step_s - t0  # seconds of step per 1 ms of the constant
        t = statistics.median(times[i])
        c_us = (t - t0) / per_ms * 1e3
        solved.setdefault(name, []).append(c_us)
        print(f"  {wl.model.name} {plan.to_string()}: measured {t * 1e3:7.1f} ms (runs "
              f"{[round(x * 1e3, 1) for x in times[i]]}), model without host cost {t0 * 1e3:7.1f} ms, "
              f"{per_ms * 1e3:.1f} calls -> {name} = {c_us:.0f} us", flush=True)
    for name, vals in solved.items():
        print(f"fit: {name} = {statistics.median(vals):.0f} us (median of {[round(v) for v in vals]})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--distributed", action="store_true", help="fit the DDP/TP/PP host costs on 2 local ranks")
    args = ap.parse_args()
    rate = probe_rate()
    print(f"matmul probe, 1 thread: best {rate:.4f} TFLOP/s", flush=True)
    cluster = load_preset("cpu-2ranks")
    node = cluster.nodes[0]
    devs = [d.model_copy(update={"achieved_tflops": rate, "peak_tflops_fp32": rate, "peak_tflops_bf16": rate})
            for d in node.devices]
    cluster = cluster.model_copy(update={"nodes": [node.model_copy(update={"devices": devs})]})
    if args.distributed:
        distributed(cluster, args)
        return
    rows = []
    for shape in SHAPES:
        runs = [measure(shape, args.steps) for _ in range(args.repeats)]
        t, wl = statistics.median(r[0] for r in runs), runs[0][1]
        ctx = make_context(cluster, wl)
        rows.append((shape, t, ctx, Plan(micro_batch_size=shape[-1])))
        print(f"measured {shape}: {t * 1e3:.1f} ms/step", flush=True)
    best = None
    for e_max in np.linspace(0.3, 1.2, 19):
        for x_half in (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05):
            for launch_us in (5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0):
                for step_s in (0.0005, 0.001, 0.002, 0.004):
                    err = 0.0
                    for _, t, ctx, plan in rows:
                        ctx.rate_max = rate * 1e12 * e_max
                        ctx.x_half, ctx.launch_us, ctx.step_overhead = x_half, launch_us, step_s
                        err += np.log(evaluate(plan, ctx).step_s / t) ** 2
                    if best is None or err < best[0]:
                        best = (err, e_max, x_half, launch_us, step_s)
    err, e_max, x_half, launch_us, step_s = best
    print(f"fit: e_max={e_max:.2f} x_half={x_half} launch_us={launch_us} step_overhead_s={step_s} "
          f"(rms log error {np.sqrt(err / len(rows)):.3f})")
    for shape, t, ctx, plan in rows:
        ctx.rate_max = rate * 1e12 * e_max
        ctx.x_half, ctx.launch_us, ctx.step_overhead = x_half, launch_us, step_s
        p = evaluate(plan, ctx).step_s
        print(f"  {shape}: measured {t * 1e3:7.1f} ms  predicted {p * 1e3:7.1f} ms  ({p / t - 1:+.0%})")


if __name__ == "__main__":
    main()
