"""How well the cost model's collectives match the public nccl-tests measurements (knowledge/measurements/public/
nccl_busbw.csv).

Run: python benchmarks/nccl_accuracy.py [--rows]
Prints, per source whose hardware a cluster file can state (gpuadvisor.publicruns.collectives.CASES): rows,
median predicted/measured time, and the mean |error| of the time for buffers from 8 MiB up (bandwidth-bound) and
below (latency-bound); with --rows every row. No timing assertions: a measuring instrument (docs/calibration.md,
"Collectives against nccl-tests").
"""
from __future__ import annotations

import argparse

from gpuadvisor.publicruns.collectives import SMALL_BYTES, evaluate_collectives, summarize_collectives


def _f(v, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every predicted row")
    args = ap.parse_args(argv)
    out = evaluate_collectives()
    if args.rows:
        print(f"{'row':22} {'GPU':6} {'ranks':>5} {'collective':14} {'MiB':>10} {'algo':26} {'meas busbw':>10} "
              f"{'pred busbw':>10} {'time ratio':>10}")
        for o in out:
            r = o.row
            print(f"{r.ref:22} {r.gpu[:6]:6} {r.gpus:>5} {r.collective:14} {r.size_bytes / 2**20:>10.2f} "
                  f"{r.algo[:26]:26} {r.busbw:>10.1f} {o.predicted_busbw:>10.1f} {o.ratio:>10.2f}")
        print()
    big = f">= {SMALL_BYTES // 2**20} MiB"
    head = (f"{'source':30} {'GPU':6} {'rows':>4} {'pred/meas':>9} {'MAPE% ' + big:>16} {'rows':>4} "
            f"{'MAPE% smaller':>13} {'rows':>4}  sets")
    print("Cost model collectives vs nccl-tests (time of one collective; pred/meas = median predicted/measured)")
    print(head)
    print("-" * len(head))
    for t in summarize_collectives(out):
        print(f"{t['source'][:30]:30} {t['gpu'][:6]:6} {t['rows']:>4} {t['median_ratio']:>9.2f} "
              f"{_f(t['mape_large_pct']):>16} {t['rows_large']:>4} {_f(t['mape_small_pct']):>13} "
              f"{t['rows_small']:>4}  {t['sets'] or '-'}")
    notes = sorted({(o.case.source_id, o.case.note) for o in out if o.case.note})
    if notes:
        print("\nStand-ins:")
        for sid, note in notes:
            print(f"  {sid}: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
