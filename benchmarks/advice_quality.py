#!/usr/bin/env python
"""Advice quality on an emulated 2-node cluster: does the advisor's ranking match what really runs fastest?

For each inter-node link speed (tc-shaped veth between two network namespaces, 1 CPU rank per node)
and each model size: probe the nodes through their access with the compute measurement on (the matmul
probe per node, as `gpuadvisor probe --cluster --measure` does), measure the inter-node network, predict
every feasible non-ZeRO layout the advisor enumerates on that measured cluster (single rank, DP, PP, TP
across the nodes; every micro-batch size and count and pipeline schedule; see plans_for), run each for real
(`trials.multinode.run_trial_multinode`), --repeats times round robin, and report per setting

* Kendall tau between predicted and measured throughput (all plans; over the pairs the runs order beyond
  doubt; over each shape's best-predicted plan only, the ranking `gpuadvisor suggest` shows),
* regret of the top pick: measured best / measured of the advisor's pick - 1,
* trials a confirm (running plans in predicted order) needs to reach the measured best,
* the measured ordering, so a strategy that wins on a fast link and loses on a slow one shows.

Fast plans get more timed steps (--min-seconds of timed window by the prediction), so a 0.3M model is not
timed over 0.2 s. Needs root (ip netns, tc). Results go to --out (JSON, written after every setting) and two
Markdown tables on stdout. Example:
`python benchmarks/advice_quality.py --steps 3 --min-seconds 1.5 --repeats 3` (about 55 minutes on 2 cores).
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from multinode.emucluster import EmulatedCluster, clean_stale, unavailable_reason  # noqa: E402

from gpuadvisor.candidates import SearchSpace, enumerate_rows, row_plan  # noqa: E402
from gpuadvisor.costmodel.combine import fast_eval, make_context, to_estimate  # noqa: E402
from gpuadvisor.costmodel.rules import load_rules  # noqa: E402
from gpuadvisor.hardware.cluster_file import load_cluster  # noqa: E402
from gpuadvisor.launch.build import make_job  # noqa: E402
from gpuadvisor.remote.cluster_probe import internode_measurement, probe_cluster, with_network  # noqa: E402
from gpuadvisor.remote.preflight import preflight, require_ok  # noqa: E402
from gpuadvisor.schemas import ModelSpec, TrainingSettings, Workload  # noqa: E402
from gpuadvisor.trials.multinode import run_trial_multinode  # noqa: E402

MODELS = {
    "tiny-0.3M": ModelSpec(name="tiny-0.3M", n_layers=4, d_model=64, n_heads=4, d_ff=256, vocab_size=512),
    "small-3M": ModelSpec(name="small-3M", n_layers=4, d_model=256, n_heads=4, d_ff=1024, vocab_size=512),
}
PORT = 29660


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-a between two paired lists (1 = same order, -1 = reversed)."""
    pairs = list(itertools.combinations(range(len(xs)), 2))
    if not pairs:
        return float("nan")
    s = 0
    for i, j in pairs:
        a, b = xs[i] - xs[j], ys[i] - ys[j]
        s += (a * b > 0) - (a * b < 0)
    return s / len(pairs)


def resolved_tau(rows: list[dict]) -> tuple[float | None, int]:
    """Kendall tau over the pairs the measurement orders beyond doubt: their runs do not overlap (every run
    of one plan faster than every run of the other). Returns (tau, number of such pairs); tau None if none."""
    s = n = 0
    for a, b in itertools.combinations(rows, 2):
        if min(a["runs"]) > max(b["runs"]):
            fast, slow = a, b
        elif min(b["runs"]) > max(a["runs"]):
            fast, slow = b, a
        else:
            continue
        n += 1
        s += 1 if fast["predicted"] > slow["predicted"] else -1
    return (round(s / n, 3) if n else None), n


def plans_for(cluster, workload, every: bool = True):
    """The plans to measure, [(plan, predicted tokens/s, variant)], variant 0 = the best-predicted plan of its
    shape (single, dp, pp, tp; TP across nodes allowed, to show why it loses).

    every=False: one plan per shape, as `gpuadvisor suggest` ranks them. every=True: every feasible non-ZeRO
    layout the advisor enumerates (micro-batch size and count, pipeline schedule), less the knobs that only
    trade speed for memory (activation recompute, sequence parallelism, bucket size: each is the same layout
    with extra work or an unchanged step here) and less plans the model predicts identically to one already
    kept (GPipe = 1F1B at pp 2), whose order no measurement could check."""
    ctx = make_context(cluster, workload)
    rows = enumerate_rows(cluster, workload, allow_tp_across_nodes=True, space=SearchSpace())
    rules = load_rules()
    shapes: dict[tuple, list] = {}
    for row in rows:
        p = row_plan(row)
        if p.zero_stage or p.recompute or p.sequence_parallel or (p.nodes == 1 and p.world_size > 1):
            continue
        e = to_estimate(fast_eval(p, ctx, rules), ctx)
        if not e.feasible:
            continue
        variants = shapes.setdefault((p.dp, p.tp, p.pp, p.nodes), [])
        if all(abs(e.tokens_per_s - t) > 1e-6 * t for _, t in variants):
            variants.append((p, e.tokens_per_s))
    plans = []
    for variants in shapes.values():
        variants.sort(key=lambda v: -v[1])
        plans += [(p, t, k) for k, (p, t) in enumerate(variants if every else variants[:1])]
    return plans


def steps_for(predicted_tokens_per_s: float, tokens_per_step: int, *, min_steps: int, min_seconds: float,
              max_steps: int = 400) -> int:
    """Timed steps so that the timed window lasts about min_seconds by the prediction (at least min_steps):
    a fixed step count times a 0.3M model for 0.2 s, where one scheduler hiccup moves the result by 20%."""
    step_s = tokens_per_step / max(predicted_tokens_per_s, 1e-9)
    return max(min_steps, min(max_steps, math.ceil(min_seconds / step_s)))


def summarize(rows: list[dict]) -> dict:
    """tau, regret and trials-to-best for one setting's rows (status ok only)."""
    ok = [r for r in rows if r["status"] == "ok"]
    if len(ok) < 2:
        return {"tau": None, "regret": None, "trials_to_best": None, "n": len(ok)}
    pred = [r["predicted"] for r in ok]
    meas = [r["measured"] for r in ok]
    by_pred = sorted(ok, key=lambda r: -r["predicted"])
    best = max(ok, key=lambda r: r["measured"])
    pick = by_pred[0]
    tau_res, n_res = resolved_tau(ok)
    best_of_shape = [r for r in ok if r.get("variant", 0) == 0]
    tau_shapes = (round(kendall_tau([r["predicted"] for r in best_of_shape], [r["measured"] for r in best_of_shape]),
                        3) if len(best_of_shape) > 1 else None)
    return {"tau": round(kendall_tau(pred, meas), 3), "tau_shapes": tau_shapes,
            "regret": round(best["measured"] / pick["measured"] - 1, 3),
            "tau_resolved": tau_res, "pairs_resolved": n_res,
            "trials_to_best": by_pred.index(best) + 1, "n": len(ok), "pick": _label(pick),
            "best": _label(best),
            "measured_order": [_label(r) for r in sorted(ok, key=lambda r: -r["measured"])],
            "predicted_order": [_label(r) for r in by_pred]}


def _label(row: dict) -> str:
    """Short name of a measured plan: shape, micro-batch size x count, pipeline schedule (e.g. 'pp 2x4 il')."""
    if "mb" not in row:
        return row["strategy"]
    sched = {"1f1b": "", "gpipe": " gpipe", "interleaved": " il"}.get(row.get("schedule") or "1f1b", "")
    return f"{row['strategy']} {row['mb']}x{row['m']}{sched if row['strategy'] == 'pp' else ''}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="50mbit,1gbit,none", help="tc rates per setting; 'none' = unshaped")
    ap.add_argument("--models", default=",".join(MODELS), help=f"subset of {','.join(MODELS)}")
    ap.add_argument("--steps", type=int, default=4, help="fewest timed steps per trial")
    ap.add_argument("--min-seconds", type=float, default=0.0,
                    help="more timed steps where the plan is fast, so the timed window lasts about this long by "
                         "the prediction (at most 400 steps); 0 = always --steps")
    ap.add_argument("--shapes-only", action="store_true",
                    help="measure one plan per shape (the best-predicted) instead of every feasible non-ZeRO layout")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs per plan, taken round robin over the plans; the median counts (a shared 2-core "
                         "machine varies 15-30%% run to run)")
    ap.add_argument("--out", default="advice_quality.json")
    args = ap.parse_args(argv)
    why = unavailable_reason()
    if why:
        print(f"cannot emulate nodes here: {why}", file=sys.stderr)
        return 2
    clean_stale()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: trials stop, namespaces are removed
    results: dict = {"settings": [], "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    out_path = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="gpa-bench-"))
    with EmulatedCluster(2, rate=None) as emu:
        hosts = load_cluster(emu.write_cluster_file(work / "hosts.yaml"))
        require_ok(preflight(hosts, port=PORT))
        base = probe_cluster(hosts, measure_compute=True)  # as `probe --cluster --measure`: matmul per node
        results["cpu_rank_tflops"] = [d.achieved_tflops for n in base.nodes for d in n.devices]
        print(f"measured CPU-rank matmul rate per node: {results['cpu_rank_tflops']} TFLOP/s", flush=True)
        for rate in args.rates.split(","):
            emu.shape(None if rate == "none" else rate)
            m = internode_measurement(base, port=PORT, max_bytes=4 << 20, log_dir=work / f"net-{rate}")
            cluster = with_network(base, m)
            for model in args.models.split(","):
                wl = Workload(model=MODELS[model], training=TrainingSettings(
                    seq_len=args.seq, global_batch=args.batch, precision="fp32"))
                plans = plans_for(cluster, wl, every=not args.shapes_only)
                runs: dict[int, list] = {i: [] for i in range(len(plans))}
                steps = [steps_for(pred, args.batch * args.seq, min_steps=args.steps, min_seconds=args.min_seconds)
                         for _, pred, _ in plans]
                for (plan, pred, variant), n in zip(plans, steps):
                    print(f"{rate:>7} {model:>10} plan {plan.to_string()}: predicted {pred:9.0f} tok/s, {n} steps",
                          flush=True)
                for rep in range(args.repeats):  # round robin: a slow spell of the host hits every plan alike
                    for i, (plan, pred, variant) in enumerate(plans):
                        job = make_job(plan, wl, steps=steps[i], warmup=min(3, max(1, steps[i] // 10))).model_copy(
                            update={"device": "cpu"})
                        runs[i].append(run_trial_multinode(
                            job, cluster, work / f"{rate}-{model}-{plan.strategy}{variant}-{rep}",
                            timeout_s=args.timeout, port=PORT, check=False, env={"OMP_NUM_THREADS": "1"}))
                rows = []
                for i, (plan, pred, variant) in enumerate(plans):
                    recs = runs[i]
                    ok = [r.measured_tokens_per_s for r in recs if r.status == "ok" and r.measured_tokens_per_s]
                    rec = next((r for r in recs if r.status != "ok"), recs[-1]) if not ok else recs[-1]
                    rows.append({"strategy": plan.strategy, "variant": variant, "plan": plan.to_string(),
                                 "mb": plan.micro_batch_size, "m": plan.num_micro_batches, "schedule": plan.pp_schedule,
                                 "predicted": round(pred, 1), "steps": steps[i],
                                 "measured": ok and round(statistics.median(ok), 1),
                                 "runs": [round(x, 1) for x in ok],
                                 "status": "ok" if ok else rec.status, "error": None if ok else rec.error,
                                 "trial_s": sum(r.duration_s for r in recs)})
                    print(f"{rate:>7} {model:>10} {_label(rows[-1]):>15}: predicted {pred:9.0f} "
                          f"tok/s, measured "
                          f"{rows[-1]['measured'] or 0:9.0f} ({rows[-1]['status']}, median of {len(ok)}: "
                          f"{rows[-1]['runs']})", flush=True)
                setting = {"rate": rate, "model": model, "network": m.network.model_dump(),
                           "p2p_gb_per_s": m.p2p_bandwidth_gb_per_s, "rows": rows, "summary": summarize(rows)}
                done = [s for s in results["settings"] if (s["rate"], s["model"]) != (rate, model)]
                results["settings"] = done + [setting]
                out_path.write_text(json.dumps(results, indent=1))
                if emu.leftover_pids():
                    print(f"WARNING: processes left in the namespaces: {emu.leftover_pids()}", file=sys.stderr)
    print(markdown(results))
    return 0


def markdown(results: dict) -> str:
    """Two tables: per setting the summary (tau, regret, trials to the best, the measured order's top 5), then per
    setting predicted / measured tokens/s (median and range) of each shape's best-predicted plan, where a
    strategy that wins on one link and loses on another (the ordering flip) shows."""
    lines = ["| link | model | measured net GB/s | plans | Kendall tau | tau, resolved pairs (n) | tau, best per "
             "shape | regret of pick | trials to best | pick | measured order, top 5 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in results["settings"]:
        sm = s["summary"]
        order = sm.get("measured_order", [])
        lines.append(f"| {s['rate']} | {s['model']} | {s['network']['bandwidth_gb_per_s']:.3g} | {sm['n']} | "
                     f"{sm['tau']} | {sm.get('tau_resolved')} ({sm.get('pairs_resolved')}) | {sm.get('tau_shapes')} | "
                     f"{sm['regret']} | {sm['trials_to_best']} | {sm.get('pick')} | "
                     f"{' > '.join(order[:5])}{' > ...' if len(order) > 5 else ''} |")
    lines += ["", "| link | model | single | dp | pp | tp |", "|---|---|---|---|---|---|"]
    for s in results["settings"]:
        cells = []
        for strategy in ("single", "dp", "pp", "tp"):
            r = next((r for r in s["rows"] if r["strategy"] == strategy and r.get("variant", 0) == 0), None)
            if r is None or not r["runs"]:
                cells.append("-" if r is None else f"{r['predicted']:.0f} / {r['status']}")
            else:
                cells.append(f"{_label(r)}: {r['predicted']:.0f} / {r['measured']:.0f} "
                             f"({min(r['runs']):.0f}-{max(r['runs']):.0f})")
        lines.append(f"| {s['rate']} | {s['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
