"""Read a user's existing training config back into a plan string: "check my config" (`predict --from FILE`).

Formats: DeepSpeed JSON (ds_config.json), torchtitan job TOML, HuggingFace Accelerate YAML, Megatron-LM argument
line (a text file). Keys gpuadvisor models become plan fields; keys the frameworks know but the cost model does
not (optimizer, scheduler, logging...) are listed as ignored; anything else is a one-line error naming the key.
Torch-free. The world size comes from the file when it says it (Accelerate num_processes, DeepSpeed batch
arithmetic), else from the cluster (all its devices). Precision fp8 (FP8 Linears, bf16 elsewhere) reads from
Megatron's --fp8-format, torchtitan's float8/MX [model] converters and Accelerate's `mixed_precision: fp8`; scaling
finer than per tensor (MX, blockwise, rowwise) is predicted as per-tensor FP8 with a note. A DeepSpeed JSON has no
FP8 setting (its engine stays bf16): it reads as bf16; `--precision fp8` overrides it for a model with FP8 modules.
Context parallelism (torchtitan's context_parallel_degree, Megatron's --context-parallel-size, Accelerate's
parallelism_config_cp_size and megatron_lm_context_parallel_size) reads into Plan.cp; where the file leaves the
data-parallel degree to be inferred, it is world / (tp x pp x cp) (`values.context_parallel_degree` checks it).
"""
from __future__ import annotations

import difflib
import json
import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..errors import UserError
from ..schemas.plan import DEEPSPEED_PREFETCH_BUCKET
from . import megatron_shape
from .values import context_parallel_degree as _cp_degree
from .values import positive_int as _int

if TYPE_CHECKING:
    from ..schemas.workload import ModelSpec


@dataclass
class ReadBack:
    """What a config file says: plan fields, workload settings, and what was ignored or approximated."""

    fmt: str
    plan: dict[str, Any] = field(default_factory=dict)
    world_size: Optional[int] = None
    seq_len: Optional[int] = None
    precision: Optional[str] = None
    #: TrainingSettings.attention_kernel the file's stack runs (None: the stack's default is the advisor's, flash)
    attention_kernel: Optional[str] = None
    #: TrainingSettings.kernels the file's stack runs: "fused" for Megatron (its fused norms and vocab-parallel
    #: cross entropy) and a compiled torchtitan model and loss; None: PyTorch's eager modules, the advisor's default
    kernels: Optional[str] = None
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the model the file trains, where it states the shape (Megatron's --num-layers, --hidden-size,
    #: --num-attention-heads...: launch/megatron_shape.py), and what reading it assumed (`model_notes`)
    model: Optional["ModelSpec"] = None
    model_notes: list[str] = field(default_factory=list)
    #: the file holds neither the micro-batch nor the accumulation (an Accelerate YAML without them): mb and m
    #: are the script's, and the plan splits the assumed global batch with m = 1
    split_assumed: bool = False
    #: TrainingSettings.grad_reduce_in_bf16: Megatron's --grad-reduce-in-bf16 (a bf16 gradient buffer instead of its
    #: fp32 default with bf16)
    grad_reduce_in_bf16: bool = False
    #: TrainingSettings.fp8_param_gather: Megatron's --fp8-param-gather (FP8 primary weights, all-gathered in FP8)
    fp8_param_gather: bool = False
    #: a DeepSpeed JSON's data_types.grad_accum_dtype as written (lower case; None: not set)
    grad_accum_dtype: Optional[str] = None
    #: a DeepSpeed JSON another config names sets activation_checkpointing.cpu_checkpointing, which that config's
    #: launcher decides on (_deepspeed_file)
    json_cpu_checkpointing: bool = False

    def spec(self) -> str:
        """The plan string (as `predict --plan` takes it)."""
        return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in self.plan.items())


def _unknown(where: str, key: str, known: set[str]) -> UserError:
    near = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f"did you mean '{near[0]}'?" if near else f"known keys: {', '.join(sorted(known)[:12])}..."
    return UserError(f"{where}: unknown key '{key}'; {hint}")


# --- DeepSpeed (runtime/constants.py, runtime/zero/config.py, DeepSpeed 0.19.8) -----------------------------
_DS_MODELLED = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16", "fp16",
                "zero_optimization", "activation_checkpointing"}
_DS_IGNORED = {"optimizer", "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
               "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "prescale_gradients",
               "gradient_predivide_factor", "communication_data_type", "flops_profiler",
               "tensorboard", "wandb", "csv_monitor", "comms_logger", "dump_state", "amp", "data_types",
               "checkpoint", "memory_breakdown", "sparse_gradients", "seq_parallel_communication_data_type",
               "timers", "aio", "elasticity", "data_efficiency", "compression_training", "torch_autocast",
               "bfloat16", "graph_harvesting", "use_data_before_expert_parallelism", "fp8"}
_ZERO_MODELLED = {"stage", "reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                  "overlap_comm", "zero_hpz_partition_size", "offload_optimizer", "offload_param",
                  "stage3_max_live_parameters", "stage3_max_reuse_distance"}
_ZERO_IGNORED = {"contiguous_gradients", "stage3_param_persistence_threshold", "stage3_gather_16bit_weights_on_model_save", "sub_group_size",
                 "round_robin_gradients", "reduce_scatter", "allgather_partitions", "elastic_checkpoint",
                 "ignore_unused_parameters", "zero_quantized_weights", "zero_quantized_gradients", "mics_shard_size",
                 "load_from_fp32_weights", "memory_efficient_linear", "cpu_offload", "use_multi_rank_bucket_allreduce",
                 "stage3_gather_fp16_weights_on_model_save", "zeropp_loco_param", "log_trace_cache_warnings"}


#: DeepSpeed's names for its dtypes in data_types (runtime/config_utils.py DtypeEnum), fp32's apart
_DS_FP32 = {"fp32", "float32", "float", "torch.float32"}
_DS_DTYPES = _DS_FP32 | {"fp16", "float16", "half", "torch.float16", "bf16", "bfloat16", "torch.bfloat16"}


def read_deepspeed(data: dict, where: str = "ds_config.json", *, checkpointing: bool = True) -> ReadBack:
    """A DeepSpeed config dict -> ReadBack. `checkpointing`: whether the JSON's activation_checkpointing section
    decides the recompute (a script that checkpoints through deepspeed.checkpointing, configured from this JSON);
    False where another config names the JSON and its launcher decides (_deepspeed_file)."""
    rb = ReadBack("DeepSpeed JSON")
    for k in data:
        if k not in _DS_MODELLED | _DS_IGNORED:
            raise _unknown(where, k, _DS_MODELLED | _DS_IGNORED)
        if k in _DS_IGNORED:
            rb.ignored.append(k)
    z = data.get("zero_optimization", {}) or {}
    if not isinstance(z, dict):
        raise UserError(f"{where}: 'zero_optimization' must be a mapping")
    for k in z:
        if k not in _ZERO_MODELLED | _ZERO_IGNORED:
            raise _unknown(f"{where} zero_optimization", k, _ZERO_MODELLED | _ZERO_IGNORED)
    stage = z.get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise UserError(f"{where}: zero_optimization.stage must be 0..3, got {stage!r}")
    types = data.get("data_types")
    if isinstance(types, dict) and types.get("grad_accum_dtype") is not None:
        dtype = str(types["grad_accum_dtype"]).strip().lower()
        if dtype not in _DS_DTYPES:
            raise UserError(f"{where}: data_types.grad_accum_dtype {types['grad_accum_dtype']!r} is not one of "
                            f"DeepSpeed's dtypes; use fp32, bf16 or fp16")
        rb.grad_accum_dtype = dtype
    mb = _int(where, "train_micro_batch_size_per_gpu", data.get("train_micro_batch_size_per_gpu", 1))
    gas = _int(where, "gradient_accumulation_steps", data.get("gradient_accumulation_steps", 1))
    if "train_batch_size" in data:
        tbs = _int(where, "train_batch_size", data["train_batch_size"])
        if tbs % (mb * gas):
            raise UserError(f"{where}: train_batch_size {tbs} is not micro {mb} x accumulation {gas} x ranks")
        rb.world_size = tbs // (mb * gas)
        rb.plan["dp"] = rb.world_size
    rb.plan.update(zero=stage, mb=mb, m=gas)
    off = [k for k in ("offload_optimizer", "offload_param")
           if isinstance(z.get(k), dict) and z[k].get("device", "none") not in ("none", None)]
    if off:
        if not stage:
            raise UserError(f"{where}: {off[0]} needs zero_optimization.stage >= 1")
        rb.plan["offload"] = True
        if stage == 3 and off == ["offload_param"]:
            rb.notes.append("offload_param without offload_optimizer is modelled as ZeRO-Offload of both")
        elif stage == 3 and off == ["offload_optimizer"]:
            rb.plan["offload_param"] = False  # the parameter partition stays on the device
        # DeepSpeed pins its host buffers unless told not to (offload_config.py pin_memory: true by default in 0.19.8)
        for k in off:
            if not isinstance(z[k].get("pin_memory", True), bool):
                raise UserError(f"{where}: zero_optimization.{k}.pin_memory must be true or false, got "
                                f"{str(z[k]['pin_memory'])[:40]!r}")
        pageable = [f"{k}.pin_memory" for k in off if z[k].get("pin_memory") is False]
        if pageable:
            rb.notes.append(f"{' and '.join(pageable)} false: DeepSpeed copies to and from host RAM through pageable "
                            "memory, slower than the pinned rate the prediction assumes (probes/hostcopy.py measures "
                            "both on your GPU); set pin_memory: true (DeepSpeed's default) unless host RAM is short")
    if stage == 3:
        # DeepSpeed's caps on gathered parameters (Plan.zero_max_live_parameters / zero_max_reuse_distance)
        for key, name in (("stage3_max_live_parameters", "zero_max_live_parameters"),
                          ("stage3_max_reuse_distance", "zero_max_reuse_distance")):
            if key in z:
                value = z[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                        or value < (1 if key == "stage3_max_live_parameters" else 0) or value > 1e15:
                    raise UserError(f"{where}: zero_optimization.{key} must be a whole number of parameter elements "
                                    f"(DeepSpeed's default 1e9), got {str(value)[:40]!r}")
                rb.plan[name] = int(value)
    if "reduce_bucket_size" in z:
        rb.plan["zero_reduce_bucket_size"] = int(float(z["reduce_bucket_size"]))
    bucket = z.get("stage3_prefetch_bucket_size" if stage == 3 else "allgather_bucket_size")
    if bucket is not None:
        rb.plan["zero_allgather_bucket_size"] = int(float(bucket))
    elif stage == 3:  # DeepSpeed's own default, not the plan's (the hand-over writes its 500M explicitly)
        rb.plan["zero_allgather_bucket_size"] = DEEPSPEED_PREFETCH_BUCKET
    if stage == 0:
        # no ZeRO: the engine all-reduces the gradients in buffers after the backward (engine.py
        # allreduce_gradients -> buffered_allreduce_fallback), whatever overlap_comm says
        rb.plan["zero_overlap_comm"] = False
        rb.notes.append("ZeRO stage 0: DeepSpeed's engine all-reduces the gradients after the backward, not during "
                        "it (PyTorch DDP overlaps them): predicted so")
    elif "overlap_comm" in z:
        rb.plan["zero_overlap_comm"] = bool(z["overlap_comm"])
    elif stage in (1, 2):
        # DeepSpeed's default overlaps gradient reduction with backward at stage 3 only (runtime/zero/config.py
        # overlap_comm_valid: `overlap_comm = stage == 3`); stage 1/2 then reduce after the backward
        rb.plan["zero_overlap_comm"] = False
        rb.notes.append(f"no zero_optimization.overlap_comm: DeepSpeed's default at stage {stage} reduces gradients "
                        "after the backward, not during it (predicted so); set \"overlap_comm\": true to overlap")
    if int(z.get("zero_hpz_partition_size", 1) or 1) > 1:
        rb.plan["zero_hpz_partition_size"] = int(z["zero_hpz_partition_size"])
    _read_activation_checkpointing(rb, data.get("activation_checkpointing"), stage, where, checkpointing)
    for prec in ("bf16", "fp16"):
        if isinstance(data.get(prec), dict) and data[prec].get("enabled"):
            rb.precision = prec
    rb.precision = rb.precision or "fp32"
    return rb


def _read_activation_checkpointing(rb: ReadBack, ac: Any, stage: int, where: str, applies: bool = True) -> None:
    """DeepSpeed's activation_checkpointing section (runtime/activation_checkpointing/config.py): cpu_checkpointing
    keeps the checkpoints in host RAM (Plan.offload_activations), which says the model recomputes through
    deepspeed.checkpointing; the section without it configures that function alone (the recompute is the model
    code's, not the JSON's: noted). Not `applies`: checked, and left to the caller (_deepspeed_file)."""
    if ac is None:
        return
    if not isinstance(ac, dict):
        raise UserError(f"{where}: 'activation_checkpointing' must be a mapping")
    known = {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization", "number_checkpoints",
             "synchronize_checkpoint_boundary", "profile"}
    for k in ac:
        if k not in known:
            raise _unknown(f"{where} activation_checkpointing", k, known)
        if k != "number_checkpoints" and ac[k] is not None and not isinstance(ac[k], bool):
            raise UserError(f"{where}: activation_checkpointing.{k} must be true or false, got {str(ac[k])[:40]!r}")
    if not applies:
        rb.json_cpu_checkpointing = bool(ac.get("cpu_checkpointing"))
        return
    if not ac.get("cpu_checkpointing"):
        rb.notes.append("activation_checkpointing without cpu_checkpointing: whether the model recomputes is its "
                        "code's choice; predicted without recompute (add recompute with --plan to compare)")
        return
    if not stage:
        raise UserError(f"{where}: activation_checkpointing.cpu_checkpointing is predicted beside a ZeRO stage "
                        "(zero_optimization.stage >= 1); set a stage or drop cpu_checkpointing")
    rb.plan.update(recompute=True, offload_activations=True)
    rb.notes.append("activation_checkpointing.cpu_checkpointing: every layer recomputes through "
                    "deepspeed.checkpointing with its input in host RAM")
    if ac.get("partition_activations"):
        rb.notes.append("partition_activations with cpu_checkpointing: DeepSpeed copies each partition to host RAM "
                        "blocking (checkpointing.py partition_activations), slower than the side-stream copies "
                        "predicted")


def _deepspeed_file(path: Path, what: str) -> ReadBack:
    """The DeepSpeed JSON another config names (Accelerate's deepspeed_config_file, Megatron-DeepSpeed's
    --deepspeed_config) -> ReadBack; unreadable, not JSON or not an object is one line naming it as `what`. Its
    activation_checkpointing section is checked but does not set the recompute: Megatron-DeepSpeed configures
    DeepSpeed's checkpointing from its own arguments (--checkpoint-in-cpu), and Accelerate's models checkpoint with
    torch (ReadBack.json_cpu_checkpointing: the callers note it)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise UserError(f"{what}: cannot read it: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise UserError(f"{what}: a DeepSpeed config is a JSON object")
    return read_deepspeed(data, path.name, checkpointing=False)


# --- torchtitan (torchtitan/config/job_config.py, commit 000204a4) ------------------------------------------
_TT_SECTIONS = {"job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training", "parallelism",
                "checkpoint", "activation_checkpoint", "float8", "mx", "comm", "memory_estimation", "fault_tolerance",
                "experimental", "validation", "compile", "quantize"}
#: [model] converters that swap nn.Linear for FP8 training: "float8" / "mxfloat8" (Float8Converter, MXFloat8Converter
#: registered in torchtitan/components/quantization at commit 000204a4), and the later torchtitan spelling
#: "quantize.linear.float8" / "quantize.linear.mx" (its [quantize.linear.*] sections)
_TT_FP8_CONVERTERS = {"float8": "per-tensor", "quantize.linear.float8": "per-tensor", "mxfloat8": "MX",
                      "quantize.linear.mx": "MX"}
#: [parallelism] fsdp_reshard_after_forward choices (torchtitan job_config.py Parallelism)
_TT_RESHARD = ("default", "always", "never")
#: [parallelism] context_parallel_rotate_method choices (job_config.py Parallelism: how the key/value shards go round
#: the cp ranks in torch's context_parallel SDPA); both are priced alike, as the ring's exchange of every shard
_TT_ROTATE = ("allgather", "alltoall")
_TT_MODELLED = {
    "training": {"local_batch_size", "global_batch_size", "seq_len", "enable_cpu_offload", "mixed_precision_param",
                 "mixed_precision_reduce", "compile", "dataset", "dataset_path", "max_norm", "steps", "gc_freq",
                 "gc_debug", "seed", "deterministic"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel",
                    "pipeline_parallel_degree", "pipeline_parallel_split_points", "pipeline_parallel_layers_per_stage",
                    "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
                    "pipeline_parallel_microbatch_size", "context_parallel_degree", "context_parallel_rotate_method",
                    "expert_parallel_degree", "expert_tensor_parallel_degree", "enable_compiled_autograd"},
    "activation_checkpoint": {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns"},
    "compile": {"enable", "components", "backend"},
}
#: [compile] components torchtitan compiles (its Compile config: default both)
_TT_COMPILE_PARTS = ("model", "loss")
_TT_SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe", "interleaved1f1b": "interleaved"}


def _fsdp_runtime(plan: dict[str, Any]) -> None:
    """Mark a read-back FSDP plan's ZeRO-2/3 as FSDP's (Plan.zero_impl; FSDP with offload is priced as
    DeepSpeed's ZeRO-Offload, the one offload model)."""
    if int(plan.get("zero", 0)) >= 2 and not plan.get("offload"):
        plan["zero_impl"] = "fsdp"


def read_torchtitan(data: dict, world: int, where: str = "torchtitan TOML") -> ReadBack:
    """A torchtitan job config -> ReadBack (`world`: devices the job runs on, for data_parallel_shard_degree=-1)."""
    rb = ReadBack("torchtitan TOML")
    for sec, body in data.items():
        if sec not in _TT_SECTIONS:
            raise _unknown(where, f"[{sec}]", {f"[{s}]" for s in _TT_SECTIONS})
        if not isinstance(body, dict):
            raise UserError(f"{where}: '{sec}' is a {type(body).__name__}, not a section; write its keys under "
                            f"[{sec}]")
        for k in body:
            if sec in _TT_MODELLED and k not in _TT_MODELLED[sec]:
                raise _unknown(f"{where} [{sec}]", k, _TT_MODELLED[sec])
        if sec not in _TT_MODELLED:
            rb.ignored.append(f"[{sec}]")
    tr, par = data.get("training", {}), data.get("parallelism", {})
    tp = _int(where, "tensor_parallel_degree", par.get("tensor_parallel_degree", 1))
    pp = _int(where, "pipeline_parallel_degree", par.get("pipeline_parallel_degree", 1))
    ep = _int(where, "expert_parallel_degree", par.get("expert_parallel_degree", 1))
    if ep > 1 and par.get("expert_tensor_parallel_degree", 1) != 1:
        raise UserError(f"{where}: expert_tensor_parallel_degree other than 1 with expert parallelism is not "
                        "modelled; set it to 1")
    rep = _int(where, "data_parallel_replicate_degree", par.get("data_parallel_replicate_degree", 1))
    shard = par.get("data_parallel_shard_degree", -1)
    cp = _torchtitan_cp(par, rb, where, world=world if shard == -1 else None, others=rep * tp * pp)
    if shard == -1:  # torchtitan's ParallelDims: the rest of the world, world / (replicate x cp x tp x pp)
        shard = world // (rep * cp * tp * pp)
    shard = _int(where, "data_parallel_shard_degree", shard)
    dp = rep * shard
    zero = 0
    if shard > 1 or cp > 1:  # ParallelDims.fsdp_enabled: FSDP over dp_shard x cp ranks whenever cp > 1
        reshard = par.get("fsdp_reshard_after_forward", "default")
        if reshard not in _TT_RESHARD:
            raise UserError(f"{where}: fsdp_reshard_after_forward must be one of {', '.join(_TT_RESHARD)} "
                            f"(torchtitan's choices), got {reshard!r}")
        # torchtitan's "default" reshards after forward except under pipeline parallelism (parallelize.py), which is
        # how the cost model prices ZeRO-3 with PP (FSDP per stage, synced once per step)
        zero = 3 if reshard in ("always", "default") else 2
        if reshard == "always" and pp > 1:
            rb.notes.append("fsdp_reshard_after_forward \"always\" under pipeline parallelism re-gathers each stage's "
                            "weights for every micro-batch's backward (torch's pipelining leaves them unsharded after "
                            "it); predicted as \"default\", one all-gather per step: expect it slower")
        if zero == 2 and pp > 1:  # FSDP per stage without resharding: ZeRO-2 does not combine with PP in a Plan
            zero = 1
            rb.notes.append("FSDP without resharding under pipeline parallelism is predicted as ZeRO-1 (distributed "
                            "optimizer); its sharded gradients save a little more memory")
    rb.plan.update(dp=dp, tp=tp, pp=pp, zero=zero)
    if cp > 1:
        rb.plan["cp"] = cp
    if ep > 1:
        rb.plan["ep"] = ep
    if zero and rep > 1:
        if tp == 1 and pp == 1 and cp == 1:
            rb.plan.update(zero=3, zero_hpz_partition_size=shard)
        elif cp > 1:  # hpZ is pure data parallelism; FSDP over the cp ranks and replicas as ZeRO over dp x cp
            rb.notes.append(f"HSDP (replicate {rep} x shard {shard} x cp {cp}: torchtitan shards over the cp ranks "
                            f"whenever cp > 1) is predicted as ZeRO-{zero} over dp x cp = {dp * cp} ranks (the "
                            "replicate groups are not modelled: less memory predicted than it holds)")
        else:  # the ZeRO stage read from the resharding policy stays; the replicate groups are not modelled
            rb.notes.append(f"HSDP (replicate {rep} x shard {shard}) with TP/PP is predicted as FSDP over dp={dp} "
                            "(hpZ is modelled with pure data parallelism only)")
    local = _int(where, "local_batch_size", tr.get("local_batch_size", 8))
    glob = tr.get("global_batch_size", -1)
    if pp > 1:
        mb = _int(where, "pipeline_parallel_microbatch_size", par.get("pipeline_parallel_microbatch_size", 1))
        if local % mb:
            raise UserError(f"{where}: local_batch_size {local} is not a multiple of pipeline_parallel_microbatch_size")
        rb.plan.update(mb=mb, m=local // mb)
        sched = str(par.get("pipeline_parallel_schedule", "1F1B")).lower()
        if sched not in _TT_SCHEDULES:
            raise UserError(f"{where}: pipeline_parallel_schedule '{par.get('pipeline_parallel_schedule')}' is not "
                            "modelled; use 1F1B, GPipe or Interleaved1F1B")
        rb.plan["schedule"] = _TT_SCHEDULES[sched]
        if sched == "interleaved1f1b":
            rb.plan["pp_virtual_stages"] = 2
    else:
        m = 1 if glob in (-1, None) else _int(where, "global_batch_size", glob) // (local * dp)
        rb.plan.update(mb=local, m=max(1, m))
    if tr.get("enable_cpu_offload"):
        if zero and tp == 1 and pp == 1 and cp == 1:
            rb.plan["offload"] = True
        else:
            rb.notes.append("enable_cpu_offload is modelled for FSDP with pure data parallelism only: predicted "
                            "without it")
    ac = data.get("activation_checkpoint", {})
    mode = ac.get("mode", "selective")
    rb.plan["recompute"] = mode == "full"
    if mode == "selective":
        option = str(ac.get("selective_ac_option", "2"))
        if option == "op":
            # per-op selective checkpointing (Plan.recompute_ops): every other matmul's output and the core's kept
            rb.plan["recompute_ops"] = True
        elif option.isdecimal() and int(option) >= 1:
            # layer-level selective: every k-th transformer block checkpointed (recompute_interval k)
            rb.plan["recompute"] = True
            if int(option) > 1:
                rb.plan["recompute_interval"] = int(option)
        else:
            raise UserError(f"{where}: [activation_checkpoint] selective_ac_option must be 'op' or a whole number "
                            f">= 1 (every k-th block), got {option!r}")
    if tp > 1 and not par.get("disable_loss_parallel", False):
        rb.plan["sequence_parallel"] = True  # torchtitan's TP plan shards norms/dropout along the sequence
        if par.get("enable_async_tensor_parallel", False):
            rb.plan["tp_comm_overlap"] = True
    rb.seq_len = tr.get("seq_len", 2048)
    rb.precision = "bf16" if tr.get("mixed_precision_param", "bfloat16") == "bfloat16" else "fp32"
    _torchtitan_fp8(data, rb)
    _torchtitan_compile(data, rb, where)
    _torchtitan_model(data, rb, where)
    _fsdp_runtime(rb.plan)
    rb.world_size = dp * tp * pp * cp
    return rb


def _torchtitan_cp(par: dict, rb: ReadBack, where: str, *, world: Optional[int], others: int) -> int:
    """[parallelism] context_parallel_degree (torchtitan's context parallelism: each sequence split over that many
    ranks) and context_parallel_rotate_method, checked. `world`: the devices whose rest data_parallel_shard_degree
    -1 takes (None where the file gives the shard degree); `others`: replicate x tp x pp beside it."""
    method = par.get("context_parallel_rotate_method", _TT_ROTATE[0])
    if method not in _TT_ROTATE:
        raise UserError(f"{where}: context_parallel_rotate_method must be one of {', '.join(_TT_ROTATE)} "
                        f"(torchtitan's choices), got {str(method)[:80]!r}")
    if "context_parallel_degree" not in par:
        return 1
    cp = _cp_degree(where, "context_parallel_degree", par["context_parallel_degree"], world=world, others=others,
                    names="replicate x tensor x pipeline degrees")
    if cp > 1 and method != _TT_ROTATE[0]:
        rb.notes.append(f"context_parallel_rotate_method {method}: priced as allgather's exchange of the key/value "
                        "shards (the same bytes per layer)")
    return cp


def _torchtitan_model(data: dict, rb: ReadBack, where: str) -> None:
    """[model] name/flavor -> the bundled preset torchtitan's model of that flavor has the shape of
    (knowledge/models.yaml `torchtitan`); another flavor leaves the model to --model, with the line that says so."""
    from ..workload.catalog import presets, torchtitan_preset
    from ..workload.specs import resolve_model
    from .torchtitan import PLACEHOLDER

    model = data.get("model") or {}
    name, flavor = str(model.get("name") or "").strip(), str(model.get("flavor") or "").strip()
    preset = torchtitan_preset(name, flavor) if name and flavor else None
    if preset is not None:
        rb.model = resolve_model(preset.key)  # named as --model names it
        rb.ignored = [x for x in rb.ignored if x != "[model]"]
        rb.notes.append(f"[model] {name} '{flavor}': torchtitan's flavor of {preset.key}, predicted with its shape")
        return
    fix = "pass --model (a preset or the model's config.json)"
    if not (name and flavor):
        rb.model_notes.append(f"{where} has no [model] name and flavor, which would say the model; {fix}")
    elif (name, flavor) == PLACEHOLDER:
        rb.model_notes.append(f"{where}: [model] still holds the placeholder gpuadvisor writes for a model torchtitan "
                              f"does not register; {fix}")
    else:
        known = ", ".join(f"{p.torchtitan[0]} '{p.torchtitan[1]}'" for p in presets().values() if p.torchtitan)
        rb.model_notes.append(f"{where}: [model] {name[:80]} '{flavor[:80]}' is not a torchtitan model gpuadvisor has "
                              f"the shape of (it knows {known}); {fix}")


def _torchtitan_compile(data: dict, rb: ReadBack, where: str) -> None:
    """torch.compile of the model and the loss (`[compile] enable` with its `components`, default both): Inductor
    fuses the norms' and the loss's elementwise passes, so the run is priced with fused kernels
    (TrainingSettings.kernels). The model alone (components = ["model"]) keeps the eager loss's fp32 logits:
    "fused-layers". The older `[training] compile = true` compiled the model, and the loss only from 2025
    (torchtitan/components/loss.py build_cross_entropy_loss); before, train.py left it eager ("TODO: compiling loss
    function causes CUDA errors"), so it is priced fused-layers, the upper bound. The loss alone stays eager."""
    comp = data.get("compile") or {}
    enable = comp.get("enable", False)
    if not isinstance(enable, bool):
        raise UserError(f"{where}: [compile] enable must be true or false, got {enable!r}")
    parts = comp.get("components", list(_TT_COMPILE_PARTS))
    if isinstance(parts, str):  # the command line's comma-separated form
        parts = [p.strip() for p in parts.split(",") if p.strip()]
    if not isinstance(parts, list) or any(p not in _TT_COMPILE_PARTS for p in parts):
        raise UserError(f"{where}: [compile] components must be a list of {' and '.join(map(repr, _TT_COMPILE_PARTS))}"
                        f", got {parts!r}")
    old = (data.get("training") or {}).get("compile", False)
    if not isinstance(old, bool):
        raise UserError(f"{where}: [training] compile must be true or false, got {old!r}")
    if enable and set(parts) == set(_TT_COMPILE_PARTS):
        rb.kernels = "fused"
        rb.notes.append("torch.compile of the model and the loss: priced with fused norms and loss (--kernels fused)")
    elif (enable and set(parts) == {"model"}) or old:
        rb.kernels = "fused-layers"
        rb.notes.append("torch.compile of the model" + (" ([training] compile: the loss too only in torchtitan "
                                                         "releases from 2025)" if old and not enable else " alone")
                        + ": priced with fused layers beside the eager loss's fp32 logits (--kernels fused-layers; "
                        "--kernels fused if the loss is compiled too)")
    elif enable and parts:
        rb.notes.append("torch.compile of the loss alone: priced with eager kernels (the eager norms set the bound; "
                        "--kernels fused for the lower)")


def _torchtitan_fp8(data: dict, rb: ReadBack) -> None:
    """[model] converters with a float8/MX converter: precision fp8 (FP8 Linears, bf16 elsewhere)."""
    converters = (data.get("model") or {}).get("converters", [])
    if isinstance(converters, str):  # the command line's comma-separated form
        converters = [c.strip() for c in converters.split(",") if c.strip()]
    kinds = [_TT_FP8_CONVERTERS[c] for c in converters if c in _TT_FP8_CONVERTERS]
    if not kinds:
        return
    if rb.precision == "fp32":
        rb.notes.append("float8 converter with mixed_precision_param float32: predicted as FP8 Linears with bf16 "
                        "elsewhere")
    rb.precision = "fp8"
    rb.ignored = [x for x in rb.ignored if x not in ("[float8]", "[mx]", "[quantize]")]
    recipe = str((data.get("float8") or {}).get("recipe_name") or "tensorwise")
    if "MX" in kinds or recipe != "tensorwise":
        what = "MX block scaling" if "MX" in kinds else f"float8 recipe_name '{recipe}'"
        rb.notes.append(f"{what} is finer than per-tensor scaling: predicted as per-tensor FP8 (its extra scale "
                        "traffic and slower GEMMs are not priced)")


# --- Accelerate (accelerate/commands/config/config_args.py ClusterConfig, 1.15.0) --------------------------
_ACC_KEYS = {"compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug", "num_processes",
             "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend",
             "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config", "deepspeed_config",
             "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config", "downcast_bf16", "tpu_name",
             "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands", "tpu_vm", "tpu_env",
             "dynamo_config", "ipex_config", "mpirun_config"}


def read_accelerate(data: dict, base: Path, global_batch: int, where: str = "Accelerate YAML") -> ReadBack:
    """An Accelerate config -> ReadBack (micro-batch size is the script's: global batch / dp is assumed)."""
    for k in data:
        if k not in _ACC_KEYS:
            raise _unknown(where, k, _ACC_KEYS)
    kind = str(data.get("distributed_type", "NO")).upper()
    world = _int(where, "num_processes", data.get("num_processes", 1))
    ds = data.get("deepspeed_config") or {}
    mp = str(data.get("mixed_precision", "no"))
    if kind == "DEEPSPEED" and ds.get("deepspeed_config_file"):
        path = (base / ds["deepspeed_config_file"])
        rb = _deepspeed_file(path, f"{where}: deepspeed_config_file '{path}'")
        rb.fmt = "Accelerate YAML (DeepSpeed plugin)"
        if rb.json_cpu_checkpointing:
            rb.notes.append(f"{path.name}'s cpu_checkpointing acts where the model checkpoints through "
                            "deepspeed.checkpointing; a Hugging Face model under Accelerate checkpoints with torch "
                            "(unless inside DeepSpeed's CheckpointHiddenStatesOffload): predicted with the "
                            "checkpoints on the device")
        if mp == "fp8":  # the file's bf16 section is the engine's; accelerate swaps the Linears for FP8 ones
            rb.precision = "fp8"
    else:
        rb = ReadBack("Accelerate YAML")
        plan: dict[str, Any] = {"dp": world}
        m_in_file = False  # does the YAML hold the accumulation (else it is the script's, like the micro-batch)
        if kind == "DEEPSPEED":
            plan["zero"] = int(ds.get("zero_stage", 2))
            if ds.get("offload_optimizer_device", "none") not in ("none", None) and plan["zero"]:
                plan["offload"] = True
                if plan["zero"] == 3 and ds.get("offload_param_device", "none") in ("none", None):
                    plan["offload_param"] = False  # the optimizer alone in host RAM
            plan["m"] = _int(where, "gradient_accumulation_steps", ds.get("gradient_accumulation_steps", 1))
            m_in_file = "gradient_accumulation_steps" in ds
        elif kind == "FSDP":
            fs = data.get("fsdp_config") or {}
            pc = data.get("parallelism_config") or {}
            tp = int(pc.get("parallelism_config_tp_size", 1))
            if world % tp:
                raise UserError(f"{where}: num_processes {world} is not divisible by parallelism_config_tp_size "
                                f"{tp}")
            # accelerate >= 1.10 (ParallelismConfig cp_size): FSDP2 shards over dp_shard x cp, the rest is dp
            cp = _cp_degree(where, "parallelism_config_cp_size", pc.get("parallelism_config_cp_size", 1),
                            world=world, others=tp, names="parallelism_config_tp_size")
            strat = str(fs.get("fsdp_sharding_strategy", "")).upper()
            if int(fs.get("fsdp_version", 1)) == 2:
                plan["zero"] = 3 if fs.get("fsdp_reshard_after_forward", True) else 2
            else:
                plan["zero"] = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3,
                                "1": 3, "2": 2, "3": 0, "4": 3}.get(strat, 3)
            if tp > 1 or cp > 1:
                plan.update(dp=world // (tp * cp), tp=tp)  # FSDP2 + TP/CP: ZeRO-2/3 beside TP and CP
            if cp > 1:
                plan["cp"] = cp
            if fs.get("fsdp_offload_params") and plan["zero"]:
                if tp > 1 or cp > 1:
                    rb.notes.append("fsdp_offload_params with TP or CP is not modelled: predicted without offload")
                else:
                    plan["offload"] = True
            plan["recompute"] = bool(fs.get("fsdp_activation_checkpointing", False))
            _fsdp_runtime(plan)
        elif kind == "MEGATRON_LM":
            mc = data.get("megatron_lm_config") or {}
            tp, pp = int(mc.get("megatron_lm_tp_degree", 1)), int(mc.get("megatron_lm_pp_degree", 1))
            if "megatron_lm_context_parallel_size" in mc:  # Megatron's --context-parallel-size through accelerate
                cp = _cp_degree(where, "megatron_lm_context_parallel_size", mc["megatron_lm_context_parallel_size"],
                                world=world, others=tp * pp, names="tp x pp")
            else:
                cp = _accelerate_megatron_default_cp(where, world, tp * pp, rb)
            plan.update(dp=world // (tp * pp * cp), tp=tp, pp=pp, m=int(mc.get("megatron_lm_num_micro_batches", 1)))
            if cp > 1:
                plan["cp"] = cp
            m_in_file = "megatron_lm_num_micro_batches" in mc
            if mc.get("megatron_lm_use_distributed_optimizer"):
                plan["zero"] = 1  # the distributed optimizer: ZeRO-1 with any TP/PP
            plan["sequence_parallel"] = bool(mc.get("megatron_lm_sequence_parallelism")) and tp > 1
            plan["recompute"] = bool(mc.get("megatron_lm_recompute_activations"))
        elif kind not in ("NO", "MULTI_GPU", "MULTI_CPU"):
            raise UserError(f"{where}: distributed_type {kind} is not modelled; use NO, MULTI_GPU, DEEPSPEED, FSDP "
                            "or MEGATRON_LM")
        rb.split_assumed = not m_in_file
        m = int(plan.get("m", 1))
        per = plan["dp"] * m
        if global_batch % per:
            raise UserError(f"{where}: global batch {global_batch} does not split over dp {plan['dp']} x "
                            f"accumulation {m}; pass --global-batch")
        plan.update(mb=global_batch // per, m=m)
        rb.plan = plan
        rb.notes.append(f"Accelerate configs do not hold the micro-batch size: assumed --global-batch {global_batch} "
                        f"/ dp {plan['dp']} / accumulation {m} = {global_batch // per}")
        rb.precision = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}.get(mp, "fp32")
    if rb.precision == "fp8":
        _accelerate_fp8(data, rb, where)
    _accelerate_kernels(data, kind, rb)
    rb.world_size = world
    return rb


def _accelerate_kernels(data: dict, kind: str, rb: ReadBack) -> None:
    """The kernels of the script Accelerate launches (TrainingSettings.kernels): Megatron-LM's own layers are fused;
    a `dynamo_config` backend compiles the model (and an HF model's loss, computed in its forward): fused; otherwise
    the script's model runs eagerly, a Hugging Face transformers model by assumption: "hf", said."""
    backend = str((data.get("dynamo_config") or {}).get("dynamo_backend", "NO")).upper()
    if kind == "MEGATRON_LM":
        rb.kernels = "fused"
    elif backend not in ("NO", "NONE", ""):
        rb.kernels = "fused"
        rb.notes.append(f"dynamo_backend {backend}: torch.compile of the model (and an HF model's loss, computed in "
                        "its forward), priced with fused kernels (--kernels fused)")
    else:
        rb.kernels = "hf"
        rb.notes.append("Accelerate runs your script's model eagerly: priced as Hugging Face transformers' modeling "
                        "code (--kernels hf; --kernels eager for a model with fused norms, as the bundled trainers')")


#: accelerate's FP8 backends (commands/launch.py --fp8_backend; utils/dataclasses.py FP8BackendType)
_ACC_FP8_BACKENDS = {"AO", "TE", "MSAMP"}


def _accelerate_fp8(data: dict, rb: ReadBack, where: str) -> None:
    """`mixed_precision: fp8`: the fp8_config backend, checked; MS-AMP's 8-bit optimizer states are not priced."""
    fp8 = data.get("fp8_config") or {}
    if not isinstance(fp8, dict):
        raise UserError(f"{where}: 'fp8_config' must be a mapping (backend: AO, TE or MSAMP)")
    backend = str(fp8.get("backend", "")).upper()
    if backend and backend not in _ACC_FP8_BACKENDS:
        raise UserError(f"{where}: fp8_config backend '{fp8.get('backend')}' is not one of accelerate's FP8 backends; "
                        "use AO (torchao), TE (Transformer Engine) or MSAMP")
    if not backend:
        rb.notes.append("mixed_precision fp8 without an fp8_config backend: accelerate picks torchao, else Transformer "
                        "Engine, else MS-AMP, whichever is installed; predicted as FP8 Linears with bf16 elsewhere")
    elif backend == "MSAMP":
        rb.notes.append("MS-AMP's 8-bit gradients and optimizer states are not modelled: predicted as FP8 Linears "
                        "with bf16 elsewhere")


# --- Megatron-LM (megatron/training/arguments.py, commit 000c4ac2) -----------------------------------------
_MEG_VALUED = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
               "--global-batch-size", "--seq-length", "--num-layers-per-virtual-pipeline-stage",
               "--num-virtual-stages-per-pipeline-rank", "--recompute-granularity", "--recompute-method",
               "--recompute-num-layers", "--context-parallel-size", "--expert-model-parallel-size",
               "--expert-tensor-parallel-size", "--num-layers", "--fp8-format", "--fp8-recipe",
               "--transformer-impl", "--attention-backend"} | {
    # Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed megatron/arguments.py: _add_zero_args, _add_training_args;
    # deepspeed.add_config_arguments): the ZeRO stage, DeepSpeed's JSON, the old checkpointing chunk, Ulysses
    "--zero-stage", "--deepspeed_config", "--deepspeed-config", "--checkpoint-num-layers",
    "--ds-sequence-parallel-size"} | megatron_shape.VALUED
#: _add_transformer_engine_args: --fp8-format choices and --fp8-recipe choices (default delayed); per-tensor ones are
#: what the cost model prices, the others are read as per-tensor FP8 with a note
_MEG_FP8_FORMATS = ("e4m3", "hybrid")
_MEG_FP8_RECIPES = {"delayed": True, "tensorwise": True, "mxfp8": False, "blockwise": False, "custom": False}
#: --transformer-impl choices and --attention-backend's (the AttnBackend enum) in megatron/training/arguments.py
_MEG_IMPLS = ("transformer_engine", "local", "inference_optimized")
_MEG_ATTN_BACKENDS = ("auto", "flash", "fused", "unfused", "local")
#: Megatron-DeepSpeed's flash-attention switches (its default attention core is Megatron's unfused one)
_MDS_FLASH = ("--use-flash-attn", "--use-flash-attn-v1", "--use-flash-attn-v2", "--use-flash-attn-triton")
_MEG_SWITCHES = {"--sequence-parallel", "--tp-comm-overlap", "--use-distributed-optimizer", "--use-torch-fsdp2",
                 "--optimizer-cpu-offload", "--bf16", "--fp16", "--recompute-activations",
                 "--torch-fsdp2-no-reshard-after-forward", "--overlap-grad-reduce", "--overlap-param-gather",
                 # the gradient buffer's dtype with --bf16 (fp32 unless this)
                 "--grad-reduce-in-bf16",
                 # FP8 primary weights (Transformer Engine), all-gathered in FP8 by the sharded optimizer
                 "--fp8-param-gather",
                 # expert all-to-alls hidden by the combined 1F1B schedule (Plan.ep_overlap)
                 "--overlap-moe-expert-parallel-comm",
                 # Megatron-LM before 2022 and Megatron-DeepSpeed: full recompute of every layer (Megatron-LM's
                 # validate_args turned it into --recompute-granularity full --recompute-method uniform)
                 "--checkpoint-activations",
                 # Megatron-DeepSpeed: the DeepSpeed engine, its pipeline switch, CPU Adam, the flash kernels
                 "--deepspeed", "--no-pipeline-parallel", "--cpu-optimizer", "--partition-activations", *_MDS_FLASH,
                 # ... and DeepSpeed's checkpoint function with the checkpoints in host RAM (Plan.offload_activations)
                 "--deepspeed-activation-checkpointing", "--checkpoint-in-cpu",
                 *megatron_shape.SWITCHES}
#: Megatron-Core's modules that --recompute-granularity selective recomputes (nargs '*', default core_attn)
_MEG_RECOMPUTE_MODULES = "--recompute-modules"
#: --recompute-granularity and --recompute-method choices (megatron/training/arguments.py _add_training_args)
_MEG_RECOMPUTE_GRANULARITIES = ("full", "selective")
_MEG_RECOMPUTE_METHODS = ("uniform", "block")


def _meg_choice(where: str, flag: str, value: str, choices, hint: str = "") -> str:
    """`value` if it is one of Megatron's argparse `choices` for `flag`, else the one-line error argparse makes."""
    if value not in choices:
        raise UserError(f"{where}: {flag} must be one of {', '.join(choices)} (Megatron's choices), got {value!r}"
                        + (f"; {hint}" if hint else ""))
    return value


def read_megatron(argv: list[str], world: int, where: str = "Megatron arguments",
                  base: Optional[Path] = None) -> ReadBack:
    """A Megatron-LM or Megatron-DeepSpeed argument list -> ReadBack; other flags are kept as ignored, near-misses
    of ours refused. With --deepspeed, DeepSpeed's JSON (--deepspeed_config, relative to `base` or the working
    folder) gives the ZeRO stage and its settings as `predict --from ds_config.json` reads them."""
    rb = ReadBack("Megatron-LM arguments")
    vals: dict[str, str] = {}
    switches: set[str] = set()
    ours = _MEG_VALUED | _MEG_SWITCHES | {_MEG_RECOMPUTE_MODULES} | megatron_shape.LISTED
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("--"):
            i += 1
            continue
        flag, _, inline = a.partition("=")
        if flag in _MEG_VALUED:
            if not inline and i + 1 >= len(argv):
                raise UserError(f"{where}: '{flag}' needs a value")
            vals[flag] = inline or argv[i + 1]
            i += 1 if inline else 2
            continue
        if flag == _MEG_RECOMPUTE_MODULES or flag in megatron_shape.LISTED:  # nargs: the words up to the next flag
            words = [inline] if inline else []
            while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                words.append(argv[i + 1])
                i += 1
            vals[flag] = " ".join(words)
        elif flag in _MEG_SWITCHES:
            switches.add(flag)
        elif difflib.get_close_matches(flag, sorted(ours), n=1, cutoff=0.85):
            raise _unknown(where, flag, ours)
        else:
            rb.ignored.append(flag)
        i += 1

    def num(flag: str, default: int) -> int:
        return _int(where, flag, vals.get(flag, default))

    tp, pp = num("--tensor-model-parallel-size", 1), num("--pipeline-model-parallel-size", 1)
    ep = num("--expert-model-parallel-size", 1)
    if ep > 1 and num("--expert-tensor-parallel-size", 1) != 1:
        raise UserError(f"{where}: --expert-tensor-parallel-size other than 1 with expert parallelism is not "
                        "modelled; set it to 1")
    if world % (tp * pp):
        raise UserError(f"{where}: world size {world} is not divisible by tp {tp} x pp {pp}")
    # Megatron's validate_args: data-parallel size = world / (tp x pp x cp); the cp ranks reduce gradients with the
    # dp ranks (its data-parallel group with context parallelism), --global-batch-size counts dp only
    cp = _cp_degree(where, "--context-parallel-size", vals.get("--context-parallel-size", 1), world=world,
                    others=tp * pp, names="tp x pp")
    dp = world // (tp * pp * cp)
    mb = num("--micro-batch-size", 1)
    glob = num("--global-batch-size", mb * dp)
    if glob % (mb * dp):
        raise UserError(f"{where}: the global batch size {glob} is not a multiple of micro {mb} x dp {dp}")
    rb.plan.update(dp=dp, tp=tp, pp=pp, mb=mb, m=glob // (mb * dp))
    if cp > 1:
        rb.plan["cp"] = cp
        if "--cp-comm-type" in rb.ignored:
            rb.notes.append("--cp-comm-type: predicted as Megatron's default p2p ring over the cp ranks")
    if ep > 1:
        rb.plan["ep"] = ep
    if "--overlap-moe-expert-parallel-comm" in switches:
        if ep == 1:
            raise UserError(f"{where}: --overlap-moe-expert-parallel-comm needs --expert-model-parallel-size > 1 "
                            "(Megatron-Core refuses it without expert parallelism); drop it or set the size")
        rb.plan["ep_overlap"] = True
    layers = num("--num-layers", 1) if "--num-layers" in vals else 0  # 0: the file does not say
    if "--num-virtual-stages-per-pipeline-rank" in vals:
        rb.plan.update(pp_virtual_stages=num("--num-virtual-stages-per-pipeline-rank", 1), schedule="interleaved")
    elif "--num-layers-per-virtual-pipeline-stage" in vals:
        # Megatron's validate_args: virtual stages = (num_layers / pp) / layers per virtual stage (the hand-over
        # writes this flag: launch/megatron.py)
        per = num("--num-layers-per-virtual-pipeline-stage", 1)
        if layers and per > 0 and pp > 1:
            if (layers // pp) % per or layers % pp:
                raise UserError(f"{where}: --num-layers-per-virtual-pipeline-stage {per} does not divide a pipeline "
                                f"stage's layers ({layers} over pp {pp}; Megatron refuses it); pick a divisor")
            v = layers // pp // per
            if v > 1:
                rb.plan.update(pp_virtual_stages=v, schedule="interleaved")
            else:
                rb.notes.append("--num-layers-per-virtual-pipeline-stage equals the layers of a stage: one chunk per "
                                "rank, predicted as plain 1F1B")
        else:
            rb.notes.append("--num-layers-per-virtual-pipeline-stage: interleaving with 2 chunks per rank assumed "
                            "(give --num-layers and --pipeline-model-parallel-size > 1 to read the count)")
            rb.plan.update(pp_virtual_stages=2, schedule="interleaved")
    if "--sequence-parallel" in switches and tp > 1:
        rb.plan["sequence_parallel"] = True
        if "--tp-comm-overlap" in switches:
            rb.plan["tp_comm_overlap"] = True
    gran = vals.get("--recompute-granularity")
    if gran is not None:
        _meg_choice(where, "--recompute-granularity", gran, _MEG_RECOMPUTE_GRANULARITIES)
    if "--recompute-method" in vals:
        _meg_choice(where, "--recompute-method", vals["--recompute-method"], _MEG_RECOMPUTE_METHODS)
    if "--checkpoint-activations" in switches and gran is None:
        gran = "full"
        if num("--checkpoint-num-layers", 1) > 1:
            rb.notes.append(f"--checkpoint-num-layers {vals['--checkpoint-num-layers']}: chunks of layers recompute "
                            "together; predicted as every layer recomputing alone (the same compute, a little "
                            "more memory)")
    if gran == "full" or "--recompute-activations" in switches and gran != "selective":
        rb.plan["recompute"] = True
        if vals.get("--recompute-method") == "block":
            # the first N layers of each model chunk recompute: every k-th layer with k = layers per chunk / N
            chunks = pp * int(rb.plan.get("pp_virtual_stages", 1))
            per_chunk = max(1, layers // chunks) if layers else 0
            n = num("--recompute-num-layers", 1)
            if per_chunk and 0 < n < per_chunk:
                rb.plan["recompute_interval"] = max(1, round(per_chunk / n))
            elif not layers:
                rb.notes.append("--recompute-method block without --num-layers: the share of layers that recompute "
                                "is not known; predicted as every layer recomputing")
            elif n <= 0:
                rb.plan["recompute"] = False
    elif gran == "selective":
        modules = vals.get(_MEG_RECOMPUTE_MODULES, "core_attn").split()
        if "core_attn" in modules:
            rb.plan["recompute_attention"] = True  # the attention core's forward replays in the backward
        others = [w for w in modules if w != "core_attn"]
        if not modules:
            rb.notes.append("--recompute-modules with no module names: selective recompute replays nothing "
                            "(Megatron's default is core_attn); predicted without recompute")
        if others:
            rb.notes.append(f"--recompute-modules {' '.join(others)}: recomputing these is not a plan mode; "
                            "predicted with them stored")
    if "--use-torch-fsdp2" in switches:
        if "--use-distributed-optimizer" in switches or pp > 1:
            clash = "--use-distributed-optimizer" if pp == 1 else "--pipeline-model-parallel-size > 1"
            raise UserError(f"{where}: Megatron refuses --use-torch-fsdp2 with {clash} (validate_args); keep one")
        rb.plan["zero"] = 2 if "--torch-fsdp2-no-reshard-after-forward" in switches else 3
    elif "--use-distributed-optimizer" in switches:
        rb.plan["zero"] = 1  # Megatron's distributed optimizer, with any TP and PP
    if "--optimizer-cpu-offload" in switches and rb.plan.get("zero"):
        if tp == 1 and pp == 1 and cp == 1:
            rb.plan["offload"] = True
            if rb.plan["zero"] == 3:
                rb.plan["offload_param"] = False  # Megatron offloads the optimizer only; FSDP2 keeps the parameters
        else:
            rb.notes.append("--optimizer-cpu-offload with TP/PP/CP is not modelled: predicted without offload")
    rb.precision = "bf16" if "--bf16" in switches else "fp16" if "--fp16" in switches else "fp32"
    if "--grad-reduce-in-bf16" in switches:
        if rb.precision == "bf16" and "--deepspeed" not in switches:
            rb.grad_reduce_in_bf16 = True
        elif rb.precision == "bf16":
            rb.notes.append("--grad-reduce-in-bf16 acts on Megatron's own gradient buffer, not under --deepspeed: "
                            "DeepSpeed's data_types.grad_accum_dtype decides the gradients' dtype")
        else:
            rb.notes.append("--grad-reduce-in-bf16 acts with --bf16 on Megatron's own gradient buffer (not with "
                            "--fp16): predicted without it")
    if "--deepspeed" in switches:
        _megatron_deepspeed(vals, switches, rb, where, base)
    else:
        _megatron_grad_overlap(switches, rb)
        if "--no-pipeline-parallel" in switches or "--zero-stage" in vals:
            rb.notes.append("--zero-stage / --no-pipeline-parallel act only with --deepspeed (Megatron-DeepSpeed): "
                            "predicted without DeepSpeed")
        if switches & {"--checkpoint-in-cpu", "--deepspeed-activation-checkpointing"}:
            rb.notes.append("--checkpoint-in-cpu / --deepspeed-activation-checkpointing act only with --deepspeed "
                            "(Megatron-DeepSpeed): predicted with the checkpoints on the device")
    if "--fp8-format" in vals:
        _megatron_fp8(vals, rb, where)
    elif "--fp8-param-gather" in switches:
        raise UserError(f"{where}: --fp8-param-gather keeps FP8 weights, but no --fp8-format switches FP8 on; add "
                        "--fp8-format hybrid or drop --fp8-param-gather")
    elif "--fp8-recipe" in vals:
        rb.notes.append("--fp8-recipe without --fp8-format trains no FP8 in Megatron (the format switches it on): "
                        f"predicted as {rb.precision}")
    _megatron_attention(vals, switches, rb, where)
    if "--fp8-format" in vals:
        _megatron_fp8_params(switches, rb, where)
    rb.kernels = "fused"  # Megatron's fused norms (TE or apex) and its vocab-parallel cross entropy
    if rb.plan.get("recompute_attention") and "--deepspeed" in switches and rb.attention_kernel == "flash":
        # Megatron-DeepSpeed checkpoints the core only on its unfused path (ParallelAttention.forward)
        rb.plan.pop("recompute_attention")
        rb.notes.append("--recompute-granularity selective: Megatron-DeepSpeed's flash-attention path does not "
                        "checkpoint the core; predicted without recompute")
    if "--use-torch-fsdp2" in switches:
        _fsdp_runtime(rb.plan)
    if "--seq-length" in vals:
        rb.seq_len = num("--seq-length", 1)
    rb.model, rb.model_notes = megatron_shape.megatron_model(vals, switches, tp=tp,
                                                             deepspeed="--deepspeed" in switches, where=where)
    rb.world_size = world
    return rb


def _megatron_grad_overlap(switches: set[str], rb: ReadBack) -> None:
    """Megatron overlaps the data-parallel gradient sync with the backward only with --overlap-grad-reduce, and the
    distributed optimizer's parameter all-gather with the next forward only with --overlap-param-gather (both off
    by default: DistributedDataParallelConfig.overlap_grad_reduce, OptimizerConfig.overlap_param_gather); without
    the first, finalize_model_grads syncs after the backward. FSDP2 (ZeRO-2/3) overlaps by itself."""
    if int(rb.plan.get("dp", 1)) == 1 or int(rb.plan.get("zero", 0)) >= 2:
        return
    if "--overlap-grad-reduce" not in switches:
        rb.plan["zero_overlap_comm"] = False
        rb.notes.append("no --overlap-grad-reduce: Megatron syncs the gradients after the backward (its default), "
                        "predicted so; add --overlap-grad-reduce (with the distributed optimizer also "
                        "--overlap-param-gather) to hide it")
    elif int(rb.plan.get("zero", 0)) == 1 and "--overlap-param-gather" not in switches:
        rb.notes.append("--overlap-grad-reduce without --overlap-param-gather: Megatron all-gathers the updated "
                        "parameters after the step, exposed; predicted with both overlapped (one plan switch): a "
                        "little fast")


def _megatron_attention(vals: dict[str, str], switches: set[str], rb: ReadBack, where: str) -> None:
    """The attention kernel a Megatron run uses (megatron/training/arguments.py: --transformer-impl defaults to
    transformer_engine, --attention-backend to auto, which picks Transformer Engine's cuDNN fused attention where
    it supports the shape): cudnn, unless the local implementation or the flash backend is asked for. Values
    outside Megatron's choices are one-line errors, as Megatron's argparse makes them.

    Megatron's own layers (--transformer-impl local) and the unfused/local backends run an unfused core (attention
    kernel "eager"). Megatron-DeepSpeed (--deepspeed) builds Megatron's own layers by default, unfused unless one of
    its --use-flash-attn switches is given (then FlashAttention-2)."""
    deepspeed = "--deepspeed" in switches
    impl = vals.get("--transformer-impl", "local" if deepspeed else "transformer_engine")
    backend = vals.get("--attention-backend", "auto")
    _meg_choice(where, "--transformer-impl", impl, _MEG_IMPLS)
    _meg_choice(where, "--attention-backend", backend, _MEG_ATTN_BACKENDS)
    flash_switch = next((f for f in _MDS_FLASH if f in switches), None)
    if flash_switch:
        rb.attention_kernel = "flash"
        rb.notes.append(f"{flash_switch}: FlashAttention in Megatron's own layers (--attention-kernel flash)")
    elif backend in ("unfused", "local") or (impl == "local" and backend != "flash"):
        rb.attention_kernel = "eager"
        rb.notes.append(f"attention backend '{backend}' / --transformer-impl {impl}: an unfused attention core, "
                        "predicted so (--attention-kernel eager: the s x s scores stored and moved through memory)"
                        + ("; Megatron-DeepSpeed's --use-flash-attn-v2 switches FlashAttention on"
                           if deepspeed else ""))
    elif impl == "local" or backend == "flash":
        rb.attention_kernel = "flash"
    else:
        rb.attention_kernel = "cudnn"
        rb.notes.append("Transformer Engine layers (Megatron's default): predicted with cuDNN fused attention "
                        "(--attention-kernel cudnn)")


def _megatron_deepspeed(vals: dict[str, str], switches: set[str], rb: ReadBack, where: str,
                        base: Optional[Path]) -> None:
    """Megatron-DeepSpeed (--deepspeed): ZeRO from DeepSpeed's JSON when it can be read (the engine follows it),
    else from --zero-stage (its argparse default is 1); DeepSpeed runs every stage (Plan.zero_impl: its stage 1
    beside TP/PP all-reduces gradient buckets, not Megatron's distributed optimizer's reduce-scatter), and its
    pipeline engine refuses ZeRO-2/3 (ZeRO-1 only with pipeline parallelism, deepspeed/runtime/pipe/engine.py)."""
    rb.fmt = "Megatron-DeepSpeed arguments"
    pp = int(rb.plan.get("pp", 1))
    if "--no-pipeline-parallel" in switches and pp > 1:
        raise UserError(f"{where}: --no-pipeline-parallel needs --pipeline-model-parallel-size 1 "
                        "(Megatron-DeepSpeed's check); drop one")
    if int(rb.plan.get("cp", 1)) > 1:
        raise UserError(f"{where}: --context-parallel-size {rb.plan['cp']} with --deepspeed: DeepSpeed's engine runs "
                        "no ring attention (its sequence parallelism is Ulysses); drop --deepspeed (Megatron-Core runs "
                        "it) or set --context-parallel-size 1")
    if _int(where, "--ds-sequence-parallel-size", vals.get("--ds-sequence-parallel-size", 1)) != 1:
        raise UserError(f"{where}: DeepSpeed-Ulysses sequence parallel sizes > 1 are not modelled; set "
                        "--ds-sequence-parallel-size 1")
    if "--use-distributed-optimizer" in switches or "--use-torch-fsdp2" in switches:
        rb.notes.append("--use-distributed-optimizer / --use-torch-fsdp2 are Megatron's own sharding; with "
                        "--deepspeed the DeepSpeed engine shards (its ZeRO stage is what is predicted)")
        rb.plan.pop("zero", None)
        rb.plan.pop("zero_impl", None)
    stage_arg = vals.get("--zero-stage")
    if stage_arg not in (None, "0", "1", "2", "3"):
        raise UserError(f"{where}: --zero-stage must be 0..3, got {stage_arg!r}")
    stage = 1 if stage_arg is None else int(stage_arg)
    from_flag = f"ZeRO stage {stage} from --zero-stage{'' if stage_arg else ' (its default)'}"
    cfg = vals.get("--deepspeed_config", vals.get("--deepspeed-config"))
    if not cfg:
        rb.notes.append(f"no --deepspeed_config: {from_flag}")
        _deepspeed_stage(stage, pp, switches, rb, where)
        return
    path = Path(cfg)
    places = [path] if path.is_absolute() else [folder / path for folder in (base, Path.cwd()) if folder is not None]
    found = next((p for p in places if p.is_file()), None)
    if found is None:
        rb.notes.append(f"DeepSpeed config '{cfg}' not found next to the arguments: {from_flag}; put the JSON "
                        "beside the file to read its settings")
        _deepspeed_stage(stage, pp, switches, rb, where)
        return
    ds = _deepspeed_file(found, f"{where}: DeepSpeed config '{cfg}'")
    grad_accum = ds.grad_accum_dtype
    rb.notes.extend(f"{found.name}: {n}" for n in ds.notes)
    if ds.json_cpu_checkpointing:
        rb.notes.append(f"{found.name}'s cpu_checkpointing: Megatron-DeepSpeed configures DeepSpeed's checkpointing "
                        "from its arguments (checkpoint_in_cpu=--checkpoint-in-cpu), which override the JSON")
    js = int(ds.plan.get("zero", 0))
    if stage_arg is not None and js != stage:
        rb.notes.append(f"--zero-stage {stage} but {found.name} says stage {js}: DeepSpeed follows the JSON")
    rb.plan.pop("offload_param", None)  # DeepSpeed's JSON says what is offloaded, not --optimizer-cpu-offload
    for key in ("offload", "offload_param", "zero_reduce_bucket_size", "zero_allgather_bucket_size",
                "zero_overlap_comm", "zero_hpz_partition_size"):
        if key in ds.plan:
            rb.plan[key] = ds.plan[key]
    if ds.precision and ds.precision != rb.precision:
        rb.notes.append(f"{found.name} trains {ds.precision}, the arguments {rb.precision}: predicted as "
                        f"{ds.precision} (DeepSpeed's engine casts the model)")
        rb.precision = ds.precision
    _deepspeed_stage(js, pp, switches, rb, where, grad_accum)


def _deepspeed_stage(stage: int, pp: int, switches: set[str], rb: ReadBack, where: str,
                     grad_accum: Optional[str] = None) -> None:
    """The ZeRO stage DeepSpeed's engine runs, into the plan, and what Megatron-DeepSpeed leaves unmodelled.

    With bf16 and ZeRO, DeepSpeed accumulates and reduces gradients in the model's dtype unless its JSON says
    data_types.grad_accum_dtype fp32 (engine.get_data_types), and only then does stage 1 run its BF16_Optimizer
    with a whole-model fp32 gradient buffer (bf16_optimizer.py `fp32_groups_gradients_flat`): a bf16 Megatron row
    under --deepspeed reads grad_reduce_in_bf16 unless the JSON asks for fp32 (Megatron's own buffer is fp32)."""
    if stage >= 2 and pp > 1:
        raise UserError(f"{where}: DeepSpeed's pipeline engine runs ZeRO-1 only (ZeRO-{stage} with "
                        f"--pipeline-model-parallel-size {pp}); use ZeRO stage 1 or --no-pipeline-parallel")
    if stage:  # DeepSpeed's engine shards at every stage, stage 1 beside TP/PP too (not Megatron's optimizer)
        rb.plan["zero"] = stage
        rb.plan["zero_impl"] = "deepspeed"
    if int(rb.plan.get("dp", 1)) > 1:
        if pp > 1 and rb.plan.get("zero_overlap_comm", True):
            rb.notes.append("DeepSpeed's pipeline engine reduces the gradients after the pipeline flush (its "
                            "ReduceGrads step), not during the backward: predicted so")
        if pp > 1 or (stage < 3 and "zero_overlap_comm" not in rb.plan):
            rb.plan["zero_overlap_comm"] = False  # DeepSpeed's default overlaps at stage 3 only
    if rb.precision == "bf16" and stage >= 1:
        if grad_accum in _DS_FP32:
            rb.notes.append(f"data_types.grad_accum_dtype {grad_accum}: DeepSpeed keeps an fp32 gradient buffer for "
                            "the whole model (its BF16_Optimizer at stage 1) and all-reduces it in fp32: priced so")
        else:
            rb.grad_reduce_in_bf16 = True
            rb.notes.append(f"bf16 under DeepSpeed's ZeRO-{stage}: gradients accumulate and reduce in bf16 "
                            "(DeepSpeed's default grad_accum_dtype with ZeRO is the model's dtype), not in Megatron's "
                            "fp32 buffer; set data_types.grad_accum_dtype fp32 for that")
    if "--cpu-optimizer" in switches and not rb.plan.get("offload"):
        rb.notes.append("--cpu-optimizer without offload_optimizer in DeepSpeed's JSON: predicted with the "
                        "optimizer on the GPU")
    if "--partition-activations" in switches and int(rb.plan.get("tp", 1)) > 1:
        rb.notes.append("--partition-activations splits the checkpointed inputs over the TP ranks: not modelled "
                        "(predicted with whole inputs: a little more memory)")
    _checkpoint_in_cpu(switches, rb)


def _checkpoint_in_cpu(switches: set[str], rb: ReadBack) -> None:
    """Megatron-DeepSpeed's --checkpoint-in-cpu: with --deepspeed-activation-checkpointing it configures DeepSpeed's
    checkpoint function with checkpoint_in_cpu (megatron/initialize.py setup_deepspeed_random_and_activation_
    checkpointing), whose recomputing layers keep their inputs in host RAM: Plan.offload_activations where the Plan
    takes it (a ZeRO stage, pure data parallelism), else a note."""
    if "--checkpoint-in-cpu" not in switches:
        return
    if "--deepspeed-activation-checkpointing" not in switches:
        rb.notes.append("--checkpoint-in-cpu acts only with --deepspeed-activation-checkpointing (Megatron's own "
                        "checkpointing keeps the inputs on the device): predicted so")
        return
    if not rb.plan.get("recompute"):
        rb.notes.append("--checkpoint-in-cpu without recompute (--checkpoint-activations or --recompute-granularity "
                        "full): nothing is checkpointed, nothing moves to host RAM")
        return
    if not rb.plan.get("zero") or any(int(rb.plan.get(k, 1)) > 1 for k in ("tp", "pp")):
        rb.notes.append("--checkpoint-in-cpu beside TP/PP or without ZeRO is not modelled: predicted with the "
                        "checkpoints on the device (more memory than it needs)")
        return
    rb.plan["offload_activations"] = True
    rb.notes.append("--checkpoint-in-cpu: the recomputing layers' inputs in host RAM (DeepSpeed's cpu checkpointing)"
                    + ("; with --partition-activations DeepSpeed copies them blocking, slower than the side-stream "
                       "copies predicted" if "--partition-activations" in switches else ""))


def _megatron_fp8(vals: dict[str, str], rb: ReadBack, where: str) -> None:
    """--fp8-format (Transformer Engine FP8 Linears): precision fp8, the format and recipe checked as Megatron's
    argparse choices do."""
    fmt, recipe = vals["--fp8-format"], vals.get("--fp8-recipe", "delayed")
    _meg_choice(where, "--fp8-format", fmt, _MEG_FP8_FORMATS, "hybrid is E4M3 forward, E5M2 gradients")
    _meg_choice(where, "--fp8-recipe", recipe, tuple(_MEG_FP8_RECIPES))
    if rb.precision != "bf16":
        rb.notes.append(f"FP8 on top of {rb.precision} (no --bf16): predicted as FP8 Linears with bf16 elsewhere")
    if not _MEG_FP8_RECIPES[recipe]:
        rb.notes.append(f"--fp8-recipe {recipe} is not the per-tensor scaling the cost model prices: predicted as "
                        "per-tensor FP8 (its extra scale traffic and slower GEMMs are not priced)")
    rb.precision = "fp8"


#: Accelerate's Megatron-LM plugin runs context parallelism 2 unless told otherwise: MegatronLMPlugin.__post_init__
#: reads `context_parallel_size = int(os.environ.get(prefix + "CONTEXT_PARALLEL_SIZE", 2))` and passes it to Megatron
#: (accelerate 1.15 utils/dataclasses.py), and `accelerate launch` sets that variable only from the YAML's
#: megatron_lm_context_parallel_size (utils/launch.py)
ACCELERATE_MEGATRON_DEFAULT_CP = 2


def _accelerate_megatron_default_cp(where: str, world: int, others: int, rb: ReadBack) -> int:
    """The context-parallel degree of an Accelerate MEGATRON_LM YAML without megatron_lm_context_parallel_size: the
    plugin's default (ACCELERATE_MEGATRON_DEFAULT_CP), said in a note; a world it does not divide is a one-line error
    (Megatron would refuse it at start-up)."""
    cp = ACCELERATE_MEGATRON_DEFAULT_CP
    if world % (others * cp):
        raise UserError(f"{where}: no megatron_lm_context_parallel_size, so Accelerate's Megatron-LM plugin runs its "
                        f"default context parallelism {cp}, which beside tp x pp = {others} does not divide the world "
                        f"size {world}; set megatron_lm_context_parallel_size: 1 under megatron_lm_config")
    rb.notes.append(f"no megatron_lm_context_parallel_size: Accelerate's Megatron-LM plugin defaults it to {cp} "
                    f"(context parallelism {cp}), predicted so; set megatron_lm_context_parallel_size: 1 to run "
                    "without")
    return cp


def _megatron_fp8_params(switches: set[str], rb: ReadBack, where: str) -> None:
    """--fp8-param-gather: the Linears' weights in FP8 only, all-gathered in FP8 (TrainingSettings.fp8_param_gather).
    Megatron asserts a sharded optimizer for it (--use-distributed-optimizer, FSDP2 or Megatron-FSDP); the cost model
    prices it with the distributed optimizer (ZeRO-1) and Transformer Engine's layers."""
    if "--fp8-param-gather" not in switches:
        return
    if "--deepspeed" in switches:
        rb.notes.append("--fp8-param-gather acts on Megatron's distributed optimizer, not under --deepspeed: "
                        "predicted with bf16 weights")
        return
    if rb.plan.get("zero") is None:
        raise UserError(f"{where}: --fp8-param-gather needs --use-distributed-optimizer (Megatron asserts it); add "
                        "it or drop --fp8-param-gather")
    if int(rb.plan["zero"]) != 1:
        rb.notes.append("--fp8-param-gather beside FSDP2 is not modelled: predicted with bf16 weights (more memory "
                        "than the run holds)")
    elif rb.attention_kernel != "cudnn":
        rb.notes.append("--fp8-param-gather needs Transformer Engine's layers: predicted with bf16 weights")
    else:
        rb.fp8_param_gather = True


def read_config(path: Path, *, world: int, global_batch: int) -> ReadBack:
    """Detect the format by extension (.json, .toml, .yaml/.yml, anything else = Megatron arguments) and read it."""
    fix = ("give a ds_config.json, torchtitan .toml, Accelerate .yaml or a Megatron argument file (as --emit writes "
           "them)")
    if path.is_dir():
        raise UserError(f"--from '{path}' is a folder; {fix}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"--from file '{path}' not found; {fix}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read --from file '{path}': {exc}; {fix}") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            data = json.loads(text)
            if not isinstance(data, dict):
                raise UserError(f"{path.name}: a DeepSpeed config is a JSON object")
            return read_deepspeed(data, path.name)
        if suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # the same parser, from PyPI (a dependency on Python 3.10)
                import tomli as tomllib

            return read_torchtitan(tomllib.loads(text), world, path.name)
        if suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
            if not isinstance(data, dict):
                raise UserError(f"{path.name}: an Accelerate config is a YAML mapping")
            return read_accelerate(data, path.parent, global_batch, path.name)
    except UserError:
        raise
    except Exception as exc:  # json/toml/yaml syntax errors: one line naming the file
        raise UserError(f"{path.name}: not valid {suffix[1:].upper()}: {' '.join(str(exc).split())}") from None
    body = " ".join(line.split("#", 1)[0] for line in text.replace("\\\n", " ").splitlines())
    try:
        return read_megatron(shlex.split(body), world, path.name, base=path.parent)
    except ValueError as exc:
        if isinstance(exc, UserError):
            raise
        raise UserError(f"{path.name}: cannot split the argument line: {exc}") from None
