"""`gpuadvisor study`: run the seed papers' experiment grid on this cluster; plots and a report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import exitcodes
from ..errors import UserError
from ..schemas.workload import MAX_GLOBAL_BATCH, MAX_SEQ_LEN, PRECISIONS
from .argtypes import whole
from .suggest_cmd import add_cluster_args, add_finetune_args, finetune_from_args, parse_duration

DEFAULT_OUT = "gpuadvisor-study"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "study", help="run the papers' DP/TP/PP/ZeRO scaling study on this cluster, with plots and a report",
        description="Plan a grid (models x strategies x GPU counts, fixed global batch per model, 1-GPU baseline), "
                    "run every cell with the bundled trainers (resumable), aggregate as seed 001 Appendix F, and "
                    "write results.csv/json, PNG plots, report.md and report.html to --out.")
    p.add_argument("--models", required=True,
                   help="comma list: sizes (100M,300M), presets (gpt2), config.json paths, or shapes "
                        "L<layers>-H<hidden>-A<heads>[-F<ffn>][-V<vocab>][-S<positions>] e.g. L2-H32-A4-V256-S16")
    p.add_argument("--strategies", default="all",
                   help="comma list of dp,tp,pp,zero1,zero2,zero2-offload,zero3,zero3-offload-optim,zero3-offload "
                        "(default all: the papers' grid, every one but the two partial offloads)")
    p.add_argument("--gpus", default="1,2,4", help="GPU counts, e.g. 1,2,4; NxM = N nodes x M GPUs (default 1,2,4)")
    p.add_argument("--steps", type=whole(1, 1_000_000), default=200,
                   help="timed steps per cell (default 200, as the paper)")
    p.add_argument("--warmup", type=whole(0, 1_000_000), default=10, help="untimed warm-up steps per cell (default 10)")
    p.add_argument("--pp-microbatches", default="p", metavar="p,4p",
                   help="pipeline micro-batch counts: p (maximum bubble, the paper's main runs), 4p, or p,4p")
    p.add_argument("--seq-len", type=whole(1, MAX_SEQ_LEN),
                   help="sequence length for every model (default: the model's)")
    p.add_argument("--global-batch", type=whole(1, MAX_GLOBAL_BATCH),
                   help="global batch for every model (default: the model's)")
    p.add_argument("--precision", choices=PRECISIONS, help="precision for every model")
    add_finetune_args(p)
    add_cluster_args(p)
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                   help=f"study folder; rerunning resumes it (default ./{DEFAULT_OUT})")
    p.add_argument("--dry-run", action="store_true", help="show the grid, predictions and estimated wall time only")
    p.add_argument("--json", action="store_true",
                   help="print JSON on stdout: the grid with --dry-run, else the study outcome (rows and files)")
    p.add_argument("--trial-timeout", metavar="DURATION", help="deadline per cell, e.g. 10m (default from prediction)")
    p.add_argument("--no-plots", action="store_true", help="skip plots and report (results.csv/json only)")
    p.set_defaults(func=run)


def _spec(args: argparse.Namespace):
    from ..study.spec import StudySpec, parse_gpus, parse_models, parse_pp_microbatches, parse_strategies

    if args.steps < 1:
        raise UserError(f"--steps must be at least 1, got {args.steps}")
    if args.warmup < 0:
        raise UserError(f"--warmup must be 0 or more, got {args.warmup}")
    from ..trials.hostcheck import refuse_fp8

    refuse_fp8(args.precision or "", "study")  # up front, --dry-run too: every cell is a bundled-trainer run
    finetune = finetune_from_args(args)
    return StudySpec(models=parse_models(args.models), strategies=parse_strategies(args.strategies, finetune.adapters),
                     gpus=parse_gpus(args.gpus), steps=args.steps, warmup=args.warmup,
                     pp_microbatches=parse_pp_microbatches(args.pp_microbatches), seq_len=args.seq_len,
                     global_batch=args.global_batch, precision=args.precision, finetune=finetune)


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..study.execute import check_host, dump_grid, resolve_workloads, run_study
    from ..study.grid import build_grid

    spec = _spec(args)
    cluster, notes = api.resolve_cluster(args.cluster, preset=args.preset, cpu_ranks=args.cpu_ranks)
    fallback = args.cluster is None and args.preset is None and not args.cpu_ranks and cluster.name == api.FALLBACK_PRESET
    if not args.dry_run:
        if fallback:
            raise UserError("this host has no GPU; run the study on CPU ranks with --cpu-ranks 2 (or --preset "
                            "cpu-2ranks), or plan one for another cluster with --preset NAME --dry-run")
        host = check_host(cluster)
        if host:
            raise UserError(host[0])
    workloads = resolve_workloads(spec, cluster, notes)
    if not args.dry_run:
        from ..trials.hostcheck import require_modules

        zero = any(s.startswith("zero") for s in spec.strategies)
        require_modules(["torch", *(["deepspeed"] if zero else []), *([] if args.no_plots else ["matplotlib"])],
                        "gpuadvisor study" + ("" if args.no_plots else " (with plots; --no-plots skips them)"))
    if args.dry_run:
        cells = build_grid(spec, cluster, workloads)
        if args.json:
            print(dump_grid(cells))
            return 0
        from ..study.render import grid_view
        from .console import Text, emit

        from .render import describe_finetune

        for n in notes:
            emit(Text(f"note: {n}"))
        for m, wl in workloads.items():
            tuning = describe_finetune(wl)
            if tuning:
                emit(Text(f"fine-tuning {m}: {tuning}"))
        emit(grid_view(cells, spec, cluster, Path(args.out)))
        return 0
    timeout = parse_duration(args.trial_timeout) if args.trial_timeout else None
    from .argtypes import check_writable

    check_writable(args.out, "--out", folder=True)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    outcome = run_study(spec, cluster, args.out, workloads=workloads, trial_timeout_s=timeout, plots=not args.no_plots)
    ok = sum(r.status == "ok" for r in outcome.rows)
    ran = sum(r.status not in ("skipped", "pending") for r in outcome.rows)
    if args.json:
        print(outcome.model_dump_json(indent=1, exclude={"cells"}))
        return 0 if ok == ran else 3
    print(f"wrote {', '.join(outcome.files)} to {outcome.out_dir} ({ok} of {ran} run cells ok; "
          f"{len(outcome.reused)} reused from an earlier run)")
    return exitcodes.OK if ok == ran else exitcodes.RUN_FAILED
