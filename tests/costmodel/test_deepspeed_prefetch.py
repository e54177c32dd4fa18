"""DeepSpeed ZeRO-3's prefetch under its live-parameter cap (engine._ds_module_chain).

At each module's hook DeepSpeed prefetches the next parameters while what it pops stays under
min(stage3_max_live_parameters minus what it holds gathered, stage3_prefetch_bucket_size): a Linear as large as the
cap (1e9 elements) prefetches nothing while it computes, so the gather after it waits in the open
(partitioned_param_coordinator.fetch_sub_module).
"""
import numpy as np
import pytest

from gpuadvisor.costmodel.combine import make_context
from gpuadvisor.costmodel.engine import _ds_module_chain, evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import apply_what_if
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.shapes import layer_shape
from gpuadvisor.workload.specs import make_workload

# the modules a GPT layer's forward meets: input norm, Q, K, V, O, post-attention norm, fc1, fc2 (elements)
SMALL = [0, 1e8, 1e8, 1e8, 1e8, 0, 4e8, 4e8]           # every Linear under the cap
HUGE = [0, 4.2e8, 4.2e8, 4.2e8, 4.2e8, 0, 1.7e9, 1.7e9]  # a 530B's: the MLP Linears above it


def _chain(numels, gather_s, compute_s, bucket=5e8, cap=1e9):
    return float(_ds_module_chain(np.array([numels]), np.array([gather_s]), np.array([compute_s]),
                                  np.array([bucket]), cap)[0])


@pytest.mark.parametrize("gather_s, compute_s", [(0.5, 1.0), (1.0, 1.0), (2.0, 1.0), (0.2, 3.0)])
def test_a_window_of_a_layer_or_more_is_the_layer_level_prefetch(gather_s, compute_s):
    """When the cap and the bucket let DeepSpeed run a layer ahead or more, it streams the next gathers behind the
    compute: a layer's exposed time is what its gathers outlast its compute by, as the layer-level model says."""
    assert _chain(SMALL, gather_s, compute_s, bucket=1e12, cap=1e12) == pytest.approx(
        max(0.0, gather_s - compute_s), abs=1e-9)


def test_a_window_under_a_layer_leaves_gaps():
    """This layer holds 1.2e9 elements: under the 1e9 cap the prefetch cannot run a layer ahead, so with gathers as
    long as the compute some of them wait, where the layer-level model hides them all."""
    exposed = _chain(SMALL, 1.0, 1.0)
    assert 0.0 < exposed < 1.0


def test_a_module_at_the_cap_leaves_the_next_gather_in_the_open():
    """A fast network hides every gather of a small layer, but not the gathers that follow a Linear at the cap:
    the next layer's Q after fc2 (only a norm between) and fc2 after fc1 wait at least their whole gathers."""
    gather_s, compute_s = 0.3, 1.0
    assert _chain(SMALL, gather_s, compute_s) == 0.0
    exposed = _chain(HUGE, gather_s, compute_s)
    assert gather_s / sum(HUGE) * (4.2e8 + 1.7e9) <= exposed < gather_s
    # the same layer under a cap it does not reach hides it all
    assert _chain(HUGE, gather_s, compute_s, cap=1e12, bucket=1e12) == 0.0


def test_a_small_bucket_prefetches_one_linear_ahead():
    """stage3_prefetch_bucket_size under every Linear: one module ahead, so fc1's gather (4e8 elements) shows
    what it outlasts O's compute (1e8) by, and every other gather hides behind the Linear before it."""
    gather_s, compute_s = 0.9, 1.0
    share_g, share_c = gather_s / sum(SMALL), compute_s / sum(SMALL)
    assert _chain(SMALL, gather_s, compute_s, bucket=5e7) == pytest.approx(4e8 * share_g - 1e8 * share_c, rel=1e-6)


def _exposed_zero3(spec: str, chain: bool) -> float:
    cl = apply_what_if(load_preset("dgx-a100-8x-4nodes-ib-hdr"), "gpus=64x8")
    ctx = make_context(cl, make_workload(spec, seq_len=1024, global_batch=512))
    if not chain:
        ctx.ds_modules = np.zeros(0)  # the layer-level prefetch alone
    plan = parse_plan("dp=512,zero=3,mb=1,m=1,nodes=64,gpn=8,zero_impl=deepspeed,recompute=true")
    return evaluate(plan, ctx).comm["zero@network"]


def test_the_530b_azure_shape_waits_on_its_mlp_gathers_and_a_13b_does_not_move():
    """End to end on 512 A100 (the Azure runs' shape, DeepSpeed ZeRO-3): the 530B's MLP Linears reach the cap and
    its exposed gathers grow by more than a third over the layer-level prefetch; a 13B-class model, every Linear far
    under the cap, is priced exactly as before."""
    big, small = "L105-H20480-A128-V51200-S1024", "L40-H5120-A40-V51200-S1024"
    assert max(layer_shape(make_workload(big).model).gathered_module_numels()) > 1e9
    assert _exposed_zero3(big, True) > 1.3 * _exposed_zero3(big, False)
    assert _exposed_zero3(small, True) == pytest.approx(_exposed_zero3(small, False), rel=1e-12)
