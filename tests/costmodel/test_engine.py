"""The one physics engine (costmodel/engine.py): a plan is a batch of one, breakdowns add up, rows are plans."""
import random

import numpy as np
import pytest

from gpuadvisor.candidates import SearchSpace, enumerate_plans, enumerate_rows, row_plan
from gpuadvisor.costmodel.combine import estimate, fast_eval, make_context
from gpuadvisor.costmodel.engine import evaluate_batch, plan_row
from gpuadvisor.costmodel.rules import load_rules
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import apply_what_if
from gpuadvisor.workload.specs import make_workload

CASES = [
    ("nano-cluster-2x2-a40-1gbe", None, "gpt2", dict(seq_len=1024, global_batch=16), {}),
    ("nano-cluster-2x2-a40-1gbe", None, "1.5B", dict(seq_len=1024, global_batch=16), {"allow_tp_across_nodes": True}),
    ("nano-cluster-2x2-a40-1gbe", None, "resnet18", dict(optimizer="sgd", global_batch=512), {}),
    ("a6000-4x-pcie", None, "gpt-300m", {}, {"allow_comm_hooks": True}),
    ("a6000-4x-pcie", None, "gpt-10m", {}, {}),
    ("baskerville-a100-nvlink-ib", None, "gpt2-large", dict(seq_len=512, global_batch=32), {"allow_comm_hooks": True}),
    ("dgx-a100-8x", "gpus=4x8", "7B", dict(seq_len=2048, global_batch=256), {}),
    ("workstation-2x4090", None, "1.5B", dict(seq_len=1024, global_batch=16), {}),
    ("hgx-h100-8x", "gpus=4x8", "13B", dict(seq_len=4096, global_batch=64), {}),
    ("dgx-a100-8x-4nodes-ib-hdr", None, "7B", dict(seq_len=2048, global_batch=256), {}),
]


def _case(c):
    preset, whatif, model, wkw, ekw = c
    cl = load_preset(preset)
    if whatif:
        cl = apply_what_if(cl, whatif)
    return cl, make_workload(model, **wkw), ekw


@pytest.mark.parametrize("case", CASES, ids=[c[2] + "@" + c[0] for c in CASES])
def test_a_plan_is_a_batch_of_one(case):
    """Row i of the batch and the same plan evaluated alone agree exactly (plan_row inverts row_plan)."""
    cl, wl, ekw = _case(case)
    ctx, rules = make_context(cl, wl), load_rules()
    rows = enumerate_rows(cl, wl, **ekw)
    b = evaluate_batch(rows, ctx, rules)
    idx = random.Random(7).sample(range(len(rows)), min(40, len(rows)))
    for i in idx:
        plan = row_plan(rows[i])
        assert plan_row(plan) == tuple(rows[i])
        e = fast_eval(plan, ctx, rules)
        assert bool(b.feasible[i]) == e.feasible and b.reason_of(i) == e.reason
        assert b.mem_total[i] == pytest.approx(e.mem.total, rel=1e-12)
        if e.feasible:
            assert b.tps[i] == pytest.approx(e.tps, rel=1e-12)
            assert b.step_s[i] == pytest.approx(e.step_s, rel=1e-12)


@pytest.mark.parametrize("case", CASES, ids=[c[2] + "@" + c[0] for c in CASES])
def test_breakdown_adds_up_to_the_step(case):
    """compute + exposed communication + bubble + offload + optimizer + overhead = step time (before rules)."""
    cl, wl, ekw = _case(case)
    ctx = make_context(cl, wl)
    rows = enumerate_rows(cl, wl, **ekw)
    b = evaluate_batch(rows, ctx, ())
    ok = np.flatnonzero(b.feasible)
    assert len(ok)
    for i in random.Random(3).sample(list(ok), min(40, len(ok))):
        e = b.eval(int(i))
        parts = e.compute_s + sum(e.comm.values()) + e.bubble_s + e.offload_s + e.optimizer_s + e.overhead_s
        assert parts == pytest.approx(e.step_s, rel=1e-9), e.plan.to_string()
        assert e.mem.total == pytest.approx(b.mem_total[i], rel=1e-12)


def test_user_plan_knobs_outside_the_rows_count():
    """zero_overlap_comm=False exposes ZeRO-1's gradient all-reduce: the single-plan path passes it through."""
    cl = load_preset("a6000-4x-pcie")
    wl = make_workload("gpt-300m")
    from gpuadvisor.schemas import Plan
    on = Plan(dp=4, zero_stage=1, micro_batch_size=2, num_micro_batches=wl.training.global_batch // 8,
              devices_per_node=4)
    off = on.model_copy(update={"zero_overlap_comm": False})
    assert estimate(off, cl, wl).step_time_s > estimate(on, cl, wl).step_time_s


def test_rows_are_the_valid_plans_in_order():
    for case in CASES[:6]:
        cl, wl, ekw = _case(case)
        rows = enumerate_rows(cl, wl, **ekw)
        plans = list(enumerate_plans(cl, wl, **ekw))
        assert [row_plan(r) for r in rows] == plans  # every row validates (Plan + check_plan_for)


def test_pruned_count_is_every_plan_the_bound_removes():
    cl, wl, _ = _case(CASES[6])
    sp = SearchSpace()
    sp.memory_limit_bytes = float(make_context(cl, wl).mem_cap)
    kept = enumerate_rows(cl, wl, space=sp)
    assert sp.pruned and len(kept) + sum(sp.pruned.values()) == len(enumerate_rows(cl, wl))


def test_rank_notes_say_what_was_pruned():
    from gpuadvisor.ranking import rank
    cl, wl, _ = _case(CASES[6])
    r = rank(cl, wl, top=3)
    assert r.n_candidates == len(enumerate_rows(cl, wl))
    assert any("pruned before timing" in n for n in r.notes)
    assert sum(r.infeasible_reasons.values()) == r.n_candidates - r.n_feasible
    assert np.isfinite(r.top[0].tokens_per_s)
