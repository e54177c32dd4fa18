"""The ranking's array code gives what its row-by-row originals gave: distinct rows (np.unique), infeasibility
counts in order of first occurrence (forbid rules included) and one winner per plan shape."""
from __future__ import annotations

import numpy as np
import pytest

from gpuadvisor.candidates import SearchSpace, enumerate_rows
from gpuadvisor.costmodel.combine import make_context
from gpuadvisor.costmodel.engine import evaluate_batch, unique_rows
from gpuadvisor.costmodel.rules import Rule, compile_condition, compile_vector_condition, load_rules
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import apply_what_if
from gpuadvisor.ranking.rank import _best_per_shape, _count_reasons, _scores
from gpuadvisor.workload.specs import make_workload


@pytest.mark.parametrize("shape,high", [((1, 6), 5), ((500, 3), 3), ((2000, 7), 2), ((300, 1), 50), ((64, 4), 1)])
def test_unique_rows_is_numpys_unique_along_rows(shape, high):
    rng = np.random.default_rng(sum(shape) + high)
    for dtype in (np.int64, float):
        m = rng.integers(0, high, size=shape).astype(dtype)
        want_u, want_inv = np.unique(m, axis=0, return_inverse=True)
        got_u, got_inv = unique_rows(m)
        assert np.array_equal(got_u, want_u) and np.array_equal(got_inv, want_inv.reshape(-1))
    u, inv = unique_rows(np.zeros((0, 6), dtype=np.int64))
    assert u.shape == (0, 6) and inv.shape == (0,)


def _forbid(rule_id: str, when: list) -> Rule:
    return Rule(rule_id, "forbid", 1.0, f"no {rule_id}", "test", compile_condition(when, rule_id),
                compile_vector_condition(when, rule_id))


@pytest.fixture(scope="module")
def batch():
    """7B on 2 nodes x 8 A100-40GB with 64 GiB of host RAM: device-memory failures, host-memory failures for
    offload, and two forbid rules."""
    cluster = apply_what_if(load_preset("dgx-a100-8x"), "gpus=2x8")
    cluster = cluster.model_copy(update={"nodes": [
        n.model_copy(update={"cpu": n.cpu.model_copy(update={"ram_bytes": 64 * 2**30})}) for n in cluster.nodes]})
    wl = make_workload("7B", global_batch=64)
    ctx = make_context(cluster, wl)
    rows = enumerate_rows(cluster, wl, space=SearchSpace())
    rules = load_rules() + (_forbid("pp2", ["pp", "==", 2]), _forbid("tp4zero1", {"all": [["tp", "==", 4],
                                                                                          ["zero", "==", 1]]}))
    b = evaluate_batch(rows, ctx, rules)
    assert any(b.forbid) and len(set(b.reason.tolist())) == 3
    return b


def test_reason_counts_match_counting_row_by_row(batch):
    bad = np.flatnonzero(~batch.feasible)
    want: dict[str, int] = {}
    for i in bad:
        r = batch.reason_of(int(i))
        if r:
            want[r] = want.get(r, 0) + 1
    got = _count_reasons(batch, bad)
    assert list(got.items()) == list(want.items())
    assert "forbidden by rule: no pp2" in got and "forbidden by rule: no tp4zero1" in got


def _best_reference(rows, b, ok, objective):
    """The row-by-row original (before the arrays): the best row per shape and the sort key of every feasible row."""
    k1, k2 = _scores(b, ok, objective)
    shapes = np.asarray([[rows[i][c] for c in (0, 1, 2, 3, 4, 16, 17)] for i in ok], dtype=float)
    _, sid = np.unique(shapes, axis=0, return_inverse=True)
    sid = sid.reshape(-1)
    order = np.lexsort((np.arange(len(ok)), k2, k1, sid))
    first = np.ones(len(order), dtype=bool)
    first[1:] = sid[order][1:] != sid[order][:-1]
    keys = {int(ok[j]): (float(k1[j]), float(k2[j]), j) for j in range(len(ok))}
    return ok[order[first]].tolist(), keys


@pytest.mark.parametrize("objective", ["throughput", "memory", "cost", "time"])
def test_best_per_shape_matches_the_row_by_row_original(batch, objective):
    ok = np.flatnonzero(batch.feasible)
    best, keys = _best_per_shape(batch, ok, objective)
    want, want_keys = _best_reference(batch.rows, batch, ok, objective)
    assert sorted(best) == sorted(want) and len(best) > 20
    assert {i: keys[i] for i in best} == {i: want_keys[i] for i in best}
    assert sorted(best, key=lambda i: keys[i]) == sorted(want, key=lambda i: want_keys[i])
