"""Plain-words findings derived from the study's numbers (thresholds from seed 001, Appendix F).

Efficiency ~80% is desirable, below 70% is poor (seed 001 App. F); the paper's expectations for the
ZeRO stages and pipeline micro-batches (sec. IV-B, IV-C) are quoted next to what this cluster measured.
"""
from __future__ import annotations

import statistics
from typing import Optional

from .plots import _gpu_labels, eval_gpus, gpu_label
from .results import StudyRow

GOOD_PCT = 80.0
POOR_PCT = 70.0
MIB = 2**20


def _ok(rows: list[StudyRow]) -> list[StudyRow]:
    return [r for r in rows if r.status == "ok" and r.tokens_per_s]


def _fmt_tps(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.0f}%"


def model_findings(rows: list[StudyRow], model: str) -> list[str]:
    """Findings for one model: best strategy per GPU count, efficiency bands, memory, ZeRO, pipeline."""
    out: list[str] = []
    mrows = [r for r in _ok(rows) if r.model == model]
    base = next((r for r in mrows if r.strategy == "single"), None)
    if base is None:
        out.append(f"{model}: the 1-GPU baseline did not produce metrics, so scaling cannot be computed.")
    multi = [r for r in mrows if r.strategy != "single"]
    for g in _gpu_labels(multi, with_one=False):
        at = [r for r in multi if gpu_label(r) == g]
        best = max(at, key=lambda r: r.tokens_per_s or 0.0)
        if base is not None and best.scaling_factor is not None:
            if best.scaling_factor < 1.0:
                out.append(f"{model} at {g} GPUs: no strategy beats one GPU (best {best.strategy}, "
                           f"{_fmt_tps(best.tokens_per_s)} tokens/s = {best.scaling_factor:.2f}x the baseline); "
                           "train on one device unless you need the memory.")
            else:
                out.append(f"{model} at {g} GPUs: {best.strategy} has the best throughput, "
                           f"{_fmt_tps(best.tokens_per_s)} tokens/s = {best.scaling_factor:.2f}x one GPU "
                           f"({_pct(best.efficiency_pct)} scaling efficiency).")
        else:
            out.append(f"{model} at {g} GPUs: {best.strategy} has the best throughput ({_fmt_tps(best.tokens_per_s)} "
                       "tokens/s).")
        good = [r for r in at if r.efficiency_pct is not None and r.efficiency_pct >= GOOD_PCT]
        poor = [r for r in at if r.efficiency_pct is not None and r.efficiency_pct < POOR_PCT]
        if good:
            out.append(f"{model} at {g} GPUs: desirable scaling (>= {GOOD_PCT:.0f}%): "
                       + ", ".join(f"{r.strategy} {_pct(r.efficiency_pct)}" for r in good) + ".")
        if poor:
            out.append(f"{model} at {g} GPUs: efficiency drops below {POOR_PCT:.0f}% (poor) for "
                       + ", ".join(f"{r.strategy} {_pct(r.efficiency_pct)}" for r in sorted(poor, key=lambda r: r.efficiency_pct or 0))
                       + ".")
        withmem = [r for r in at if r.peak_memory_bytes]
        if withmem and base is not None and base.peak_memory_bytes:
            low = min(withmem, key=lambda r: r.peak_memory_bytes or 0)
            low_mem = low.peak_memory_bytes or 0  # withmem holds rows with a peak
            out.append(f"{model} at {g} GPUs: lowest peak memory per device with {low.strategy}, "
                       f"{low_mem / MIB:,.0f} MiB ({low_mem / base.peak_memory_bytes:.2f}x the "
                       "1-GPU peak).")
    out += _zero(mrows, model, base)
    out += _pipeline(mrows, model)
    return out


def _zero(mrows: list[StudyRow], model: str, base: Optional[StudyRow]) -> list[str]:
    """ZeRO stages ranked by throughput at each GPU count, against the paper's pattern."""
    out = []
    zrows = [r for r in mrows if r.strategy.startswith("zero")]
    for g in _gpu_labels(zrows, with_one=False):
        at = sorted([r for r in zrows if gpu_label(r) == g], key=lambda r: -(r.tokens_per_s or 0))
        if len(at) < 2:
            continue
        order = " > ".join(f"{r.strategy} ({_fmt_tps(r.tokens_per_s)})" for r in at)
        out.append(f"{model} ZeRO at {g} GPUs, fastest first: {order} tokens/s. The A6000 paper saw ZeRO-1 > 1 GPU, "
                   "ZeRO-2 < ZeRO-1, ZeRO-3 ~ ZeRO-1 and ZeRO-3-offload <= ZeRO-2 (models >= 300M).")
    return out


def _pipeline(mrows: list[StudyRow], model: str) -> list[str]:
    """m = 4p against m = p at each GPU count."""
    out = []
    for g in _gpu_labels([r for r in mrows if r.strategy == "pp-4p"], with_one=False):
        p = next((r for r in mrows if r.strategy == "pp" and gpu_label(r) == g), None)
        q = next((r for r in mrows if r.strategy == "pp-4p" and gpu_label(r) == g), None)
        if p and q and p.tokens_per_s and q.tokens_per_s is not None:
            d = (q.tokens_per_s / p.tokens_per_s - 1) * 100
            better = "m=4p beats m=p" if d > 0 else "m=p beats m=4p"
            out.append(f"{model} pipeline at {g} GPUs: {better} ({d:+.0f}% with m=4p); the A6000 paper found m=4p "
                       "better on 2 GPUs and m=p better on 4 (more micro-batches, more messages).")
    return out


def network_findings(rows: list[StudyRow]) -> list[str]:
    """Which strategy moves the most bytes across NICs, or that the study stayed on one node."""
    ok = [r for r in _ok(rows) if r.strategy != "single"]
    nic = [r for r in ok if r.nodes > 1]
    if not nic:
        lo = [r for r in ok if r.loopback_bytes]
        extra = ""
        if lo:
            top = max(lo, key=lambda r: r.loopback_bytes or 0)
            extra = (f" Between ranks of this host, {top.strategy} at {gpu_label(top)} GPUs ({top.model}) moved the "
                     f"most bytes over loopback: {(top.loopback_bytes or 0) / 1e6:,.2f} MB in the timed window.")
        return ["All measured cells ran on one node, so no training traffic crossed a NIC: the network volume and "
                "throughput of seed 000's nano-cluster (1 GbE between nodes) cannot show here; they are ~0 (any "
                "bytes in the NIC columns are background traffic)." + extra]
    top = max(nic, key=lambda r: (r.network_tx_bytes or 0) + (r.network_rx_bytes or 0))
    fast = max(nic, key=lambda r: r.network_gbit_per_s or 0)
    return [f"Most network volume: {top.strategy} at {gpu_label(top)} GPUs ({top.model}), "
            f"{((top.network_tx_bytes or 0) + (top.network_rx_bytes or 0)) / 1e9:,.2f} GB in the timed window; "
            f"highest network throughput: {fast.strategy} at {fast.network_gbit_per_s:.2f} Gbit/s."]


def prediction_findings(rows: list[StudyRow]) -> list[str]:
    """How far the cost model was from the measurements, and whether it picked the right winner."""
    pts = [r for r in _ok(rows) if r.measured_over_predicted]
    if not pts:
        return ["No cell has both a prediction and a measurement."]
    ratios = [r.measured_over_predicted for r in pts if r.measured_over_predicted is not None]
    med = statistics.median(ratios)
    off = [r for r in pts if not 0.5 <= (r.measured_over_predicted or 1) <= 2.0]
    out = [f"Measured / predicted throughput: median {med:.2f} over {len(pts)} cells; "
           f"{len(pts) - len(off)} of {len(pts)} within a factor of 2."]
    if off:
        out.append("Outside 2x: " + ", ".join(f"{r.model} {r.strategy} x{gpu_label(r)} ({r.measured_over_predicted:.2f})"
                                              for r in off[:8]) + ("..." if len(off) > 8 else "") + ".")
    agree, total = 0, 0
    for model in dict.fromkeys(r.model for r in pts):
        for g in {gpu_label(r) for r in pts if r.model == model and eval_gpus(gpu_label(r)) > 1}:
            at = [r for r in pts if r.model == model and gpu_label(r) == g and r.strategy != "single"]
            if len(at) < 2:
                continue
            total += 1
            agree += max(at, key=lambda r: r.tokens_per_s or 0) is max(at, key=lambda r: r.predicted_tokens_per_s or 0)
    if total:
        out.append(f"The cost model's fastest strategy was also the measured fastest in {agree} of {total} "
                   "(model, GPU count) groups.")
    return out


def failure_findings(rows: list[StudyRow]) -> list[str]:
    """Cells that ran and failed, with their classification."""
    bad = [r for r in rows if r.status not in ("ok", "skipped", "pending")]
    return [f"{r.model} {r.strategy} x{gpu_label(r)}: {r.status} - {r.note or 'see ' + r.run_dir}" for r in bad]


def findings(rows: list[StudyRow]) -> list[str]:
    """All findings, model by model, then network, prediction, failures."""
    out: list[str] = []
    for model in dict.fromkeys(r.model for r in rows):
        out += model_findings(rows, model)
    out += network_findings(rows)
    out += prediction_findings(rows)
    out += failure_findings(rows)
    return out
