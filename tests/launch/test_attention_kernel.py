"""The attention kernel in the hand-over: Megatron argument files read back as Transformer Engine's cuDNN attention,
and the launch notes say which written file runs the kernel the prediction assumes (where the rates differ)."""
from __future__ import annotations

import pytest

from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch import build_launch
from gpuadvisor.launch.readback import read_megatron
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.specs import make_workload

BASE = ["--tensor-model-parallel-size", "2", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"]


@pytest.mark.parametrize("extra, kernel, noted", [
    ([], "cudnn", "cuDNN fused attention"),                               # Megatron's defaults: TE, backend auto
    (["--attention-backend", "fused"], "cudnn", "cuDNN fused attention"),
    (["--attention-backend", "flash"], "flash", None),
    (["--transformer-impl", "local"], "eager", "unfused attention core"),
    (["--attention-backend", "unfused"], "eager", "unfused attention core"),
])
def test_megatron_readback_names_the_attention_kernel(extra, kernel, noted):
    rb = read_megatron(BASE + extra, world=8)
    assert rb.attention_kernel == kernel
    if noted:
        assert any(noted in n for n in rb.notes), rb.notes
    assert "--attention-backend" not in rb.ignored and "--transformer-impl" not in rb.ignored


def _notes(preset: str, kernel: str) -> list[str]:
    wl = make_workload("L8-H1024-A16", seq_len=1024, global_batch=64, attention_kernel=kernel)
    plan = parse_plan("tp=2,pp=2,mb=1,m=32", nodes=1, devices_per_node=4)
    return [n for n in build_launch(plan, load_preset(preset), wl).notes if n.startswith("attention:")]


def test_launch_notes_say_which_file_runs_which_attention_on_hopper_only():
    flash = _notes("hgx-h100-8x", "flash")
    assert len(flash) == 1 and "megatron_args.txt runs Transformer Engine's cuDNN attention" in flash[0]
    cudnn = _notes("hgx-h100-8x", "cudnn")
    assert len(cudnn) == 1 and "predicted with cuDNN fused attention" in cudnn[0]
    # A100: FlashAttention-2 and cuDNN attention are priced alike (both at the GEMM rate): nothing to say
    assert _notes("dgx-a100-8x", "flash") == [] and _notes("dgx-a100-8x", "cudnn") == []
    # an unfused core is priced for the user's own stack: no written file runs one, on any GPU
    for preset in ("dgx-a100-8x", "hgx-h100-8x"):
        eager = _notes(preset, "eager")
        assert len(eager) == 1 and "unfused attention core" in eager[0] and "larger micro-batch" in eager[0]


@pytest.mark.parametrize("extra, flag", [
    (["--attention-backend", "zzz"], "--attention-backend must be one of auto, flash, fused, unfused, local"),
    (["--transformer-impl", "\x01\x02"], "--transformer-impl must be one of transformer_engine, local"),
])
def test_megatron_attention_values_outside_megatrons_choices_are_one_line_errors(extra, flag):
    from gpuadvisor.errors import UserError

    with pytest.raises(UserError, match=flag) as exc:
        read_megatron(BASE + extra, world=8)
    assert "\n" not in str(exc.value)
