"""The enumeration is bounded by design (candidates/enumerate.py docstring): rows grow with log(devices), not
with the batch size; the batch-derived loops take O(cap) steps."""
import time

import pytest

from gpuadvisor.candidates import enumerate_rows
from gpuadvisor.candidates.enumerate import _micro_batches, divisors, small_divisors
from gpuadvisor.costmodel.combine import make_context, single_device_best
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import apply_what_if
from gpuadvisor.schemas.bounds import MAX_DEVICES
from gpuadvisor.schemas.workload import MAX_GLOBAL_BATCH
from gpuadvisor.workload.specs import make_workload


@pytest.fixture(scope="module")
def dgx():
    return load_preset("dgx-a100-8x")


@pytest.mark.parametrize("n", [1, 2, 12, 64, 97, 720, 2 ** 20, 498968388, MAX_GLOBAL_BATCH, 2 ** 31 - 1])
@pytest.mark.parametrize("cap", [1, 8, 64])
def test_small_divisors_match_the_full_factorisation(n, cap):
    full = divisors(n)
    assert small_divisors(n, cap) == [d for d in full if d <= cap]
    above = [d for d in full if d > cap]
    assert small_divisors(n, cap, one_more=True) == [d for d in full if d <= cap] + above[:1]


@pytest.mark.parametrize("per_replica", [1, 3, 48, 64, 96, 1000, 498968388, 2 ** 31, 2 ** 31 - 1])
def test_micro_batch_sizes_are_few_and_divide(per_replica):
    sizes = _micro_batches(per_replica, 64)
    assert 1 <= len(sizes) <= 8  # log2(64) + 2
    assert all(per_replica % s == 0 and s <= 64 for s in sizes)
    assert max(sizes) == max(d for d in divisors(per_replica) if d <= 64)


def test_a_huge_batch_gives_the_same_rows_as_a_large_one(dgx):
    """The batch only enters through divisibility: on 1,024 GPUs 2^31 and 2^20 give the same candidates."""
    cl = apply_what_if(dgx, "gpus=128x8")
    big = enumerate_rows(cl, make_workload("7B", seq_len=2048, global_batch=MAX_GLOBAL_BATCH))
    mid = enumerate_rows(cl, make_workload("7B", seq_len=2048, global_batch=2 ** 20))
    assert len(big) == len(mid) < 300_000
    # the same plans but for the number of micro-batches (column 6) and the batch (last column)
    assert [r[:6] + r[7:-1] for r in big] == [r[:6] + r[7:-1] for r in mid]


@pytest.mark.parametrize("spec,limit", [("gpus=128x8", 300_000), ("gpus=1x256", 80_000), ("gpus=64x8", 250_000),
                                        ("gpus=16384x8", 700_000)])
def test_row_count_is_bounded(dgx, spec, limit):
    cl = apply_what_if(dgx, spec)
    assert cl.num_devices <= MAX_DEVICES
    t = time.perf_counter()
    rows = enumerate_rows(cl, make_workload("7B", seq_len=2048, global_batch=MAX_GLOBAL_BATCH))
    assert len(rows) < limit
    assert time.perf_counter() - t < 30  # generous: catches work that grows with devices or batch, not speed


def test_pipeline_degrees_above_16_are_powers_of_two_or_even_splits(dgx):
    cl = apply_what_if(dgx, "gpus=16384x8")
    wl = make_workload("7B", seq_len=2048, global_batch=4096)  # 32 layers
    pps = {r[2] for r in enumerate_rows(cl, wl)}
    assert {1, 2, 3, 5, 16, 32} <= pps
    assert all(p <= 16 or p & (p - 1) == 0 or 32 % p == 0 for p in pps) and max(pps) <= 32


def test_single_device_baseline_is_bounded_in_the_batch(dgx):
    """It used to try every divisor of the batch up to the batch (16 s at 498,968,388)."""
    wl = make_workload("125M", global_batch=498968388)
    t = time.perf_counter()
    assert single_device_best(make_context(dgx, wl)) > 0
    assert time.perf_counter() - t < 10
