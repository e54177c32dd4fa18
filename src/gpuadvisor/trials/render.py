"""Plain-text table of a confirm study: predicted vs measured per trial, the winner, the first pick's gap."""
from __future__ import annotations

from ..cli.render import compact_plan, human_bytes, human_rate, human_time
from .schemas import ConfirmResult


def render_confirm(r: ConfirmResult) -> str:
    """Trials table (plan, status, predicted, measured, ratio, peak memory) plus the verdict."""
    hdr = f"{'#':>3}  {'plan':<52} {'status':<15} {'pred/s':>8} {'meas/s':>8} {'m/p':>5} {'peak mem':>10}"
    out = [f"Confirm study '{r.study_name}' ({r.storage}); {human_time(r.elapsed_s)} of "
           f"{human_time(r.budget_s)} budget used", hdr, "-" * len(hdr)]
    for t in r.trials:
        pred = human_rate(t.predicted_tokens_per_s) if t.predicted_tokens_per_s else "-"
        meas = human_rate(t.measured_tokens_per_s) if t.measured_tokens_per_s else "-"
        ratio = f"{t.measured_over_predicted:.2f}" if t.measured_over_predicted else "-"
        mem = human_bytes(t.measured_peak_memory_bytes) if t.measured_peak_memory_bytes else "-"
        tag = "" if t.seed_rank is None else f"[top{t.seed_rank + 1}] "
        out.append(f"{t.number:>3}  {(tag + compact_plan(t.plan)):<52} {t.status:<15} {pred:>8} {meas:>8} {ratio:>5} {mem:>10}")
        if t.error:
            out.append(f"     error: {' '.join(t.error.split())[:150]}")
    if r.winner is None:
        out.append("No trial succeeded: see the errors above.")
    else:
        out.append(f"Confirmed winner: {compact_plan(r.winner)} at {human_rate(r.winner_measured_tokens_per_s or 0)}/s "
                   "measured")
        if r.first_pick_gap_pct is not None:
            verdict = ("the cost model's first pick won" if r.first_pick_gap_pct <= 0 else
                       f"the cost model's first pick measured {r.first_pick_gap_pct:.1f}% below the best")
            out.append(f"First pick: {compact_plan(r.first_pick) if r.first_pick else '-'}; {verdict}")
    out += [f"note: {n}" for n in r.notes]
    return "\n".join(out)
