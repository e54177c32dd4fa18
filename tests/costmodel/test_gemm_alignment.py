"""GEMMs off the Tensor Cores' 16-byte grid (compute.alignment_factor; calibration gemm_efficiency.misaligned_rate, from
the H100 d_ff sweep in knowledge/measurements/public/matmul_shape_dependence.csv) and the padding advice that
follows from it (ranking/alignment.py)."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from gpuadvisor.api import make_workload, suggest
from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.analytical.compute import alignment_factor
from gpuadvisor.costmodel.calibration import load_calibration
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import parse_plan

PUBLIC = Path(__file__).resolve().parents[2] / "knowledge" / "measurements" / "public"


def test_the_misaligned_rate_is_the_measured_h100_d_ff_sweep():
    """d_ff 10922 (a multiple of 2 only) against the multiples of 32 beside it, same bmm, same H100."""
    rows = {int(r["K_reduction"]): float(r["tflops"])
            for r in csv.DictReader(open(PUBLIC / "matmul_shape_dependence.csv"))}
    aligned = [t for k, t in rows.items() if k % 32 == 0]
    ge = load_calibration()["gemm_efficiency"]
    assert ge["misaligned_rate"] == pytest.approx(rows[10922] / np.mean(aligned), abs=0.005)
    assert ge["alignment_bytes"] == 16


def test_alignment_needs_every_leading_dimension_on_16_bytes():
    f = load_calibration()["gemm_efficiency"]["misaligned_rate"]
    assert alignment_factor((768, 50304), 2, 16, f) == 1.0
    assert alignment_factor((768, 50257), 2, 16, f) == f             # GPT-2's vocabulary, unpadded
    assert alignment_factor((4096, 10922), 2, 16, f) == f            # int(8/3 x 4096)
    assert alignment_factor((4096, 11008), 1, 16, f) == 1.0          # FP8: 16 elements
    assert alignment_factor((4096, 11000), 1, 16, f) == f            # a multiple of 8, not of 16
    # per TP rank, arrays: 50304 / 2 aligned, / 5 not whole, / 16 = 3144 aligned
    tp = np.array([1.0, 2.0, 5.0, 16.0])
    assert alignment_factor((768, 50304 / tp), 2, 16, f).tolist() == [1.0, 1.0, f, 1.0]
    assert alignment_factor((768, 50257), 2, 0, f) == 1.0            # CPU ranks: no such rule


def _head_and_layers(vocab: int, preset="hgx-h100-8x"):
    wl = make_workload("gpt2", seq_len=1024, global_batch=16)
    wl = wl.model_copy(update={"model": wl.model.model_copy(update={"vocab_size": vocab})})
    return evaluate(parse_plan("dp=1,mb=16,m=1,nodes=1,gpn=1"), Context(load_preset(preset), wl))


def test_an_unpadded_vocabulary_slows_the_head_and_nothing_else():
    """GPT-2 at 50,257 against 50,256 (a multiple of 8): the head's GEMMs at 0.685 of their rate, a few % of the
    step; on CPU ranks no difference beyond the one extra row."""
    odd, even = _head_and_layers(50257), _head_and_layers(50256)
    assert odd.step_s > 1.02 * even.step_s
    cpu_odd, cpu_even = _head_and_layers(50257, "cpu-2ranks"), _head_and_layers(50256, "cpu-2ranks")
    assert cpu_odd.step_s == pytest.approx(cpu_even.step_s, rel=1e-3)


def test_suggest_advises_padding_gpt2s_vocabulary_with_the_gain_and_not_an_aligned_llama():
    s = suggest("gpt2", preset="hgx-h100-8x", top=3)
    note = next(n for n in s.notes if n.startswith("pad the model"))
    assert "vocabulary 50,257 -> 50,304" in note and "pad_to_multiple_of=64" in note
    gain = int(note.split("predicts +")[1].split("%")[0])
    assert 2 <= gain <= 15, note
    assert not any(n.startswith("pad the model") for n in suggest("llama-3.1-8b", preset="hgx-h100-8x",
                                                                   top=3).notes)
    # CPU ranks: nothing to gain, nothing said
    assert not any(n.startswith("pad the model") for n in suggest("gpt2", preset="cpu-2ranks", top=3).notes)
