"""Read the public measured training runs (knowledge/measurements/public/*.csv) into typed PublicRun rows.

The files and their schema are described in knowledge/measurements/public/README.md. Only the
training-throughput files are read here (TRAINING_FILES); the matmul and NCCL tables have other schemas.
"""
from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path
from typing import Optional

from ..errors import UserError
from ..paths import knowledge_dir

#: The training-throughput CSVs (file stem = PublicRun.family) and their row counts in the README.
TRAINING_FILES: dict[str, int] = {
    "llmfoundry_mpt": 216,
    "torchtitan": 55,
    "megatron_lm": 20,
    "megatron_bridge_perf": 293,
    "deepspeed_fsdp": 142,
    "single_node_gpt2": 7,
    "consumer_gpus": 2,
}

#: What a source's own script fixes that its rows leave empty: source_id -> (gradient accumulation steps, where).
#: A row without its global batch gets micro-batch x GPUs x these steps, and the `grad_accum` cell.
SCRIPT_ACCUMULATION: dict[str, tuple[int, str]] = {
    "mleng_h200_vs_b200_llama8b": (1, "stas00/ml-engineering insights/when-to-upgrade-gpus/benchmark.py ds_config(): "
                                      "gradient_accumulation_steps 1, train_micro_batch_size_per_gpu 1"),
}

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


def public_dir() -> Path:
    """The folder holding the public measurement CSVs."""
    return knowledge_dir() / "measurements" / "public"


def _num(text: str) -> Optional[float]:
    """The leading number of a cell ('110.95 (60.2%)' -> 110.95); None for an empty or non-numeric cell."""
    m = _NUMBER.match(text or "")
    return float(m.group(1)) if m else None


def _int(text: str) -> Optional[int]:
    """An integer cell ('8', '8.0', '3 (optimizer offload)' -> 3); None when empty or not a whole number."""
    v = _num(text)
    return int(v) if v is not None and float(v).is_integer() else None


@dataclasses.dataclass(frozen=True)
class PublicRun:
    """One measured training run as published: the CSV's typed fields, plus the file it came from.

    Text fields keep the source's wording (e.g. zero_stage '3 (optimizer offload)'); numbers are None
    where the cell is empty. `family` is the file stem, `row` the 1-based data row in that file.
    """

    family: str
    row: int
    source_id: str
    source_ref: str
    gpu: str
    gpu_mem_gb: Optional[float]
    gpus: Optional[int]
    nodes: Optional[int]
    gpus_per_node: Optional[int]
    interconnect: str
    framework: str
    software: str
    model_name: str
    arch: str
    params: Optional[int]
    layers: Optional[int]
    hidden: Optional[int]
    heads: Optional[int]
    kv_heads: Optional[int]
    ffn_hidden: Optional[int]
    vocab: Optional[int]
    seq_len: Optional[int]
    precision: str
    dp: Optional[int]
    tp: Optional[int]
    pp: Optional[int]
    vpp: Optional[int]
    cp: Optional[int]
    ep: Optional[int]
    zero_stage: str
    fsdp_mode: str
    micro_batch: Optional[int]
    grad_accum: Optional[int]
    global_batch: Optional[int]
    global_batch_tokens: Optional[int]
    activation_checkpointing: str
    compile: str
    other_opts: str
    tokens_per_s_per_gpu: Optional[float]
    tokens_per_s_total: Optional[float]
    samples_per_s: Optional[float]
    iter_time_s: Optional[float]
    tflops_per_gpu: Optional[float]
    mfu_pct: Optional[float]
    hfu_pct: Optional[float]
    peak_tflops_assumed: Optional[float]
    mem_gib: Optional[float]
    metric_definition: str
    notes: str

    @property
    def ref(self) -> str:
        """Short reference to the row: '<file stem>:<row>' (row 1 = first data line)."""
        return f"{self.family}:{self.row}"

    @property
    def measured_iter_time_s(self) -> Optional[float]:
        """Seconds per optimizer step: the row's own, else global batch tokens / (tokens/s/GPU x GPUs), else its
        TFLOP/s per GPU through the FLOP formula its `metric_definition` states (metrics.FULL_RECOMPUTE_FORMULA)."""
        if self.iter_time_s:
            return self.iter_time_s
        tokens = self.global_batch_tokens or (
            self.global_batch * self.seq_len if self.global_batch and self.seq_len else None)
        if tokens and self.tokens_per_s_per_gpu and self.gpus:
            return tokens / (self.tokens_per_s_per_gpu * self.gpus)
        return self._time_from_tflops()

    def _time_from_tflops(self) -> Optional[float]:
        """Seconds per step from the TFLOP/s per GPU through the FLOP formula the row's `metric_definition` names
        (metrics.FULL_RECOMPUTE_FORMULA, metrics.CAUSAL_MODEL_FORMULA); None for any other definition."""
        from .metrics import (CAUSAL_MODEL_FORMULA, FULL_RECOMPUTE_FORMULA, GPT2_VOCAB,
                              causal_model_flops_per_iteration, full_recompute_flops_per_iteration)

        if not (self.tflops_per_gpu and self.gpus and self.global_batch and self.seq_len and self.layers
                and self.hidden):
            return None
        if FULL_RECOMPUTE_FORMULA in self.metric_definition.replace(" ", ""):
            flops = full_recompute_flops_per_iteration(self.global_batch, self.seq_len, self.layers, self.hidden,
                                                       vocab=self.vocab or GPT2_VOCAB)
        elif CAUSAL_MODEL_FORMULA in self.metric_definition and self.heads and self.ffn_hidden and self.vocab:
            flops = causal_model_flops_per_iteration(self.global_batch, self.seq_len, self.layers, self.hidden,
                                                     self.heads, self.kv_heads or self.heads, self.ffn_hidden,
                                                     self.vocab)
        else:
            return None
        return flops / (self.tflops_per_gpu * 1e12 * self.gpus)

    @property
    def measured_tokens_per_s_per_gpu(self) -> Optional[float]:
        """Tokens/s per GPU: the row's own, else derived from the iteration time."""
        if self.tokens_per_s_per_gpu:
            return self.tokens_per_s_per_gpu
        t = self.measured_iter_time_s
        if t and self.global_batch and self.seq_len and self.gpus:
            return self.global_batch * self.seq_len / (t * self.gpus)
        return None


_INT_FIELDS = {f.name for f in dataclasses.fields(PublicRun) if f.type in ("Optional[int]",)}
_FLOAT_FIELDS = {f.name for f in dataclasses.fields(PublicRun) if f.type in ("Optional[float]",)}
_TEXT_FIELDS = {f.name for f in dataclasses.fields(PublicRun)} - _INT_FIELDS - _FLOAT_FIELDS - {"family", "row"}


def _parse_row(family: str, index: int, raw: dict[str, str]) -> PublicRun:
    values: dict[str, object] = {"family": family, "row": index}
    for name in _TEXT_FIELDS:
        values[name] = (raw.get(name) or "").strip()
    for name in _INT_FIELDS:
        values[name] = _int(raw.get(name) or "")
    for name in _FLOAT_FIELDS:
        values[name] = _num(raw.get(name) or "")
    script = SCRIPT_ACCUMULATION.get(str(values["source_id"]))
    if script and values["micro_batch"] and values["gpus"]:
        values["grad_accum"] = values["grad_accum"] or script[0]
        values["global_batch"] = values["global_batch"] or (
            values["micro_batch"] * values["gpus"] * values["grad_accum"])  # type: ignore[operator]
    return PublicRun(**values)  # type: ignore[arg-type]


def load_file(path: Path) -> list[PublicRun]:
    """The runs of one training-throughput CSV; UserError if its header lacks a schema column."""
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = sorted((_TEXT_FIELDS | _INT_FIELDS | _FLOAT_FIELDS) - set(reader.fieldnames or ()))
        if missing:
            raise UserError(f"{path.name}: columns {', '.join(missing)} missing; "
                            "see knowledge/measurements/public/README.md for the training-throughput schema")
        return [_parse_row(path.stem, i, raw) for i, raw in enumerate(reader, start=1)]


def load_runs(folder: Optional[Path] = None) -> list[PublicRun]:
    """Every measured training run of the public files, in file order (TRAINING_FILES)."""
    folder = folder or public_dir()
    runs: list[PublicRun] = []
    for stem in TRAINING_FILES:
        path = folder / f"{stem}.csv"
        if not path.is_file():
            raise UserError(f"public measurement file '{path}' not found; reinstall gpuadvisor or restore "
                            "knowledge/measurements/public/")
        runs.extend(load_file(path))
    return runs
