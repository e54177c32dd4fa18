"""Context parallelism (Plan.cp): each rank holds s/cp of every sequence, attention spans the whole sequence, and
ring attention passes the key/value chunks around the cp ranks, hidden behind the attention core."""
from __future__ import annotations

import numpy as np
import pytest

from gpuadvisor import api
from gpuadvisor.candidates import enumerate_plans, enumerate_rows
from gpuadvisor.candidates.enumerate import CP_MIN_SEQ, context_parallel_degrees
from gpuadvisor.costmodel.analytical.comm import ring_attention_exchange_s
from gpuadvisor.costmodel.combine import make_context
from gpuadvisor.costmodel.engine import evaluate, evaluate_batch, plan_row
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import Plan, check_plan_for, parse_plan

H100 = load_preset("hgx-h100-8x")


def _wl(seq: int, gb: int = 8, **kw):
    return api.make_workload("llama-3.1-8b", seq_len=seq, global_batch=gb, **kw)


def test_the_degrees_multiply_to_the_world_and_the_gradient_group_is_dp_times_cp():
    p = parse_plan("dp=2,tp=2,cp=2,zero=1,mb=1,m=4")
    assert (p.world_size, p.devices_per_node, p.gradient_ranks) == (8, 8, 4)
    assert p.strategy == "tp2xcp2-zero1" and p.zero_framework == "distributed-optimizer"
    assert parse_plan("dp=1,cp=8,zero=3,mb=1,m=1").strategy == "cp8-zero3"
    assert parse_plan("dp=1,cp=8,zero=3,mb=1,m=1").zero_runtime == "fsdp"  # torchtitan's FSDP2 over dp_shard*cp
    assert parse_plan(p.to_string()) == p and "cp=2" in p.to_string()
    with pytest.raises(ValueError, match=r"dp\*tp\*pp\*cp = 2\*1\*1\*2 = 4 do not match"):
        Plan(dp=2, cp=2, nodes=1, devices_per_node=8)


@pytest.mark.parametrize("text, words", [
    ("dp=4,cp=2,zero=3,zero_impl=deepspeed,mb=1,m=1", "not DeepSpeed"),
    ("dp=4,cp=2,zero=2,offload=true,mb=1,m=1", "not DeepSpeed"),
    ("dp=2,pp=2,cp=2,mb=1,m=2,mesh_order=tp-pp-dp", "mesh_order tp-dp-pp"),
    ("dp=4,cp=2,mb=1,m=1,comm_hook=fp16", "comm hooks"),
])
def test_plans_the_frameworks_do_not_run_with_context_parallelism_are_one_line_errors(text, words):
    with pytest.raises(ValueError, match=words) as err:
        parse_plan(text)
    assert "\n" not in str(err.value)


def test_the_workload_must_split_evenly_and_run_a_fused_attention_kernel():
    plan = parse_plan("dp=2,cp=4,zero=3,mb=1,m=4")
    check_plan_for(plan, _wl(8192))
    with pytest.raises(ValueError, match="divisible by 2\\*cp = 8"):
        check_plan_for(plan, _wl(8196))
    with pytest.raises(ValueError, match="fused attention kernel"):
        check_plan_for(plan, _wl(8192, attention_kernel="eager"))
    with pytest.raises(ValueError, match="generic"):
        check_plan_for(plan, api.make_workload("resnet50", global_batch=8))


def test_a_rank_holds_a_cp_th_of_each_sequences_activations_and_logits():
    wl = _wl(65536)
    plain = api.predict(wl, "dp=8,zero=3,mb=1,m=1,recompute=full", cluster=H100)
    split = api.predict(wl, "dp=4,cp=2,zero=3,mb=1,m=2,recompute=full", cluster=H100)
    # (a little over half: the per-step terms that do not scale with a rank's tokens)
    assert 0.5 <= split.memory.activations / plain.memory.activations < 0.53
    assert split.memory.logits / plain.memory.logits == pytest.approx(0.5, rel=0.02)
    # ZeRO-3 shards over dp*cp = 8 in both: the same model states
    assert split.memory.optimizer == plain.memory.optimizer and split.memory.weights == plain.memory.weights


def test_attention_spans_the_whole_sequence_not_a_ranks_chunk():
    """cp=4 at 64k is not four ranks' worth of 16k sequences: the core's work per token is the 64k sequence's, so the
    cp plan's compute exceeds that of dp*cp ranks training 16k sequences on the same tokens (ring attention computes
    every query against every key of the sequence; the causal halves are balanced over the ranks)."""
    ring = api.predict(_wl(65536, 4), "dp=2,cp=4,zero=3,mb=1,m=2,recompute=full", cluster=H100)
    short = api.predict(_wl(16384, 16), "dp=8,zero=3,mb=1,m=2,recompute=full", cluster=H100)
    assert ring.step.compute_s > 1.8 * short.step.compute_s
    assert ring.tokens_per_s * ring.step_time_s == pytest.approx(4 * 65536)


def test_the_ring_exchange_is_cp_minus_one_steps_of_a_chunk_each():
    chunk, bw, lat, call = 64e6, 100.0, 5.0, 1e-5
    assert ring_attention_exchange_s(chunk, 1, bw, lat, call) == 0.0
    assert ring_attention_exchange_s(chunk, 4, bw, lat, call) == pytest.approx(3 * (5e-6 + 64e6 / 100e9 + 1e-5))


def test_the_exchange_hides_behind_long_attention_and_shows_on_a_slow_link():
    """At 128k tokens the core outlasts the key/value ring on NVLink (a few % of the step); across 25 GbE nodes it
    does not, and the exchange is priced on the link it crosses."""
    nv = api.predict(_wl(131072, 2), "dp=1,cp=8,zero=3,mb=1,m=2,recompute=full", cluster=H100)
    exposed = sum(v for k, v in nv.step.comm_exposed_s.items() if k.startswith("cp@"))
    assert 0 < exposed < 0.02 * nv.step_time_s and "cp@nvlink" in nv.step.comm_exposed_s
    slow = api.predict(_wl(8192, 8), "dp=1,cp=8,zero=3,mb=1,m=8,recompute=full,nodes=2,gpn=4",
                       cluster=load_preset("baskerville-a100-25gbe"))
    assert slow.step.comm_exposed_s.get("cp@network", 0.0) > 0.05 * slow.step_time_s


def test_a_batch_of_mixed_degrees_gives_each_row_what_it_gives_alone():
    ctx = make_context(H100, _wl(32768, 16))
    plans = [parse_plan(t) for t in ("dp=8,zero=3,mb=1,m=2,recompute=full", "dp=2,cp=4,zero=1,mb=1,m=8",
                                     "dp=1,tp=2,cp=4,zero=1,mb=2,m=8,sequence_parallel=true",
                                     "dp=4,cp=2,zero=2,mb=1,m=4")]
    b = evaluate_batch([plan_row(p) for p in plans], ctx)
    for i, p in enumerate(plans):
        alone = evaluate(p, ctx)
        assert b.tps[i] == pytest.approx(alone.tps) and b.mem_total[i] == pytest.approx(alone.mem.total)
        assert b.eval(i).plan == p


def test_enumeration_offers_context_parallelism_for_long_sequences_on_gpus_only():
    wl = _wl(CP_MIN_SEQ, 64)
    plans = list(enumerate_plans(H100, wl))
    cps = {p.cp for p in plans}
    assert cps == {1, 2, 4, 8}
    for p in plans:
        assert p.dp * p.cp * p.tp * p.pp == p.nodes * p.devices_per_node
        if p.cp > 1:
            assert not p.zero_offload and p.mesh_order == "tp-dp-pp" and p.ep == 1
    assert len(enumerate_rows(H100, wl)) == len(plans)  # every row a valid plan
    assert context_parallel_degrees(_wl(CP_MIN_SEQ // 2), 8, True) == [1]
    assert context_parallel_degrees(wl, 8, False) == [1]  # CPU ranks: the bundled trainers run no ring attention
    assert context_parallel_degrees(_wl(CP_MIN_SEQ, finetune="lora"), 8, True) == [1]
    assert context_parallel_degrees(_wl(CP_MIN_SEQ, attention_kernel="eager"), 8, True) == [1]


def test_torchtitans_measured_context_parallel_runs_are_predicted():
    """torchtitan's Llama 3.1 8B runs at 64k/128k/256k tokens with CP 2/4/8 on 8 H100 and 405B at the same lengths
    on 512 H100 (knowledge/measurements/public, torchtitan_llama3_h100_202412 rows 5-7, 16-18): time and peak
    memory per device."""
    from gpuadvisor.publicruns.evaluate import evaluate_runs, memory_check
    from gpuadvisor.publicruns.load import load_runs
    runs = [r for r in load_runs() if r.source_id == "torchtitan_llama3_h100_202412" and (r.cp or 1) > 1]
    out = evaluate_runs(runs)
    assert len(out) == 6 and all(o.timed for o in out) and all(",cp=" in o.plan for o in out)
    ratios = np.array([o.ratio for o in out])
    assert np.all((ratios > 0.85) & (ratios < 1.4)) and np.median(ratios) == pytest.approx(1.0, abs=0.1)
    mem = np.array([m["ratio"] for m in memory_check(out)])
    assert len(mem) == 6 and np.all((mem > 0.8) & (mem < 1.05))


def test_the_bundled_trainers_refuse_context_parallelism_so_trials_never_pick_it():
    from gpuadvisor.trainers.support import unsupported_reason
    from gpuadvisor.trials.space import DefaultPlanner

    why = unsupported_reason(parse_plan("dp=4,cp=2,zero=3,mb=1,m=1"), _wl(8192), cuda=True)
    assert why and "context parallelism" in why and "cp=1" in why
    planner = DefaultPlanner(H100, _wl(32768, 16))
    assert [e.plan.cp for e in planner.top(3)] == [1, 1, 1]
