"""Appendix F aggregation, checked against hand-computed examples."""
from __future__ import annotations

import pytest

from gpuadvisor.schemas import NicBytes, Plan, TrainingResults
from gpuadvisor.trainers.aggregate import compare, summarize, total_tokens


def res(rank, world, tokens, time_s, peak, avg, util=None, nic=None, losses=()):
    return TrainingResults(rank=rank, world_size=world, device=f"cuda:{rank}", tokens=tokens, tokens_seen=tokens,
                           time_s=time_s, step_times_s=[time_s], peak_memory_bytes=peak, avg_memory_bytes=avg,
                           avg_utilization_pct=util, nic_bytes=nic or {}, losses=list(losses))


def test_dp_sums_tokens_and_takes_max_time():
    plan = Plan(dp=2, devices_per_node=2)
    s = summarize([res(0, 2, 1000, 10.0, 300, 200.0, 80.0), res(1, 2, 1000, 12.5, 500, 100.0, 60.0)], plan)
    assert s.total_tokens == 2000
    assert s.total_time_s == 12.5
    assert s.throughput_tokens_per_s == 160.0  # 2000 / 12.5
    assert s.avg_memory_bytes == 150.0  # mean of averages
    assert s.total_memory_bytes == 300.0  # sum of averages
    assert s.peak_memory_bytes == 500  # max of peaks
    assert s.avg_utilization_pct == 70.0


def test_tp_takes_max_tokens():
    plan = Plan(tp=2, devices_per_node=2)
    s = summarize([res(0, 2, 4096, 8.0, 1, 1.0), res(1, 2, 4096, 8.0, 1, 1.0)], plan)
    assert s.total_tokens == 4096 and s.throughput_tokens_per_s == 512.0


def test_pp_counts_last_stage_only():
    plan = Plan(pp=2, num_micro_batches=2, devices_per_node=2)
    s = summarize([res(0, 2, 0, 9.0, 1, 1.0), res(1, 2, 4096, 10.0, 1, 1.0)], plan)
    assert s.total_tokens == 4096 and s.throughput_tokens_per_s == 409.6


def test_tp_x_dp_sums_replicas_of_max():
    plan = Plan(tp=2, dp=2, devices_per_node=4)  # ranks 0,1 replica 0; ranks 2,3 replica 1
    results = [res(r, 4, 100, 1.0, 1, 1.0) for r in range(4)]
    assert total_tokens(results, plan) == 200
    plan2 = Plan(tp=2, dp=2, devices_per_node=4, mesh_order="tp-pp-dp")
    assert total_tokens(results, plan2) == 200


def test_network_bytes_skip_loopback_and_utilisation_optional():
    plan = Plan(dp=2, nodes=2, devices_per_node=1)
    nic0 = {"lo": NicBytes(rx_bytes=10**9, tx_bytes=10**9), "eth0": NicBytes(rx_bytes=300, tx_bytes=200)}
    nic1 = {"eth0": NicBytes(rx_bytes=30, tx_bytes=20)}
    s = summarize([res(0, 2, 1, 1.0, 1, 1.0, nic=nic0), res(1, 2, 1, 1.0, 1, 1.0, nic=nic1)], plan)
    assert (s.network_tx_bytes, s.network_rx_bytes) == (220, 330)
    assert s.avg_utilization_pct is None


def test_compare_against_single_gpu_baseline():
    base = summarize([res(0, 1, 1000, 10.0, 400, 200.0)], Plan())  # 100 tok/s
    run = summarize([res(0, 2, 1000, 6.0, 300, 150.0), res(1, 2, 1000, 8.0, 200, 250.0)], Plan(dp=2, devices_per_node=2))
    c = compare(run, base, n_devices=2)  # 2000 tokens / 8 s = 250 tok/s
    assert c.runtime_overhead_pct == pytest.approx(-20.0)  # (8/10 - 1) * 100
    assert c.scaling_factor == pytest.approx(2.5)
    assert c.scaling_efficiency_pct == pytest.approx(125.0)
    assert c.ideal_throughput_tokens_per_s == pytest.approx(200.0)
    assert c.peak_memory_ratio == pytest.approx(0.75)  # 300 / 400
    assert c.avg_memory_ratio == pytest.approx(1.0)  # 200 / 200
    assert c.total_memory_ratio == pytest.approx(2.0)  # 400 / 200
    # the paper's baseline is a TrainingResults: same answer
    assert compare(run, res(0, 1, 1000, 10.0, 400, 200.0), n_devices=2) == c


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="n_devices"):
        compare(summarize([res(0, 1, 1, 1.0, 1, 1.0)], Plan()), summarize([res(0, 1, 1, 1.0, 1, 1.0)], Plan()))
    with pytest.raises(ValueError, match="world size"):
        summarize([res(0, 1, 1, 1.0, 1, 1.0)], Plan(dp=2, devices_per_node=2))
    with pytest.raises(ValueError, match="no per-rank"):
        summarize([], Plan())
