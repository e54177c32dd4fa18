"""Grid-fit one GPU family's GEMM curve (e_max, x_half, w_half) on the public measured runs of that family.

    python benchmarks/fit_gemm_family.py hopper [--e-max 0.5,0.55,0.6,0.65] [--x-half 3,1.5,0.75] [--w-half 0,384]
        [--attn-rel 0.5] [--attn-rel-flash3 1.5,1.8] [--source mleng_h200_vs_b200_llama8b]

A parameter not given keeps the family's value in knowledge/calibration.yaml, so one flag grids one constant.
Maps every run of knowledge/measurements/public whose GPU belongs to the family (with every approximation of
publicruns.mapping.LIMITS; `--source` keeps one source_id), predicts its step time under each grid point (the
calibration table with only that family's numbers changed) and prints, per point, the score (mean over sources
of the mean squared log
ratio predicted/measured: each source weighs the same, however many rows it has), then the median ratio and
the MAPE per source. knowledge/calibration.yaml states which point it took and this command.
"""
from __future__ import annotations

import argparse
import copy
import itertools
import math

from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.calibration import load_calibration
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.publicruns import load, mapping
from gpuadvisor.publicruns.mapping import Unsupported


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", help="a gemm_efficiency family of knowledge/calibration.yaml (hopper, a100, ...)")
    ap.add_argument("--e-max", default=None, help="default: the family's")
    ap.add_argument("--x-half", default=None, help="default: the family's")
    ap.add_argument("--w-half", default=None, help="width half-points to try (default: the family's own)")
    ap.add_argument("--attn-rel", default=None, help="attention-core rates relative to GEMMs (default: the family's)")
    ap.add_argument("--attn-rel-flash3", default=None,
                    help="FlashAttention-3/4 core rates relative to GEMMs (default: the family's)")
    ap.add_argument("--source", default=None, help="only the runs of this source_id")
    args = ap.parse_args()
    base = load_calibration()
    fam = base["gemm_efficiency"]["families"].get(args.family)
    if fam is None:
        raise SystemExit(f"unknown family {args.family}; known: {', '.join(base['gemm_efficiency']['families'])}")
    inputs = []
    for run in load.load_runs():
        if not run.measured_iter_time_s or not any(m in run.gpu for m in fam["match"]):
            continue
        if args.source and run.source_id != args.source:
            continue
        try:
            inputs.append((run, mapping.to_inputs(run, approximate=mapping.LIMITS)))
        except Unsupported:
            continue
    print(f"{len(inputs)} mapped runs of family {args.family}")
    w_halves = _floats(args.w_half) if args.w_half else [float(fam.get("w_half", 0.0))]
    attn = _floats(args.attn_rel) if args.attn_rel else [float(fam.get("attn_rel", 1.0))]
    flash3 = (_floats(args.attn_rel_flash3) if args.attn_rel_flash3 else
              [float(fam.get("attn_rel_flash3", fam.get("attn_rel_cudnn", fam.get("attn_rel", 1.0))))])
    e_maxes = _floats(args.e_max) if args.e_max else [float(fam["e_max"])]
    x_halves = _floats(args.x_half) if args.x_half else [float(fam["x_half"])]
    for e_max, x_half, w_half, attn_rel, f3 in itertools.product(e_maxes, x_halves, w_halves, attn, flash3):
        cal = copy.deepcopy(base)
        cal["gemm_efficiency"]["families"][args.family].update(e_max=e_max, x_half=x_half, w_half=w_half,
                                                                attn_rel=attn_rel, attn_rel_flash3=f3)
        by: dict[str, list[float]] = {}
        for run, inp in inputs:
            e = evaluate(inp.plan, Context(inp.cluster, inp.workload, calibration=cal))
            if e.feasible:
                by.setdefault(run.source_id, []).append(math.log(e.step_s / run.measured_iter_time_s))
        if not by:
            continue
        score = sum(sum(v * v for v in vs) / len(vs) for vs in by.values()) / len(by)
        cells = "  ".join(f"{k[:22]} {math.exp(sorted(v)[len(v) // 2]):.2f}/{100 * sum(abs(math.exp(x) - 1) for x in v) / len(v):.0f}%"
                          for k, v in sorted(by.items()))
        print(f"e_max {e_max:.2f} x_half {x_half:5.2f} w_half {w_half:4.0f} attn {attn_rel:.2f} flash3 {f3:.2f}  "
              f"score {score:.4f}  (median ratio / MAPE) {cells}")


if __name__ == "__main__":
    main()
