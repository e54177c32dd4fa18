"""The model catalog: knowledge/models.yaml presets and the nominal size table, loaded once."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import UserError
from ..paths import knowledge_dir
from ..safe_yaml import load_bundled_yaml
from ..schemas.workload import ModelSpec
from .convnets import resnet_counts

_SHAPE_KEYS = ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size", "max_seq_len", "tied_embeddings",
               "n_kv_heads", "mlp", "head_dim", "norm", "norms_per_layer", "qk_norm", "bias", "qkv_bias", "dropout",
               "n_experts", "experts_per_token", "expert_d_ff", "shared_expert_d_ff", "sliding_window",
               "sliding_window_layers", "attention_sinks")
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


@dataclass(frozen=True)
class Preset:
    """A catalog entry: the ModelSpec plus workload defaults and reference numbers."""

    key: str
    spec: ModelSpec
    published_params: Optional[int] = None
    published_active_params: Optional[int] = None
    context: int = 0
    default_seq_len: Optional[int] = None
    default_global_batch: Optional[int] = None
    batch_source: str = ""  # where default_global_batch comes from
    default_precision: Optional[str] = None
    note: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)
    #: (name, flavor) of the torchtitan model with this shape (its job TOML's [model] section), if torchtitan has one
    torchtitan: Optional[tuple[str, str]] = None


def normalize(name: str) -> str:
    """Lower-case, '_' -> '-', surrounding whitespace dropped: 'GPT2_XL ' -> 'gpt2-xl'."""
    return name.strip().lower().replace("_", "-")


def format_size(n: float) -> str:
    """1.5e9 -> '1.5B', 124e6 -> '124M'; beyond 1000T in scientific notation ('1.12e+17')."""
    if n >= 1e15:
        return f"{n:.3g}"
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.4g}{suffix}"
    return f"{n:.0f}"


def parse_size(text: str) -> Optional[float]:
    """'1.5B' / '350m' / '10M' -> parameter count; None when `text` is not a size."""
    t = text.strip().lower().replace(" ", "")
    if len(t) < 2 or t[-1] not in _SUFFIX:
        return None
    try:
        value = float(t[:-1])
    except ValueError:
        return None
    return value * _SUFFIX[t[-1]] if value > 0 else None


@functools.lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    path = knowledge_dir() / "models.yaml"
    with open(path, encoding="utf-8") as f:
        return load_bundled_yaml(f)


def _build(key: str, entry: dict[str, Any]) -> Preset:
    """Turn one YAML entry into a Preset (deriving generic models' numbers)."""
    source = " ".join(str(entry.get("source", "")).split())
    note = " ".join(str(entry.get("note", "")).split())
    if "derive" in entry:
        d = dict(entry["derive"])
        if d.pop("family") != "resnet":
            raise ValueError(f"models.yaml preset {key}: unknown derive family")
        counts = resnet_counts(**d)
        spec = ModelSpec(
            name=key, kind="generic", params_override=counts.params, flops_per_sample=counts.training_flops,
            activation_bytes_per_sample=float(counts.activation_elements * entry["activation_bytes_per_element"]),
            source=source,
        )
    else:
        spec = ModelSpec(name=key, source=source, **{k: entry[k] for k in _SHAPE_KEYS if k in entry})
    return Preset(
        key=key, spec=spec, published_params=entry.get("published_params"),
        published_active_params=entry.get("published_active_params"),
        context=int(entry.get("context") or spec.max_seq_len),
        default_seq_len=entry.get("default_seq_len"), default_global_batch=entry.get("default_global_batch"),
        batch_source=" ".join(str(entry.get("batch_source", "")).split()),
        default_precision=entry.get("default_precision"), note=note,
        aliases=tuple(entry.get("aliases", ())),
        torchtitan=_torchtitan(key, entry.get("torchtitan")),
    )


def _torchtitan(key: str, value: Any) -> Optional[tuple[str, str]]:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2):
        raise ValueError(f"models.yaml preset {key}: torchtitan must be [name, flavor], got {value!r}")
    return str(value[0]), str(value[1])


@functools.lru_cache(maxsize=1)
def presets() -> dict[str, Preset]:
    """All presets by canonical name."""
    return {key: _build(key, entry) for key, entry in _raw()["presets"].items()}


@functools.lru_cache(maxsize=1)
def _names() -> dict[str, str]:
    out: dict[str, str] = {}
    for key, p in presets().items():
        out[normalize(key)] = key
        for alias in p.aliases:
            out[normalize(alias)] = key
    return out


@functools.lru_cache(maxsize=1)
def sizes() -> dict[float, tuple[str, str]]:
    """Nominal parameter count -> (size label, preset name), from the size table."""
    out = {}
    for label, key in _raw()["sizes"].items():
        n = parse_size(str(label))
        if n is None or key not in presets():
            raise ValueError(f"models.yaml size '{label}' -> '{key}' is malformed")
        out[n] = (str(label), key)
    return out


def lookup(name: str) -> Optional[Preset]:
    """The preset called `name` (or one of its aliases), else None."""
    key = _names().get(normalize(name))
    return presets()[key] if key else None


def torchtitan_preset(name: str, flavor: str) -> Optional[Preset]:
    """The preset torchtitan's model `name` of `flavor` trains ([model] name = "llama3", flavor = "8B"), else None."""
    return next((p for p in presets().values() if p.torchtitan == (name.strip(), flavor.strip())), None)


def preset_names() -> list[str]:
    """Canonical preset names, catalog order."""
    return list(presets())


def nearest_size(n: float, tolerance: float = 0.2, typed: Optional[str] = None) -> tuple[Preset, str, float]:
    """The preset whose nominal size is nearest to `n`: (preset, label, relative distance).

    Raises UserError when none is within `tolerance` (relative to the documented size); the message
    quotes `typed` (what the user wrote, e.g. '0.5M') when given.
    """
    table = sizes()
    best = min(table, key=lambda s: abs(n - s) / s)
    rel = abs(n - best) / best
    if rel > tolerance:
        known = ", ".join(label for label, _ in table.values())
        raise UserError(
            f"unknown model size '{typed or format_size(n)}': known sizes {known} (±{tolerance:.0%}); "
            "or give a preset name, a shape like L24-H1024-A16 (layers, hidden, heads) or the path of a "
            "HuggingFace config.json"
        )
    label, key = table[best]
    return presets()[key], label, rel
