"""What fine-tuning changes in a transformer's counts: adapter parameters, frozen-weight bytes, FLOPs per token.

LoRA (Hu et al. 2021, arXiv:2106.09685 §4.1): a frozen Linear W (out x in) gets A (r x in) and B (out x r), so
each adapted Linear adds r·(in + out) trainable parameters; nothing else trains (embeddings, norms, head frozen,
as peft does by default). QLoRA (Dettmers et al. 2023, arXiv:2305.14314 §3) stores the frozen Linear weights as
4-bit NormalFloat in blocks of 64 with one fp32 absmax each (32/64 = 0.5 bit/param); double quantisation stores
those absmax as 8-bit in blocks of 256 with one fp32 constant each: 8/64 + 32/(64·256) = 0.127 bit/param.
Embeddings, norms and the LM head stay 16-bit (bitsandbytes quantises Linear layers only; transformers keeps the
output head unquantised).

FLOPs (PaLM app. B accounting: forward 2N, backward 4N per token): a frozen Linear still needs its input
gradient (2N) but no weight gradient (2N), so a frozen base costs 4N per token instead of 6N; attention's score
and value matmuls (no weights) keep their full fwd+bwd cost; each adapter costs 6·r·(in + out) (its weight
gradients are computed).

User settings (below the counts): `make_finetune` builds a FineTune from a method name and LoRA options with
one-line errors worded for the CLI's flags or the API's arguments; `parse_targets` reads 'q,k,v' / 'all-linear' /
'attention' / 'mlp'. Where a framework fuses projections (GPT-2's c_attn holds q,k,v; transformers >= 5 stores an
MoE layer's experts' gate and up as one gate_up_proj parameter) peft trains one adapter over the fused width, a
little fewer parameters than counted here.
"""
from __future__ import annotations

from typing import Any, Optional, Union

from ..errors import UserError, validation_message
from ..schemas.workload import ALL_LINEAR, MAX_LORA_RANK, FineTune, ModelSpec, Workload
from .shapes import LayerShape, layer_shape

#: NF4 storage per frozen Linear parameter (bytes), without and with double quantisation (QLoRA §3).
NF4_BITS = 4.0
NF4_CONSTANT_BITS = 32.0 / 64.0
NF4_DOUBLE_QUANT_CONSTANT_BITS = 8.0 / 64.0 + 32.0 / (64.0 * 256.0)


def nf4_bytes_per_param(double_quant: bool = True) -> float:
    """Bytes one NF4-stored weight takes with its block constants: 0.5625, or 0.5159 with double quantisation."""
    return (NF4_BITS + (NF4_DOUBLE_QUANT_CONSTANT_BITS if double_quant else NF4_CONSTANT_BITS)) / 8.0


def linears(shape: LayerShape, active: bool = False) -> dict[str, list[tuple[int, int, int]]]:
    """role -> [(in, out, copies)] of one layer's Linear weights (MoE: each routed expert, top-k when `active`).

    Roles as `FineTune.target_modules` names them: q, k, v, o (attention), gate, up, down (MLP; gate only in
    gated MLPs, a GeLU MLP's fc1/fc2 are up/down). The MoE router (d x E) is a Linear with no role: never adapted.
    """
    d, q, k = shape.d_model, shape.q_dim, shape.kv_dim
    out: dict[str, list[tuple[int, int, int]]] = {"q": [(d, q, 1)], "k": [(d, k, 1)], "v": [(d, k, 1)],
                                                  "o": [(q, d, 1)], "gate": [], "up": [], "down": []}
    mlps: list[tuple[int, int]] = []  # (width, copies)
    if shape.moe:
        mlps.append((shape.expert_d_ff, shape.experts_per_token if active else shape.n_experts))
        if shape.shared_d_ff:
            mlps.append((shape.shared_d_ff, 1))
    else:
        mlps.append((shape.d_ff, 1))
    for f, n in mlps:
        if shape.gated:
            out["gate"].append((d, f, n))
        out["up"].append((d, f, n))
        out["down"].append((f, d, n))
    return out


def linear_weight_params(shape: LayerShape, active: bool = False) -> int:
    """Matrix weights of one layer's Linears (what QLoRA quantises), router included, biases and norms not."""
    n = sum(i * o * c for mats in linears(shape, active).values() for i, o, c in mats)
    if shape.moe:
        n += shape.d_model * shape.n_experts
    return n


def adapter_params_per_layer(shape: LayerShape, ft: FineTune, active: bool = False) -> int:
    """LoRA parameters of one layer: r·(in + out) per targeted Linear (per expert copy with MoE)."""
    if not ft.adapters:
        return 0
    mats = linears(shape, active)
    return sum(ft.lora_rank * (i + o) * c for role in ft.target_modules for i, o, c in mats[role])


def adapter_params(m: ModelSpec, ft: FineTune, active: bool = False) -> int:
    """Trainable adapter parameters of the whole model (0 for full fine-tuning)."""
    if not ft.adapters:
        return 0
    return m.n_layers * adapter_params_per_layer(layer_shape(m), ft, active)


def frozen_layer_bytes(shape: LayerShape, ft: FineTune, weight_bytes: float) -> float:
    """Bytes of one layer's frozen base weights: all at `weight_bytes` (LoRA), Linear matrices NF4 (QLoRA)."""
    if ft.method == "qlora":
        lin = linear_weight_params(shape)
        return lin * nf4_bytes_per_param(ft.double_quant) + (shape.params - lin) * weight_bytes
    return shape.params * weight_bytes


def frozen_model_bytes(m: ModelSpec, ft: FineTune, weight_bytes: float) -> float:
    """Bytes of the whole frozen base: the layers (NF4 Linears with QLoRA) plus 16-bit embedding, head, final norm."""
    shape = layer_shape(m)
    rest = m.params - m.n_layers * shape.params
    return m.n_layers * frozen_layer_bytes(shape, ft, weight_bytes) + rest * weight_bytes


def adapter_flops_per_token(shape: LayerShape, ft: FineTune) -> float:
    """Training FLOPs per token of one layer's adapters (active experts only): 6·r·(in + out) each."""
    return 6.0 * adapter_params_per_layer(shape, ft, active=True)


METHODS = ("full", "lora", "qlora")
#: Named target sets (peft's "all-linear" is every linear layer but the output head).
TARGET_SETS: dict[str, tuple[str, ...]] = {"all-linear": ALL_LINEAR, "attention": ("q", "k", "v", "o"),
                                           "mlp": ("gate", "up", "down")}
LABELS = {"full": "full fine-tuning", "lora": "LoRA", "qlora": "QLoRA"}


def adapter_linears(model: ModelSpec) -> dict[str, list[tuple[int, int, int]]]:
    """role -> [(in, out, copies per layer)] of the Linears an adapter on that role would sit on (roles the model
    has: no gate on a GeLU MLP)."""
    return {role: mats for role, mats in linears(layer_shape(model)).items() if mats}


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
        raise UserError(f"{name['method']}: {validation_message(exc)}") from None


def check_targets(model: ModelSpec, finetune: FineTune, flag: str = "--lora-targets") -> None:
    """Refuse adapters that would train nothing: every targeted role is absent from the model."""
    if not finetune.adapters or model.kind != "transformer":
        return
    missing = missing_targets(model, finetune.target_modules)
    if len(missing) == len(finetune.target_modules):
        have = ",".join(r for r in ALL_LINEAR if r in adapter_linears(model))
        raise UserError(f"{flag} {','.join(missing)}: '{model.name}' has no such linear layer (its MLP is not "
                        f"gated); target some of {have}")


__all__ = ["LABELS", "METHODS", "NF4_BITS", "TARGET_SETS", "adapter_flops_per_token", "adapter_linears",
           "adapter_params", "adapter_params_per_layer", "check_targets", "frozen_layer_bytes", "frozen_model_bytes",
           "linear_weight_params", "linears", "make_finetune", "missing_targets", "nf4_bytes_per_param",
           "parse_targets", "trainable_params"]
