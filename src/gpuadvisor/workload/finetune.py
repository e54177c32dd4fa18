"""LoRA / QLoRA adapters: which linear layers get one, how many parameters train, and the settings from user input.

Count (LoRA, Hu et al. 2021): an adapter on a Linear `in -> out` trains A (r x in) and B (out x r), r·(in + out)
parameters. Per layer, for each targeted role the model has (widths from `shapes.layer_shape`):

- q: d -> n_heads·head_dim; k, v: d -> n_kv_heads·head_dim; o: n_heads·head_dim -> d
- gate (gated MLPs only: SwiGLU/GeGLU), up: d -> d_ff; down: d_ff -> d
- MoE: every routed expert's gate/up/down at expert_d_ff, plus the shared expert's at shared_expert_d_ff
  (the router gets no adapter)

times n_layers. This is peft's count for the separate projections of Llama/Mistral/Qwen2 (tests: Qwen2.5-3B r=16
on q,v = 3,686,400, the peft README; Llama-2-7B r=8 on q,v = 4,194,304). Where a framework fuses projections
(GPT-2's c_attn holds q,k,v; transformers >= 5 stores an MoE layer's experts' gate and up as one gate_up_proj
parameter) peft trains one adapter over the fused width, a little fewer parameters than counted here.
"""
from __future__ import annotations

from typing import Any, Optional, Union

from ..errors import UserError
from ..schemas.workload import ALL_LINEAR, MAX_LORA_RANK, FineTune, ModelSpec, Workload
from .shapes import layer_shape

METHODS = ("full", "lora", "qlora")
#: Named target sets (peft's "all-linear" is every linear layer but the output head).
TARGET_SETS: dict[str, tuple[str, ...]] = {"all-linear": ALL_LINEAR, "attention": ("q", "k", "v", "o"),
                                           "mlp": ("gate", "up", "down")}
LABELS = {"full": "full fine-tuning", "lora": "LoRA", "qlora": "QLoRA"}


def adapter_linears(model: ModelSpec) -> dict[str, list[tuple[int, int, int]]]:
    """role -> [(in, out, copies per layer)] of the linear layers an adapter on that role sits on."""
    s = layer_shape(model)
    d = s.d_model
    out: dict[str, list[tuple[int, int, int]]] = {
        "q": [(d, s.q_dim, 1)], "k": [(d, s.kv_dim, 1)], "v": [(d, s.kv_dim, 1)], "o": [(s.q_dim, d, 1)]}
    mlps = [(s.expert_d_ff, s.n_experts)] if s.moe else [(s.d_ff, 1)]
    if s.moe and s.shared_d_ff:
        mlps.append((s.shared_d_ff, 1))
    out["up"] = [(d, f, n) for f, n in mlps]
    out["down"] = [(f, d, n) for f, n in mlps]
    if s.gated:
        out["gate"] = [(d, f, n) for f, n in mlps]
    return out


def adapter_params(model: ModelSpec, finetune: FineTune) -> int:
    """Trainable adapter parameters of `finetune` on `model` (0 for full fine-tuning: nothing is an adapter)."""
    if not finetune.adapters:
        return 0
    linears = adapter_linears(model)
    r = finetune.lora_rank
    per_layer = sum(n * r * (i + o) for role in finetune.target_modules for i, o, n in linears.get(role, []))
    return model.n_layers * per_layer


def trainable_params(workload: Workload) -> int:
    """Parameters the optimizer updates: the adapters, or the whole model for full fine-tuning."""
    if workload.finetune.adapters:
        return adapter_params(workload.model, workload.finetune)
    return workload.model.params


def missing_targets(model: ModelSpec, targets: tuple[str, ...]) -> list[str]:
    """Targeted roles the model has no linear layer for (gate on a GeLU MLP)."""
    have = adapter_linears(model)
    return [t for t in targets if t not in have]


def parse_targets(text: str, what: str = "--lora-targets") -> tuple[str, ...]:
    """'q,k,v' / 'all-linear' / 'attention' / 'mlp' -> roles; UserError naming `what` and the fix."""
    spec = text.strip().lower()
    if spec in TARGET_SETS:
        return TARGET_SETS[spec]
    roles = [r.strip() for r in spec.split(",")]
    bad = [r for r in roles if r not in ALL_LINEAR]
    if not spec or bad:
        shown = ", ".join(repr(b) for b in bad) if spec and bad else "nothing"
        raise UserError(f"{what}: {shown} is not a linear layer; give a comma list of {','.join(ALL_LINEAR)}, "
                        "or all-linear / attention / mlp")
    if len(set(roles)) != len(roles):
        raise UserError(f"{what}: {spec} names a layer twice; name each once")
    return tuple(roles)


def make_finetune(method: Union[str, FineTune, None], *, lora_rank: Optional[int] = None,
                  lora_alpha: Optional[float] = None, targets: Union[str, tuple[str, ...], list[str], None] = None,
                  double_quant: Optional[bool] = None, flags: bool = False) -> FineTune:
    """A FineTune from a method name ('full', 'lora', 'qlora') or a FineTune, and optional LoRA settings.

    `flags`: word errors with the CLI's flags (--finetune, --lora-rank...), else with the API's argument names.
    Raises UserError (one line, naming the setting and the fix).
    """
    name = {"method": "--finetune", "rank": "--lora-rank", "alpha": "--lora-alpha", "targets": "--lora-targets",
            } if flags else {"method": "finetune", "rank": "lora_rank", "alpha": "lora_alpha", "targets": "targets"}
    lora = [k for k, v in (("rank", lora_rank), ("alpha", lora_alpha), ("targets", targets),
                           ("dq", double_quant)) if v is not None]
    if method is None:
        method = "full"
    if isinstance(method, FineTune):
        base = method
    elif isinstance(method, str):
        m = method.strip().lower()
        if m not in METHODS:
            raise UserError(f"{name['method']}: unknown method '{method}'; use full, lora or qlora")
        base = FineTune(method=m)  # type: ignore[arg-type]
    else:
        raise UserError(f"{name['method']} must be 'full', 'lora', 'qlora' or a FineTune, got "
                        f"{type(method).__name__}")
    if not lora:
        return base
    if not base.adapters:
        given = " and ".join(name.get(k, "double_quant") for k in lora)
        raise UserError(f"{given} only {'applies' if len(lora) == 1 else 'apply'} to adapters; add "
                        f"{name['method']} lora (or qlora), or drop {given}")
    update: dict[str, Any] = {}
    if lora_rank is not None:
        if isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or not 1 <= lora_rank <= MAX_LORA_RANK:
            raise UserError(f"{name['rank']} must be a whole number from 1 to {MAX_LORA_RANK}, got {lora_rank!r}; "
                            "typical ranks are 8 to 64")
        update["lora_rank"] = lora_rank
    if lora_alpha is not None:
        if isinstance(lora_alpha, bool) or not isinstance(lora_alpha, (int, float)) or not 0 < lora_alpha < 1e9:
            raise UserError(f"{name['alpha']} must be a positive number, got {lora_alpha!r}; the default is "
                            "2 x rank")
        update["lora_alpha"] = float(lora_alpha)
    if targets is not None:
        if isinstance(targets, str):
            update["target_modules"] = parse_targets(targets, name["targets"])
        else:
            update["target_modules"] = parse_targets(",".join(str(t) for t in targets), name["targets"])
    if double_quant is not None:
        if base.method != "qlora":
            raise UserError("double quantisation is a QLoRA setting; use finetune 'qlora' or drop double_quant")
        update["double_quant"] = bool(double_quant)
    try:
        return FineTune.model_validate({**base.model_dump(), **update})
    except ValueError as exc:
        from .hf_config import _first_error

        raise UserError(f"{name['method']}: {_first_error(exc)}") from None


def check_targets(model: ModelSpec, finetune: FineTune, flag: str = "--lora-targets") -> None:
    """Refuse adapters that would train nothing: every targeted role is absent from the model."""
    if not finetune.adapters or model.kind != "transformer":
        return
    missing = missing_targets(model, finetune.target_modules)
    if len(missing) == len(finetune.target_modules):
        have = ",".join(r for r in ALL_LINEAR if r in adapter_linears(model))
        raise UserError(f"{flag} {','.join(missing)}: '{model.name}' has no such linear layer (its MLP is not "
                        f"gated); target some of {have}")


__all__ = ["LABELS", "METHODS", "TARGET_SETS", "adapter_linears", "adapter_params", "check_targets",
           "make_finetune", "missing_targets", "parse_targets", "trainable_params"]
