"""Long-context stacks: Liger-Kernel's chunked linear cross-entropy (kernels "liger") never holds the logits whole,
and FlashAttention-3/4 (attention_kernel "flash3") runs the core at cuDNN's rate on Hopper and datacenter Blackwell
only."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.cli import main
from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.analytical.memory import chunked_loss_bytes, logits_bytes
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.cluster_file import cluster_from_dict
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch.build import attention_notes
from gpuadvisor.schemas import parse_plan
from gpuadvisor.trials.hostcheck import refuse_unmeasurable
from tests._cli import one_line

PLAN = "dp=8,zero=3,mb=1,m=1,recompute=full,nodes=1,gpn=8"


def _wl(seq: int, kernel: str = "flash", kernels: str = "fused"):
    return api.make_workload("llama-3.1-8b", seq_len=seq, global_batch=8, attention_kernel=kernel, kernels=kernels)


def test_liger_holds_one_chunk_of_logits_the_input_gradient_and_the_heads_weight_gradient():
    """Liger's chunk: next_power_of_2(ceil(tokens / ceil(V / h))) tokens; at 256k tokens of Llama 3.1 8B that is
    8,192 x 128,256 bf16 logits, plus the 256k x 4,096 input gradient and the 128,256 x 4,096 weight gradient."""
    s, v, h = 262144, 128256, 4096
    expect = 2 * (8192 * v + s * h) + 2 * v * h
    assert chunked_loss_bytes(s, 1, v, h, 2, 2) == pytest.approx(expect)
    assert expect / 2 ** 30 == pytest.approx(4.94, abs=0.01)
    assert logits_bytes(s, 1, v, fused=True) / 2 ** 30 == pytest.approx(125.25, abs=0.01)  # the fused loss's fp32
    # short sequences are chunked too: 100 tokens over ceil(V / h) = 32 is 4 tokens a chunk
    assert chunked_loss_bytes(100, 1, v, h, 2, 2) == pytest.approx(2 * (4 * v + 100 * h) + 2 * v * h)


def test_liger_fits_a_96k_sequence_that_a_fused_loss_does_not_at_the_same_time():
    cluster = load_preset("hgx-h100-8x")
    fused = api.predict(_wl(98304, "flash3", "fused"), PLAN, cluster=cluster)
    liger = api.predict(_wl(98304, "flash3", "liger"), PLAN, cluster=cluster)
    assert not fused.feasible and liger.feasible
    assert fused.memory.logits - liger.memory.logits > 40 * 2 ** 30
    assert liger.memory.activations == fused.memory.activations  # the layers store alike
    assert liger.step_time_s == pytest.approx(fused.step_time_s, rel=1e-9)  # same FLOPs, no eager loss traffic


def test_flash3_prices_the_core_at_its_fitted_rate_with_pytorch_layers():
    """FlashAttention-3's core at the family's attn_rel_flash3 (fitted on ml-engineering's long-context H200 rows,
    above cuDNN's kernel-benchmark rate), its layers stored as the PyTorch flash stack stores them."""
    from gpuadvisor.costmodel.calibration import load_calibration

    cluster = load_preset("hgx-h100-8x")
    flash, flash3, cudnn = (Context(cluster, _wl(65536, k)) for k in ("flash", "flash3", "cudnn"))
    hopper = load_calibration()["gemm_efficiency"]["families"]["hopper"]
    assert flash3.attn_rel == float(hopper["attn_rel_flash3"]) > cudnn.attn_rel > flash.attn_rel
    assert not flash3.te_layers and flash3.sp_keeps_gathered  # stores as the flash stack does
    t = {k: api.predict(_wl(65536, k, "liger"), PLAN, cluster=cluster).step_time_s for k in ("flash", "flash3")}
    assert t["flash3"] < 0.6 * t["flash"]  # 64k tokens: the core is most of the step


def test_flash3_before_hopper_is_a_one_line_error_naming_the_fix(capsys):
    with pytest.raises(UserError) as exc:
        Context(load_preset("dgx-a100-8x"), _wl(8192, "flash3"))
    msg = str(exc.value)
    assert "\n" not in msg and "cannot run FlashAttention-3/4" in msg and "8.0" in msg
    assert "--attention-kernel flash" in msg
    code = main(["predict", "--model", "llama-3.1-8b", "--plan", PLAN, "--preset", "dgx-a100-8x",
                 "--attention-kernel", "flash3", "--seq-len", "8192", "--global-batch", "8"])
    assert code == 2
    one_line(capsys.readouterr().err, "cannot run FlashAttention-3/4", "--attention-kernel flash")
    # the RTX Blackwell chips (sm_120) have no FlashAttention-3/4 path either, though their capability is above 9
    rtx = cluster_from_dict({"name": "ws", "nodes": [{"name": "n0", "gpus": "2x RTX 5090", "topology": "PHB"}]})
    with pytest.raises(UserError, match=r"RTX 5090 cannot run FlashAttention-3/4 .* 12\.0"):
        Context(rtx, _wl(8192, "flash3"))


def test_the_hand_over_and_the_trials_say_who_runs_flash3_and_liger():
    device = load_preset("hgx-h100-8x").nodes[0].devices[0]
    (note,) = attention_notes(parse_plan(PLAN), _wl(8192, "flash3"), device)
    assert "FlashAttention-3/4" in note and "flash_attention_3" in note
    for kwargs, needle in (({"attention_kernel": "flash3"}, "--attention-kernel flash3"),
                           ({"kernels": "liger"}, "--kernels liger")):
        with pytest.raises(UserError) as exc:
            refuse_unmeasurable("bf16", kwargs.get("attention_kernel", "flash"), "confirm",
                                kernels=kwargs.get("kernels"))
        assert needle in str(exc.value) and "\n" not in str(exc.value)
