"""Hand-computed checks of each cost-model formula."""
import math

import numpy as np
import pytest

from gpuadvisor.costmodel.analytical import comm as C
from gpuadvisor.costmodel.analytical import memory as M
from gpuadvisor.costmodel.analytical.compute import flops_per_token, layer_params
from gpuadvisor.costmodel.analytical.pipeline import bubble_fraction, pipeline_step_s
from gpuadvisor.schemas import ModelSpec


def test_ring_allreduce_hand_computed():
    # S = 1 GB, n = 4, B = 10 GB/s, alpha = 10 us: 2*3/4*0.1 s + 6*10 us
    assert C.ring_allreduce_s(1e9, 4, 10.0, 10.0) == pytest.approx(0.15 + 60e-6)
    assert C.ring_allreduce_s(1e9, 1, 10.0, 10.0) == 0.0


def test_reduce_scatter_and_all_gather():
    assert C.reduce_scatter_s(1e9, 4, 10.0, 10.0) == pytest.approx(0.075 + 30e-6)
    assert C.all_gather_s(1e9, 2, 10.0, 0.0) == pytest.approx(0.05)


def test_ring_latency_counts_network_hops_only_where_the_ring_leaves_a_node():
    """NCCL's tuning model (src/graph/tuning.cc): (nRanks − nNodes)·α_intra + (nNodes − 1)·α_net per ring pass."""
    # 16 nodes x 8 GPUs, 5 us network, 2 us NVLink: 15 network steps and 112 NVLink steps (was 127 x 5 us)
    assert C.ring_steps_latency_s(128, 5.0, 16, 2.0) == pytest.approx(15 * 5e-6 + 112 * 2e-6)
    assert C.reduce_scatter_s(0.0 + 1e6, 128, 10.0, 5.0, 16, 2.0) == pytest.approx(
        127 / 128 * 1e6 / 10e9 + 15 * 5e-6 + 112 * 2e-6)
    assert C.ring_allreduce_s(1e6, 128, 10.0, 5.0, 16, 2.0) == pytest.approx(
        2 * 127 / 128 * 1e6 / 10e9 + 2 * (15 * 5e-6 + 112 * 2e-6))
    # one node, one GPU per node (every step crosses), or no node count: every step pays α
    assert C.ring_steps_latency_s(8, 2.0, 1, 2.0) == pytest.approx(7 * 2e-6)
    assert C.ring_steps_latency_s(8, 5.0, 8, float("inf")) == pytest.approx(7 * 5e-6)
    assert C.ring_steps_latency_s(128, 5.0) == pytest.approx(127 * 5e-6)
    # arrays, as the engine passes them
    got = C.ring_steps_latency_s(np.array([8.0, 64.0]), np.array([2.0, 30.0]), np.array([1.0, 8.0]),
                                 np.array([2.0, 10.0]))
    assert got == pytest.approx([7 * 2e-6, 7 * 30e-6 + 56 * 10e-6])


def test_nccl_tree_allreduce_wins_latency_bound_sizes_across_nodes_only():
    # 64 ranks on 8 nodes, 25 GB/s rails, 5 us network and 2 us NVLink hops, tree bandwidth 0.85 of the ring's
    ring = C.ring_allreduce_s(25e3, 64, 25.0, 5.0, 8, 2.0)
    tree = C.tree_allreduce_s(25e3, 64, 8, 8, 25.0, 5.0, 2.0, 0.85)
    assert ring == pytest.approx(2 * 63 / 64 * 25e3 / 25e9 + 2 * (7 * 5e-6 + 56 * 2e-6))
    assert tree == pytest.approx(2 * 63 / 64 * 25e3 / (0.85 * 25e9) + 2 * (3 * 5e-6 + 7 * 2e-6))
    assert tree < ring / 4
    # large buffers: the ring's full bandwidth wins, as NCCL's tuner picks rings there
    big_ring = C.ring_allreduce_s(1e9, 64, 25.0, 5.0, 8, 2.0)
    big_tree = C.tree_allreduce_s(1e9, 64, 8, 8, 25.0, 5.0, 2.0, 0.85)
    assert big_ring < big_tree
    args = (64, 8, 8, 25.0, 5.0, 150.0, 2.0, 0, 0.0, 99)
    assert C.allreduce_s(1e9, *args, 0.85) == pytest.approx(big_ring)
    assert C.allreduce_s(25e3, *args, 0.85) == pytest.approx(tree)
    # gloo (factor 0) and one node keep rings
    assert C.allreduce_s(25e3, *args, 0.0) == pytest.approx(ring)
    assert C.tree_allreduce_s(25e3, 8, 1, 8, 25.0, 5.0, 2.0, 0.85) == math.inf
    assert C.allreduce_s(25e3, 8, 1, 8, 25.0, 5.0, 150.0, 2.0, 0, 0.0, 3, 0.85) == pytest.approx(
        C.ring_allreduce_s(25e3, 8, 25.0, 5.0))


def test_ddp_buckets_across_nodes_pay_tree_latency_per_bucket():
    from gpuadvisor.costmodel.analytical import Context
    from gpuadvisor.costmodel.engine import evaluate
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.schemas import parse_plan
    from gpuadvisor.workload.specs import make_workload

    wl = make_workload("gpt2", global_batch=64)
    clus = load_preset("dgx-a100-8x-4nodes-ib-hdr")
    plan = parse_plan("dp=32,mb=2,m=1,ddp_bucket_mb=1,nodes=4,gpn=8")
    with_tree = evaluate(plan, Context(clus, wl)).comm["dp@network"]
    import copy
    from gpuadvisor.costmodel.calibration import load_calibration
    cal = copy.deepcopy(load_calibration())
    cal["network"]["nccl_tree_bw_factor"] = 0.0
    rings = evaluate(plan, Context(clus, wl, calibration=cal)).comm["dp@network"]
    # 1 MB buckets of a 124M model's fp32 gradients across 4 nodes: hundreds of latency-bound all-reduces
    assert with_tree < rings


def test_p2p():
    assert C.p2p_s(1e8, 1.0, 50.0) == pytest.approx(0.1 + 50e-6)


def test_overlap_exposed():
    # 1 s of comm, 0.1 s last bucket, 0.5 s window, contention 0.2: 1 - 0.5 + 0.1
    assert C.overlapped_exposed_s(1.0, 0.1, 0.5, 0.2) == pytest.approx(0.6)
    assert C.overlapped_exposed_s(0.3, 0.1, 0.5, 0.0) == pytest.approx(0.1)


def test_adam_bytes():
    assert M.state_bytes_per_param("bf16", "adamw") == (2, 2, 12)
    assert M.state_bytes_per_param("fp32", "adam") == (4, 4, 8)


def test_zero_sharding():
    w, g, o, host = M.model_state_bytes(1e9, 4, 3, False, "bf16", "adamw")
    assert (w, g, o, host) == pytest.approx((0.5e9, 0.5e9, 3e9, 0.0))
    w, g, o, host = M.model_state_bytes(1e9, 4, 1, False, "bf16", "adamw")
    assert (w, g, o) == pytest.approx((2e9, 2e9, 3e9))
    _, _, o, host = M.model_state_bytes(1e9, 2, 2, True, "bf16", "adamw")
    assert o == 0 and host == pytest.approx(6e9 + 2e9)


def test_bubble_fraction():
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert bubble_fraction(4, 16) == pytest.approx(3 / 19)
    assert bubble_fraction(4, 4, virtual=2) == pytest.approx(1.5 / 5.5)
    assert bubble_fraction(1, 8) == 0.0
    step, bubble = pipeline_step_s(1.0, 4, 4)
    assert step == pytest.approx(7.0) and bubble == pytest.approx(3.0)


def test_korthikanti_activations():
    s, b, h, a = 1024, 4, 1024, 16
    sbh = s * b * h
    assert M.activation_bytes_per_layer(s, b, h, a, fused_attention=False) == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert M.activation_bytes_per_layer(s, b, h, a) == pytest.approx(34 * sbh)
    assert M.activation_bytes_per_layer(s, b, h, a, tp=4, sp=True) == pytest.approx(34 * sbh / 4)
    assert M.activation_bytes_per_layer(s, b, h, a, tp=4) == pytest.approx(sbh * (10 + 24 / 4))
    assert M.activation_bytes_per_layer(s, b, h, a, recompute=True) == pytest.approx(2 * sbh)
    assert M.inflight_microbatches(4, 16, "1f1b") == 4
    assert M.inflight_microbatches(4, 16, "gpipe") == 16


def test_flops_per_token_palm():
    m = ModelSpec(name="t", n_layers=12, d_model=768, n_heads=12, d_ff=3072, vocab_size=50257, max_seq_len=1024)
    f = flops_per_token(m, 1024)
    assert f == pytest.approx(12 * (6 * layer_params(m) + 12 * 768 * 1024) + 6 * 50257 * 768)
    # ~ 6N + 12·L·h·s
    assert f == pytest.approx(6 * m.params + 12 * 12 * 768 * 1024, rel=0.02)
    assert flops_per_token(m, 1024, recompute=True) > f


def test_powersgd_ratio():
    assert C.powersgd_ratio(4, 1024) == pytest.approx(8 / 1024)


def test_pipeline_exchanges_per_slot_megatron_1f1b():
    from gpuadvisor.costmodel.analytical.pipeline import exchanges_per_slot
    assert exchanges_per_slot(1) == 0
    assert exchanges_per_slot(2) == 1  # both stages are end stages: one exchange per slot
    assert exchanges_per_slot(4) == 2  # middle stages exchange with both neighbours
    assert exchanges_per_slot(4, 2) == 4


def test_tied_embedding_grad_allreduce_only_with_pipeline():
    from gpuadvisor.costmodel.analytical.pipeline import tied_embedding_grad_bytes
    assert tied_embedding_grad_bytes(50257, 768, 1, 2) == 50257 * 768 * 2
    assert tied_embedding_grad_bytes(50257, 768, 2, 2) == 50257 * 768


def test_powersgd_is_priced_at_the_rank_the_trainers_run():
    """The PowerSGD hook moves powersgd_ratio(POWERSGD_RANK, h) of DDP's fp32 gradient bytes, at the rank the
    bundled trainers' hook and Accelerate's POWER_SGD hook run (PowerSGDState's default, 1; the engine used to
    price rank 4 while the trainers ran rank 1)."""
    from gpuadvisor.costmodel.analytical import Context
    from gpuadvisor.costmodel.engine import evaluate
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.schemas import parse_plan
    from gpuadvisor.workload.specs import make_workload

    assert C.POWERSGD_RANK == 1
    ctx = Context(load_preset("a6000-4x-pcie"), make_workload("gpt2", global_batch=16, seq_len=1024))
    plain = evaluate(parse_plan("dp=4,mb=4,m=1", nodes=1, devices_per_node=4), ctx).link_bytes["pcie"]
    hooked = evaluate(parse_plan("dp=4,mb=4,m=1,comm_hook=powersgd", nodes=1, devices_per_node=4),
                      ctx).link_bytes["pcie"]
    assert hooked / plain == pytest.approx(C.powersgd_ratio(1, 768), rel=1e-9)
    assert hooked / plain != pytest.approx(C.powersgd_ratio(4, 768), rel=1e-3)
