"""The learned correction: estimator contract, JSON storage, and lower leave-one-source-out error."""
from __future__ import annotations

import json
import math
import random

import pytest
from sklearn.base import clone

from gpuadvisor.costmodel.correction import Correction
from gpuadvisor.costmodel.learned import LearnedCorrection, loso_report
from gpuadvisor.schemas import MeasurementRow, ModelSpec, Plan, TrainingSettings, Workload

from .planner_fixture import cpu_cluster, make_estimate


def _truth(plan: Plan) -> float:
    """The systematic error of the 'analytical model': TP and PP cost more than it thinks, big micro-batches help."""
    return math.exp(-0.8 * math.log2(plan.tp) - 0.35 * math.log2(plan.pp) + 0.12 * math.log2(plan.micro_batch_size))


def synthetic(n_groups: int = 5, seed: int = 0):
    """Rows from several sources (different clusters and models), analytical off by a feature-dependent factor."""
    rnd = random.Random(seed)
    rows, ests = [], []
    for g in range(n_groups):
        world = 2 if g % 2 else 4
        cluster = cpu_cluster(world)
        wl = Workload(model=ModelSpec(name=f"m{g}", n_layers=8, d_model=128 * (g + 1), n_heads=8, d_ff=512 * (g + 1),
                                      vocab_size=1000), training=TrainingSettings(seq_len=128, global_batch=16))
        for tp in (1, 2, 4):
            for pp in (1, 2, 4):
                if world % (tp * pp):
                    continue
                dp = world // (tp * pp)
                for mb in (1, 2, 4):
                    plan = Plan(dp=dp, tp=tp, pp=pp, micro_batch_size=mb, num_micro_batches=max(pp, 16 // (dp * mb)),
                                devices_per_node=world)
                    analytical = 1000.0 * world * mb ** 0.2 * (g + 1)
                    est = make_estimate(plan, wl, analytical)
                    measured = analytical * _truth(plan) * rnd.uniform(0.97, 1.03)
                    rows.append(MeasurementRow(id=f"syn-{g}-{plan.to_string()}", source="synthetic", plan=plan,
                                               source_group=f"group-{g}", cluster=cluster, workload=wl,
                                               metric="tokens_per_s", value=measured, unit="tokens/s"))
                    ests.append(est)
    return rows, ests


def test_estimator_contract_and_json():
    rows, ests = synthetic(3)
    m = LearnedCorrection(n_members=3, n_estimators=50)
    assert not [k for k in vars(m) if k.endswith("_")]  # __init__ stores hyper-parameters only
    assert m.fit(rows, ests) is m and hasattr(m, "members_")
    assert clone(m).get_params() == m.get_params()
    assert isinstance(m, Correction)
    text = m.to_json()
    data = json.loads(text)  # plain data, no pickle
    assert data["params"]["n_members"] == 3 and len(data["X"]) == len(rows)
    back = LearnedCorrection.from_json(text)
    r, e = rows[5], ests[5]
    f1, u1 = m.factor(r.plan, r.cluster, r.workload, e)
    f2, u2 = back.factor(r.plan, r.cluster, r.workload, e)
    assert f1 == pytest.approx(f2) and u1 == pytest.approx(u2) and f1 > 0 and u1 >= 0
    with pytest.raises(ValueError):
        LearnedCorrection().factor(r.plan, r.cluster, r.workload, e)


def test_loso_learned_beats_analytical():
    rows, ests = synthetic(5)
    rep = loso_report(rows, ests, LearnedCorrection(n_members=4, n_estimators=100))
    assert rep["n_rows"] == len(rows) and set(rep["per_group"]) == {f"group-{g}" for g in range(5)}
    assert rep["learned_mae"] < 0.5 * rep["analytical_mae"], rep
    assert all(v["learned_mae"] < v["analytical_mae"] for v in rep["per_group"].values()), rep


def test_no_signal_no_harm():
    """When the analytical model is right (up to noise), the correction stays near 1."""
    rows, ests = synthetic(4)
    fixed = [r.model_copy(update={"value": e.tokens_per_s * (1.0 + 0.01 * ((i % 3) - 1))})
             for i, (r, e) in enumerate(zip(rows, ests))]
    rep = loso_report(fixed, ests, LearnedCorrection(n_members=3, n_estimators=50))
    assert rep["learned_mae"] < 0.03


def test_correction_does_not_extrapolate_to_unseen_hardware():
    """Fitted on CPU-rank clusters, the correction shrinks to 1 on a GPU cluster with a 1 GbE network,
    and says it is unsure there (uncertainty up to the training rows' spread)."""
    from gpuadvisor.hardware.presets import load_preset

    rows, ests = synthetic(3)
    m = LearnedCorrection(n_members=3, n_estimators=50).fit(rows, ests)
    plan = Plan(tp=2, pp=2, micro_batch_size=1, num_micro_batches=4, devices_per_node=4)
    near, near_unc = m.factor(plan, rows[0].cluster, rows[0].workload, ests[0])
    gpu = load_preset("nano-cluster-2x2-a40-1gbe")
    plan2 = Plan(tp=2, pp=2, micro_batch_size=1, num_micro_batches=4, nodes=2, devices_per_node=2)
    far, far_unc = m.factor(plan2, gpu, rows[0].workload, make_estimate(plan2, rows[0].workload, 1000.0))
    assert near < 0.5  # truth 0.32: it learned that TP x PP costs more than the analytical model thinks
    assert abs(math.log(far)) < 0.05 and far_unc > near_unc


def test_within_cluster_leave_one_plan_out_improves():
    """Plans measured on a cluster move the prediction of an untried plan on that cluster toward truth."""
    from gpuadvisor.costmodel.learned import within_report

    rows, ests = synthetic(1)
    rep = within_report(rows, ests, LearnedCorrection(n_members=3, n_estimators=80))
    assert rep["n_rows"] == len(rows)
    assert rep["learned_mae"] < 0.5 * rep["analytical_mae"], rep
