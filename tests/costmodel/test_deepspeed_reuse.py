"""DeepSpeed ZeRO-3's reuse distance (schemas.plan.DEEPSPEED_MAX_REUSE_DISTANCE): what its backward gathers again.

DeepSpeed releases a gathered parameter only when its next use lies more than stage3_max_reuse_distance elements
further along the recorded module trace. So the forward's last 1e9 elements stay gathered into the backward (a
model under 1e9 gathers only in its forward), and a layer's recompute replay and its backward share one gather
unless half the layer exceeds the distance. The engine prices this (engine._ds_reuse); FSDP re-gathers every layer.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuadvisor.costmodel.analytical import deepspeed_replay_regather
from gpuadvisor.costmodel.combine import make_context
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import apply_what_if
from gpuadvisor.schemas import Plan
from gpuadvisor.schemas.plan import DEEPSPEED_MAX_REUSE_DISTANCE
from gpuadvisor.workload.specs import make_workload

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "deepspeed_zero3_host.py"
H = 256
LAYER = 12 * H * H + 13 * H
# the benchmark's block in forward order: LayerNorm, fused QKV, output projection, LayerNorm, the MLP's two Linears
BLOCK = [H, H, 3 * H * H, 3 * H, H * H, H, H, H, 4 * H * H, 4 * H, 4 * H * H, H]


def _ctx(model: str, **kw):
    cl = apply_what_if(load_preset("dgx-a100-8x-4nodes-ib-hdr"), "gpus=2x8")
    return make_context(cl, make_workload(model, seq_len=1024, global_batch=64, **kw))


def _plan(impl: str, recompute: bool = False) -> Plan:
    return Plan(dp=16, zero_stage=3, micro_batch_size=1, num_micro_batches=4, nodes=2, devices_per_node=8,
                zero_impl=impl, recompute=recompute)


def test_replay_gathers_again_only_what_half_a_layer_beyond_the_distance_releases():
    assert sum(BLOCK) == LAYER
    # a quarter layer: every tensor but the last Linear's is released between its replay and its backward
    share = deepspeed_replay_regather(BLOCK, [1], 0.25 * LAYER)[0]
    assert share == pytest.approx(1 - (4 * H * H + H) / LAYER)
    # GPT-3 175B (1.8e9 elements per layer) at TP 1 against the 1e9 default: two thirds; at TP 8 nothing
    big = _ctx("175B")
    assert big.ds_replay_regather([1, 8]).tolist() == pytest.approx([share, 0.0], abs=0.002)
    assert _ctx("llama-7b").ds_replay_regather([1]).tolist() == [0.0]
    assert deepspeed_replay_regather([], [1, 2]).tolist() == [0.0, 0.0]


def test_a_model_under_the_distance_gathers_only_in_its_forward():
    """GPT-3 760M (24 layers, 0.76e9 elements): DeepSpeed sends one gather and one reduce-scatter of each layer per
    micro-batch, FSDP one gather more; DeepSpeed's device holds the whole 16-bit model gathered at the peak."""
    ctx = _ctx("gpt3-760m")
    assert ctx.params < DEEPSPEED_MAX_REUSE_DISTANCE
    ev = {impl: evaluate(_plan(impl), ctx) for impl in ("deepspeed", "fsdp")}
    saved = sum(ev["fsdp"].link_bytes.values()) - sum(ev["deepspeed"].link_bytes.values())
    assert saved == pytest.approx(4 * ctx.L * ctx.w_layer_bytes * 15 / 16)
    held = ev["deepspeed"].mem.comm_buffers - ev["fsdp"].mem.comm_buffers
    # the layers and the (tied) head, less FSDP's two gathered layers
    assert held == pytest.approx((ctx.L - 2) * ctx.w_layer_bytes + ctx.p_head * ctx.weight_bytes, rel=1e-6)
    assert ev["deepspeed"].step_s < ev["fsdp"].step_s


def test_recompute_shares_the_gather_below_the_distance_and_not_above():
    """Llama 7B's layers (0.2e9): the replay's gather serves the backward, so recompute adds no traffic; GPT-3 175B
    at TP 1: the replay's gather of the first two thirds of each layer is released before the backward needs it."""
    for model, extra in (("llama-7b", 0.0), ("175B", 2 / 3)):
        ctx = _ctx(model)
        sent = {rc: sum(evaluate(_plan("deepspeed", rc), ctx).link_bytes.values()) for rc in (False, True)}
        kept = max(0.0, min(ctx.L, (DEEPSPEED_MAX_REUSE_DISTANCE - ctx.p_head) / ctx.p_layer))
        want = 4 * (ctx.L - kept) * extra * ctx.w_layer_bytes * 15 / 16
        assert sent[True] - sent[False] == pytest.approx(want, rel=0.01, abs=1.0), model


def _count(reuse_layers: float, recompute: bool) -> float:
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    cmd = [sys.executable, str(BENCH), "--count", "--reuse-layers", str(reuse_layers)] + (
        ["--recompute"] if recompute else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("DeepSpeed 0")), None)
    assert out.returncode == 0 and line, out.stderr[-2000:]
    return float(line.rsplit(" ", 1)[1])


def test_the_model_counts_what_deepspeed_gathers_in_its_backward():
    """The real DeepSpeed engine on a fake process group (benchmarks/deepspeed_zero3_host.py --count), 8 layers,
    distance and live cap a quarter layer: the backward gathers all but the kept quarter, and with recompute the
    replay's share again (7.75 and 12.9 layers' elements in the model)."""
    pytest.importorskip("deepspeed.runtime.zero.partitioned_param_coordinator")
    share = deepspeed_replay_regather(BLOCK, [1], 0.25 * LAYER)[0]
    assert _count(0.25, False) == pytest.approx(8 - 0.25, rel=0.02)
    assert _count(0.25, True) == pytest.approx((8 - 0.25) * (1 + share), rel=0.02)



def test_a_plans_own_reuse_distance_sets_what_its_backward_gathers_again():
    """Plan.zero_max_reuse_distance (a DeepSpeed JSON's stage3_max_reuse_distance): at 0 every layer is gathered
    again in the backward, FSDP's traffic; with the 760M model under it (the default) none is; in between, the
    layers past (distance - LM head) / layer. The replay share follows the plan's distance too."""
    ctx = _ctx("gpt3-760m")
    fsdp = sum(evaluate(_plan("fsdp"), ctx).link_bytes.values())

    def sent(distance: int) -> float:
        return sum(evaluate(_plan("deepspeed").model_copy(update={"zero_max_reuse_distance": distance}),
                            ctx).link_bytes.values())
    ring = 15 / 16 * 4 * ctx.w_layer_bytes  # one layer gathered over a ring of 16, 4 micro-batches
    assert sent(0) == pytest.approx(fsdp)
    assert sent(DEEPSPEED_MAX_REUSE_DISTANCE) == pytest.approx(fsdp - ctx.L * ring)
    kept = (300_000_000 - ctx.p_head) / ctx.p_layer
    assert sent(300_000_000) == pytest.approx(fsdp - kept * ring)
    big = _ctx("175B")
    share = deepspeed_replay_regather(big.layer_tensors, [1], 0.25 * big.p_layer)[0]
    assert big.ds_replay_regather([1, 1], [DEEPSPEED_MAX_REUSE_DISTANCE, 0.25 * big.p_layer]).tolist() == \
        pytest.approx([big.ds_replay_regather([1]).tolist()[0], share])
