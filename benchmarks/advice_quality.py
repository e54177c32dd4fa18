#!/usr/bin/env python
"""Advice quality on an emulated 2-node cluster: does the advisor's ranking match what really runs fastest?

For each inter-node link speed (tc-shaped veth between two network namespaces, 1 CPU rank per node)
and each model size: probe the nodes through their access with the compute measurement on (the matmul
probe per node, as `gpuadvisor probe --cluster --measure` does), measure the inter-node network, rank the
plans with `gpuadvisor.ranking.rank` on that measured cluster, run every feasible non-ZeRO plan shape
for real (`trials.multinode.run_trial_multinode`), and report

* Kendall tau between predicted and measured throughput,
* regret of the top pick: measured best / measured of the advisor's pick - 1,
* trials a confirm (running plans in predicted order) needs to reach the measured best,
* the measured ordering, so a strategy that wins on a fast link and loses on a slow one shows.

Needs root (ip netns, tc). Results go to --out (JSON, written after every trial) and a Markdown
table on stdout. Example: `python benchmarks/advice_quality.py --rates 50mbit,1gbit,none --steps 4`.
"""
from __future__ import annotations

import argparse
import itertools
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from multinode.emucluster import EmulatedCluster, clean_stale, unavailable_reason  # noqa: E402

from gpuadvisor.costmodel.combine import estimate  # noqa: E402
from gpuadvisor.hardware.cluster_file import load_cluster  # noqa: E402
from gpuadvisor.launch.build import make_job  # noqa: E402
from gpuadvisor.ranking import rank  # noqa: E402
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


def plans_for(cluster, workload):
    """One plan per non-ZeRO shape from the ranking (TP across nodes allowed, to show why it loses)."""
    ranking = rank(cluster, workload, top=40, allow_tp_across_nodes=True)
    seen, plans = set(), []
    for e in ranking.top:
        p = e.plan
        key = (p.dp, p.tp, p.pp, p.nodes)
        if p.zero_stage or key in seen or (p.nodes == 1 and p.world_size > 1):
            continue
        seen.add(key)
        plans.append((p, e.tokens_per_s))
    return plans


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
    return {"tau": round(kendall_tau(pred, meas), 3), "regret": round(best["measured"] / pick["measured"] - 1, 3),
            "tau_resolved": tau_res, "pairs_resolved": n_res,
            "trials_to_best": by_pred.index(best) + 1, "n": len(ok), "pick": pick["strategy"],
            "best": best["strategy"],
            "measured_order": [r["strategy"] for r in sorted(ok, key=lambda r: -r["measured"])],
            "predicted_order": [r["strategy"] for r in by_pred]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="50mbit,1gbit,none", help="tc rates per setting; 'none' = unshaped")
    ap.add_argument("--models", default=",".join(MODELS), help=f"subset of {','.join(MODELS)}")
    ap.add_argument("--steps", type=int, default=4)
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
                plans = plans_for(cluster, wl)
                runs: dict[int, list] = {i: [] for i in range(len(plans))}
                for rep in range(args.repeats):  # round robin: a slow spell of the host hits every plan alike
                    for i, (plan, _) in enumerate(plans):
                        job = make_job(plan, wl, steps=args.steps, warmup=1).model_copy(update={"device": "cpu"})
                        runs[i].append(run_trial_multinode(
                            job, cluster, work / f"{rate}-{model}-{plan.strategy}-{rep}", timeout_s=args.timeout,
                            port=PORT, check=False, env={"OMP_NUM_THREADS": "1"}))
                rows = []
                for i, (plan, _) in enumerate(plans):
                    pred = estimate(plan, cluster, wl).tokens_per_s
                    recs = runs[i]
                    ok = [r.measured_tokens_per_s for r in recs if r.status == "ok" and r.measured_tokens_per_s]
                    rec = next((r for r in recs if r.status != "ok"), recs[-1]) if not ok else recs[-1]
                    rows.append({"strategy": plan.strategy, "plan": plan.to_string(), "predicted": round(pred, 1),
                                 "measured": ok and round(statistics.median(ok), 1),
                                 "runs": [round(x, 1) for x in ok],
                                 "status": "ok" if ok else rec.status, "error": None if ok else rec.error,
                                 "trial_s": sum(r.duration_s for r in recs)})
                    print(f"{rate:>7} {model:>10} {plan.strategy:>6}: predicted {pred:9.0f} tok/s, measured "
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
    """The per-setting table and the flip line."""
    lines = ["| link | model | measured net GB/s | plans | Kendall tau | tau, resolved pairs (n) | regret of pick | "
             "trials to best | pick | measured order (fastest first) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in results["settings"]:
        sm = s["summary"]
        lines.append(f"| {s['rate']} | {s['model']} | {s['network']['bandwidth_gb_per_s']:.3g} | {sm['n']} | "
                     f"{sm['tau']} | {sm.get('tau_resolved')} ({sm.get('pairs_resolved')}) | {sm['regret']} | "
                     f"{sm['trials_to_best']} | {sm.get('pick')} | "
                     f"{' > '.join(sm.get('measured_order', []))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
