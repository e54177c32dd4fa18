"""Accuracy of the cost model against the seeds' published tables and findings.

Run: python benchmarks/seed_accuracy.py [--json]   (same report as `gpuadvisor validate`)
"""
from __future__ import annotations

import sys

from gpuadvisor.validation import report_json, validate


def main() -> int:
    rep = validate()
    print(report_json(rep) if "--json" in sys.argv else rep.render())
    return 0 if rep.orderings_hold else 1


if __name__ == "__main__":
    sys.exit(main())
