"""The bundled trainer on this host's GPU against the cost model: measured vs predicted tokens/s and peak memory.

    PYTHONPATH=src python benchmarks/gpu_trainer_check.py --out DIR [--grid default|quick] [--budget-s 420]
    PYTHONPATH=src python benchmarks/gpu_trainer_check.py --out DIR --cpu     # the same path on one CPU rank
    PYTHONPATH=src python benchmarks/gpu_trainer_check.py --repredict DIR/rows.jsonl --cluster DIR/cluster.json

What a user's first `suggest` + `--confirm` does on one GPU, made into a grid:
1. probes this host (NVML, `nvidia-smi topo -m`) and builds the cluster from it as `suggest` does
   (hardware.build.cluster_from_probe, from the one probe it prints), and prints what it found;
2. per grid row (model, sequence length, micro-batch, micro-batches per step, recompute) predicts the
   single-GPU plan with the cost model (costmodel.combine.estimate) and runs it for real with the bundled
   trainer (`python -m gpuadvisor.trainers`, bf16 autocast, PyTorch SDPA, torch.optim AdamW), one
   subprocess per row with its own timeout, so an OOM or a hang costs one row;
3. prints measured / predicted tokens/s and peak memory (torch.cuda.max_memory_allocated against the
   model's weights + gradients + optimizer + activations + logits, i.e. without the framework reserve) and
   writes every row to DIR/rows.jsonl (with the job, the prediction and the trainer's RunMetrics) and the
   probe report to DIR/probe.json.

Rows that run past the budget are skipped and say so. No row is timed in a test: this prints figures.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gpuadvisor import api
from gpuadvisor.costmodel.combine import estimate
from gpuadvisor.hardware.build import cluster_from_probe
from gpuadvisor.launch.build import make_job
from gpuadvisor.schemas import Plan

GiB = 1024 ** 3

#: (model, seq_len, micro_batch, micro_batches per step, recompute). GPT-2 sizes from host-bound to GEMM-bound,
#: a GQA/SwiGLU model with a 151k vocabulary, a 1.5B micro-batch whose activations fill most of an 80 GB card,
#: and a 2.7B model at sequence 2048 with recompute.
GRIDS = {
    "default": [
        ("gpt2", 1024, 4, 1, False), ("gpt2", 1024, 16, 1, False), ("gpt2", 1024, 32, 1, False),
        ("gpt2-medium", 1024, 16, 1, False),
        ("gpt2-large", 1024, 8, 1, False),
        ("gpt2-xl", 1024, 4, 1, False), ("gpt2-xl", 1024, 16, 1, False), ("gpt2-xl", 1024, 16, 1, True),
        ("gpt2-xl", 1024, 8, 2, False),
        ("qwen2.5-0.5b", 2048, 8, 1, False),
        ("gpt2-xl", 1024, 32, 1, False),
        ("gpt3-2.7b", 2048, 4, 1, True),
    ],
    "quick": [("gpt2", 1024, 8, 1, False), ("gpt2-xl", 1024, 8, 1, False), ("gpt2-xl", 1024, 8, 1, True)],
    # the memory terms' check: one row per term (logits, norms and copies, fp32 accumulated gradients, GQA and a
    # gated MLP, recompute)
    "memory": [("gpt2", 1024, 16, 1, False), ("gpt2-xl", 1024, 16, 1, False), ("gpt2-xl", 1024, 8, 2, False),
               ("qwen2.5-0.5b", 2048, 8, 1, False), ("gpt2-xl", 1024, 16, 1, True)],
    "cpu": [("gpt-10m", 128, 2, 1, False), ("gpt-10m", 128, 2, 2, True)],
}


def predicted_peak(est) -> int:
    """What torch.cuda.max_memory_allocated can see: the model's memory less its framework reserve."""
    m = est.memory
    return int(m.total - m.framework)


def predicted(model: str, seq: int, mb: int, m: int, rc: bool, cluster):
    """(plan, workload, estimate) of one grid row: the single-GPU plan at bf16, its batch mb x m."""
    wl = api.make_workload(model, seq_len=seq, global_batch=mb * m, precision="bf16")
    plan = Plan(micro_batch_size=mb, num_micro_batches=m, recompute=rc)
    return plan, wl, estimate(plan, cluster, wl)


def run_row(row, cluster, out: Path, steps: int, warmup: int, timeout_s: float, cpu: bool) -> dict:
    model, seq, mb, m, rc = row
    plan, wl, est = predicted(model, seq, mb, m, rc, cluster)
    device = cluster.nodes[0].devices[0]
    job = make_job(plan, wl, steps=steps, warmup=warmup, estimate=est, device=device)
    if cpu:
        job = job.model_copy(update={"device": "cpu", "backend": "gloo"})
    name = f"{model}-s{seq}-mb{mb}-m{m}{'-rc' if rc else ''}"
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "job.json").write_text(job.model_dump_json())
    rec = {"row": name, "model": model, "seq_len": seq, "micro_batch": mb, "micro_batches": m, "recompute": rc,
           "device": device.name, "predicted_feasible": est.feasible, "predicted_tokens_per_s": est.tokens_per_s,
           "predicted_step_s": est.step_time_s, "predicted_peak_bytes": predicted_peak(est),
           "predicted_step": est.step.model_dump(), "predicted_memory": est.memory.model_dump()}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "gpuadvisor.trainers", "--plan", str(d / "job.json"),
                               "--out", str(d)], capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
        rec["rc"] = proc.returncode
        (d / "log.txt").write_text(proc.stdout + proc.stderr)
    except subprocess.TimeoutExpired:
        rec["rc"] = "timeout"
    rec["wall_s"] = round(time.monotonic() - t0, 1)
    metrics = d / "metrics.json"
    if metrics.is_file():
        mt = json.loads(metrics.read_text())
        s = mt["summary"]
        rec.update(measured_tokens_per_s=s["throughput_tokens_per_s"], measured_peak_bytes=s["peak_memory_bytes"],
                   measured_step_times_s=mt["ranks"][0]["step_times_s"])
    else:
        errs = sorted(d.glob("error-rank*.json"))
        rec["error"] = json.loads(errs[0].read_text()) if errs else None
    return rec


def repredict(rows_path: Path, cluster_path: Path) -> None:
    """Measured rows of an earlier run (rows.jsonl) against the cost model as it is now, on that run's cluster."""
    from gpuadvisor.schemas import Cluster

    cluster = Cluster.model_validate_json(cluster_path.read_text())
    ratios, mems = [], []
    for line in rows_path.read_text().splitlines():
        r = json.loads(line)
        if not r.get("measured_tokens_per_s"):
            continue
        est = predicted(r["model"], r["seq_len"], r["micro_batch"], r["micro_batches"], r["recompute"], cluster)[2]
        tps, peak = r["measured_tokens_per_s"], r["measured_peak_bytes"]
        ratios.append(est.tokens_per_s / tps)
        mems.append(predicted_peak(est) / peak)
        print(f"{r['row']:32s} tok/s meas {tps:9.0f} pred {est.tokens_per_s:9.0f} pred/meas {ratios[-1]:5.2f} | "
              f"peak GiB meas {peak / GiB:6.1f} pred {predicted_peak(est) / GiB:6.1f} pred/meas {mems[-1]:5.2f}")
    if ratios:
        def mape(xs):
            return 100.0 * sum(abs(x - 1.0) for x in xs) / len(xs)
        print(f"{len(ratios)} rows: tokens/s MAPE {mape(ratios):.1f} % (pred/meas {min(ratios):.2f}-"
              f"{max(ratios):.2f}); peak memory MAPE {mape(mems):.1f} % (pred/meas {min(mems):.2f}-{max(mems):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the rows, logs, probe and cluster (running rows only)")
    ap.add_argument("--grid", default=None, choices=sorted(GRIDS), help="default: 'default' on a GPU, 'cpu' on CPU")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting rows after this many seconds")
    ap.add_argument("--row-timeout-s", type=float, default=150.0)
    ap.add_argument("--cpu", action="store_true", help="one CPU rank (a check of this script, not of a GPU)")
    ap.add_argument("--repredict", type=Path, metavar="ROWS", help="re-predict an earlier run's rows.jsonl (with "
                    "--cluster its cluster.json) with the cost model as it is now; runs nothing")
    ap.add_argument("--cluster", type=Path, help="with --repredict: the cluster.json that run wrote")
    args = ap.parse_args()
    if args.repredict:
        if not args.cluster:
            ap.error("--repredict needs --cluster (the cluster.json written beside rows.jsonl)")
        repredict(args.repredict, args.cluster)
        return
    if args.out is None:
        ap.error("--out DIR is needed to run rows (rows.jsonl, the trainer logs, probe.json, cluster.json)")
    t_start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    report = api.probe()
    (args.out / "probe.json").write_text(report.model_dump_json(indent=1))
    print(f"probe: {report.hostname}: {len(report.gpus)} GPU(s) "
          + "; ".join(f"{g.name} {(g.memory_total_bytes or 0) / GiB:.1f} GiB" for g in report.gpus)
          + (f"; NVML: {report.nvml_error}" if report.nvml_error else ""), flush=True)
    if not report.gpus and not args.cpu:
        raise SystemExit(f"no GPU on this host ({report.nvml_error or 'NVML reports none'}); pass --cpu to check "
                         "the script on one CPU rank")
    cluster = cluster_from_probe(report, cpu_ranks=1 if args.cpu else None)  # as suggest builds it, one probe
    dev = cluster.nodes[0].devices[0]
    print(f"cluster: probed {report.hostname}; device {dev.name}: {dev.memory_bytes / GiB:.1f} GiB, "
          f"{dev.peak_tflops_bf16} TFLOP/s bf16, {dev.memory_bandwidth_gb_per_s} GB/s", flush=True)
    (args.out / "cluster.json").write_text(cluster.model_dump_json(indent=1))
    rows = GRIDS[args.grid or ("cpu" if args.cpu else "default")]
    with open(args.out / "rows.jsonl", "a") as fh:
        for row in rows:
            left = args.budget_s - (time.monotonic() - t_start)
            if left < 20:
                print(f"skipped {row}: {left:.0f}s of the budget left", flush=True)
                continue
            rec = run_row(row, cluster, args.out, args.steps, args.warmup, min(args.row_timeout_s, left), args.cpu)
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            meas, pred = rec.get("measured_tokens_per_s"), rec["predicted_tokens_per_s"]
            if meas:
                print(f"{rec['row']:32s} tok/s meas {meas:9.0f} pred {pred:9.0f} pred/meas {pred / meas:5.2f} | "
                      f"peak GiB meas {rec['measured_peak_bytes'] / GiB:6.1f} "
                      f"pred {rec['predicted_peak_bytes'] / GiB:6.1f} | {rec['wall_s']}s", flush=True)
            else:
                err = rec.get("error") or {}
                print(f"{rec['row']:32s} rc {rec['rc']} {err.get('kind', '')}: {str(err.get('message', ''))[:160]} "
                      f"(predicted feasible {rec['predicted_feasible']}, "
                      f"peak {rec['predicted_peak_bytes'] / GiB:.1f} GiB) | {rec['wall_s']}s", flush=True)


if __name__ == "__main__":
    main()
