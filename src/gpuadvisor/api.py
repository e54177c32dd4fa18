"""The public Python API: the whole pipeline in a few readable lines.

    probe ──► cluster ──► candidates ──► cost model ──► ranking ──► trials ──► launch config

Each stage is its own package; this module only composes them. Nothing here imports torch:
ranking must start fast (trials run the trainers in subprocesses).
"""
from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

from pydantic import ConfigDict, Field, ValidationError, validate_call

from .errors import UserError, error_text
from .schemas import Cluster, Estimate, LaunchConfig, Plan, ProbeReport, Ranking, Workload
from .schemas._base import Frozen
from .schemas.workload import BatchDefault, FineTune, ModelSpec
from .trials.schemas import ConfirmResult

#: The preset used when this machine has no GPU and no cluster was given (seed 000's nano-cluster).
FALLBACK_PRESET = "nano-cluster-2x2-a40-1gbe"

F = TypeVar("F", bound=Callable[..., Any])


def typed(func: F) -> F:
    """Check the argument types of a public API function (strictly: "3" is not 3) before it runs.

    A wrong type raises a one-line UserError naming the argument, never a raw TypeError/AttributeError
    from deep inside the pipeline.
    """
    checked = validate_call(config=ConfigDict(strict=True, arbitrary_types_allowed=True))(func)
    params = inspect.signature(func).parameters

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return checked(*args, **kwargs)
        except UserError:
            raise
        except ValidationError as exc:
            if exc.title != func.__name__:  # raised inside the function: a bad value deeper down
                raise UserError(" ".join(str(exc).split())) from None
            errs = exc.errors()
            name = str(errs[0]["loc"][0]) if errs[0]["loc"] else "?"
            mine = [e for e in errs if e["loc"] and str(e["loc"][0]) == name]
            bad_value = next((e for e in mine if e["type"] == "value_error"), None)
            if bad_value is not None:
                why = error_text(bad_value)
            else:
                ann = params[name].annotation if name in params else "another type"
                why = f"must be {ann}, got {type(errs[0].get('input')).__name__} {errs[0].get('input')!r:.40}"
            raise UserError(f"{func.__name__}(): argument '{name}' {why}; "
                            f"see help(gpuadvisor.api.{func.__name__})") from None
        except ValueError as exc:  # a plan/workload value the pipeline refused: the same one line as the CLI
            raise UserError(" ".join(str(exc).split())) from None

    return wrapper  # type: ignore[return-value]


class Suggestion(Frozen):
    """What `suggest` returns: the ranking, the launch config of the winner, and where the cluster came from."""

    ranking: Ranking
    cluster: Cluster
    workload: Workload
    launch: Optional[LaunchConfig] = Field(None, description="Launch config of the top plan (None if nothing fits)")
    notes: list[str] = Field(default_factory=list, description="E.g. that a bundled preset was used")
    trainable_params: int = Field(0, description="Parameters the optimizer updates: the LoRA/QLoRA adapters, or "
                                                 "the whole model (workload.finetune says which)")


class Prediction(Estimate):
    """What `predict` returns: the Estimate plus the fine-tuning it was made for."""

    finetune: FineTune = Field(default_factory=FineTune, description="Full fine-tuning, LoRA or QLoRA settings")
    trainable_params: int = Field(0, description="Parameters the optimizer updates (adapters, or the whole model)")


class Confirmation(ConfirmResult):
    """What `confirm` returns: the study's result plus the fine-tuning its trials ran."""

    finetune: FineTune = Field(default_factory=FineTune, description="Full fine-tuning, LoRA or QLoRA settings")


def probe(*, sysfs_root: str = "/", topo_text: Optional[str] = None) -> ProbeReport:
    """Inventory this host: GPUs (NVML), topology (nvidia-smi topo -m), NICs, CPU/RAM. Never raises on odd hardware."""
    from .probe.inventory import probe_host

    return probe_host(sysfs_root=sysfs_root, topo_text=topo_text)


@typed
def resolve_cluster(cluster: Union[Cluster, str, Path, None] = None, *, preset: Optional[str] = None,
                    cpu_ranks: Optional[int] = None) -> tuple[Cluster, list[str]]:
    """Turn --cluster/--preset/nothing into a Cluster, with notes saying where it came from.

    `cluster` may be a Cluster, a cluster file path, or "local" (probe this host now). With neither
    cluster nor preset: probe this host; if it has no GPU (and no cpu_ranks were asked for) fall back
    to the bundled FALLBACK_PRESET and say so.
    """
    from .hardware.presets import load_preset

    if isinstance(cluster, Cluster):
        return cluster, []
    if cluster is not None and preset is not None:
        raise UserError("give either --cluster or --preset, not both")
    if cpu_ranks is not None and (preset is not None or (cluster is not None and str(cluster) != "local")):
        raise UserError("--cpu-ranks models this host's CPU ranks; it does not combine with --preset or a cluster "
                        "file (their nodes say what they have): drop one")
    if preset is not None:
        return load_preset(preset), [f"cluster: bundled preset '{preset}'"]
    if cluster is not None and str(cluster) != "local":
        from .hardware.cluster_file import load_cluster

        path = Path(cluster)
        if path.is_dir():
            raise UserError(f"cluster file '{path}' is a folder; give the YAML/JSON file in it "
                            "(docs/cluster-file.md) or use --preset NAME")
        if not path.is_file():
            raise UserError(f"cluster file '{path}' not found; write one (docs/cluster-file.md) or use --preset NAME")
        return load_cluster(path), [f"cluster: file '{path}'"]
    from .hardware.build import cluster_from_probe

    report = probe()
    if report.gpus or cpu_ranks:
        built = cluster_from_probe(report, cpu_ranks=cpu_ranks)
        what = f"{len(report.gpus)} GPU(s)" if report.gpus else f"{cpu_ranks} CPU rank(s) (gloo)"
        return built, [f"cluster: probed this host '{report.hostname}': {what}"]
    if str(cluster) == "local":
        raise UserError("this host has no GPU; pass --cpu-ranks N to use CPU ranks, or --preset NAME")
    reason = report.nvml_error or "NVML reports no GPU"
    return load_preset(FALLBACK_PRESET), [
        f"no GPU on this machine ({reason}); using the bundled preset '{FALLBACK_PRESET}' "
        "(seed 000's nano-cluster: 2 nodes x 2 A40, PCIe, 1 GbE). Use --preset NAME or --cluster FILE to choose."
    ]


@typed
def make_workload(model: Union[str, ModelSpec], *, seq_len: Optional[int] = None, global_batch: Optional[int] = None,
                  precision: str = "bf16", token_budget: Optional[float] = None,
                  allow_batch_change: bool = False, finetune: Union[FineTune, str, None] = None,
                  attention_kernel: str = "flash", kernels: str = "eager", grad_reduce_in_bf16: bool = False,
                  fp8_param_gather: bool = False) -> Workload:
    """Resolve a model string ("1.5B", "gpt2-xl", a config.json path), or take a ModelSpec, plus training settings.

    finetune: "full" (default), "lora", "qlora", or a FineTune (rank, alpha, target modules).
    attention_kernel: "flash" (FlashAttention-2 / PyTorch SDPA: the bundled trainers, DeepSpeed, torchtitan, HF),
    "flash3" (FlashAttention-3 on Hopper / -4 on Blackwell: flash-attn 3/4) or "cudnn" (Transformer Engine's cuDNN
    fused attention: Megatron-Core, NeMo).
    kernels: "eager" (PyTorch modules as the bundled trainers run them; default), "fused" (fused norm and loss
    kernels: llm-foundry, torch.compile) or "liger" (fused, and Liger-Kernel's chunked linear cross-entropy, which
    never holds the logits whole): they set the stored activations and logits.
    grad_reduce_in_bf16, fp8_param_gather: Megatron's --grad-reduce-in-bf16 and --fp8-param-gather, as NVIDIA's
    recipes set them (TrainingSettings; docs/cost-model.md "Megatron's gradient buffer", "Megatron's FP8 weights").
    Without global_batch: a batch people train with (workload/batch_defaults.py); make_workload_explained says which.
    """
    return make_workload_explained(model, seq_len=seq_len, global_batch=global_batch, precision=precision,
                                   token_budget=token_budget, allow_batch_change=allow_batch_change,
                                   finetune=finetune, attention_kernel=attention_kernel, kernels=kernels,
                                   grad_reduce_in_bf16=grad_reduce_in_bf16, fp8_param_gather=fp8_param_gather)[0]


@typed
def make_workload_explained(model: Union[str, ModelSpec], *, seq_len: Optional[int] = None,
                            global_batch: Optional[int] = None,
                            precision: str = "bf16", token_budget: Optional[float] = None,
                            allow_batch_change: bool = False, finetune: Union[FineTune, str, None] = None,
                            attention_kernel: str = "flash", kernels: str = "eager",
                            grad_reduce_in_bf16: bool = False,
                            fp8_param_gather: bool = False) -> tuple[Workload, Optional[BatchDefault]]:
    """make_workload's Workload and, when its global batch is the default (no global_batch given), a BatchDefault
    (global_batch, why: where that batch comes from); None when the batch was given."""
    from .workload.settings import workload_and_default

    kwargs = {k: v for k, v in dict(seq_len=seq_len, global_batch=global_batch, precision=precision,
                                   attention_kernel=attention_kernel, kernels=kernels, token_budget=token_budget,
                                   allow_batch_change=allow_batch_change, grad_reduce_in_bf16=grad_reduce_in_bf16,
                                   fp8_param_gather=fp8_param_gather).items()
              if v is not None}
    return workload_and_default(model, finetune=finetune, targets_flag="finetune target_modules", **kwargs)


def _workload(model: Union[str, Workload], finetune: Union[FineTune, str, None], **settings: Any) -> Workload:
    """The Workload of a public call: a model string with settings, or a Workload (its finetune replaced when given)."""
    if not isinstance(model, Workload):
        return make_workload(model, finetune=finetune, **settings)
    if finetune is None:
        return model
    from .workload.finetune import make_finetune
    from .workload.settings import with_finetune

    return with_finetune(model, make_finetune(finetune), flag="finetune target_modules")


def _correction(use_learned: bool):
    """The learned correction if one can be fitted from the measurement rows, else None (analytical only)."""
    if not use_learned:
        return None
    try:
        from .costmodel.learned import load_default
    except ImportError:
        return None
    return load_default()


@typed
def suggest(model: Union[str, Workload], *, cluster: Union[Cluster, str, Path, None] = None,
            preset: Optional[str] = None, cpu_ranks: Optional[int] = None, seq_len: Optional[int] = None,
            global_batch: Optional[int] = None, precision: Optional[str] = None,
            token_budget: Optional[float] = None, allow_batch_change: bool = False, objective: str = "throughput",
            top: int = 5, price_per_gpu_hour: Optional[float] = None, what_if: Optional[list[str]] = None,
            use_learned: bool = False, finetune: Union[FineTune, str, None] = None,
            attention_kernel: str = "flash", kernels: str = "eager", grad_reduce_in_bf16: bool = False,
            fp8_param_gather: bool = False) -> Suggestion:
    """Rank every feasible plan for `model` on the cluster and return the winner's launch config.

    Args:
        model: a size ("1.5B"), a preset name ("gpt2-xl"), a HuggingFace config.json path, or a Workload.
        cluster: a Cluster, a cluster file, "local", or None (probe; no GPU -> bundled preset).
        preset: name of a bundled cluster preset (`gpuadvisor presets`).
        objective: throughput | memory | time | cost.
        precision: "bf16", "fp16", "fp32" or "fp8"; None (default): bf16, or fp16 where a GPU has no bf16 tensor
            cores (V100, T4: training_precision, with a note).
        what_if: cluster modifications such as "nic=10gbe" or "gpus=2x4" applied before ranking.
        use_learned: apply the learned correction fitted on knowledge/ and local measurements.
        finetune: "full" (default), "lora", "qlora" or a FineTune (rank, alpha, target modules); with a Workload
            it replaces the workload's own.
        attention_kernel: "flash" (FlashAttention-2 / SDPA, default), "flash3" (FlashAttention-3/4 on Hopper /
            Blackwell) or "cudnn" (Transformer Engine, as Megatron-Core and NeMo run it).
        kernels: "eager" (PyTorch modules, as the bundled trainers of launch.sh run them; default), "fused"
            (fused norm/loss kernels: llm-foundry, torch.compile), "liger" (fused, and Liger-Kernel's chunked linear
            cross-entropy: no whole logits), "fused-layers" (torch.compile of the model alone, beside an eager loss)
            or "hf" (Hugging Face transformers' modeling code run eagerly: eager, plus
            the HBM passes of its op-by-op norms, rotary, K/V repeat and gate): what the layers and loss store.
        grad_reduce_in_bf16: plans that run as Megatron keep and reduce gradients in bf16 (--grad-reduce-in-bf16)
            instead of Megatron's fp32 buffer.
        fp8_param_gather: with precision "fp8" and attention_kernel "cudnn", plans on Megatron's distributed
            optimizer keep the Linears' weights in FP8 only (--fp8-param-gather), as NVIDIA's FP8 recipes do.
    """
    from .workload.finetune import trainable_params
    from .workload.settings import default_seq_note
    from .launch import build_launch
    from .ranking import apply_what_if, rank
    from .ranking.alignment import padding_note
    from .ranking.attention import flash3_note
    from .ranking.loss import chunked_loss_note

    clus, notes = resolve_cluster(cluster, preset=preset, cpu_ranks=cpu_ranks)
    for spec in what_if or []:
        clus = apply_what_if(clus, spec)
        notes.append(f"what-if: {spec}")
    if isinstance(model, Workload):  # its own settings; finetune, when given, replaces its own
        wl, chosen = _workload(model, finetune), None
    else:
        precision = training_precision(precision, clus, notes)
        wl, chosen = make_workload_explained(model, seq_len=seq_len, global_batch=global_batch, precision=precision,
                                             token_budget=token_budget, allow_batch_change=allow_batch_change,
                                             finetune=finetune, attention_kernel=attention_kernel,
                                             kernels=kernels, grad_reduce_in_bf16=grad_reduce_in_bf16,
                                             fp8_param_gather=fp8_param_gather)
    if chosen is not None:  # one note: the batch, where it comes from, and the flag that changes it
        t = wl.training
        tokens = f" ({t.global_batch * t.seq_len:,} tokens)" if wl.model.kind == "transformer" else ""
        notes.append(f"global batch {t.global_batch}{tokens} per step is the default for '{wl.model.name}' "
                     f"({chosen.why}), not your run's: the best plan depends on it; pass --global-batch N "
                     "(API: global_batch=N)")
    if seq_len is None and isinstance(model, str):
        seq_note = default_seq_note(model, wl.training.seq_len)
        if seq_note:
            notes.append(seq_note)
    ranking = rank(clus, wl, objective=objective, top=top, price_per_gpu_hour=price_per_gpu_hour,
                   correction=_correction(use_learned))
    if ranking.top:
        pad = padding_note(wl, clus, ranking.top[0])
        if pad:
            notes.append(pad)
        fa3 = flash3_note(wl, clus, ranking.top[0])
        if fa3:
            notes.append(fa3)
    loss = chunked_loss_note(wl, clus, ranking, price_per_gpu_hour=price_per_gpu_hour)
    if loss:
        notes.append(loss)
    launch = build_launch(ranking.top[0].plan, clus, wl, ranking.top[0]) if ranking.top else None
    return Suggestion(ranking=ranking, cluster=clus, workload=wl, launch=launch, notes=notes,
                      trainable_params=trainable_params(wl))


@typed
def predict(model: Union[str, Workload], plan: Union[Plan, str], *, cluster: Union[Cluster, str, Path, None] = None,
            preset: Optional[str] = None, cpu_ranks: Optional[int] = None, seq_len: Optional[int] = None,
            global_batch: Optional[int] = None, precision: Optional[str] = None, use_learned: bool = False,
            finetune: Union[FineTune, str, None] = None, attention_kernel: str = "flash",
            kernels: str = "eager", grad_reduce_in_bf16: bool = False, fp8_param_gather: bool = False) -> Prediction:
    """Predict throughput, step-time and memory breakdown for one given plan.

    finetune: "full" (default), "lora", "qlora" or a FineTune; the Prediction states it and the trainable count.
    global_batch: default the plan's dp*mb*m (as `gpuadvisor predict`), not the model's default batch.
    kernels: "eager" (default) or "fused", as for `suggest`; grad_reduce_in_bf16 and fp8_param_gather as for
    `suggest`.
    """
    from .costmodel.combine import estimate
    from .schemas import check_plan_for, parse_plan

    clus, _ = resolve_cluster(cluster, preset=preset, cpu_ranks=cpu_ranks)
    precision = training_precision(precision, clus)
    p = plan if isinstance(plan, Plan) else parse_plan(plan)
    if global_batch is None and not isinstance(model, Workload):
        global_batch = p.global_batch()  # the plan states its batch; a model default could only contradict it
    wl = _workload(model, finetune, seq_len=seq_len, global_batch=global_batch, precision=precision,
                   attention_kernel=attention_kernel, kernels=kernels, grad_reduce_in_bf16=grad_reduce_in_bf16,
                   fp8_param_gather=fp8_param_gather)
    check_plan_for(p, wl)
    return prediction(estimate(p, clus, wl, correction=_correction(use_learned)), wl)


def training_precision(precision: Optional[str], cluster: Cluster, notes: Optional[list[str]] = None) -> str:
    """The precision to train in: the caller's, else bf16, or fp16 mixed precision where a GPU of the cluster has no
    bf16 tensor cores (V100, T4: costmodel.analytical.lacks_bf16), with a note that says so."""
    if precision is not None:
        return precision
    from .costmodel.analytical import lacks_bf16

    old = next((d for n in cluster.nodes for d in n.devices if lacks_bf16(d)), None)
    if old is None:
        return "bf16"
    if notes is not None:
        notes.append(f"precision fp16 (mixed precision with loss scaling): {old.name} has no bf16 tensor cores "
                     f"(compute capability {old.compute_capability}); pass --precision to choose (API: precision=...)")
    return "fp16"


def prediction(est: Estimate, workload: Workload) -> Prediction:
    """An Estimate as a Prediction: the same figures plus the workload's fine-tuning and trainable count."""
    from .workload.finetune import trainable_params

    return Prediction.model_validate({**{k: getattr(est, k) for k in Estimate.model_fields},
                                      "finetune": workload.finetune, "trainable_params": trainable_params(workload)})


@typed
def launch_config(plan: Plan, cluster: Cluster, workload: Workload, estimate: Optional[Estimate] = None) -> LaunchConfig:
    """Render a plan as per-node launch commands, DeepSpeed JSON and environment."""
    from .launch import build_launch

    return build_launch(plan, cluster, workload, estimate)


@typed
def confirm(model: Union[str, Workload], *, cluster: Union[Cluster, str, Path, None] = None,
            preset: Optional[str] = None, cpu_ranks: Optional[int] = None, top_k: int = 3,
            budget_s: float = 900.0, steps: int = 20, warmup: int = 3, storage: Optional[str] = None,
            seq_len: Optional[int] = None, global_batch: Optional[int] = None, precision: Optional[str] = None,
            finetune: Union[FineTune, str, None] = None, attention_kernel: str = "flash", **kwargs) -> Confirmation:
    """Run short real trials of the cost model's top-K plans (Optuna study) and return the confirmed winner.

    finetune: "full" (default), "lora", "qlora" or a FineTune; the trials train what it says (job.json carries
    it) and the Confirmation states it. precision "fp8" is refused up front (UserError, before the cluster is
    resolved): the bundled trainers have no FP8 kernels, so their bf16 runs would be compared with FP8 predictions;
    so is attention_kernel "cudnn" (they run PyTorch's SDPA attention).
    """
    from .trials.hostcheck import refuse_unmeasurable
    from .trials.study import TRAINER, confirm as _confirm

    clus = None
    if precision is None and not isinstance(model, Workload):  # the GPUs say bf16 or fp16 (training_precision)
        clus, _ = resolve_cluster(cluster, preset=preset, cpu_ranks=cpu_ranks)
        precision = training_precision(None, clus)
    wl = _workload(model, finetune, seq_len=seq_len, global_batch=global_batch, precision=precision,
                   attention_kernel=attention_kernel)
    if kwargs.get("trainer_module", TRAINER) == TRAINER:
        refuse_unmeasurable(wl.training.precision, wl.training.attention_kernel, "confirm", wl.core_kernel)
    if clus is None:
        clus, _ = resolve_cluster(cluster, preset=preset, cpu_ranks=cpu_ranks)
    res = _confirm(clus, wl, top_k=top_k, budget_s=budget_s, steps=steps, warmup=warmup, storage=storage, **kwargs)
    return Confirmation.model_validate({**{k: getattr(res, k) for k in ConfirmResult.model_fields},
                                        "finetune": wl.finetune})
