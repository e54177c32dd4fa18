"""What a study asks for: models, strategies, GPU counts, run length; parsing of the CLI lists.

The design is the A6000 paper's (seed 001, sec. II-III): per model a fixed global batch and a fixed
number of steps, so every strategy and world size sees the same total tokens; a 1-GPU baseline per
model; DP/ZeRO split the batch across ranks, TP sees the whole batch, PP cuts it into m micro-batches.
"""
from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field

from ..errors import UserError
from ..schemas import Workload
from ..schemas._base import Frozen
from ..schemas.workload import FineTune
from ..workload.specs import _SHAPE_RE, SHAPE_VOCAB, shape_model  # noqa: F401 - re-exported (study --models shapes)

#: Every strategy a study can run, in the order tables and plots list them. The two partial offloads are what
#: `suggest` picks for a model that fits with only the optimizer in host RAM: ZeRO-2 with DeepSpeed's
#: offload_optimizer, and ZeRO-3 with the optimizer alone offloaded (parameters stay on the device).
STRATEGIES = ("dp", "tp", "pp", "zero1", "zero2", "zero2-offload", "zero3", "zero3-offload-optim", "zero3-offload")
#: 'all': the papers' grid (seed 001 runs DP, TP, PP, ZeRO-1/2/3 and ZeRO-3 with offload); the partial offloads
#: run when named.
ALL_STRATEGIES = ("dp", "tp", "pp", "zero1", "zero2", "zero3", "zero3-offload")
#: Strategies for LoRA/QLoRA: data parallel without offload, what the bundled trainers run for adapters
#: (trainers/support.finetune_reason: not split by TP/PP, no ZeRO offload).
ADAPTER_STRATEGIES = ("dp", "zero1", "zero2", "zero3")
PP_FACTORS = {"p": 1, "4p": 4}


class GpuCount(Frozen):
    """One world size of the grid: `gpus` devices, optionally pinned to `nodes` nodes (from 'NxM')."""

    gpus: int = Field(ge=1, description="Devices in the run")
    nodes: Optional[int] = Field(None, ge=1, description="Nodes, when given as NODESxGPUS; None = fewest nodes")

    @property
    def label(self) -> str:
        return f"{self.nodes}x{self.gpus // self.nodes}" if self.nodes else str(self.gpus)


class StudySpec(Frozen):
    """The study grid's axes and run length (what `gpuadvisor study` was asked)."""

    models: list[str] = Field(description="Model descriptions as typed: sizes, presets, config paths, L2-H32-A4 shapes")
    strategies: list[str] = Field(description="Strategies among dp, tp, pp, zero1, zero2, zero2-offload, zero3, "
                                  "zero3-offload-optim, zero3-offload")
    gpus: list[GpuCount]
    steps: int = Field(200, ge=1, description="Timed steps per cell (the paper: 200)")
    warmup: int = Field(10, ge=0, description="Untimed warm-up steps per cell")
    pp_microbatches: list[Literal["p", "4p"]] = Field(default_factory=lambda: list[Literal["p", "4p"]](["p"]),
                                                        description="PP micro-batch counts: m=p and/or m=4p")
    seq_len: Optional[int] = Field(None, description="Override of every model's sequence length")
    global_batch: Optional[int] = Field(None, description="Override of every model's global batch")
    precision: Optional[str] = Field(None, description="Override of the models' precision")
    finetune: FineTune = Field(default_factory=FineTune,
                               description="Full fine-tuning (default), or LoRA/QLoRA adapters for every model")


def _items(text: str, what: str) -> list[str]:
    items = [s.strip() for s in (text or "").split(",") if s.strip()]
    if not items:
        raise UserError(f"--{what} is empty; give a comma-separated list")
    return items


def parse_strategies(text: str, adapters: bool = False) -> list[str]:
    """'dp,tp,zero3-offload' (or 'all', the papers' grid; 'all,zero2-offload' adds to it) -> validated list in the
    canonical order.

    `adapters` (LoRA/QLoRA): 'all' is the data-parallel strategies without offload, the ones the bundled trainers
    run for adapters; tp/pp and the offloads are refused."""
    items = [s.lower() for s in _items(text, "strategies")]
    if "all" in items:  # the grid, plus whatever else is named ('all,zero2-offload')
        items = [s for s in items if s != "all"] + list(ADAPTER_STRATEGIES if adapters else ALL_STRATEGIES)
    bad = [s for s in items if s not in STRATEGIES]
    if bad:
        raise UserError(f"unknown strategy '{bad[0]}'; use any of {','.join(STRATEGIES)} (or 'all')")
    if adapters:
        split = [s for s in items if s in ("tp", "pp")]
        if split:
            raise UserError(f"--strategies {','.join(split)}: LoRA/QLoRA adapters train on data-parallel plans only; "
                            f"use any of {','.join(ADAPTER_STRATEGIES)} (or 'all'), or --finetune full")
        offload = [s for s in items if s not in ADAPTER_STRATEGIES]
        if offload:
            raise UserError(f"--strategies {','.join(offload)}: the bundled trainers run LoRA/QLoRA adapters without "
                            f"ZeRO offload; use any of {','.join(ADAPTER_STRATEGIES)} (or 'all'), or --finetune full")
    return [s for s in STRATEGIES if s in items]


def parse_gpus(text: str) -> list[GpuCount]:
    """'1,2,4' or '1,2,2x1,2x2' (NODESxGPUS per node) -> sorted unique GpuCounts."""
    out: list[GpuCount] = []
    for item in _items(text, "gpus"):
        m = re.fullmatch(r"(\d+)(?:x(\d+))?", item.lower())
        if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < 1):
            raise UserError(f"cannot read GPU count '{item}'; write e.g. --gpus 1,2,4 or 2x2 (nodes x GPUs per node)")
        if m.group(2):
            n, per = int(m.group(1)), int(m.group(2))
            out.append(GpuCount(gpus=n * per, nodes=n))
        else:
            out.append(GpuCount(gpus=int(m.group(1))))
    uniq = {(g.gpus, g.nodes or 0): g for g in out}
    return [uniq[k] for k in sorted(uniq)]


def parse_pp_microbatches(text: str) -> list[str]:
    """'p,4p' -> ['p', '4p']."""
    items = [s.lower() for s in _items(text, "pp-microbatches")]
    bad = [s for s in items if s not in PP_FACTORS]
    if bad:
        raise UserError(f"unknown micro-batch count '{bad[0]}'; use p, 4p or p,4p (m = stages, or 4 x stages)")
    return [s for s in PP_FACTORS if s in items]


def parse_models(text: str) -> list[str]:
    """'100M,300M,L2-H32-A4-S16' -> list (duplicates removed, order kept)."""
    seen: dict[str, None] = {}
    for m in _items(text, "models"):
        seen.setdefault(m, None)
    return list(seen)


def model_slug(text: str) -> str:
    """A file-name-safe label of a model description."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", text.strip()).strip("-")
    return slug or "model"


def resolve_workload(text: str, spec: StudySpec, precision: Optional[str] = None) -> Workload:
    """The Workload of one model of the study (presets bring the paper's Table I seq len and batch); `precision`
    stands in where `spec.precision` is unset (execute.resolve_workloads: fp16 on GPUs without bf16), else the
    model's own."""
    from ..workload.specs import make_workload

    settings: dict = {}
    if spec.seq_len is not None:
        settings["seq_len"] = spec.seq_len
    if spec.global_batch is not None:
        settings["global_batch"] = spec.global_batch
    if (spec.precision or precision) is not None:
        settings["precision"] = spec.precision or precision
    shaped = shape_model(text)
    if shaped is not None:
        settings.setdefault("seq_len", min(shaped.max_seq_len or 128, 128))
        return make_workload(shaped, finetune=spec.finetune, **settings)
    return make_workload(text, finetune=spec.finetune, **settings)
