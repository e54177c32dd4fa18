"""Sequence parallelism on PyTorch's DTensor (the flash stack: torchtitan, the bundled trainers) keeps the
column-parallel Linears' all-gathered inputs whole; Megatron's and Transformer Engine's layers keep the shard and
gather again in the backward (tests/trainers/test_op_checkpoint.py checks the trainer's side)."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.analytical.memory import activation_bytes_per_layer, activation_terms
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.workload.shapes import layer_shape


def test_the_gathered_inputs_stay_whole_on_dtensor_only():
    wl = api.make_workload("llama-3.1-8b", seq_len=4096, global_batch=8, kernels="fused")
    shape, (s, b, tp) = layer_shape(wl.model), (4096, 1, 4)
    terms = activation_terms(shape, 2)
    assert terms.gathered == 2 * 2 * shape.d_model  # the QKV and the gate/up inputs, bf16

    def per_layer(keep: bool, sp: bool = True) -> float:
        return activation_bytes_per_layer(s, b, shape.d_model, shape.n_heads, tp, sp, shape=shape,
                                          sp_keeps_gathered=keep)
    assert per_layer(True) - per_layer(False) == pytest.approx(s * b * terms.gathered * (1 - 1 / tp))
    assert per_layer(True, sp=False) == per_layer(False, sp=False)  # without SP both keep the replicated input
    assert Context(load_preset("hgx-h100-8x"), wl).sp_keeps_gathered
    cudnn = api.make_workload("llama-3.1-8b", seq_len=4096, global_batch=8, attention_kernel="cudnn")
    assert not Context(load_preset("hgx-h100-8x"), cudnn).sp_keeps_gathered
