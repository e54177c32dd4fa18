"""How well the current cost model predicts the public measured training runs (knowledge/measurements/public/).

Run: python benchmarks/calibration_accuracy.py [--source ID] [--json PATH] [--worst N] [--loso]
                                               [--approximate NAME,...]
Prints, per source and overall: rows used/skipped (top skip reasons), MAPE of the iteration time, Kendall
tau per group of comparable configs, regret of the predicted-best config, the worst rows, and the Megatron
weak-scaling TFLOP/s check. No timing assertions: this is a measuring instrument (docs/calibration.md).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Optional

from gpuadvisor.publicruns import LIMITS, load_runs
from gpuadvisor.publicruns.evaluate import (GROUP_FIELDS, MEGATRON_WEAK_SCALING, MIN_GROUP, SCALING_FIELDS,
                                            TAU_GOOD, by_source, evaluate_runs, loso_mape, megatron_tflops_check,
                                            memory_check, predicted_oom, worst)

#: What the Megatron TFLOP/s check must assume: the weak-scaling table gives no micro-batch or recompute,
#: and its distributed optimizer runs with TP/PP, which Plan cannot combine.
MEGATRON_APPROXIMATIONS = ("micro-batch", "recompute-unstated", "pp-schedule")


def _f(v: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _pct(frac: Optional[float]) -> str:
    return "-" if frac is None else f"{100 * frac:.0f}%"


def render_sources(table: dict[str, dict], loso: Optional[dict[str, Optional[float]]]) -> str:
    head = (f"{'source':34} {'rows':>4} {'used':>4} {'skip':>4} {'OOM':>4} {'MAPE%':>7} {'+OOM%':>6} "
            f"{'pred/meas':>9} {'groups':>6} {'tau med':>7} {'tau>=.8':>7} {'regret max%':>11} {'regret med%':>11} "
            f"{'scal.grp':>8} {'scal.tau':>8} {'retention':>9}")
    if loso is not None:
        head += f" {'LOSO MAPE%':>10}"
    lines = [head, "-" * len(head)]
    for sid, s in table.items():
        line = (f"{sid[:34]:34} {s['rows']:>4} {s['used']:>4} {s['skipped']:>4} {s['predicted_oom']:>4} "
                f"{_f(s['mape_pct']):>7} {_f(s['mape_all_pct']):>6} {_f(s['median_ratio'], '{:.2f}'):>9} "
                f"{s['groups']:>6} "
                f"{_f(s['tau_median'], '{:.2f}'):>7} {_pct(s['tau_good_frac']):>7} "
                f"{_f(s['regret_max_pct']):>11} {_f(s['regret_median_pct']):>11} {s['scaling_groups']:>8} "
                f"{_f(s['scaling_tau_median'], '{:.2f}'):>8} {_f(s['retention_ratio_median'], '{:.2f}'):>9}")
        if loso is not None:
            line += f" {_f(loso.get(sid)):>10}"
        lines.append(line)
    return "\n".join(lines)


def render_reasons(table: dict[str, dict]) -> str:
    lines = ["Skip reasons (a row may have several):"]
    for sid, s in table.items():
        if s["top_skip_reasons"] and not sid.startswith("ALL,"):
            lines.append(f"  {sid}: " + "; ".join(f"{r} ({n})" for r, n in s["top_skip_reasons"]))
    return "\n".join(lines)


def render_worst(rows) -> str:
    lines = [f"{'row':24} {'model':24} {'GPUs':>5} {'measured s':>10} {'predicted s':>11} {'ratio':>6}  plan"]
    for o in rows:
        lines.append(f"{o.run.ref:24} {o.run.model_name[:24]:24} {o.run.gpus:>5} {o.measured_s:>10.3f} "
                     f"{o.predicted_s:>11.3f} {o.ratio:>6.2f}  {o.plan}")
    return "\n".join(lines)


def render_oom(rows) -> str:
    lines = [f"{'row':24} {'model':24} {'GPUs':>5} {'pred GiB':>8} {'usable GiB':>10} {'measured GiB':>12} "
             f"{'time ratio':>10}  plan"]
    for o in rows:
        lines.append(f"{o.run.ref:24} {o.run.model_name[:24]:24} {o.run.gpus:>5} {_f(o.predicted_mem_gib):>8} "
                     f"{_f(o.capacity_gib):>10} {_f(o.run.mem_gib):>12} {_f(o.ratio, '{:.2f}'):>10}  {o.plan}")
    return "\n".join(lines)


def render_memory(rows: list[dict]) -> str:
    lines = [f"{'row':20} {'model':16} {'GPUs':>5} {'measured GiB':>12} {'pred GiB':>8} {'ratio':>6} {'fits':>4}  plan"]
    for r in rows:
        lines.append(f"{r['ref']:20} {r['model'][:16]:16} {r['gpus']:>5} {r['measured_gib']:>12.1f} "
                     f"{r['predicted_gib']:>8.1f} {r['ratio']:>6.2f} {'yes' if r['fits'] else 'no':>4}  "
                     f"{r['plan']}{' (approximated)' if r['approximated'] else ''}")
    ratios = sorted(r["ratio"] for r in rows)
    lines.append(f"median ratio {statistics.median(ratios):.2f} (range {ratios[0]:.2f}-{ratios[-1]:.2f}); "
                 f"{sum(not r['fits'] for r in rows)} of {len(rows)} called out of memory")
    return "\n".join(lines)


def render_megatron(rows: list[dict]) -> str:
    lines = [f"{'row':20} {'model':10} {'GPUs':>5} {'published':>9} {'predicted':>9} {'ratio':>6}  within 15%"]
    for r in rows:
        lines.append(f"{r['ref']:20} {r['model'][:10]:10} {r['gpus']:>5} {_f(r['published_tflops']):>9} "
                     f"{_f(r['predicted_tflops']):>9} {_f(r['ratio'], '{:.2f}'):>6}  "
                     f"{'yes' if r['within'] else 'no'}{'' if r['status'] == 'ok' else ' (' + r['status'] + ')'}")
    n_ok = sum(r["within"] for r in rows)
    lines.append(f"within 15 %: {n_ok} of {len(rows)}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", help="only rows whose source_id (or file stem) is this")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    ap.add_argument("--worst", type=int, default=10, metavar="N", help="how many worst rows to list (10)")
    ap.add_argument("--loso", action="store_true",
                    help="leave-one-source-out: MAPE after a multiplicative bias fitted on the other sources")
    ap.add_argument("--approximate", default="", metavar="NAME,...",
                    help=f"apply these approximations instead of skipping rows: {', '.join(LIMITS)} (or 'all')")
    args = ap.parse_args(argv)
    approx = tuple(LIMITS) if args.approximate == "all" else tuple(filter(None, args.approximate.split(",")))
    unknown = [a for a in approx if a not in LIMITS]
    if unknown:
        ap.error(f"unknown approximation {', '.join(unknown)}; use {', '.join(LIMITS)} or all")

    runs = load_runs()
    if args.source:
        runs = [r for r in runs if args.source in (r.source_id, r.family)]
        if not runs:
            ap.error(f"no rows with source_id or file '{args.source}'")
    outcomes = evaluate_runs(runs, approx)
    table = by_source(outcomes)
    loso = loso_mape(outcomes) if args.loso else None
    meg_runs = [r for r in runs if r.source_id == MEGATRON_WEAK_SCALING]
    meg = megatron_tflops_check(evaluate_runs(meg_runs, MEGATRON_APPROXIMATIONS)) if meg_runs else []
    bad = worst(outcomes, args.worst)

    print(f"Cost model vs public measured runs ({len(runs)} rows; approximations: {', '.join(approx) or 'none'})")
    print(f"MAPE over rows the model says fit; OOM = measured runs the model calls out of memory; +OOM% = MAPE "
          f"with those rows too (their time as if they fit). Groups: "
          f"same {', '.join(GROUP_FIELDS)} with >= {MIN_GROUP} rows; tau = Kendall tau-b of step times, "
          f"tau>=.8 = share of groups with tau >= {TAU_GOOD}; regret = measured time of the predicted-best config "
          f"/ measured best - 1. Scaling groups: same {', '.join(SCALING_FIELDS)} at >= 2 GPU counts; "
          f"scal.tau = tau of tokens/s/GPU; retention = predicted/measured ratio of tokens/s/GPU at the largest "
          f"vs the smallest GPU count (1 = scale loss as measured).\n")
    print(render_sources(table, loso))
    print()
    print(render_reasons(table))
    print(f"\nWorst {len(bad)} rows by |log(predicted/measured)|:")
    print(render_worst(bad))
    oom = predicted_oom(outcomes, args.worst)
    if oom:
        print(f"\nMeasured runs the model calls out of memory ({len(oom)} shown, largest overshoot first):")
        print(render_oom(oom))
    mem = memory_check(outcomes)
    if mem:
        print("\nPeak memory per GPU where the row states it (torchtitan: max reserved; every run ran):")
        print(render_memory(mem))
    if meg:
        print(f"\nMegatron-style TFLOP/s per GPU ({MEGATRON_WEAK_SCALING}; Megatron's FLOP count; "
              f"approximations: {', '.join(MEGATRON_APPROXIMATIONS)}):")
        print(render_megatron(meg))
    if args.json:
        doc = {"approximations": list(approx), "sources": table, "loso_mape_pct": loso, "megatron_tflops": meg,
               "memory": mem,
               "worst": [{"ref": o.run.ref, "source_ref": o.run.source_ref, "measured_s": o.measured_s,
                          "predicted_s": o.predicted_s, "ratio": o.ratio, "plan": o.plan} for o in bad],
               "rows": [{"ref": o.run.ref, "source_id": o.run.source_id, "used": o.used,
                         "reasons": list(o.reasons), "plan": o.plan, "measured_s": o.measured_s,
                         "predicted_s": o.predicted_s if o.timed else None,
                         "infeasible_reason": o.infeasible_reason, "predicted_mem_gib": o.predicted_mem_gib,
                         "capacity_gib": o.capacity_gib, "assumptions": list(o.assumptions)}
                        for o in outcomes]}
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        print(f"\nJSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
