"""torchtitan job config (TOML) for a plan: FSDP/HSDP/DDP, TP, PP and schedule, activation checkpointing, compile.

Keys follow torchtitan's JobConfig dataclasses (torchtitan/config/job_config.py, pytorch/torchtitan commit
000204a4; sections job, model, training, parallelism, activation_checkpoint, metrics). Mapping:
- ZeRO-3 -> data_parallel_shard_degree = dp (FSDP2, reshard after forward); ZeRO-1/2 -> FSDP with
  fsdp_reshard_after_forward = "never" (parameters stay gathered between forward and backward, as ZeRO-2 keeps
  them whole); hpZ h -> HSDP: shard h inside a node, replicate dp/h; no ZeRO -> data_parallel_replicate_degree
  = dp (DDP); offload -> training.enable_cpu_offload.
- batch: local_batch_size = mb x m for pipeline plans (pipeline_parallel_microbatch_size = mb gives m
  micro-batches), else mb with global_batch_size = dp x mb x m (torchtitan accumulates m steps).
- precision: mixed_precision_param bfloat16 or float32 (torchtitan has no fp16 mode). fp8 (`FLOAT8`): bfloat16 plus
  `[model] converters = ["float8"]`, torchtitan's torchao float8 converter (Float8Converter, registered as
  "float8" in torchtitan/components/quantization/float8.py at that commit; later torchtitan renamed it
  `quantize.linear.float8`): every nn.Linear whose dims divide by 16 becomes torchao's Float8Linear with
  tensorwise dynamic scaling (`[float8] recipe_name` unset), the per-tensor current scaling whose casts the cost
  model prices (calibration.yaml `fp8`). `[float8] enable_fsdp_float8_all_gather = false` (and so
  precompute_float8_dynamic_scale_for_fsdp = false) keeps bf16 weights in FSDP's all-gather, as the prediction
  does; `[training] compile = true`, which fuses torchao's scaling and casting kernels (torchtitan docs/float8.md:
  needed for competitive FP8 performance; the torchtitan Float8 rows in knowledge/measurements/public/torchtitan.csv
  ran compiled).
- ep -> expert_parallel_degree with expert_tensor_parallel_degree = 1 (torchtitan's MoE models).
- ZeRO with TP/PP is torchtitan's 2D/3D parallelism (ParallelDims: replicate x shard x tp x pp = world):
  data_parallel_shard_degree = dp beside tensor_parallel_degree and pipeline_parallel_degree, FSDP wrapping each
  pipeline stage. ZeRO-3 with PP is torchtitan's "default" (no resharding under PP: one all-gather per step, as
  the cost model prices it): torch's pipelining leaves each stage's parameters unsharded after every backward and
  accumulates unsharded gradients until the last micro-batch (PipelineStage.backward_maybe_with_nosync), so
  "always" would only add an all-gather per micro-batch without lowering the peak. ZeRO-1 (distributed optimizer
  elsewhere) is FSDP without resharding.
Per-op selective checkpointing (Plan.recompute_ops) is selective_ac_option "op".
- cp -> context_parallel_degree = cp with context_parallel_rotate_method "allgather" (torchtitan's default; the
  other choice, "alltoall", is priced the same). torchtitan shards FSDP over the dp_shard_cp mesh (dp_shard x cp
  ranks: ParallelDims), which is the plan's ZeRO over gradient_ranks = dp*cp, and applies FSDP whenever cp > 1
  (ParallelDims.fsdp_enabled = dp_shard_enabled or cp_enabled): a plan without ZeRO is written as HSDP, replicate
  dp and shard over the cp ranks without resharding after forward (the nearest torchtitan has to DDP), and says so.
  ParallelDims.seq_len_divisor: seq_len must divide by tp x 2cp.
- [model] name/flavor: the torchtitan model registered with the workload's shape (`flavor_of`: the presets whose
  knowledge/models.yaml entry names one, matched by shape and vocabulary, so an HF config.json of Llama 3.1 8B
  gets llama3 "8B" too). A model torchtitan does not register gets PLACEHOLDER, which torchtitan refuses by name
  at start-up, instead of a flavor that would train another model (its "debugmodel" is 6 layers of width 256).
"""
from __future__ import annotations

import json
from typing import Any, Optional

from ..schemas.plan import Plan
from ..schemas.workload import ModelSpec, Workload

FILE = "torchtitan.toml"
#: [model] for a model torchtitan does not register: a name its model registry refuses, saying what to put there
PLACEHOLDER = ("SET-your-torchtitan-model", "SET-its-flavor")

#: [float8] for precision fp8 (torchtitan/config/job_config.py `Float8` at the commit above; the docstring says why)
FLOAT8 = {"enable_fsdp_float8_all_gather": False, "precompute_float8_dynamic_scale_for_fsdp": False}
SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}
#: [parallelism] context_parallel_rotate_method written for cp > 1 (torchtitan's default; "alltoall" the other choice)
ROTATE_METHOD = "allgather"
#: torchtitan's training entry point (run_train.sh: torchrun ... -m torchtitan.train --job.config_file FILE)
MODULE = "torchtitan.train"


def flavor_of(model: ModelSpec) -> Optional[tuple[str, str]]:
    """torchtitan's (name, flavor) for `model`: the bundled preset that names one and trains alike (the same
    layers, widths, heads, experts and vocabulary), else None."""
    from ..workload.catalog import presets
    from ..workload.shapes import shape_differences

    if model.kind != "transformer":
        return None
    for p in presets().values():
        if p.torchtitan and p.spec.vocab_size == model.vocab_size and p.spec.qk_norm == model.qk_norm \
                and not shape_differences(model, p.spec):
            return p.torchtitan
    return None


def titan_config(plan: Plan, workload: Workload, *, steps: int, compile: bool = False) -> dict[str, dict[str, Any]]:
    """The job config as nested sections (what the TOML holds)."""
    t = workload.training
    par: dict[str, Any] = {"tensor_parallel_degree": plan.tp, "pipeline_parallel_degree": plan.pp}
    if plan.zero_stage == 0:
        par.update(data_parallel_replicate_degree=plan.dp, data_parallel_shard_degree=1)
        if plan.cp > 1:  # FSDP over the cp ranks all the same (module docstring): weights kept whole, as in DDP
            par["fsdp_reshard_after_forward"] = "never"
    elif plan.zero_hpz_partition_size > 1:
        h = plan.zero_hpz_partition_size
        par.update(data_parallel_replicate_degree=plan.dp // h, data_parallel_shard_degree=h)
    else:
        par.update(data_parallel_replicate_degree=1, data_parallel_shard_degree=plan.dp,
                   fsdp_reshard_after_forward=("default" if plan.pp > 1 else "always") if plan.zero_stage == 3
                   else "never")
    if plan.cp > 1:
        par.update(context_parallel_degree=plan.cp, context_parallel_rotate_method=ROTATE_METHOD)
    if plan.tp > 1:
        par["disable_loss_parallel"] = False
    if plan.tp_comm_overlap:
        par["enable_async_tensor_parallel"] = True  # torchtitan's async TP needs torch.compile (set below)
    if plan.ep > 1:
        # torchtitan's MoE expert parallelism (ParallelDims: ep borrows from the data-parallel shard and TP
        # ranks); expert TP 1 as Plan.ep assumes
        par.update(expert_parallel_degree=plan.ep, expert_tensor_parallel_degree=1)
    fp8 = t.precision == "fp8"
    training: dict[str, Any] = {"seq_len": t.seq_len, "steps": steps, "global_batch_size": plan.global_batch(),
                                "mixed_precision_param": "float32" if t.precision == "fp32" else "bfloat16",
                                "mixed_precision_reduce": "float32",
                                "compile": compile or plan.tp_comm_overlap or fp8,
                                "enable_cpu_offload": plan.zero_offload}
    if plan.pp > 1:
        par.update(pipeline_parallel_schedule=SCHEDULES[plan.pp_schedule],
                   pipeline_parallel_microbatch_size=plan.micro_batch_size)
        chunks = plan.pp * plan.pp_virtual_stages
        if workload.model.n_layers and workload.model.n_layers % chunks == 0:
            par["pipeline_parallel_layers_per_stage"] = workload.model.n_layers // chunks
        training["local_batch_size"] = plan.micro_batch_size * plan.num_micro_batches
    else:
        training["local_batch_size"] = plan.micro_batch_size
    name, flavor = flavor_of(workload.model) or PLACEHOLDER
    model: dict[str, Any] = {"name": name, "flavor": flavor}
    if fp8:
        model["converters"] = ["float8"]
    sections = {
        "job": {"description": f"gpuadvisor plan {plan.to_string()}", "dump_folder": "./outputs"},
        "model": model,
        "metrics": {"log_freq": 10},
        "training": training,
        "parallelism": par,
        "activation_checkpoint": _activation_checkpoint(plan),
    }
    if fp8:
        sections["float8"] = dict(FLOAT8)
    return sections


def _activation_checkpoint(plan: Plan) -> dict:
    """torchtitan's [activation_checkpoint]: full, none, per-op selective (Plan.recompute_ops: selective_ac_option
    "op") or layer-level selective every recompute_interval-th layer (selective_ac_option "k": torchtitan
    checkpoints every k-th transformer block)."""
    if plan.recompute_ops:
        return {"mode": "selective", "selective_ac_option": "op"}
    if not plan.recompute:
        return {"mode": "none"}
    if plan.recompute_interval == 1:
        return {"mode": "full"}
    return {"mode": "selective", "selective_ac_option": str(plan.recompute_interval)}


def _value(v: Any) -> str:
    if isinstance(v, list):  # a TOML array of the scalars below
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a TOML basic string is a JSON string for the characters we write


def toml_text(sections: dict[str, dict[str, Any]], header: list[str]) -> str:
    """Sections of scalars as TOML (all a job config needs)."""
    out = [f"# {h}" for h in header]
    for name, body in sections.items():
        out += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in body.items()]
    return "\n".join(out) + "\n"


def torchtitan_toml(plan: Plan, workload: Workload, *, steps: int, marker: str) -> str:
    """The TOML file: [model] names torchtitan's model of the workload's shape, or PLACEHOLDER where it has none."""
    sections = titan_config(plan, workload, steps=steps)
    named = (sections["model"]["name"], sections["model"]["flavor"])
    known = named if named != PLACEHOLDER else None
    notes = [marker, f"torchtitan job config for plan {plan.to_string()} ({workload.model.name})",
             (f"[model] {known[0]} '{known[1]}' is torchtitan's {workload.model.name} shape; point its tokenizer at "
              "the model's, then run with" if known else
              f"{workload.model.name} is not a model torchtitan registers: set [model] name/flavor (and tokenizer) "
              "to your torchtitan model of this shape, then run with"),
             f"  NGPU={plan.devices_per_node} CONFIG_FILE=./{FILE} ./run_train.sh   (torchtitan's launcher)"]
    if workload.training.precision == "fp16":
        notes.append("fp16 asked for: torchtitan trains in bfloat16 or float32 only, bfloat16 written")
    if workload.training.precision == "fp8":
        notes += ["fp8: bfloat16 with the float8 converter (torchao Float8Linear, tensorwise dynamic scaling; needs "
                  "torchao and an FP8 GPU), compiled to fuse its casts",
                  "enable_fsdp_float8_all_gather = false: bf16 weights in FSDP's all-gather, as predicted; true "
                  "halves those bytes (faster than predicted where the all-gather is exposed)"]
        if plan.tp > 1:
            notes.append("with TP, torchtitan's float8 TP plan (Float8ColwiseParallel) all-gathers the Linears' inputs "
                         "in FP8: fewer bytes than the bf16 TP traffic predicted")
    if plan.zero_stage in (1, 2):
        notes.append(f"ZeRO-{plan.zero_stage} has no exact torchtitan twin: FSDP without resharding after forward")
    if plan.zero_stage and (plan.tp > 1 or plan.pp > 1):
        notes.append(f"ZeRO-{plan.zero_stage} with tp={plan.tp}, pp={plan.pp}: FSDP2 over dp={plan.dp} "
                     "beside TP/PP (torchtitan's 2D/3D parallelism)")
    if plan.zero_offload and not plan.offloads_params:
        notes.append("enable_cpu_offload is FSDP2's CPUOffloadPolicy, which moves the parameters and gradients to host "
                     "RAM too: slower than this plan, which offloads the optimizer only (ds_config.json runs it as "
                     "predicted)")
    notes += _cp_notes(plan)
    if plan.ep_overlap:
        notes.append("ep_overlap: torchtitan does not hide the expert all-to-alls behind compute; this file runs them "
                     "exposed, slower than predicted (megatron_args.txt runs the overlap)")
    if plan.zero_stage == 3 and plan.pp > 1:
        notes.append("fsdp_reshard_after_forward = \"default\" (no resharding under PP): torch's pipelining keeps each "
                     "stage's weights and gradients unsharded through the step anyway, so the stage syncs once per step "
                     "and holds ZeRO-1's memory, as predicted")
    return toml_text(sections, notes)


def _cp_notes(plan: Plan) -> list[str]:
    """What context_parallel_degree runs (module docstring): FSDP over dp_shard x cp, HSDP for a plan without ZeRO."""
    if plan.cp == 1:
        return []
    notes = [f"context parallel degree {plan.cp}: each sequence split over {plan.cp} ranks (torch's context_parallel "
             f"around SDPA), FSDP sharded over data_parallel_shard_degree x cp = "
             f"{(plan.dp if plan.zero_stage else 1) * plan.cp} ranks; launch.sh runs this file "
             f"(torchrun ... -m {MODULE} --job.config_file {FILE})"]
    if not plan.zero_stage:
        notes.append(f"no ZeRO in the plan, but torchtitan applies FSDP whenever cp > 1: HSDP, replicate {plan.dp} x "
                     f"shard {plan.cp}, weights not resharded after forward; optimizer states 1/{plan.cp} per rank, "
                     "less memory than predicted (megatron_args.txt runs the plan's DDP)")
    return notes
