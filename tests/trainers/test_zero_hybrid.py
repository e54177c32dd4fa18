"""ZeRO next to TP and PP really shards: what each of 4 ranks holds after one step (dp2 x tp2, dp2 x pp2).

Losses are checked in test_equivalence.py; this checks the memory side, which equal losses cannot show:
ZeRO-1 keeps whole (TP- or stage-) parameters but 1/dp of the optimizer states, ZeRO-3 (FSDP2) 1/dp of both.
"""
from __future__ import annotations

import pytest

from ._launch import job, run_probe

pytestmark = pytest.mark.slow

JOBS = {
    "tp2xdp2": job(tp=2, dp=2),
    "zero1_tp2xdp2": job(tp=2, dp=2, zero_stage=1),
    "zero3_tp2xdp2": job(tp=2, dp=2, zero_stage=3),
    "pp2xdp2": job(pp=2, dp=2, num_micro_batches=2),
    "zero1_pp2xdp2": job(pp=2, dp=2, zero_stage=1, num_micro_batches=2),
    "zero3_pp2xdp2": job(pp=2, dp=2, zero_stage=3, num_micro_batches=2),
    "tp2xpp2": job(tp=2, pp=2, num_micro_batches=2),
    "tp2xpp2_sp": job(tp=2, pp=2, num_micro_batches=2, sequence_parallel=True),
}


@pytest.fixture(scope="module")
def held(tmp_path_factory) -> dict:
    return run_probe(tmp_path_factory.mktemp("probe"), "_sharding_probe.py", JOBS, 4)


def by(ranks: list[dict], dim: str) -> dict[int, list[dict]]:
    """Ranks grouped by their coordinate on `dim` (e.g. all dp replicas of one TP shard)."""
    out: dict[int, list[dict]] = {}
    for r in ranks:
        out.setdefault(r["coords"][dim], []).append(r)
    return out


@pytest.mark.parametrize("base,dim", [("tp2xdp2", "tp"), ("pp2xdp2", "pp")])
def test_zero1_shards_only_the_optimizer_states(held, base, dim):
    plain, zero1 = by(held[base], dim), by(held[f"zero1_{base}"], dim)
    for c, replicas in plain.items():
        full = replicas[0]["param_numel"]
        assert all(r["param_numel"] == r["state_numel"] == full for r in replicas)  # DDP-like: all replicated
        assert all(r["param_numel"] == full for r in zero1[c])  # parameters stay whole per TP shard / stage
        states = [r["state_numel"] for r in zero1[c]]
        assert sum(states) == full and max(states) < full  # states split over the 2 dp ranks


@pytest.mark.parametrize("base,dim", [("tp2xdp2", "tp"), ("pp2xdp2", "pp")])
def test_zero3_shards_parameters_and_states(held, base, dim):
    plain, zero3 = by(held[base], dim), by(held[f"zero3_{base}"], dim)
    for c, replicas in plain.items():
        full = replicas[0]["param_numel"]
        assert sum(r["param_numel"] for r in zero3[c]) == full
        assert sum(r["state_numel"] for r in zero3[c]) == full
        assert all(r["param_numel"] < full for r in zero3[c])


def test_fsdp_over_tp_uses_the_2d_mesh(held):
    assert "('dp', 'tp')" in held["zero3_tp2xdp2"][0]["dtensor_meshes"]  # TP placement + dp shard
    assert held["zero3_pp2xdp2"][0]["dtensor_meshes"] == ["('dp',)"]
    assert held["zero1_pp2xdp2"][0]["dtensor_meshes"] == []  # plain stages, grads averaged by hand


@pytest.mark.parametrize("name,per_rank", [("tp2xpp2", [2, 2, 16, 32 // 2]), ("tp2xpp2_sp", [2, 2, 16 // 2, 32])])
def test_tp_x_pp_hands_on_a_tp_share_of_the_activations(held, name, per_rank):
    """Each TP rank of a stage sends b·s·h/tp to the next stage, as the cost model prices it (and Megatron sends):
    without SP its slice of the hidden dimension (scatter-gather), with SP its sequence shard. Global batch 4
    (mb 2 x m 2) of the tiny GPT's 16 tokens x h 32: [m, mb, seq, h] below is per micro-batch."""
    m, mb, seq, h = per_rank
    first = [r for r in held[name] if r["coords"]["pp"] == 0]
    # m micro-batches (and the schedule's shape-inference forward before them)
    assert len(first) == 2 and all(len(r["handed_on"]) >= m for r in first)
    assert all(shape == [mb, seq, h] for r in first for shape in r["handed_on"])
    assert all(r["handed_on"] == [] for r in held[name] if r["coords"]["pp"] == 1)  # the last stage hands on nothing
