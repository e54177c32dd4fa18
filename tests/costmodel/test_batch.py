"""The vectorised batch path (costmodel/batch.py) agrees with the per-plan reference (fast_eval)."""
import random

import numpy as np
import pytest

from gpuadvisor.candidates import SearchSpace, enumerate_plans, enumerate_rows, row_plan
from gpuadvisor.costmodel.batch import evaluate_batch
from gpuadvisor.costmodel.combine import fast_eval, make_context
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
]


def _case(c):
    preset, whatif, model, wkw, ekw = c
    cl = load_preset(preset)
    if whatif:
        cl = apply_what_if(cl, whatif)
    return cl, make_workload(model, **wkw), ekw


@pytest.mark.parametrize("case", CASES, ids=[c[2] + "@" + c[0] for c in CASES])
def test_batch_agrees_with_reference(case):
    cl, wl, ekw = _case(case)
    ctx, rules = make_context(cl, wl), load_rules()
    rows = enumerate_rows(cl, wl, **ekw)
    b = evaluate_batch(rows, ctx, rules)
    idx = random.Random(7).sample(range(len(rows)), min(60, len(rows)))
    n_feasible = 0
    for i in idx:
        e = fast_eval(row_plan(rows[i]), ctx, rules)
        assert bool(b.feasible[i]) == e.feasible, row_plan(rows[i]).to_string()
        assert b.reason_of(i) == e.reason
        assert b.mem_total[i] == pytest.approx(e.mem.total, rel=1e-9)
        if e.feasible:
            n_feasible += 1
            assert b.tps[i] == pytest.approx(e.tps, rel=1e-9)
            assert b.step_s[i] == pytest.approx(e.step_s, rel=1e-9)
            assert b.factor[i] == pytest.approx(e.factor, rel=1e-12)
    assert n_feasible or not b.feasible.any()


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
