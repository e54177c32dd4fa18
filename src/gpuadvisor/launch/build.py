"""Build the LaunchConfig of a plan: per-node torchrun commands, trainer arguments, DeepSpeed JSON, env, notes."""
from __future__ import annotations

import hashlib
import math
import shlex
from typing import Optional

from ..errors import UserError
from ..schemas.estimate import Estimate
from ..schemas.hardware import Cluster, Device, Node
from ..schemas.job import Predicted, TrainerJob
from ..schemas.launch import LaunchConfig, NodeLaunch
from ..schemas.plan import Plan, ZeroImpl, check_plan_for, fsdp_trainer_runs
from ..schemas.workload import FLASH_KERNELS, Workload
from .deepspeed import deepspeed_command, deepspeed_config, hostfile_text, hybrid_reason, runs_on_deepspeed
from .environment import common_env, efa_fabric, node_env, numa_binding, rdma_fabric
from .placement import NODE_LINES_MAX, choose_nodes, placement_notes

TRAINER_MODULE = "gpuadvisor.trainers"
JOB_FILE = "job.json"
DS_FILE = "ds_config.json"
HOSTFILE = "hostfile"
DEFAULT_STEPS = 20
DEFAULT_WARMUP = 3


def node_address(node: Node) -> str:
    """How other nodes reach `node`: access.address, else access.host, else its name."""
    return node.access.address or node.access.host or node.name


def rdzv_id(plan: Plan, workload: Workload) -> str:
    """A stable rendezvous id for this plan and model (same job -> same id on every node)."""
    digest = hashlib.sha1(f"{plan.to_string()}|{workload.model.name}".encode()).hexdigest()[:10]
    return f"gpuadvisor-{digest}"


def default_steps(workload: Workload, plan: Plan) -> int:
    """Steps for the token budget when there is one (plan batch × seq len tokens per step), else 20."""
    budget = workload.training.token_budget
    if not budget:
        return DEFAULT_STEPS
    per_step = plan.global_batch() * (workload.training.seq_len if workload.model.kind == "transformer" else 1)
    return max(1, math.ceil(budget / per_step))


def trainer_model_for(workload: Workload) -> Optional[str]:
    """Which bundled trainer model runs this workload: 'gpt', 'resnet18', or None (bring your own script)."""
    if workload.model.kind == "transformer":
        return "gpt"
    return "resnet18" if workload.model.name.lower().startswith("resnet18") else None


def plan_workload(plan: Plan, workload: Workload) -> Workload:
    """The workload with the plan's global batch (it differs when the advisor was allowed to change it)."""
    if plan.global_batch() == workload.training.global_batch:
        return workload
    training = workload.training.model_copy(update={"global_batch": plan.global_batch()})
    return workload.model_copy(update={"training": training})


def model_flops_per_token(workload: Workload) -> Optional[float]:
    """Training FLOPs per token without recompute (6N + 12·L·h·s, PaLM appendix B; 4N for a frozen base with
    adapters), per sample for generic models."""
    m = workload.model
    if m.kind != "transformer":
        return m.flops_per_sample
    from ..costmodel.analytical.compute import flops_per_token

    return flops_per_token(m, workload.training.seq_len, ft=workload.finetune)


def peak_flops(device: Device, precision: str) -> float:
    """Dense peak FLOP/s of a device at the training precision (bf16/fp16 tensor cores, else fp32). An fp8 run's
    MFU is against the bf16 peak, as torchtitan's (`get_peak_flops`) and most published FP8 tables state it."""
    tflops = device.peak_tflops_fp32 if precision == "fp32" else device.peak_tflops_bf16
    return tflops * 1e12


def predicted_figures(estimate: Estimate, workload: Workload, peak_per_device: Optional[float]) -> Predicted:
    """The prediction a run prints beside its measurement (MFU when the device peak is known)."""
    fpt = model_flops_per_token(workload)
    mfu = None
    if fpt and peak_per_device:
        mfu = estimate.tokens_per_s * fpt / (peak_per_device * estimate.plan.world_size)
    return Predicted(tokens_per_s=estimate.tokens_per_s, step_time_s=estimate.step_time_s,
                     peak_memory_bytes=int(estimate.memory.total),
                     network_bytes_per_step=estimate.network_bytes_per_step,
                     mfu=mfu)


def make_job(plan: Plan, workload: Workload, *, steps: Optional[int] = None, warmup: int = DEFAULT_WARMUP,
             lr: float = 1e-4, estimate: Optional[Estimate] = None, device: Optional[Device] = None) -> TrainerJob:
    """The TrainerJob (job.json) for a plan: the plan's batch, the bundled model, `steps` timed steps.

    With `estimate` (and the `device` kind the plan runs on, for MFU) the job carries the prediction, which the
    trainer prints beside the measured figures at the end of the run. A plan whose ZeRO runs on FSDP
    (Plan.zero_runtime, `fsdp_zero3`) gets zero_impl "fsdp".
    """
    model = trainer_model_for(workload)
    if model is None:
        raise UserError(f"the bundled trainers build GPT-style models and resnet18, not '{workload.model.name}'; "
                        "use the launch commands and env with your own training script")
    wl = plan_workload(plan, workload)
    lr = lr * plan.global_batch() / workload.training.global_batch
    peak = peak_flops(device, wl.training.precision) if device is not None else None
    return TrainerJob(plan=plan, workload=wl, trainer_model=model, steps=steps or default_steps(wl, plan),
                      warmup=warmup, lr=lr, model_flops_per_token=model_flops_per_token(wl) or None,
                      peak_flops_per_device=peak or None, zero_impl=job_zero_impl(plan, wl),
                      predicted=predicted_figures(estimate, wl, peak) if estimate is not None else None)


def rdzv_host_args(node: Node, node_rank: int) -> list[str]:
    """`--rdzv-conf is_host=...` and `--local-addr` for a multi-node c10d rendezvous.

    Node 0 hosts the c10d store. torchrun's own guess compares the endpoint with the hostname's
    addresses and misses secondary interfaces and network namespaces: every node then acts as a client
    and the rendezvous times out (seen on the emulated cluster of tests/multinode).
    """
    argv = ["--rdzv-conf", f"is_host={'true' if node_rank == 0 else 'false'}"]
    if node.access.address:
        argv += ["--local-addr", node.access.address]
    return argv


def _torchrun(plan: Plan, node: Node, rank: int, n_nodes: int, endpoint: str, rid: str, numa: bool,
              trainer_args: list[str], module: str = TRAINER_MODULE) -> list[str]:
    """The torchrun argument list of one node (`module`: what torchrun starts, the bundled trainer by default)."""
    argv = ["torchrun", "--nnodes", str(n_nodes), "--nproc-per-node", str(plan.devices_per_node)]
    if n_nodes == 1:
        argv.insert(1, "--standalone")
    else:
        argv += ["--node-rank", str(rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rid,
                 *rdzv_host_args(node, rank)]
    if numa:
        argv += ["--numa-binding", "node"]
    return argv + ["--max-restarts", "0", "-m", module, *trainer_args]


def _lr_note(plan: Plan, workload: Workload) -> Optional[str]:
    """Linear learning-rate scaling when the plan changed the user's global batch."""
    want, got = workload.training.global_batch, plan.global_batch()
    if want == got:
        return None
    return (f"learning rate: the plan's global batch is {got}, not your {want}; scale the LR by {got}/{want} = "
            f"{got / want:.3g} with a warm-up (linear scaling rule, Goyal et al. 2017, 'Accurate, Large Minibatch "
            "SGD'); for Adam a sqrt scaling is the gentler alternative")


def _estimate_note(estimate: Estimate) -> str:
    """One line of prediction for the notes."""
    gib = estimate.memory.total / 2**30
    return (f"prediction: {estimate.step_time_s:.3f} s/step, {estimate.tokens_per_s:,.0f} tokens/s, peak "
            f"{gib:.1f} GiB per device of {estimate.memory_capacity_bytes / 2**30:.1f} GiB")


def _measured_note(measured_tokens_per_s: float, estimate: Optional[Estimate]) -> str:
    """One line of what a trial of this plan measured, against the prediction when there is one."""
    line = f"measured in a trial run: {measured_tokens_per_s:,.0f} tokens/s"
    if estimate is not None and estimate.tokens_per_s > 0:
        line += f" ({measured_tokens_per_s / estimate.tokens_per_s:.0%} of the prediction)"
    return line


def _trainer_refusal(plan: Plan, workload: Workload, *, gpu: bool) -> Optional[str]:
    """A note when the bundled trainer refuses this plan (launch.sh then exits non-zero at start)."""
    from ..trainers.support import unsupported_reason  # torch-free

    if trainer_model_for(workload) is None:
        return None
    why = unsupported_reason(plan, plan_workload(plan, workload), cuda=gpu)
    if why is None:
        return None
    return (f"the bundled trainer refuses this plan: {why}; launch.sh and slurm.sbatch still give the launcher, "
            "environment and rendezvous for your own training (the framework files beside them)")


def fp8_notes(plan: Plan, workload: Workload, *, gpu: bool, deepspeed_json: bool) -> list[str]:
    """What of the hand-over trains FP8 Linears (the prediction of an fp8 workload assumes them), what does not.

    FP8: torchtitan.toml (float8 converter) and megatron_args.txt (Transformer Engine) for the bundled GPT
    shapes, accelerate.yaml (torchao backend) where Accelerate runs the plan; the same conditions as emit.py's
    framework_files. Not FP8: launch.sh / slurm.sbatch / job.json (the bundled trainers have no FP8 kernels:
    trainers/parallel.py trains bf16 autocast and reports it; a context-parallel plan's launch.sh runs
    torchtitan.toml instead) and ds_config.json (`deepspeed.FP8_NOTE`).
    LoRA/QLoRA and non-transformer workloads never get here: Workload refuses them with fp8."""
    if workload.training.precision != "fp8":
        return []
    from . import accelerate as _accelerate
    from . import megatron as _megatron
    from .torchtitan import FILE as TITAN

    fp8 = []
    if trainer_model_for(workload) == "gpt":
        fp8.append(f"{TITAN} (torchao float8 converter)")
        if _megatron.unsupported(plan, workload) is None:
            fp8.append(f"{_megatron.FILE} (Transformer Engine)")
    if _accelerate.plan_unsupported(plan) is None:
        fp8.append(f"{_accelerate.FILE} (torchao via accelerate)")
    where = ("FP8 Linears run in " + ", ".join(fp8) if fp8
             else "none of the framework files written for this plan trains FP8 Linears")
    if plan.cp > 1:  # launch.sh runs torchtitan.toml (`cp_notes`), the bundled trainer is not started
        return [f"fp8: {where}; launch.sh and slurm.sbatch run {TITAN}"]
    if trainer_model_for(workload) is None:
        bundled = ("launch.sh and slurm.sbatch start your own script: FP8 only if it builds Transformer Engine or "
                   "torchao float8 Linears")
    else:
        used = "bf16 autocast" if gpu else "fp32 on CPU ranks"
        bundled = (f"launch.sh, slurm.sbatch and job.json run the bundled trainer, which has no FP8 kernels and "
                   f"trains {used}")
    notes = [f"fp8: {where}; {bundled}: slower than the prediction, which assumes FP8 Linears"]
    if deepspeed_json:
        from .deepspeed import FP8_NOTE

        notes.append(FP8_NOTE)
    return notes


def launch_steps(launch: LaunchConfig) -> int:
    """The timed steps launch.sh runs (its trainer's --steps, or torchtitan's --training.steps for a context-parallel
    plan): the one step count job.json and README.txt state."""
    args = launch.trainer_args
    flag = "--training.steps" if "--training.steps" in args else "--steps"
    return int(args[args.index(flag) + 1])


def titan_args(steps: int, out_dir: str) -> list[str]:
    """What launch.sh gives torchtitan's trainer for a context-parallel plan (torchtitan's run_train.sh: `-m
    torchtitan.train --job.config_file FILE` then JobConfig overrides): the emitted torchtitan.toml, the timed steps
    ([training] steps) and the output folder ([job] dump_folder)."""
    from .torchtitan import FILE as TITAN

    return ["--job.config_file", TITAN, "--training.steps", str(steps), "--job.dump_folder", out_dir]


def check_cp_handover(plan: Plan, workload: Workload) -> None:
    """Refuse a context-parallel plan no written file runs: LoRA/QLoRA (torchtitan and Megatron-LM train every
    weight, train_lora.py is data parallel; the bundled trainers and DeepSpeed have no ring attention)."""
    if plan.cp > 1 and workload.finetune.adapters:
        raise UserError(f"cp={plan.cp} with {workload.finetune.method.upper()} adapters: no hand-over runs context "
                        "parallelism for adapter training (torchtitan and Megatron-LM train every weight, "
                        "train_lora.py runs data parallel); use cp=1")


def cp_notes(plan: Plan, workload: Workload) -> list[str]:
    """Who runs a context-parallel plan (Plan.cp > 1): launch.sh and slurm.sbatch start torchtitan on torchtitan.toml
    (context_parallel_degree), megatron_args.txt says --context-parallel-size where Megatron takes the plan; the
    bundled trainers and DeepSpeed do not run ring attention, so no gpuadvisor.trainers line and no ds_config.json
    are written."""
    if plan.cp == 1:
        return []
    from . import megatron as _megatron
    from .torchtitan import FILE as TITAN, MODULE

    megatron = (f"; {_megatron.FILE} gives Megatron-LM --context-parallel-size {plan.cp}"
                if _megatron.unsupported(plan, workload) is None else "")
    return [f"context parallel cp={plan.cp}: launch.sh and slurm.sbatch run torchtitan (torchrun ... -m {MODULE} "
            f"--job.config_file {TITAN}, context_parallel_degree {plan.cp}; install torchtitan and set [model] there "
            f"if it names no model){megatron}. The bundled trainer (job.json records the plan) and DeepSpeed do not "
            "run context parallelism"]


def attention_notes(plan: Plan, workload: Workload, device) -> list[str]:
    """Which written files run the attention kernel the prediction assumes (`_kernel_notes`), and which run the
    plan's selective recompute of the attention core (Plan.recompute_attention)."""
    if workload.model.kind != "transformer" or device.kind != "gpu":
        return []
    notes = _kernel_notes(plan, workload, device)
    if not plan.recompute_attention:
        return notes
    from . import megatron as _megatron

    core = (f"the plan recomputes the attention core (Megatron's selective recompute: {_megatron.FILE} says "
            "--recompute-granularity selective, launch.sh's trainer checkpoints its SDPA core; torchtitan.toml and "
            "the Accelerate files have no such mode and run without it)")
    if workload.core_kernel == "eager":  # the unfused core's note goes on with it
        return [notes[0] + "; " + core]
    # with fused attention the core's replay only costs time (priced); say which files run it
    return ["attention: " + core] + notes


def recompute_notes(plan: Plan) -> list[str]:
    """Which written files run op-level selective checkpointing (Plan.recompute_ops): launch.sh's trainer and
    torchtitan.toml (selective_ac_option "op"); Megatron, DeepSpeed and Accelerate have no such mode."""
    if not plan.recompute_ops:
        return []
    from . import megatron as _megatron

    return ["recompute: the plan checkpoints op by op (torchtitan's selective_ac_option 'op': every other matmul's "
            "output and the attention core's kept, the rest replayed); launch.sh's trainer and torchtitan.toml run "
            f"it; {_megatron.FILE}, the DeepSpeed and the Accelerate files have no such mode and run without "
            "recompute, which needs more memory than predicted: predict them with recompute=full or none"]


def activation_offload_notes(plan: Plan, workload: Workload) -> list[str]:
    """Which written files keep activation checkpoints in host RAM (Plan.offload_activations): ds_config.json's
    cpu_checkpointing acts only where the model checkpoints through deepspeed.checkpointing; for adapter training
    train_lora.py wraps its steps in DeepSpeed's CheckpointHiddenStatesOffload."""
    if not plan.offload_activations:
        return []
    from . import megatron as _megatron
    from . import peft as _peft
    from . import torchtitan as _torchtitan

    if workload.finetune.adapters:
        return [f"activation checkpoints in host RAM: {_peft.SCRIPT} runs each training step inside DeepSpeed's "
                "CheckpointHiddenStatesOffload (transformers' checkpointed layers' inputs, side-stream copies); "
                "launch.sh's trainer refuses adapters with it"]
    return ["activation checkpoints in host RAM: ds_config.json's activation_checkpointing.cpu_checkpointing acts "
            "where the model checkpoints through deepspeed.checkpointing.checkpoint (launch.sh's trainer; "
            "Megatron-DeepSpeed with --deepspeed-activation-checkpointing --checkpoint-in-cpu; Hugging Face models "
            "inside DeepSpeed's CheckpointHiddenStatesOffload). Plain torch checkpointing (Accelerate), "
            f"{_torchtitan.FILE} and {_megatron.FILE} keep the checkpoints on the device: more memory than predicted. "
            "DeepSpeed before its side-stream copies (PR #8282, in 0.19.8) copies them blocking: slower than "
            "predicted"]


def _kernel_notes(plan: Plan, workload: Workload, device) -> list[str]:
    """megatron_args.txt runs Transformer Engine's cuDNN fused attention (Megatron's default --transformer-impl); every
    other file runs PyTorch's FlashAttention-2 (SDPA). On GPUs where the calibration prices them alike (A100: both at
    the GEMM rate) nothing is said. A plan priced with an unfused core ("eager") is always noted: no file runs one."""
    from ..costmodel.calibration import gemm_curve
    from . import megatron as _megatron

    unfused = "attention: predicted with an unfused attention core (the s x s scores stored and moved through memory"
    if workload.core_kernel == "eager" and workload.training.attention_kernel in FLASH_KERNELS:
        return [f"{unfused}): '{workload.model.name}' has attention sinks, which FlashAttention-2 cannot run (HF "
                "trains it with attn_implementation='eager'); launch.sh's trainer runs SDPA without the sinks. With a "
                "Transformer Engine whose cuDNN (9.18 or later) fuses them, predict with --attention-kernel cudnn"]
    if workload.core_kernel == "eager":
        return [f"{unfused}, as your stack runs it); every written file runs fused attention (FlashAttention-2 / SDPA, "
                "or Transformer Engine's in megatron_args.txt), which is faster and stores no scores: they would "
                "allow a larger micro-batch than this plan"]
    if workload.training.attention_kernel == "flash3":
        return ["attention: predicted with FlashAttention-3/4 (flash-attn 3/4); launch.sh, torchtitan.toml and the "
                "other files run PyTorch's SDPA (FlashAttention-2), slower on this GPU: your own Hugging Face script "
                "with attn_implementation='flash_attention_3' and flash-attn 3 installed runs what was predicted"]
    curve = gemm_curve(device.name, device.spec_key)
    if curve.attn_rel == curve.attn_rel_cudnn:
        return []
    megatron = _megatron.unsupported(plan, workload) is None and trainer_model_for(workload) == "gpt"
    if workload.training.attention_kernel == "cudnn":
        where = f"{_megatron.FILE} runs it; " if megatron else ""
        return [f"attention: predicted with cuDNN fused attention (Transformer Engine); {where}launch.sh, "
                "torchtitan.toml and the other files run PyTorch's FlashAttention-2, slower on this GPU"]
    if megatron:
        return [f"attention: predicted with PyTorch's FlashAttention-2 (launch.sh, torchtitan.toml, ...); "
                f"{_megatron.FILE} runs Transformer Engine's cuDNN attention, faster on this GPU (`gpuadvisor "
                f"predict --from {_megatron.FILE}` prices it so)"]
    return []


#: The hand-over of a plan whose ZeRO-3 runs on FSDP2 (Plan.zero_runtime 'fsdp': what suggest gives ZeRO-3 across
#: nodes and of models above DeepSpeed's live-parameter cap, schemas.plan.handover_zero_impl). DeepSpeed's ZeRO-3 host
#: work grows with ranks x parameters and it gathers such models Linear by Linear (docs/cost-model.md); FSDP does not.
FSDP_ZERO3_NOTE = (
    "The plan's ZeRO runs on PyTorch FSDP2 in the bundled trainer (plan zero_impl 'fsdp', job.json zero_impl "
    "'fsdp'), as predicted: DeepSpeed's ZeRO-3 walks every rank's shard of every parameter in Python at each gather and "
    "gradient bucket, which across nodes adds seconds per step (DeepSpeed's own Azure runs, docs/cost-model.md), and "
    "above 1e9 parameters it gathers each Linear in its own collective where FSDP gathers a block in one. "
    "ds_config.json is written for the deepspeed launcher line in these notes; GPUADVISOR_ZERO_IMPL=deepspeed on "
    "every node switches the torchrun line to DeepSpeed too, slower than predicted")


def fsdp_zero3(plan: Plan, workload: Workload) -> bool:
    """Whether the bundled trainer runs this plan's ZeRO on FSDP2 rather than DeepSpeed: a pure data-parallel
    ZeRO-2/3 plan whose runtime is FSDP (Plan.zero_runtime; suggest sets it for ZeRO-3 on GPUs: handover_zero_impl)
    and a workload the FSDP2 path runs (schemas.plan.fsdp_trainer_runs). A plan asking for FSDP that the path cannot
    run stays on DeepSpeed (`zero_impl_notes` says so)."""
    return (runs_on_deepspeed(plan) and plan.zero_stage >= 2 and plan.zero_runtime == "fsdp"
            and fsdp_trainer_runs(workload, plan.zero_offload, plan.zero_hpz_partition_size))


def job_zero_impl(plan: Plan, workload: Workload) -> Optional[ZeroImpl]:
    """TrainerJob.zero_impl for a plan: "fsdp" where the bundled trainer runs its ZeRO on FSDP2 (`fsdp_zero3`), else
    None (DeepSpeed, or GPUADVISOR_ZERO_IMPL)."""
    return "fsdp" if fsdp_zero3(plan, workload) else None


def zero_impl_notes(plan: Plan, workload: Workload) -> list[str]:
    """A note when the plan asks for a ZeRO runtime the bundled trainer does not run it on: FSDP where it runs
    DeepSpeed, or DeepSpeed (Megatron-DeepSpeed's, as `predict --from` reads those files) beside TP/PP/EP, where it
    runs its distributed optimizer (ZeRO-1) or FSDP2 (ZeRO-2/3)."""
    if runs_on_deepspeed(plan) and plan.zero_impl == "fsdp" and not fsdp_zero3(plan, workload):
        return ["zero_impl fsdp: the bundled trainer's FSDP2 path runs full training of its GPT in bf16/fp32 only, "
                f"so this run uses DeepSpeed's ZeRO-{plan.zero_stage}, slower than predicted across many ranks; drop "
                "zero_impl to predict it as run"]
    if plan.zero_stage and plan.zero_impl == "deepspeed" and not runs_on_deepspeed(plan):
        runs = "its distributed optimizer (gradients reduce-scattered)" if plan.zero_stage == 1 else "FSDP2"
        return [f"zero_impl deepspeed beside tp={plan.tp}, pp={plan.pp}, ep={plan.ep}: the prediction prices "
                f"DeepSpeed's ZeRO-{plan.zero_stage} (Megatron-DeepSpeed's), but the bundled trainer runs this plan "
                f"with {runs}; drop zero_impl to predict it as run"]
    return []


def build_launch(plan: Plan, cluster: Cluster, workload: Workload, estimate: Optional[Estimate] = None, *,
                 master_addr: Optional[str] = None, port: int = 29500, steps: Optional[int] = None,
                 out_dir: str = "runs/gpuadvisor", measured_tokens_per_s: Optional[float] = None) -> LaunchConfig:
    """Render `plan` on `cluster` as a LaunchConfig.

    One torchrun command per node (single node: --standalone; several: c10d rendezvous on the first node's
    address, or `master_addr`, at `port`) running `python -m gpuadvisor.trainers --plan job.json ...`.
    ZeRO plans with pure data parallelism add the DeepSpeed JSON (passed to the trainer as --ds-config) and, in
    the notes, the equivalent `deepspeed --hostfile` command; ZeRO with TP/PP (FSDP2 / distributed optimizer)
    keeps the plain torchrun line, and the notes say why there is no DeepSpeed JSON and whether the bundled
    trainer runs the plan. A context-parallel plan (cp > 1) starts torchtitan instead (`-m torchtitan.train
    --job.config_file torchtitan.toml`: `cp_notes`), with no DeepSpeed JSON. Env vars carry their reason.
    `measured_tokens_per_s` (from a trial of this plan) is stated in the notes next to the prediction. Raises
    UserError when the plan does not fit the cluster or the model.
    """
    if not 1 <= port <= 65535:
        raise UserError(f"port {port} is out of range; pass a port between 1024 and 65535")
    try:
        check_plan_for(plan, plan_workload(plan, workload))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    check_cp_handover(plan, workload)
    placed = choose_nodes(plan, cluster)
    from ..costmodel.analytical import check_attention_devices, check_bf16_devices, check_fp8_devices

    used_devices = [d for _, used in placed for d in used]
    check_fp8_devices(workload, used_devices)
    check_bf16_devices(workload, used_devices)
    check_attention_devices(workload, used_devices)
    nodes = [n for n, _ in placed]
    multi = len(placed) > 1
    addr = master_addr or node_address(nodes[0])
    endpoint = f"{addr}:{port}"
    rid = rdzv_id(plan, workload)
    n_steps = steps or default_steps(plan_workload(plan, workload), plan)
    ds = deepspeed_config(plan, workload)
    gpu = placed[0][1][0].kind == "gpu"
    fsdp3 = ds is not None and fsdp_zero3(plan, workload)  # torchrun runs FSDP2; ds_config.json for DeepSpeed
    trainer_args = ["--plan", JOB_FILE, "--steps", str(n_steps), "--warmup", str(DEFAULT_WARMUP), "--out", out_dir]
    ds_args = ["--ds-config", DS_FILE] if ds is not None else []
    if not fsdp3:
        trainer_args += ds_args
    module = TRAINER_MODULE
    if plan.cp > 1:  # the bundled trainers run no context parallelism: torchtitan does (`cp_notes`)
        from .torchtitan import MODULE as module

        trainer_args = titan_args(n_steps, out_dir)
    efa = multi and efa_fabric(cluster, nodes)
    rdma = multi and not efa and rdma_fabric(cluster, nodes)
    launches = []
    for rank, (node, used) in enumerate(placed):
        numa = numa_binding(used, node) if used[0].kind == "gpu" else None
        launches.append(NodeLaunch(
            node=node.name, node_rank=rank, numa_binding=numa,
            argv=_torchrun(plan, node, rank, len(placed), endpoint, rid, numa is not None, trainer_args, module),
            env=node_env(node, used, plan, cluster, multi, rdma, efa)))
    notes = fp8_notes(plan, workload, gpu=gpu, deepspeed_json=ds is not None)
    notes += attention_notes(plan, workload, placed[0][1][0])
    notes += recompute_notes(plan)
    notes += activation_offload_notes(plan, workload)
    notes += placement_notes(plan, [n.name for n in nodes])
    notes += zero_impl_notes(plan, workload)
    notes += cp_notes(plan, workload)
    lr = _lr_note(plan, workload)
    if lr:
        notes.insert(0, lr)
    if measured_tokens_per_s:
        notes.insert(0, _measured_note(measured_tokens_per_s, estimate))
    if estimate is not None:
        notes.insert(0, _estimate_note(estimate))
    if multi:
        notes.append(f"rendezvous: every node connects to {endpoint} (node 0's address); open TCP port {port} "
                     "there, and copy this folder (job.json, launch.sh, env.sh) to the same path on every node")
    if ds is not None:
        hosts = [(n.name, len(u)) for n, u in placed]  # ssh names, as in the emitted hostfile
        cmd = deepspeed_command(hosts, addr, port, trainer_args + (ds_args if fsdp3 else []), hostfile=HOSTFILE)
        shown = hostfile_text(hosts if len(hosts) <= NODE_LINES_MAX else [hosts[0], hosts[-1]]).strip().split("\n")
        if len(hosts) > NODE_LINES_MAX:  # one line per node: the first and the last
            shown.insert(1, f"... {len(hosts) - 2} more")
        where = f" with a hostfile ({'; '.join(shown)})" if multi else ""
        ssh = ", run once on node 0 (needs passwordless ssh between nodes)" if multi else ""
        what = f"DeepSpeed's ZeRO-{plan.zero_stage} instead of FSDP2: the deepspeed launcher" if fsdp3 else \
            "deepspeed launcher equivalent"
        notes.append(f"{what}{where}{ssh}: {shlex.join(cmd)}")
    if fsdp3:
        notes.append(FSDP_ZERO3_NOTE)
    hybrid = hybrid_reason(plan)
    if hybrid:
        notes.append(f"no ds_config.json: {hybrid}")
    refused = _trainer_refusal(plan, workload, gpu=gpu) if plan.cp == 1 else None  # cp: torchtitan runs it
    if refused:
        notes.append(refused)
    if trainer_model_for(workload) is None:
        notes.append(f"'{workload.model.name}' is not one of the bundled trainer models (gpt, resnet18): keep the "
                     "launcher line and env, replace '-m gpuadvisor.trainers ...' by your training script")
    return LaunchConfig(plan=plan, estimate=estimate, launcher="torchrun", nodes=launches,
                        trainer_args=["-m", module, *trainer_args], deepspeed_config=ds,
                        env=common_env(plan, nodes, [u for _, u in placed], multi, cluster), notes=notes)
