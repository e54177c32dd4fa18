"""CPU benchmark of the bundled trainers: tokens/s, peak memory and NIC bytes per strategy.

Two tiny GPTs, 1 rank (single) and 2 ranks (DP, TP, TP+SP, PP 1F1B, ZeRO-1/2/3), gloo on one host,
fp32, global batch 8; with --four-ranks also 4 ranks (TP2 x DP2 and PP2 x DP2, plain and with ZeRO).
Every world size runs in one launch (`--also`), so start-up is paid once.
Usage: python benchmarks/trainers_cpu.py [--steps 10] [--warmup 2] [--out DIR] [--four-ranks]
Numbers depend on the host's load: on a shared 2-core machine compare strategies within one run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuadvisor.schemas import ModelSpec, Plan, RunMetrics, TrainerJob, TrainingSettings, Workload
from gpuadvisor.trainers.aggregate import compare

MODELS = {
    "gpt-tiny (2L, h64)": (ModelSpec(name="gpt-tiny", n_layers=2, d_model=64, n_heads=4, d_ff=256, vocab_size=512,
                                     max_seq_len=64, tied_embeddings=False), 64),
    "gpt-small (4L, h128)": (ModelSpec(name="gpt-small", n_layers=4, d_model=128, n_heads=4, d_ff=512,
                                       vocab_size=2048, max_seq_len=128, tied_embeddings=False), 128),
}
BATCH = 8
PLANS = {
    1: {"single": dict(micro_batch_size=8)},
    2: {
        "dp": dict(dp=2, micro_batch_size=4),
        "tp": dict(tp=2, micro_batch_size=8),
        "tp+sp": dict(tp=2, micro_batch_size=8, sequence_parallel=True),
        "pp 1f1b m=4": dict(pp=2, micro_batch_size=2, num_micro_batches=4),
        "zero1": dict(dp=2, micro_batch_size=4, zero_stage=1),
        "zero2": dict(dp=2, micro_batch_size=4, zero_stage=2),
        "zero3": dict(dp=2, micro_batch_size=4, zero_stage=3),
    },
}
# --four-ranks: ZeRO next to TP/PP against the plain 2D plans (oversubscribes a 2-core host: compare bytes)
FOUR_RANKS = {
    "tp2xdp2": dict(tp=2, dp=2, micro_batch_size=4),
    "zero1 tp2xdp2": dict(tp=2, dp=2, micro_batch_size=4, zero_stage=1),
    "zero2 tp2xdp2": dict(tp=2, dp=2, micro_batch_size=4, zero_stage=2),
    "zero3 tp2xdp2": dict(tp=2, dp=2, micro_batch_size=4, zero_stage=3),
    "pp2xdp2 m=2": dict(pp=2, dp=2, micro_batch_size=2, num_micro_batches=2),
    "zero1 pp2xdp2 m=2": dict(pp=2, dp=2, micro_batch_size=2, num_micro_batches=2, zero_stage=1),
    "zero3 pp2xdp2 m=2": dict(pp=2, dp=2, micro_batch_size=2, num_micro_batches=2, zero_stage=3),
}


def make_job(spec: ModelSpec, seq: int, steps: int, warmup: int, **plan) -> TrainerJob:
    plan["devices_per_node"] = plan.get("dp", 1) * plan.get("tp", 1) * plan.get("pp", 1)
    training = TrainingSettings(seq_len=seq, global_batch=BATCH, precision="fp32")
    return TrainerJob(plan=Plan(**plan), workload=Workload(model=spec, training=training), steps=steps,
                      warmup=warmup, device="cpu", lr=1e-4)


def run_group(tmp: Path, nproc: int, jobs: dict[str, TrainerJob]) -> dict[str, RunMetrics]:
    args: list[str] = []
    for i, (name, job) in enumerate(jobs.items()):
        path = tmp / f"{name}.json"
        path.write_text(job.model_dump_json())
        args += ["--plan", str(path), "--out", str(tmp / name)] if i == 0 else ["--also", str(path), str(tmp / name)]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd = (launcher if nproc > 1 else [sys.executable]) + ["-m", "gpuadvisor.trainers", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"launch of {list(jobs)} failed:\n{proc.stderr[-4000:]}")
    return {n: RunMetrics.model_validate_json((tmp / n / "metrics.json").read_text()) for n in jobs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", default=None, help="keep the metrics files here")
    ap.add_argument("--four-ranks", action="store_true", help="also run the 4-rank TP/PP x DP and ZeRO hybrids")
    args = ap.parse_args()
    groups = {**PLANS, 4: FOUR_RANKS} if args.four_ranks else PLANS
    from gpuadvisor.trainers.strategies.zero import ensure_deepspeed_ops

    ensure_deepspeed_ops()
    root = Path(args.out or tempfile.mkdtemp(prefix="trainers-cpu-"))
    print("| model | strategy | ranks | tokens/s | scaling eff. % | peak RSS MiB (max rank) | lo bytes/step |")
    print("|---|---|---|---|---|---|---|")
    for label, (spec, seq) in MODELS.items():
        base = None
        for nproc, plans in groups.items():
            tmp = root / f"{spec.name}-{nproc}"
            tmp.mkdir(parents=True, exist_ok=True)
            jobs = {name: make_job(spec, seq, args.steps, args.warmup, **p) for name, p in plans.items()}
            for name, m in run_group(tmp, nproc, jobs).items():
                base = base or m
                s = m.summary
                eff = compare(m, base).scaling_efficiency_pct
                lo = sum(b.tx_bytes for r in m.ranks for nic, b in r.nic_bytes.items() if nic == "lo")
                print(f"| {label} | {name} | {nproc} | {s.throughput_tokens_per_s:,.0f} | {eff:.0f} | "
                      f"{s.peak_memory_bytes / 2**20:,.0f} | {lo / args.steps:,.0f} |", flush=True)
    print(f"\nmetrics files: {root}")


if __name__ == "__main__":
    main()
