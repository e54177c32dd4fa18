"""Read a model shape from a HuggingFace `config.json` (GPT-2 or Llama-style keys)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..schemas.workload import ModelSpec

# Families with rotary positions (no learned position table) and a gated (SwiGLU) MLP.
_ROTARY_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "olmo2",
                 "gpt_neox", "gptj", "falcon"}
_GATED_ACTS = {"silu", "swish", "swiglu"}


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
    """ModelSpec from a HuggingFace config.json: GPT-2 keys (n_layer, n_embd, ...) or Llama keys."""
    path = Path(path_text).expanduser()
    cfg = _load(path)
    name = str(cfg.get("_name_or_path") or cfg.get("model_type") or path.stem)
    if "n_layer" in cfg or "n_embd" in cfg:
        fam = "GPT-2"
        h = _int(cfg, "n_embd", path, fam)
        inner = cfg.get("n_inner")
        fields = dict(
            n_layers=_int(cfg, "n_layer", path, fam), d_model=h, n_heads=_int(cfg, "n_head", path, fam),
            d_ff=_int(cfg, "n_inner", path, fam) if inner is not None else 4 * h,
            vocab_size=_int(cfg, "vocab_size", path, fam), max_seq_len=_int(cfg, "n_positions", path, fam),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), mlp="gelu",
        )
    elif "num_hidden_layers" in cfg or "hidden_size" in cfg:
        fam = "Llama-style"
        model_type = str(cfg.get("model_type", "")).lower()
        rotary = model_type in _ROTARY_TYPES or "rope_theta" in cfg or "rope_scaling" in cfg
        gated = str(cfg.get("hidden_act", "silu")).lower() in _GATED_ACTS
        heads = _int(cfg, "num_attention_heads", path, fam)
        kv = cfg.get("num_key_value_heads")
        positions = _int(cfg, "max_position_embeddings", path, fam)
        fields = dict(
            n_layers=_int(cfg, "num_hidden_layers", path, fam), d_model=_int(cfg, "hidden_size", path, fam),
            n_heads=heads, d_ff=_int(cfg, "intermediate_size", path, fam),
            vocab_size=_int(cfg, "vocab_size", path, fam), max_seq_len=0 if rotary else positions,
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), mlp="swiglu" if gated else "gelu",
            n_kv_heads=_int(cfg, "num_key_value_heads", path, fam) if kv is not None and kv != heads else 0,
        )
    else:
        raise UserError(f"model config {path}: missing key 'n_layer' or 'num_hidden_layers' (not a GPT-2 or "
                        "Llama-style config); write one with n_layer, n_embd and n_head (GPT-2 names)")
    try:
        return ModelSpec(name=name, source=f"HuggingFace config {path} ({fam} keys)", **fields)
    except ValueError as exc:
        raise UserError(f"model config {path}: {_first_error(exc)}") from None


def _first_error(exc: ValueError) -> str:
    """The first message of a pydantic ValidationError, one line."""
    errs = getattr(exc, "errors", None)
    if callable(errs) and errs():
        return str(errs()[0]["msg"]).removeprefix("Value error, ")
    return str(exc).splitlines()[0]
