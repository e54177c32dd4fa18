"""`gpuadvisor validate`: predicted vs measured for every seed row, and every seed finding."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `validate` subcommand."""
    p = sub.add_parser("validate", help="check the cost model against the seeds' measurements and findings")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 1 if any finding (ordering) fails."""
    from ..validation import report_json, validate

    rep = validate()
    print(report_json(rep) if args.json else rep.render())
    return 0 if rep.orderings_hold else 1
