"""Workload stage: model specs ("1.5B", presets, HF config.json, explicit shape, generic) and training settings.

Entry points: `resolve_model(text)`, `model_from_args(...)`, `generic_model(...)`, `training_settings(...)`,
`make_workload(model, **settings)`. No torch import: this is on the fast `suggest` path.
"""
from .catalog import preset_names
from .hf_config import model_from_hf_config
from .settings import make_workload, training_settings
from .specs import generic_model, model_from_args, resolve_model

__all__ = ["generic_model", "make_workload", "model_from_args", "model_from_hf_config", "preset_names",
           "resolve_model", "training_settings"]
