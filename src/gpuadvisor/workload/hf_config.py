"""Read a model shape from a HuggingFace `config.json` (GPT-2 keys, or a supported decoder model_type)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UserError, validation_message
from ..schemas.workload import ModelSpec
from .hf_families import FAMILIES, GATE_ACTS



def looks_like_path(text: str) -> bool:
    """True when `text` names a file or folder rather than a size or preset."""
    t = text.strip()
    return t.endswith(".json") or "/" in t and Path(t).exists() or t.startswith((".", "~"))


def _load(path: Path) -> dict[str, Any]:
    """The JSON object in `path` (a config.json or a folder holding one)."""
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"model config {path} not found; give the path of a HuggingFace config.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read model config {path}: {exc.__class__.__name__}; check the path and "
                        "permissions") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"model config {path} is not valid JSON (line {exc.lineno}); fix or re-download it"
                        ) from None
    if not isinstance(data, dict):
        raise UserError(f"model config {path} is not a JSON object; give a HuggingFace config.json")
    return data


def _int(cfg: dict[str, Any], key: str, path: Path, family: str) -> int:
    """cfg[key] as a positive int, or a one-line UserError naming the key."""
    if cfg.get(key) is None:
        raise UserError(f"model config {path}: missing key '{key}' ({family} config); add it to the file")
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"model config {path}: key '{key}' must be a positive integer, got {value!r}")
    return value


def model_from_hf_config(path_text: str) -> ModelSpec:
    """ModelSpec from a HuggingFace config.json: GPT-2 keys (n_layer, n_embd, ...) or a supported model_type.

    Supported model types (hf_families.FAMILIES): Llama 2/3, Mistral, Mixtral, Qwen2/2.5, Qwen2-MoE, Qwen3,
    Qwen3-MoE, Gemma, Gemma 2, Gemma 3 (text model), Phi-3. Anything else fails with one line naming it.
    """
    path = Path(path_text).expanduser()
    cfg = _load(path)
    name = str(cfg.get("_name_or_path") or cfg.get("model_type") or path.stem)
    note = ""
    if "n_layer" in cfg or "n_embd" in cfg:
        fam = "GPT-2"
        h = _int(cfg, "n_embd", path, fam)
        inner = cfg.get("n_inner")
        fields: dict[str, Any] = dict(
            n_layers=_int(cfg, "n_layer", path, fam), d_model=h, n_heads=_int(cfg, "n_head", path, fam),
            d_ff=_int(cfg, "n_inner", path, fam) if inner is not None else 4 * h,
            vocab_size=_int(cfg, "vocab_size", path, fam), max_seq_len=_int(cfg, "n_positions", path, fam),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), mlp="gelu",
        )
    elif "num_hidden_layers" in cfg or "hidden_size" in cfg or "text_config" in cfg:
        if str(cfg.get("model_type", "")).lower() == "gemma3" and isinstance(cfg.get("text_config"), dict):
            cfg = {"model_type": "gemma3_text", **cfg["text_config"]}
            note = "; text model only (the vision tower is not counted)"
        fam, fields = _decoder_fields(cfg, path)
    else:
        raise UserError(f"model config {path}: missing key 'n_layer' or 'num_hidden_layers' (not a GPT-2 or "
                        "Llama-style config); write one with n_layer, n_embd and n_head (GPT-2 names)")
    try:
        return ModelSpec(name=name, source=f"HuggingFace config {path} ({fam} keys){note}", **fields)
    except ValueError as exc:
        raise UserError(f"model config {path}: {validation_message(exc)}") from None


def _decoder_fields(cfg: dict[str, Any], path: Path) -> tuple[str, dict[str, Any]]:
    """ModelSpec fields of a rotary decoder config (Llama, Mistral, Qwen, Gemma, Phi-3, MoE variants)."""
    model_type = str(cfg.get("model_type") or "").lower()
    family = FAMILIES.get(model_type)
    if family is None:
        arch = ",".join(str(a) for a in cfg.get("architectures") or []) or "?"
        what = f"model_type '{model_type}'" if model_type else "no 'model_type' key"
        raise UserError(f"model config {path}: architecture {arch} ({what}) is not supported: its layer layout "
                        f"is unknown; supported model types: {', '.join(FAMILIES)}, gemma3 (its text_config); "
                        "or give the shape as L<layers>-H<hidden>-A<heads>")
    fam = family.label
    act = str(cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu").lower()
    if act not in GATE_ACTS:
        raise UserError(f"model config {path}: hidden_act '{act}' of a {fam} gated MLP is not supported; "
                        f"supported: {', '.join(GATE_ACTS)}")
    heads = _int(cfg, "num_attention_heads", path, fam)
    kv = _opt_int(cfg, "num_key_value_heads", path) or heads
    layers = _int(cfg, "num_hidden_layers", path, fam)
    attn_bias = bool(cfg.get("attention_bias", False))
    fields: dict[str, Any] = dict(
        n_layers=layers, d_model=_int(cfg, "hidden_size", path, fam), n_heads=heads,
        n_kv_heads=kv if kv != heads else 0, head_dim=_opt_int(cfg, "head_dim", path),
        vocab_size=_int(cfg, "vocab_size", path, fam), max_seq_len=0,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", family.tied_default)),
        mlp=GATE_ACTS[act], norm="rmsnorm", norms_per_layer=family.norms_per_layer, qk_norm=family.qk_norm,
        bias=family.bias or bool(cfg.get("mlp_bias", False)), qkv_bias=family.qkv_bias or attn_bias, dropout=False,
        attention_sinks=family.sinks,
    )
    fields.update(_moe_fields(cfg, path, fam, family.moe))
    fields.update(_window_fields(cfg, path, family.sliding, layers))
    return fam, fields


def _moe_fields(cfg: dict[str, Any], path: Path, fam: str, moe: str) -> dict[str, Any]:
    """d_ff and, for MoE families, experts / top-k / expert and shared-expert widths."""
    if not moe:
        return {"d_ff": _int(cfg, "intermediate_size", path, fam)}
    if moe == "mixtral":
        return {"d_ff": _int(cfg, "intermediate_size", path, fam),
                "n_experts": _int(cfg, "num_local_experts", path, fam),
                "experts_per_token": _int(cfg, "num_experts_per_tok", path, fam)}
    sparse_step = cfg.get("decoder_sparse_step", 1)
    dense_layers = cfg.get("mlp_only_layers") or []
    if sparse_step != 1 or dense_layers:
        raise UserError(f"model config {path}: dense layers among the MoE layers (decoder_sparse_step "
                        f"{sparse_step}, mlp_only_layers {dense_layers}) are not supported; every layer must be MoE")
    expert = _int(cfg, "moe_intermediate_size", path, fam)
    return {"d_ff": _opt_int(cfg, "intermediate_size", path) or expert, "expert_d_ff": expert,
            "n_experts": _int(cfg, "num_experts", path, fam),
            "experts_per_token": _int(cfg, "num_experts_per_tok", path, fam),
            "shared_expert_d_ff": _opt_int(cfg, "shared_expert_intermediate_size", path)}


def _window_fields(cfg: dict[str, Any], path: Path, sliding: str, layers: int) -> dict[str, Any]:
    """sliding_window and how many layers use it (an explicit `layer_types` list wins)."""
    window = _opt_int(cfg, "sliding_window", path)
    if not window or not sliding:
        return {}
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        n = sum(1 for t in types if t == "sliding_attention")
    elif sliding == "all":
        n = layers
    elif sliding == "qwen":
        if not cfg.get("use_sliding_window", False):
            return {}
        n = max(0, layers - int(cfg.get("max_window_layers") or 0))
    elif sliding == "alternate":
        n = (layers + 1) // 2  # Gemma 2: layers 0, 2, 4, ... slide
    else:
        k = _int(cfg, "sliding_window_pattern", path, "Gemma 3")
        n = layers - layers // k  # every k-th layer is global
    return {"sliding_window": window, "sliding_window_layers": n} if n else {}


def _opt_int(cfg: dict[str, Any], key: str, path: Path) -> int:
    """cfg[key] as a positive int, 0 when absent or null; a one-line UserError when malformed."""
    value = cfg.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"model config {path}: key '{key}' must be a positive integer or null, got {value!r}")
    return value
