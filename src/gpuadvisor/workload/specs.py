"""Turn what the user typed ("1.5B", "gpt2-xl", "path/config.json", "L24-H1024-A16") into a ModelSpec."""
from __future__ import annotations

import re
from typing import Any, Literal, Optional

from ..errors import UserError, validation_message
from ..schemas.workload import ModelSpec
from . import catalog
from .hf_config import looks_like_path, model_from_hf_config


def resolve_model(text: str) -> ModelSpec:
    """Resolve a model description into a ModelSpec.

    Accepts a size ("1.5B", "350M", "125m"; snapped to the nearest documented shape when within ±20%,
    noted in `ModelSpec.source`), a preset name or alias ("gpt2-xl", "llama-7b", "resnet18"), or the path
    of a HuggingFace config.json (or of a folder holding one). Raises UserError otherwise.
    """
    return resolve_preset(text)[0]


def resolve_preset(text: str) -> tuple[ModelSpec, Optional[catalog.Preset]]:
    """Like resolve_model, also returning the catalog entry (workload defaults) when there is one."""
    t = (text or "").strip()
    if not t:
        raise UserError("no model given; pass a size (e.g. 1.5B), a preset (e.g. gpt2-xl) or a config.json path")
    preset = catalog.lookup(t)
    if preset is not None:
        return _described(preset.spec, preset), preset
    if looks_like_path(t):
        return model_from_hf_config(t), None
    n = catalog.parse_size(t)
    if n is not None:
        preset, label, rel = catalog.nearest_size(n, typed=t)
        spec = _described(preset.spec, preset)
        if rel == 0:
            source = f"size {label} -> {preset.key}; {spec.source}"
        else:
            source = (f"size {catalog.format_size(n)} is not documented; snapped to {label} ({preset.key}, "
                      f"{rel:.1%} away); {spec.source}")
        return spec.model_copy(update={"name": f"{preset.key} ({label})", "source": source}), preset
    shaped = shape_model(t)
    if shaped is not None:
        return shaped, None
    known = ", ".join(catalog.preset_names())
    raise UserError(f"unknown model '{t}': give a size like 1.5B, a preset ({known}), a shape like "
                    "L24-H1024-A16 (layers, hidden, heads) or a HuggingFace config.json path")


def _described(spec: ModelSpec, preset: catalog.Preset) -> ModelSpec:
    """The preset's spec with a display name carrying its size, and its note appended to the source."""
    label = catalog.format_size(spec.params)
    source = f"{spec.source}; note: {preset.note}" if preset.note else spec.source
    return spec.model_copy(update={"name": f"{preset.key} ({label})", "source": source})


def swiglu_ffn(hidden: int, multiple_of: int = 256) -> int:
    """Llama's FFN width: 2/3 of 4h rounded up to `multiple_of` (Touvron et al. 2023; 4096 -> 11008)."""
    width = int(2 * 4 * hidden / 3)
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


def model_from_args(layers: int, hidden: int, heads: int, ffn: Optional[int] = None, vocab: int = 50257,
                    seq: int = 1024, *, mlp: Literal["gelu", "swiglu"] = "gelu", kv_heads: int = 0,
                    tied: Optional[bool] = None, name: Optional[str] = None) -> ModelSpec:
    """A transformer from an explicit shape (layers/hidden/heads[/ffn/vocab/seq]; the L-H-A shape spec).

    ffn defaults to 4·hidden (gelu) or Llama's 8/3·hidden rounded to 256 (swiglu). `seq` is the learned
    position table length for gelu models; swiglu models get rotary positions (no table).
    Embeddings are tied for gelu (GPT-2) and untied for swiglu (Llama) unless `tied` says otherwise.
    """
    if ffn is None:
        ffn = swiglu_ffn(hidden) if mlp == "swiglu" else 4 * hidden
    fields: dict[str, Any] = dict(n_layers=layers, d_model=hidden, n_heads=heads, d_ff=ffn, vocab_size=vocab,
                  max_seq_len=0 if mlp == "swiglu" else seq, mlp=mlp, n_kv_heads=kv_heads,
                  tied_embeddings=(mlp == "gelu") if tied is None else tied)
    for key in ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size"):
        if not isinstance(fields[key], int) or fields[key] <= 0:
            raise UserError(f"model shape: {key} must be a positive integer, got {fields[key]!r}")
    label = name or f"custom L{layers} h{hidden} a{heads}"
    try:
        return ModelSpec(name=label, source=f"explicit shape: layers={layers} hidden={hidden} heads={heads} "
                         f"ffn={ffn} vocab={vocab} seq={seq} mlp={mlp}", **fields)
    except ValueError as exc:
        raise UserError(f"model shape: {validation_message(exc)}; pick heads dividing hidden (A divides H)") from None


def generic_model(name: str, params: float, flops_per_sample: float,
                  activation_bytes_per_sample: Optional[float] = None) -> ModelSpec:
    """A non-transformer model given by parameter count, training FLOPs per sample and activation bytes.

    `flops_per_sample` is forward + backward (≈ 3 × forward); only DP/ZeRO plans apply to such models.
    """
    if not params or params <= 0:
        raise UserError(f"generic model '{name}': params must be positive, got {params}")
    if not flops_per_sample or flops_per_sample <= 0:
        raise UserError(f"generic model '{name}': flops_per_sample must be positive, got {flops_per_sample}")
    if activation_bytes_per_sample is not None and activation_bytes_per_sample < 0:
        raise UserError(f"generic model '{name}': activation_bytes_per_sample must be >= 0")
    return ModelSpec(name=name, kind="generic", params_override=int(params), flops_per_sample=float(flops_per_sample),
                     activation_bytes_per_sample=activation_bytes_per_sample,
                     source="user: params + FLOPs per sample")


#: Vocabulary of the shape-spec models: the paper's synthetic data set has 8000 token ids (seed 001, sec. II-A).
SHAPE_VOCAB = 8000
_SHAPE_RE = re.compile(r"^L(\d+)-?H(\d+)-?A(\d+)(?:-?F(\d+))?(?:-?V(\d+))?(?:-?S(\d+))?$", re.IGNORECASE)


def shape_model(text: str) -> Optional[ModelSpec]:
    """A model from a shape spec 'L<layers>-H<hidden>-A<heads>[-F<ffn>][-V<vocab>][-S<positions>]', else None.

    For tiny CPU studies, e.g. L2-H32-A4-V256-S16. Vocabulary defaults to 8000 (the paper's data set).
    """
    m = _SHAPE_RE.fullmatch(text.strip())
    if not m:
        return None
    layers, hidden, heads = (int(m.group(i)) for i in (1, 2, 3))
    ffn = int(m.group(4)) if m.group(4) else None
    vocab = int(m.group(5)) if m.group(5) else SHAPE_VOCAB
    seq = int(m.group(6)) if m.group(6) else 1024
    return model_from_args(layers, hidden, heads, ffn, vocab=vocab, seq=seq, name=text.strip())


def make_workload(model, **settings):  # noqa: ANN001, ANN201 - re-export, see settings.make_workload
    """Workload from a model description and training settings (see `settings.make_workload`)."""
    from .settings import make_workload as _make  # lazy: settings imports this module

    return _make(model, **settings)
