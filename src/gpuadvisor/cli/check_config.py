"""`gpuadvisor predict --from FILE`: predict a user's own config and say what to change first."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..errors import UserError, validation_message

if TYPE_CHECKING:
    from ..schemas import Estimate

_SKIP = {"nodes", "devices_per_node", "mesh_order", "zero_impl"}


#: Plan.zero_framework in the frameworks' words
_FRAMEWORK_WORDS = {"distributed-optimizer": "Megatron's distributed optimizer", "deepspeed": "DeepSpeed",
                    "fsdp": "FSDP"}


def plan_diff(mine, other) -> dict[str, tuple]:
    """Plan fields that differ (what the user would edit), as name -> (mine, other); who runs the ZeRO
    (Plan.zero_framework) in the frameworks' words, and only when it differs in effect (a read-back zero_impl
    against a ranked plan's default for the same runtime is no edit)."""
    a, b = mine.model_dump(), other.model_dump()
    d = {k: (a[k], b[k]) for k in a if k not in _SKIP and a[k] != b[k]}
    fa, fb = mine.zero_framework, other.zero_framework
    if fa and fb and fa != fb:
        d["ZeRO runtime"] = (_FRAMEWORK_WORDS[fa], _FRAMEWORK_WORDS[fb])
    return d


def first_change(mine, est, ranked) -> Optional[tuple[Estimate, dict]]:
    """The ranked plan that beats `mine` by >= 5% with the fewest edits (ties: the fastest)."""
    floor = est.tokens_per_s * 1.05 if est.feasible else 0.0
    best = None
    for cand in ranked:
        if cand.tokens_per_s <= floor:
            continue
        d = plan_diff(mine, cand.plan)
        if d and (best is None or (len(d), -cand.tokens_per_s) < (len(best[1]), -best[0].tokens_per_s)):
            best = (cand, d)
    return best


def _with_fp8_params(wl):
    """The workload with --fp8-param-gather (the file's or the command line's: TrainingSettings.fp8_param_gather),
    where --precision and --attention-kernel left it FP8 on Transformer Engine's layers (validated: a one-line error
    otherwise)."""
    try:
        t = type(wl.training).model_validate({**wl.training.model_dump(), "fp8_param_gather": True})
    except ValueError as exc:
        raise UserError(f"--fp8-param-gather: {validation_message(exc)}") from None
    return wl.model_copy(update={"training": t})


def _edit(d: dict) -> str:
    return ", ".join(f"{k} {a} -> {b}" for k, (a, b) in d.items())


def _fitting_split(rb, cluster, workload) -> None:
    """Neither the batch nor the accumulation came from the file: split the assumed per-rank batch into the
    largest micro-batch that fits (fewest accumulation steps), so the check judges the file's strategy, not a
    micro-batch the advisor made up. Unchanged when no split fits (the check then says so)."""
    import dataclasses

    from ..costmodel.combine import estimate
    from .predict_cmd import plan_for_cluster

    tr = workload.training
    t = tr.model_copy(update={"precision": rb.precision or tr.precision,
                              "attention_kernel": rb.attention_kernel or tr.attention_kernel,
                              "kernels": rb.kernels or tr.kernels,
                              "grad_reduce_in_bf16": rb.grad_reduce_in_bf16 or tr.grad_reduce_in_bf16,
                              "fp8_param_gather": rb.fp8_param_gather or tr.fp8_param_gather})
    wl = workload.model_copy(update={"training": t})
    per = rb.plan["mb"] * rb.plan.get("m", 1)
    for m in (d for d in range(1, per + 1) if per % d == 0):
        split = {**rb.plan, "mb": per // m, "m": m}
        try:
            plan = plan_for_cluster(dataclasses.replace(rb, plan=split).spec(), cluster)
        except (ValueError, UserError):
            return
        if estimate(plan, cluster, wl).feasible:
            if m > 1:
                gb = per * rb.plan["dp"]
                rb.plan = split
                rb.notes = [f"Accelerate configs do not hold the micro-batch size or the accumulation: assumed "
                            f"--global-batch {gb} / dp {split['dp']} = {per} per rank as mb {per // m} x accumulation "
                            f"{m} (the largest micro-batch that fits)" if "assumed --global-batch" in n else n
                            for n in rb.notes]
            return


#: formats that do not state the model (a DeepSpeed JSON, an Accelerate YAML); a torchtitan job names its model
#: ([model] name/flavor), which the read-back knows for the flavors of the bundled presets
_NO_MODEL = {".json": "a DeepSpeed JSON", ".yaml": "an Accelerate YAML", ".yml": "an Accelerate YAML"}


def _model_to_predict(typed: Optional[str], rb, name: str):
    """The model to predict: the file's shape when it states one and --model is absent or describes another model
    (the file is what runs; a note says so), else --model. A file without a shape needs --model."""
    if rb.model is None:
        if typed is None:
            raise UserError(rb.model_notes[0] if rb.model_notes else
                            f"{name} does not state the model (Megatron's --num-layers, --hidden-size and "
                            "--num-attention-heads); pass --model (a size such as 1.5B, a preset or a config.json)")
        return typed
    if typed is None:
        rb.notes.extend(rb.model_notes)
        return rb.model
    from ..workload.shapes import shape_differences
    from ..workload.specs import resolve_model

    given = resolve_model(typed)
    diff = shape_differences(rb.model, given) if given.kind == "transformer" else ["not a transformer"]
    if given.mlp == "geglu":  # Megatron's arguments cannot say GeGLU (the emitted file asks for it in a comment)
        diff = [d for d in diff if not d.startswith("gated MLP")]
    if not diff:
        return typed
    rb.notes.append(f"--model {typed} is {given.name}, which is not the model {name} trains ({'; '.join(diff)}): "
                    f"predicted with the file's shape ({rb.model.name}); drop --model or make it match")
    if rb.model_notes:  # the file does not say its vocabulary: --model's, as the closest statement of it
        rb.notes.append(f"the vocabulary of --model {typed} taken ({given.vocab_size:,}), as the arguments do not "
                        "say theirs")
        return rb.model.model_copy(update={"vocab_size": given.vocab_size})
    return rb.model


def run_check(args: argparse.Namespace, cluster) -> int:
    """Read the file, predict it (api.predict), rank the alternatives (api.suggest) and compare."""
    from .. import api
    from ..launch.readback import read_config
    from .predict_cmd import plan_for_cluster, render_estimate
    from .suggest_cmd import finetune_from_args

    finetune = finetune_from_args(args)
    path = Path(args.from_file)
    kind = _NO_MODEL.get(path.suffix.lower())
    if args.model is None and kind:
        raise UserError(f"{path.name} is {kind}, which does not say the model; pass --model (a size such as 1.5B, a "
                        "preset or a config.json)")
    default_gb, chosen = args.global_batch, None
    if not default_gb and args.model is not None:  # only an Accelerate YAML needs it (the others hold their batch)
        dwl, chosen = api.make_workload_explained(args.model, seq_len=args.seq_len, finetune=finetune,
                                                  kernels=getattr(args, "kernels", None) or "eager")
        default_gb = dwl.training.global_batch
    rb = read_config(path, world=cluster.num_devices, global_batch=default_gb or 0)
    model = _model_to_predict(args.model, rb, path.name)
    if chosen is not None and any("assumed --global-batch" in n for n in rb.notes):
        rb.notes.append(f"global batch {default_gb} is the default for '{dwl.model.name}' ({chosen.why}), not "
                        "your run's; pass --global-batch N")
        if rb.split_assumed:
            _fitting_split(rb, cluster, dwl)
    if "dp" not in rb.plan:  # a DeepSpeed file without train_batch_size: every device of the cluster
        rb.plan = {"dp": cluster.num_devices, **rb.plan}
        rb.notes.append(f"no train_batch_size: dp = the cluster's {cluster.num_devices} devices")
    spec = rb.spec()
    try:
        plan = plan_for_cluster(spec, cluster)
    except ValueError as exc:
        raise UserError(f"{path.name} reads as plan '{spec}', which is not valid: {exc}") from None
    wl = api.make_workload(model, seq_len=args.seq_len or rb.seq_len, global_batch=plan.global_batch(),
                           precision=args.precision or rb.precision or api.training_precision(None, cluster),
                           token_budget=args.token_budget, finetune=finetune,
                           attention_kernel=getattr(args, "attention_kernel", None) or rb.attention_kernel or "flash",
                           kernels=getattr(args, "kernels", None) or rb.kernels or "eager")
    # the file's Megatron switches, or the command line's (--grad-reduce-in-bf16, --fp8-param-gather)
    if rb.grad_reduce_in_bf16 or getattr(args, "grad_reduce_in_bf16", None):
        wl = wl.model_copy(update={"training": wl.training.model_copy(update={"grad_reduce_in_bf16": True})})
    if rb.fp8_param_gather or getattr(args, "fp8_param_gather", None):
        wl = _with_fp8_params(wl)
    est = api.predict(wl, plan, cluster=cluster)
    ranked = api.suggest(wl, cluster=cluster, top=50).ranking.top
    change = first_change(plan, est, ranked)
    if args.json:
        print(json.dumps({"format": rb.fmt, "plan": spec, "model": wl.model.name, "notes": rb.notes,
                          "ignored": rb.ignored,
                          "estimate": est.model_dump(mode="json"),
                          "best": ranked[0].model_dump(mode="json") if ranked else None,
                          "first_change": _edit(change[1]) if change else None}, indent=2))
        return 0 if est.feasible else 3
    print(f"{path.name}: {rb.fmt} -> plan {spec}")
    for n in rb.notes:
        print(f"  note: {n}")
    if rb.ignored:
        print(f"  not modelled (ignored): {', '.join(rb.ignored)}")
    print(render_estimate(est, cluster.name, wl.model.name))
    if not ranked:
        print("advisor: no plan fits this model on this cluster")
        return 3
    top = ranked[0]
    if est.feasible:
        ratio = top.tokens_per_s / est.tokens_per_s if est.tokens_per_s else float("inf")
        print(f"advisor's best: {top.plan.to_string()} [{top.plan.strategy}] {top.tokens_per_s:,.0f} tokens/s "
              f"(x{ratio:.2f} yours)")
    else:
        print(f"advisor's best: {top.plan.to_string()} [{top.plan.strategy}] {top.tokens_per_s:,.0f} tokens/s "
              "(yours does not fit)")
    if change is None:
        print("change first: nothing; your config is within 5% of the best plan the advisor found")
    else:
        cand, d = change
        gain = (f"+{(cand.tokens_per_s / est.tokens_per_s - 1) * 100:.0f}% tokens/s" if est.feasible
                else "makes it fit")
        print(f"change first: {_edit(d)} ({gain}: {cand.tokens_per_s:,.0f} tokens/s)")
    return 0 if est.feasible else 3
