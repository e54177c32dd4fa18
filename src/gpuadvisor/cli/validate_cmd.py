"""`gpuadvisor validate`: predicted vs measured for every seed row, and every seed finding."""
from __future__ import annotations

import argparse
import json

from .. import exitcodes


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `validate` subcommand."""
    p = sub.add_parser("validate", help="check the cost model against the seeds' measurements and findings")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--learned", action="store_true",
                   help="also report the learned correction: leave-one-source-out and within-cluster error "
                        "of analytical alone vs analytical + learned (knowledge/ and local measurements)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 1 if any finding (ordering) fails."""
    from ..validation import report_json, validate

    rep = validate()
    learned = _learned_reports() if args.learned else None
    if args.json:
        doc = json.loads(report_json(rep))
        if learned is not None:
            doc["learned"] = learned
        print(json.dumps(doc, indent=2))
    else:
        from .console import Text, emit

        emit(rep.view())
        if learned is not None:
            emit(Text(render_learned(learned)))
    return exitcodes.OK if rep.orderings_hold else exitcodes.RUN_FAILED


def _learned_reports() -> dict:
    """Both cross-validations of the learned correction over every measurement row available."""
    from ..costmodel.learned import default_rows, loso_report, within_report

    rows = default_rows()
    return {"leave_one_source_out": loso_report(rows), "within_cluster": within_report(rows)}


def render_learned(rep: dict) -> str:
    """Mean absolute relative error of tokens/s, analytical vs analytical + learned, per source group."""
    out = ["", "Learned correction (mean |predicted - measured| / measured of throughput rows):"]
    titles = {"leave_one_source_out": "leave one source out (a cluster it never saw)",
              "within_cluster": "leave one plan out (plans measured on the same cluster)"}
    for key, title in titles.items():
        r = rep[key]
        if not r.get("n_rows"):
            out.append(f"  {title}: not enough rows")
            continue
        out.append(f"  {title}: analytical {r['analytical_mae']:.1%} -> learned {r['learned_mae']:.1%} "
                   f"({r['n_rows']} rows)")
        for g, v in r["per_group"].items():
            out.append(f"    {g:<28} n={v['n']:<3} analytical {v['analytical_mae']:.1%}  learned {v['learned_mae']:.1%}")
    return "\n".join(out)
