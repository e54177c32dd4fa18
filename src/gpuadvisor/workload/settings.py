"""Training settings (sequence length, batch, precision) with validation, and the Workload they make."""
from __future__ import annotations

import inspect
from typing import Any, Optional, Union

from ..errors import UserError, validation_message
from ..schemas.workload import ATTENTION_KERNELS, KERNELS, PRECISIONS, FineTune, ModelSpec, TrainingSettings, Workload
from .batch_defaults import SMALL_MODEL_BATCH, BatchDefault, default_batch
from .catalog import Preset, lookup
from .hf_config import looks_like_path
from .specs import resolve_preset

DEFAULT_SEQ_LEN = 1024
DEFAULT_GLOBAL_BATCH = SMALL_MODEL_BATCH  # training_settings alone; make_workload uses batch_defaults.default_batch
_OPTIMIZERS = ("adam", "adamw", "sgd")


def _positive(name: str, value: Any, flag: str) -> int:
    """`value` as a positive int or a one-line UserError."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"{name} must be a positive integer, got {value!r}; pass e.g. {flag}")
    return value


def training_settings(seq_len: Optional[int] = None, global_batch: Optional[int] = None,
                      tokens_per_step: Optional[int] = None, precision: str = "bf16", *,
                      attention_kernel: str = "flash", kernels: str = "eager",
                      optimizer: str = "adamw", allow_recompute: bool = True, allow_batch_change: bool = False,
                      token_budget: Optional[float] = None, grad_reduce_in_bf16: bool = False,
                      fp8_param_gather: bool = False, model: Optional[ModelSpec] = None,
                      default_seq_len: Optional[int] = None,
                      default_global_batch: Optional[int] = None) -> TrainingSettings:
    """Validated TrainingSettings.

    seq_len defaults to `default_seq_len`, else min(model's learned position table, 1024), else 1024.
    The batch is given as `global_batch` (sequences) or `tokens_per_step` (a multiple of seq_len); both
    must agree when both are given; default `default_global_batch`, else 8 (make_workload passes the model's
    default from batch_defaults.default_batch). With `model`, seq_len may not exceed a learned position table,
    and generic (non-token) models reject tokens_per_step.
    Raises UserError with the fix on bad input.
    """
    generic = model is not None and model.kind == "generic"
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision '{precision}'; use one of {', '.join(PRECISIONS)}")
    if attention_kernel not in ATTENTION_KERNELS:
        raise UserError(f"unknown attention kernel '{attention_kernel}'; use one of {', '.join(ATTENTION_KERNELS)}")
    if kernels not in KERNELS:
        raise UserError(f"unknown kernels '{kernels}'; use one of {', '.join(KERNELS)}")
    if optimizer not in _OPTIMIZERS:
        raise UserError(f"unknown optimizer '{optimizer}'; use one of {', '.join(_OPTIMIZERS)}")
    if seq_len is None:
        table = model.max_seq_len if model is not None and model.kind == "transformer" else 0
        seq_len = default_seq_len or (min(table, DEFAULT_SEQ_LEN) if table else DEFAULT_SEQ_LEN)
    _positive("seq_len", seq_len, "--seq-len 1024")
    if model is not None and model.kind == "transformer" and model.max_seq_len and seq_len > model.max_seq_len:
        raise UserError(f"seq_len {seq_len} exceeds the {model.max_seq_len} learned positions of "
                        f"'{model.name}'; use --seq-len {model.max_seq_len} or less")
    if tokens_per_step is not None:
        if model is not None and generic:
            raise UserError(f"'{model.name}' is not a token model; give global_batch (samples), "
                            "not tokens_per_step")
        _positive("tokens_per_step", tokens_per_step, "tokens_per_step=8192")
        if tokens_per_step % seq_len:
            lo = max(seq_len, tokens_per_step // seq_len * seq_len)
            raise UserError(f"tokens_per_step {tokens_per_step} is not a multiple of seq_len {seq_len}; "
                            f"use {lo} or {lo + seq_len}")
        from_tokens = tokens_per_step // seq_len
        if global_batch is not None and global_batch != from_tokens:
            raise UserError(f"global_batch {global_batch} x seq_len {seq_len} != tokens_per_step "
                            f"{tokens_per_step}; give only one of global_batch and tokens_per_step")
        global_batch = from_tokens
    if global_batch is None:
        global_batch = default_global_batch or DEFAULT_GLOBAL_BATCH
    _positive("global_batch", global_batch, "--global-batch 8")
    if token_budget is not None and not token_budget > 0:
        raise UserError(f"token_budget must be positive, got {token_budget!r}")
    try:
        return TrainingSettings(seq_len=seq_len, global_batch=global_batch, precision=precision,
                                attention_kernel=attention_kernel, kernels=kernels, optimizer=optimizer,
                                allow_recompute=allow_recompute, allow_batch_change=allow_batch_change,
                                token_budget=token_budget, grad_reduce_in_bf16=grad_reduce_in_bf16,
                                fp8_param_gather=fp8_param_gather)
    except ValueError as exc:
        raise UserError(f"training settings: {validation_message(exc)}") from None


def make_workload(model: Union[str, ModelSpec], *, finetune: Union[FineTune, str, None] = None,
                  targets_flag: str = "--lora-targets", **settings: Any) -> Workload:
    """Workload from a model description (see resolve_model) and training_settings keywords.

    Presets bring their defaults: the A6000 paper's sizes use its Table I seq len and batch (and fp32
    for 10M unless `precision` is given); others seq_len = min(max_seq_len, 1024). Without `global_batch` or
    `tokens_per_step` the batch is `batch_defaults.default_batch`'s (a preset's own, else one people train
    with: GPT-3's tokens per batch by size, 128 sequences for LoRA/QLoRA, 8 for tiny and generic models).
    `finetune`: "full" (default), "lora", "qlora" or a FineTune (rank, alpha, target modules); LoRA/QLoRA need a
    transformer and at least one targeted linear layer it has (`targets_flag` names that setting in the error).
    """
    return workload_and_default(model, finetune=finetune, targets_flag=targets_flag, **settings)[0]


def workload_and_default(model: Union[str, ModelSpec], *, finetune: Union[FineTune, str, None] = None,
                         targets_flag: str = "--lora-targets",
                         **settings: Any) -> tuple[Workload, Optional[BatchDefault]]:
    """make_workload's Workload and, when its global batch is a default, that default and where it comes from
    (None when the batch was given as `global_batch`, `tokens_per_step` or `default_global_batch`)."""
    from .finetune import make_finetune

    ft = make_finetune(finetune)
    preset: Optional[Preset] = None
    spec = model if isinstance(model, ModelSpec) else None
    if spec is None:
        assert isinstance(model, str)
        spec, preset = resolve_preset(model)
    unknown = set(settings) - (set(inspect.signature(training_settings).parameters) - {"model"})
    if unknown:
        raise UserError(f"unknown training setting(s) {', '.join(sorted(unknown))}; known: seq_len, global_batch, "
                        "tokens_per_step, precision, attention_kernel, kernels, optimizer, allow_recompute, "
                        "allow_batch_change, token_budget, grad_reduce_in_bf16, fp8_param_gather")
    if preset is not None:
        settings.setdefault("default_seq_len", preset.default_seq_len)
        if preset.default_precision and "precision" not in settings:
            settings["precision"] = preset.default_precision
    training = training_settings(model=spec, **settings)  # validates the settings, resolves seq_len
    chosen: Optional[BatchDefault] = None
    if all(settings.get(k) is None for k in ("global_batch", "tokens_per_step", "default_global_batch")):
        chosen = default_batch(spec, training.seq_len, ft,
                               preset_batch=preset.default_global_batch if preset else None,
                               preset_source=preset.batch_source if preset else "")
        training = training_settings(model=spec, **settings, default_global_batch=chosen.global_batch)
    try:
        workload = Workload(model=spec, training=training)
    except ValueError as exc:  # the model with these settings (fp8 on a non-transformer)
        raise UserError(validation_message(exc)) from None
    return with_finetune(workload, ft, targets_flag), chosen


def default_seq_note(model: str, seq_len: int) -> Optional[str]:
    """One note when `seq_len` is the default and shorter than the context window of the catalog model `model`
    names (Preset.context, from its config.json), else None: rotary models default to 1024 tokens
    (training_settings), which sets activation memory and so the best plan, whatever the model was built for.
    A config.json path has no catalog entry: it is not read again here (suggest and the TUI already read it)."""
    if lookup(model) is None and looks_like_path(model):
        return None
    try:
        spec, preset = resolve_preset(model)
    except UserError:
        return None
    if preset is None or spec.kind != "transformer" or not preset.context or preset.context <= seq_len:
        return None
    return (f"seq {seq_len} is the default, not your run's: '{spec.name}' takes up to {preset.context:,} tokens "
            "per sequence; activation memory and the best plan depend on it; pass --seq-len N (API: seq_len=N)")


def with_finetune(workload: Workload, finetune: FineTune, flag: str = "--lora-targets") -> Workload:
    """`workload` with `finetune`, validated: one-line UserError for a generic model or targets it does not have."""
    from .finetune import check_targets

    if finetune == workload.finetune:
        return workload
    try:
        wl = Workload(model=workload.model, training=workload.training, finetune=finetune)
    except ValueError as exc:
        raise UserError(validation_message(exc)) from None
    check_targets(wl.model, wl.finetune, flag)
    return wl
