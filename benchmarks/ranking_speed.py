"""Ranking speed: candidates/s, time to rank 175B on 64 nodes x 8 GPUs, and 1.5B on the nano-cluster.

Run: python benchmarks/ranking_speed.py
"""
from __future__ import annotations

import time

from gpuadvisor.candidates import enumerate_plans
from gpuadvisor.costmodel.combine import fast_eval, make_context
from gpuadvisor.costmodel.rules import load_rules
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import apply_what_if, rank
from gpuadvisor.workload.specs import make_workload


def _timed_rank(cluster, workload, **kw):
    t = time.perf_counter()
    r = rank(cluster, workload, **kw)
    return r, time.perf_counter() - t


def main() -> None:
    load_rules()
    # steady-state evaluation rate (enumeration + cost model + rules, no pydantic Estimate)
    cl = apply_what_if(load_preset("dgx-a100-8x"), "gpus=4x8")
    wl = make_workload("7B", seq_len=2048, global_batch=256)
    ctx = make_context(cl, wl)
    rules = load_rules()
    t = time.perf_counter()
    n = 0
    for p in enumerate_plans(cl, wl):
        fast_eval(p, ctx, rules)
        n += 1
    dt = time.perf_counter() - t
    print(f"7B on 4x8 A100: {n} candidates in {dt:.2f} s = {n / dt:,.0f} candidates/s")

    big = apply_what_if(load_preset("dgx-a100-8x"), "gpus=64x8")
    r, dt = _timed_rank(big, make_workload("175B", seq_len=2048, global_batch=1536), top=10)
    print(f"175B on 64x8 A100: {r.n_candidates} candidates ({r.n_feasible} feasible) ranked in {dt:.2f} s; "
          f"best {r.top[0].plan.to_string() if r.top else '-'}")

    nano = load_preset("nano-cluster-2x2-a40-1gbe")
    r, dt = _timed_rank(nano, make_workload("1.5B", seq_len=1024, global_batch=16), top=5)
    print(f"1.5B on nano-cluster: {r.n_candidates} candidates ranked in {dt:.2f} s")
    for e in r.top:
        print(f"  {e.plan.to_string():70s} {e.tokens_per_s:10,.0f} tok/s  {e.memory.total / 2**30:5.1f} GiB")


if __name__ == "__main__":
    main()
