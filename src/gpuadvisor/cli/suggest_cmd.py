"""`gpuadvisor suggest`: rank every feasible plan for a model on a cluster and hand over a launch config."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from .. import exitcodes
from ..errors import UserError
from ..schemas.bounds import MAX_CPU_RANKS
from ..schemas.workload import (ATTENTION_KERNELS, KERNELS, MAX_GLOBAL_BATCH, MAX_LORA_RANK, MAX_SEQ_LEN,
                               MAX_TOKEN_BUDGET, PRECISIONS, FineTune)
from .argtypes import ATTENTION_HELP, KERNELS_HELP, check_writable, lora_targets, number, parse_duration, text, whole


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    """--cluster/--preset/--cpu-ranks, shared by suggest, predict and study."""
    g = p.add_argument_group("cluster (default: probe this host; no GPU -> a bundled preset)")
    g.add_argument("--cluster", metavar="FILE", help="cluster file (YAML/JSON, docs/cluster-file.md) or 'local'")
    g.add_argument("--preset", metavar="NAME", help="bundled cluster preset (see `gpuadvisor presets`)")
    g.add_argument("--cpu-ranks", type=whole(1, MAX_CPU_RANKS), metavar="N",
                   help="use N CPU ranks (gloo) on a GPU-less host (not with --preset/--cluster FILE)")


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """--model and training settings, shared by suggest, predict and study."""
    p.add_argument("--model", required=True, type=text("--model"),
                   help="size (1.5B, 350M, 7B), preset (gpt2-xl, llama-7b, resnet18) or a HF config.json path")
    p.add_argument("--seq-len", type=whole(1, MAX_SEQ_LEN), help="tokens per sequence")
    p.add_argument("--global-batch", type=whole(1, MAX_GLOBAL_BATCH), help="sequences per optimizer step (all ranks)")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="default bf16, or fp16 on GPUs without bf16 (before Ampere: V100, T4); fp8: FP8 Linears "
                        "(Transformer Engine / torchao float8) on Ada, Hopper or Blackwell")
    p.add_argument("--attention-kernel", choices=ATTENTION_KERNELS, default="flash", help=ATTENTION_HELP)
    p.add_argument("--kernels", choices=KERNELS, default="eager", help=KERNELS_HELP)
    add_megatron_args(p)


def add_megatron_args(p: argparse.ArgumentParser) -> None:
    """Megatron's gradient and FP8-weight switches, shared by suggest and predict (docs/cost-model.md)."""
    g = p.add_argument_group("Megatron settings (plans that run as Megatron and its megatron_args.txt)")
    g.add_argument("--grad-reduce-in-bf16", action="store_true", default=None,
                   help="keep and reduce gradients in bf16, as NVIDIA's recipes do, instead of Megatron's fp32 "
                        "gradient buffer (2 bytes per parameter less)")
    g.add_argument("--fp8-param-gather", action="store_true", default=None,
                   help="with --precision fp8 --attention-kernel cudnn: keep the Linears' weights in FP8 only and "
                        "all-gather them in FP8 on Megatron's distributed optimizer, as NVIDIA's FP8 recipes do")


def megatron_settings(args: argparse.Namespace) -> dict:
    """The Megatron switches given on the command line, as training-settings keywords."""
    return {k: True for k in ("grad_reduce_in_bf16", "fp8_param_gather") if getattr(args, k, None)}


def add_finetune_args(p: argparse.ArgumentParser) -> None:
    """--finetune and the LoRA settings, shared by suggest, predict and study (docs/fine-tuning.md)."""
    g = p.add_argument_group("fine-tuning (default: full; LoRA/QLoRA train adapters on a frozen base)")
    g.add_argument("--finetune", choices=["full", "lora", "qlora"], default=None,
                   help="full: every weight trains; lora: adapters on a frozen bf16 base; qlora: adapters on a "
                        "frozen NF4 (4-bit) base")
    g.add_argument("--lora-rank", type=whole(1, MAX_LORA_RANK, "a LoRA rank"), metavar="N",
                   help="adapter rank r (default 16)")
    g.add_argument("--lora-alpha", type=number(0, 1e9), metavar="X", help="LoRA scaling alpha (default 2 x rank)")
    g.add_argument("--lora-targets", type=lora_targets, metavar="LIST",
                   help="linear layers that get adapters: a comma list of q,k,v,o,gate,up,down, or all-linear "
                        "(default), attention, mlp")


def finetune_from_args(args: argparse.Namespace) -> FineTune:
    """The FineTune of --finetune/--lora-*; refuses --lora-* without --finetune lora|qlora (one line, USAGE), and
    --lora-targets that name no linear layer of --model (e.g. gate on GPT-2's GeLU MLP)."""
    from ..workload.finetune import check_targets, make_finetune

    targets = ",".join(args.lora_targets) if args.lora_targets is not None else None
    ft = make_finetune(args.finetune, lora_rank=args.lora_rank, lora_alpha=args.lora_alpha, targets=targets,
                       flags=True)
    if targets is not None and getattr(args, "model", None):
        from ..workload.specs import resolve_model

        check_targets(resolve_model(args.model), ft, "--lora-targets")
    return ft


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("suggest", help="rank parallel plans for a model and emit a launch config",
                       description="Rank every feasible DP/TP/PP/ZeRO plan for a model on your cluster.")
    add_workload_args(p)
    add_finetune_args(p)
    add_cluster_args(p)
    p.add_argument("--token-budget", type=number(0, MAX_TOKEN_BUDGET),
                   help="total training tokens (time-to-train, cost, bytes per run)")
    p.add_argument("--allow-batch-change", action="store_true",
                   help="let the advisor change the global batch (the launch config states the LR change)")
    p.add_argument("--objective", choices=["throughput", "memory", "time", "cost"], default="throughput")
    p.add_argument("--price-per-gpu-hour", type=number(0, 1e6, allow_lo=True), help="for --objective cost")
    p.add_argument("--top", type=whole(1, 1000), default=5, help="how many plans to show (default 5)")
    p.add_argument("--what-if", action="append", default=[], metavar="SPEC",
                   help="re-rank on a modified cluster, e.g. nic=10gbe or gpus=2x4 (commas combine changes); "
                        "repeat the flag to compare several scenarios side by side")
    p.add_argument("--learned", action="store_true", help="apply the learned correction from measurements")
    p.add_argument("--emit", metavar="DIR", type=text("--emit"),
                   help="write launch.sh, job.json, ds_config.json, env.sh, slurm.sbatch, "
                        "torchtitan/Accelerate/Megatron configs to DIR")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--rank", type=whole(1, 10_000), metavar="N",
                       help="with --emit: emit the N-th ranked plan (default 1)")
    which.add_argument("--plan", metavar="SPEC", help="with --emit: emit this plan ('dp=2,pp=2,mb=4,m=8', as "
                                                     "`predict --plan`)")
    p.add_argument("--force", action="store_true", help="with --emit: overwrite files you edited since the last emit")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    g = p.add_argument_group("confirm with real trial runs")
    g.add_argument("--confirm", type=whole(1, 100), metavar="K",
                   help="run short trials of the top K plans (Optuna study)")
    g.add_argument("--budget", help="wall-clock budget for --confirm (default 15m; e.g. 3m, 900s)")
    g.add_argument("--steps", type=whole(1, 100_000), default=20, help="timed steps per trial")
    g.add_argument("--warmup", type=whole(0, 100_000), default=3, help="untimed warm-up steps per trial")
    g.add_argument("--storage", help="Optuna storage URL (default: SQLite in the user data dir)")
    g.add_argument("--study-name", metavar="NAME",
                   help="Optuna study name (default: <model>-<cluster>-<fingerprint>; the same name resumes)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import api
    from .progress import DelayedProgress

    finetune = finetune_from_args(args)
    common = dict(cluster=args.cluster, preset=args.preset, cpu_ranks=args.cpu_ranks, seq_len=args.seq_len,
                  global_batch=args.global_batch, precision=args.precision, attention_kernel=args.attention_kernel,
                  kernels=args.kernels, **megatron_settings(args))
    if args.confirm:  # before ranking: the bundled trainers cannot measure FP8 nor cuDNN attention
        from ..trials.hostcheck import refuse_unmeasurable

        refuse_unmeasurable(args.precision, args.attention_kernel, "confirm", kernels=args.kernels)
    if args.study_name and not args.confirm:
        raise UserError("--study-name only applies with --confirm K; add --confirm or drop --study-name")
    if len(args.what_if) > 1 and (args.confirm or args.emit):
        raise UserError("--confirm and --emit act on one cluster but several --what-if scenarios were given; "
                        "keep one --what-if (combine changes with commas: nic=10gbe,gpus=2x4) or drop --confirm/--emit")
    if not args.confirm:
        given = [f for f, v in (("--budget", args.budget), ("--storage", args.storage)) if v is not None]
        if given:
            raise UserError(f"{' and '.join(given)} only {'applies' if len(given) == 1 else 'apply'} with "
                            "--confirm K; add --confirm K or drop it")
    budget_s = parse_duration(args.budget or "15m") if args.confirm else None
    if (args.rank is not None or args.plan is not None or args.force) and not args.emit:
        raise UserError("--rank, --plan and --force choose what --emit writes; add --emit DIR")
    if args.emit:
        check_writable(args.emit, "--emit", folder=True)
    top = max(args.top, args.rank or 1)
    # ranking is bounded (candidates/enumerate.py) but can take seconds on thousands of devices: say so past 2 s
    with DelayedProgress("gpuadvisor suggest", f"ranking plans for {args.model}"):
        base = api.suggest(args.model, token_budget=args.token_budget, allow_batch_change=args.allow_batch_change,
                           objective=args.objective, top=top, price_per_gpu_hour=args.price_per_gpu_hour,
                           use_learned=args.learned, finetune=finetune, **common)
        # each --what-if is its own scenario, compared with the unmodified cluster (commas combine changes in one)
        scenarios = [api.suggest(base.workload, cluster=base.cluster, what_if=[spec], objective=args.objective,
                                 top=top, price_per_gpu_hour=args.price_per_gpu_hour, use_learned=args.learned)
                     for spec in args.what_if]
    result = scenarios[0] if len(scenarios) == 1 else base
    confirmed = None
    if args.confirm:
        assert budget_s is not None  # parsed above whenever --confirm is given
        confirmed = api.confirm(base.workload, cluster=result.cluster, top_k=args.confirm,
                                budget_s=budget_s, steps=args.steps, warmup=args.warmup,
                                storage=args.storage, study_name=args.study_name)
    emitted = None
    if args.emit:
        emitted = _emit(result, Path(args.emit), confirmed, rank=args.rank, plan=args.plan, force=args.force)
    if args.json:
        payload = result.model_dump(mode="json")
        if len(scenarios) == 1:
            payload["what_if_baseline"] = base.ranking.model_dump(mode="json")
        elif scenarios:
            payload["what_if"] = [{"spec": spec, "cluster": sc.cluster.model_dump(mode="json"),
                                   "ranking": sc.ranking.model_dump(mode="json")}
                                  for spec, sc in zip(args.what_if, scenarios)]
        if confirmed is not None:
            payload["confirm"] = confirmed.model_dump(mode="json")
        json.dump(payload, sys.stdout, indent=2)
        print()
        return _exit_code(result, confirmed)
    _print_text(args, base, scenarios, result, confirmed, emitted)
    return _exit_code(result, confirmed)


def _exit_code(result, confirmed) -> int:
    """NOTHING_FITS when no plan fits; RUN_FAILED when --confirm ran trials and none succeeded."""
    if not result.ranking.top:
        return exitcodes.NOTHING_FITS
    if confirmed is not None and confirmed.winner is None:
        return exitcodes.RUN_FAILED
    return exitcodes.OK


def _print_text(args: argparse.Namespace, base, scenarios: list, result, confirmed, emitted=None) -> None:
    """The human-readable output: notes, rankings (baseline and what-ifs), launch, confirm results."""
    from .console import Text, emit, make_console
    from .render import ranking_view, whatif_view

    console = make_console()
    for note in base.notes:
        emit(Text(f"note: {note}"), console)
    if scenarios:
        emit(ranking_view(base.ranking, base.cluster, base.workload, details=0, title="Baseline"), console)
        for spec, sc in zip(args.what_if, scenarios):
            emit(Text(""), console)
            emit(ranking_view(sc.ranking, sc.cluster, sc.workload, details=1 if len(scenarios) == 1 else 0,
                              title=f"What-if {spec}"), console)
        emit(Text(""), console)
        emit(whatif_view(base.ranking, [(spec, sc.ranking) for spec, sc in zip(args.what_if, scenarios)]), console)
    else:
        emit(ranking_view(result.ranking, result.cluster, result.workload), console)
    if result.launch is not None and len(scenarios) <= 1:
        from ..launch import render_launch

        emit(Text("\nLaunch (top plan):"), console)
        emit(Text(render_launch(result.launch).rstrip("\n")), console)
    if confirmed is not None:
        from ..trials.render import confirm_view

        emit(Text(""), console)
        emit(confirm_view(confirmed), console)
    if emitted is not None:
        out = Path(args.emit)
        emit(Text(f"\nwrote launch files for {emitted.to_string()} to {out}"), console)
        emit(Text(f"start with: bash {out / 'launch.sh'}   (Slurm: sbatch {out / 'slurm.sbatch'})"), console)
        if (out / "train_lora.py").exists():
            emit(Text(f"your own data: see {out / 'train_lora.py'} (accelerate launch --config_file "
                      "accelerate.yaml train_lora.py --data FILE, from that folder)"), console)


def export_launch(result, confirmed=None, *, rank: Optional[int] = None, plan: Optional[str] = None):
    """The launch config `--emit` writes: `plan` (a plan string), the `rank`-th ranked plan, else the confirmed
    winner's (with its measured throughput) if trials ran and found one, else the top plan's."""
    from .. import api
    from ..launch import build_launch
    from .predict_cmd import plan_for_cluster

    if plan is not None:
        p = plan_for_cluster(plan, result.cluster)
        est = api.predict(result.workload, p, cluster=result.cluster)
        if not est.feasible:
            raise UserError(f"plan {p.to_string()} does not fit: {est.infeasible_reason}; pick another --plan")
        return build_launch(p, result.cluster, result.workload, est)
    if rank is not None:
        n = len(result.ranking.top)
        if rank > n:
            raise UserError(f"--rank {rank}: only {n} plan(s) fit; pick 1..{n}")
        est = result.ranking.top[rank - 1]
        return build_launch(est.plan, result.cluster, result.workload, est)
    if confirmed is not None and getattr(confirmed, "winner", None) is not None:
        return build_launch(confirmed.winner, result.cluster, result.workload, confirmed.winner_estimate,
                            measured_tokens_per_s=confirmed.winner_measured_tokens_per_s)
    return result.launch


def _emit(result, out_dir: Path, confirmed, *, rank: Optional[int] = None, plan: Optional[str] = None,
          force: bool = False):
    """Write the launch script and config files of `export_launch(...)`; returns the plan written.

    job.json and README.txt state the step count launch.sh runs (`--steps` is the trials' length, not the
    exported run's); job.json carries the prediction the run prints its measurement beside.
    """
    from ..launch import emit, launch_steps, make_job

    launch = export_launch(result, confirmed, rank=rank, plan=plan)
    if launch is None:
        raise UserError("nothing fits on this cluster, so there is no launch config to emit; see the ranking output")
    device = next(n for n in result.cluster.nodes if n.name == launch.nodes[0].node).devices[0]
    job = make_job(launch.plan, result.workload, steps=launch_steps(launch), estimate=launch.estimate, device=device)
    emit(launch, job, out_dir, force=force)
    return launch.plan
