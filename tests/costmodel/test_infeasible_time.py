"""A plan over device memory still gets its step time: predict says it does not fit and how fast it would run if
it did (a measured run the memory model calls out of memory keeps a time to compare; ranking never picks it)."""
import math

from gpuadvisor import api
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import rank
from gpuadvisor.workload.specs import make_workload

PLAN = "dp=8,tp=1,pp=1,mb=2,m=16"  # GPT-3 2.7B in DDP: ~54 GiB of states and activations on a 40 GB A100


def _bigger(cluster, factor: float):
    nodes = [n.model_copy(update={"devices": [d.model_copy(update={"memory_bytes": int(d.memory_bytes * factor)})
                                              for d in n.devices]}) for n in cluster.nodes]
    return cluster.model_copy(update={"nodes": nodes})


def test_over_memory_plan_keeps_the_time_it_would_take():
    small = load_preset("dgx-a100-8x")
    oom = api.predict("gpt3-2.7b", PLAN, cluster=small, seq_len=2048)
    assert not oom.feasible and "memory" in (oom.infeasible_reason or "")
    assert oom.memory.total > oom.memory_capacity_bytes
    fits = api.predict("gpt3-2.7b", PLAN, cluster=_bigger(small, 4.0), seq_len=2048)
    assert fits.feasible
    # capacity enters feasibility only: the same plan on the same GPUs with more memory runs at the same pace
    assert math.isfinite(oom.step_time_s) and oom.step_time_s > 0
    assert oom.step_time_s == fits.step_time_s
    assert oom.tokens_per_s == fits.tokens_per_s
    assert oom.step.compute_s == fits.step.compute_s > 0


def test_ranking_still_takes_only_plans_that_fit():
    r = rank(load_preset("dgx-a100-8x"), make_workload("gpt3-2.7b", seq_len=2048, global_batch=256), top=50)
    assert r.top and all(e.feasible for e in r.top)
    assert all(e.memory.total <= e.memory_capacity_bytes for e in r.top)
    assert r.infeasible_reasons.get("out of device memory", 0) > 0
