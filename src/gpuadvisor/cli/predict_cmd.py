"""`gpuadvisor predict`: the full cost-model estimate of one plan, with its breakdowns."""
from __future__ import annotations

import argparse
import sys

from .. import exitcodes
from ..errors import UserError
from ..schemas.workload import ATTENTION_KERNELS, KERNELS, MAX_GLOBAL_BATCH, MAX_SEQ_LEN, MAX_TOKEN_BUDGET, PRECISIONS
from .argtypes import ATTENTION_HELP, KERNELS_HELP, number, text, whole


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `predict` subcommand."""
    p = sub.add_parser("predict", help="estimate one plan: step time, tokens/s, memory, traffic, rules")
    p.add_argument("--model", default=None, type=text("--model"),
                   help="model preset or size, e.g. gpt2, 1.5B, or an HF config.json (with --from a Megatron argument "
                        "file that states the shape or a torchtitan TOML whose [model] flavor is a bundled preset's, "
                        "optional: the file's model)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--plan", help="e.g. 'dp=2,tp=1,pp=2,zero=1,mb=4,m=8' (nodes/gpn optional)")
    what.add_argument("--from", dest="from_file", metavar="FILE", type=text("--from"),
                      help="check your config: a ds_config.json, torchtitan .toml, Accelerate .yaml or a text file "
                           "with Megatron-LM or Megatron-DeepSpeed arguments; predicts it and compares with the "
                           "advisor's best plan")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help="cluster preset name (gpuadvisor presets)")
    src.add_argument("--cluster", help="cluster file (YAML)")
    p.add_argument("--seq-len", type=whole(1, MAX_SEQ_LEN), default=None)
    p.add_argument("--global-batch", type=whole(1, MAX_GLOBAL_BATCH), default=None,
                   help="default: dp*mb*m of the plan")
    p.add_argument("--precision", default=None, choices=PRECISIONS)
    p.add_argument("--attention-kernel", default=None, choices=ATTENTION_KERNELS, help=ATTENTION_HELP)
    p.add_argument("--kernels", default=None, choices=KERNELS, help=KERNELS_HELP)
    p.add_argument("--token-budget", type=number(0, MAX_TOKEN_BUDGET), default=None,
                   help="tokens to train (time and bytes per run)")
    p.add_argument("--what-if", default=None, help="e.g. nic=10gbe, gpus=2x4, link=nvlink")
    from .suggest_cmd import add_finetune_args, add_megatron_args

    add_megatron_args(p)
    add_finetune_args(p)
    p.add_argument("--json", action="store_true", help="print the Estimate as JSON")
    p.set_defaults(func=run)


def _cluster(args: argparse.Namespace):
    from ..hardware.presets import load_preset
    if args.cluster:
        from ..hardware.cluster_file import load_cluster
        cl = load_cluster(args.cluster)
    elif args.preset:
        cl = load_preset(args.preset)
    else:
        raise UserError("predict needs a cluster: pass --preset NAME (see 'gpuadvisor presets') or --cluster FILE")
    if args.what_if:
        from ..ranking import apply_what_if
        cl = apply_what_if(cl, args.what_if)
    return cl


def plan_for_cluster(spec: str, cluster):
    """Parse a plan string; without nodes=/gpn= it fills as few nodes of the cluster as the world size needs."""
    from ..schemas import parse_plan

    plan = parse_plan(spec)
    if "nodes" not in spec and "gpn" not in spec and "devices_per_node" not in spec:
        per = min(cluster.devices_per_node)
        w = plan.world_size
        have = len(cluster.devices_per_node) * per
        if w > have:
            raise UserError(f"plan uses {w} devices (dp x tp x pp x cp) but cluster '{cluster.name}' has "
                            f"{len(cluster.devices_per_node)} x {per}; lower dp/tp/pp/cp or try --what-if gpus=NxM")
        nodes = 1 if w <= per else -(-w // per)
        if nodes > 1 and w % nodes:
            raise UserError(f"plan world size {w} does not split over {nodes} nodes of {per}; give nodes= and gpn=")
        plan = parse_plan(spec, nodes=nodes, devices_per_node=w // nodes)
    return plan


def run(args: argparse.Namespace) -> int:
    """Parse, estimate, print."""
    from .. import api
    from .suggest_cmd import finetune_from_args

    finetune = finetune_from_args(args)
    cl = _cluster(args)
    if args.from_file:
        from .check_config import run_check

        return run_check(args, cl)
    if args.plan is None:
        raise UserError("predict needs --plan SPEC (e.g. 'dp=2,mb=4') or --from FILE (your ds_config.json, "
                        "torchtitan TOML, Accelerate YAML or Megatron argument file)")
    if args.model is None:
        raise UserError("predict needs --model (a size such as 1.5B, a preset or a config.json); only --from a "
                        "Megatron argument file that states the shape, or a torchtitan TOML of a flavor gpuadvisor "
                        "knows, can leave it out")
    plan = plan_for_cluster(args.plan, cl)
    settings = {"global_batch": args.global_batch or plan.global_batch()}
    if args.seq_len:
        settings["seq_len"] = args.seq_len
    notes: list[str] = []
    settings["precision"] = api.training_precision(args.precision, cl, notes)  # bf16, or fp16 before Ampere
    if args.attention_kernel:
        settings["attention_kernel"] = args.attention_kernel
    if args.kernels:
        settings["kernels"] = args.kernels
    if args.token_budget:
        settings["token_budget"] = args.token_budget
    from .suggest_cmd import megatron_settings

    settings.update(megatron_settings(args))
    from ..costmodel.combine import estimate

    wl = api.make_workload(args.model, finetune=finetune, **settings)
    est = api.prediction(estimate(plan, cl, wl), wl)
    if args.json:
        print(est.model_dump_json(indent=2))
    else:
        from .console import Text, emit
        from .render import describe_finetune

        for note in notes:
            emit(Text(f"note: {note}"))
        text = render_estimate(est, cl.name, wl.model.name)
        tuning = describe_finetune(wl)
        if tuning:  # the fine-tuning mode right under the header line
            head, _, rest = text.partition("\n")
            text = f"{head}\n  {tuning}\n{rest}"
        emit(Text(text))  # wrapped to the terminal width
    if not est.feasible:
        why = " ".join(str(est.infeasible_reason or "the cost model rules it out").split())
        print(f"gpuadvisor: plan {plan.to_string()} does not fit: {why}; run `gpuadvisor suggest` for plans "
              "that fit", file=sys.stderr)
        return exitcodes.NOTHING_FITS
    return exitcodes.OK


def render_estimate(est, cluster_name: str, model_name: str) -> str:
    """Human-readable estimate with step, memory and traffic breakdowns."""
    g = 2 ** 30
    s, m = est.step, est.memory
    lines = [f"{model_name} on {cluster_name}: {est.plan.to_string()}  [{est.plan.strategy}]",
             f"  {'feasible' if est.feasible else 'INFEASIBLE: ' + str(est.infeasible_reason)}",
             f"  {'' if est.feasible else 'if it fit: '}step {est.step_time_s * 1e3:.1f} ms, "
             f"{est.tokens_per_s:,.0f} tokens/s, {est.samples_per_s:,.2f} samples/s"
             + (f", scaling efficiency {est.scaling_efficiency:.2f}" if est.scaling_efficiency else ""),
             "  step breakdown (s):",
             f"    compute {s.compute_s:.4f}  bubble {s.bubble_s:.4f}  offload {s.offload_s:.4f}  "
             f"optimizer {s.optimizer_s:.4f}  overhead {s.overhead_s:.4f}"]
    for k, v in s.comm_exposed_s.items():
        lines.append(f"    exposed {k}: {v:.4f}")
    lines.append(f"  peak memory {m.total / g:.2f} GiB of {est.memory_capacity_bytes / g:.1f} GiB: weights {m.weights / g:.2f}, "
                 f"grads {m.gradients / g:.2f}, optimizer {m.optimizer / g:.2f}, activations {m.activations / g:.2f}, "
                 f"logits {m.logits / g:.2f}, buffers {m.comm_buffers / g:.2f}, framework {m.framework / g:.2f}")
    if est.host_memory_bytes:
        lines.append(f"  host RAM per node for offload: {est.host_memory_bytes / g:.1f} GiB")
    traffic = ", ".join(f"{k} {v / 1e9:.3f} GB" for k, v in est.link_bytes_per_step.items()) or "none"
    lines.append(f"  traffic per step per rank: {traffic}; busiest NIC {est.network_bytes_per_step / 1e9:.3f} GB")
    if est.network_bytes_per_run is not None:
        lines.append(f"  per run: {est.network_bytes_per_run / 1e9:.1f} GB through the busiest NIC, "
                     f"{(est.time_to_train_s or 0) / 3600:.2f} h")
    for r in est.rules:
        lines.append(f"  [{r.severity}] {r.message} ({r.source})")
    return "\n".join(lines)
