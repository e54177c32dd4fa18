"""busbw/algbw factors (nccl-tests doc/PERFORMANCE.md), the alpha-beta fit, and the rate formulas."""
import pytest


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0),
    ("all_reduce", 4, 1.5),
    ("all_reduce", 8, 1.75),
    ("all_gather", 2, 0.5),
    ("all_gather", 8, 0.875),
    ("reduce_scatter", 4, 0.75),
    ("send_recv", 2, 1.0),
    ("send_recv", 8, 1.0),
])
def test_bus_factor(collectives_probe, op, n, factor):
    assert collectives_probe.bus_factor(op, n) == pytest.approx(factor)


def test_algbw_and_busbw_hand_computed(collectives_probe):
    p = collectives_probe
    # 64 MiB in 10 ms: algbw = 67108864 / 0.01 / 1e9 = 6.7108864 GB/s
    assert p.algbw_gb_per_s(64 * 2**20, 0.01) == pytest.approx(6.7108864)
    # all_reduce over 8 ranks: busbw = 6.7108864 * 2*7/8 = 11.7440512
    assert p.busbw_gb_per_s("all_reduce", 64 * 2**20, 0.01, 8) == pytest.approx(11.7440512)
    # all_gather over 4 ranks, S = whole gathered array 1e9 B in 0.5 s: 2 GB/s * 3/4 = 1.5
    assert p.busbw_gb_per_s("all_gather", 1e9, 0.5, 4) == pytest.approx(1.5)
    assert p.busbw_gb_per_s("send_recv", 1e9, 0.25, 2) == pytest.approx(4.0)


def test_unknown_op_is_rejected(collectives_probe):
    with pytest.raises(ValueError, match="unknown collective"):
        collectives_probe.bus_factor("broadcast", 2)


def test_fit_recovers_alpha_and_bandwidth(collectives_probe):
    sizes = [2**k for k in range(12, 25, 2)]
    times = [50e-6 + s / 2e9 for s in sizes]
    alpha, bw = collectives_probe.fit_alpha_beta(sizes, times)
    assert alpha == pytest.approx(50e-6, rel=1e-6)
    assert bw == pytest.approx(2e9, rel=1e-6)


def test_fit_clamps_negative_intercept_to_zero(collectives_probe):
    sizes = [1e6, 2e6, 4e6]
    times = [0.4e-3, 1.0e-3, 2.2e-3]  # straight line with intercept -0.2 ms
    alpha, bw = collectives_probe.fit_alpha_beta(sizes, times)
    assert alpha == 0.0
    assert bw > 0


def test_fit_flat_times_give_latency_and_no_bandwidth(collectives_probe):
    alpha, bw = collectives_probe.fit_alpha_beta([1e3, 1e4, 1e5], [1e-3, 1e-3, 0.9e-3])
    assert alpha > 0 and bw is None


def test_fit_single_point_goes_through_origin(collectives_probe):
    alpha, bw = collectives_probe.fit_alpha_beta([1e6], [1e-3])
    assert alpha == 0.0 and bw == pytest.approx(1e9)


def test_default_sizes_increase(collectives_probe):
    for gpu in (True, False):
        for quick in (True, False):
            sizes = collectives_probe.default_sizes(gpu, quick)
            assert sizes == sorted(set(sizes)) and len(sizes) >= 4
    assert collectives_probe.default_sizes(True, False)[0] == 8 * 1024
    assert collectives_probe.default_sizes(True, False)[-1] == 64 * 2**20


def test_matmul_tflops(matmul_probe):
    # 2 * 1024^3 flop in 1 ms = 2.147483648 TFLOP/s
    assert matmul_probe.tflops(1024, 1024, 1024, 1e-3) == pytest.approx(2.147483648)
    shapes = matmul_probe.default_shapes(False, True)
    assert max(max(s) for s in shapes) <= 2048 and (2048, 2048, 2048) in shapes


def test_copy_rate(hostcopy_probe):
    assert hostcopy_probe.gb_per_s(256 * 2**20, 0.01) == pytest.approx(26.8435456)
