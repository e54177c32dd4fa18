"""ZeRO-3 by runtime (Plan.zero_impl): DeepSpeed's per-rank host bookkeeping against FSDP's flat buffers.

DeepSpeed ZeRO-3 walks every rank's shard of every parameter tensor in Python at each gather and gradient bucket
(partition_parameters.py AllGatherCoalescedHandle.wait, coalesced_collectives.py reduce_scatter_coalesced), so its
host work grows with ranks x tensors; it shows only where it outlasts the device's work. FSDP pays none of it.
"""
import pytest

from gpuadvisor.candidates import enumerate_rows, row_plan
from gpuadvisor.costmodel.combine import make_context
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import apply_what_if
from gpuadvisor.schemas import Plan, parse_plan
from gpuadvisor.workload.shapes import layer_shape
from gpuadvisor.workload.specs import make_workload


@pytest.mark.parametrize("name, tensors", [("1.5B", 16), ("llama-7b", 9), ("mixtral-8x7b", 2 + 4 + 1 + 8 * 3)])
def test_layer_tensors_add_up_to_the_layers_parameters(name, tensors):
    """GPT-2: 2 LayerNorms (weight, bias), Q/K/V/O with biases, 2 MLP matrices with biases; Llama: 2 RMSNorms,
    Q/K/V/O, 3 SwiGLU matrices; Mixtral: + the router and 8 experts of 3 matrices each."""
    shape = layer_shape(make_workload(name).model)
    numels = shape.tensor_numels()
    assert len(numels) == tensors and sum(numels) == shape.params


def _ctx(model: str, nodes: int, gb: int, **kw):
    cl = apply_what_if(load_preset("dgx-a100-8x-4nodes-ib-hdr"), f"gpus={nodes}x8")
    return make_context(cl, make_workload(model, seq_len=1024, global_batch=gb, **kw))


def test_deepspeed_interleaves_the_gradients_of_multi_tensor_buckets_only():
    ctx = _ctx("1.5B", 1, 8)
    n = len(ctx.layer_tensors)
    assert ctx.ds_interleaved_tensors(1e12) == n          # one bucket holds every gradient: all interleaved
    assert ctx.ds_interleaved_tensors(1.0) == 0.0         # every gradient alone: the single-tensor fast path
    # the default 5e8-element bucket holds many 1.5B layers (30.7M parameters each): all but the seams
    assert ctx.ds_interleaved_tensors(5e8) == pytest.approx(n, rel=0.02)
    # GPT-3 175B: each 12288 x 49152 MLP matrix (604M elements) overflows the bucket and goes alone
    big = _ctx("175B", 1, 8)
    assert big.ds_interleaved_tensors(5e8) == len(big.layer_tensors) - 2


def _tps_per_gpu(model: str, nodes: int, mb: int, impl):
    n = nodes * 8
    ctx = _ctx(model, nodes, n * mb)
    plan = Plan(dp=n, zero_stage=3, micro_batch_size=mb, nodes=nodes, devices_per_node=8, zero_impl=impl)
    return evaluate(plan, ctx).analytical_tps / n


def test_deepspeed_zero3_turns_host_bound_as_ranks_grow_where_fsdp_does_not():
    """GPT-2 XL (1.5B, 48 layers of 16 tensors) at 4 sequences per GPU: on one node DeepSpeed's bookkeeping hides
    behind the device work, and its Linear-by-Linear gathers (above the live-parameter cap) cost it a little more
    than the backward gathers its reuse distance saves; GPT-3 760M, under the distance, gathers only in its forward
    and runs a little faster than FSDP. From 8 to 32 nodes the bookkeeping outlasts the device work and DeepSpeed's
    per-GPU throughput falls with every doubling, FSDP's holds."""
    one = {impl: _tps_per_gpu("1.5B", 1, 4, impl) for impl in ("deepspeed", "fsdp")}
    assert 0.98 < one["deepspeed"] / one["fsdp"] < 1.0  # 0.991
    small = {impl: _tps_per_gpu("gpt3-760m", 1, 4, impl) for impl in ("deepspeed", "fsdp")}
    assert 1.0 < small["deepspeed"] / small["fsdp"] < 1.03  # 1.009: no backward gathers
    ds = [_tps_per_gpu("1.5B", k, 4, "deepspeed") for k in (8, 16, 32)]
    fs = [_tps_per_gpu("1.5B", k, 4, "fsdp") for k in (8, 16, 32)]
    assert ds[2] < 0.7 * ds[1] and ds[1] < 0.8 * ds[0]     # host-bound: 0.77, then 0.67 per doubling
    assert fs[2] > 0.85 * fs[0] and all(d <= f * (1 + 1e-9) for d, f in zip(ds, fs))


def test_zero_runtime_defaults_and_refusals():
    assert Plan(dp=8, zero_stage=3, devices_per_node=8).zero_runtime == "deepspeed"
    assert Plan(dp=4, tp=2, zero_stage=3, devices_per_node=8).zero_runtime == "fsdp"  # FSDP2 + TP
    assert Plan(dp=4, pp=2, zero_stage=3, devices_per_node=8).zero_runtime == "fsdp"  # FSDP per stage
    assert Plan(dp=8, zero_stage=1, devices_per_node=8).zero_runtime == "deepspeed"
    with pytest.raises(ValueError, match="zero_impl fsdp shards like ZeRO-2/3"):
        Plan(dp=8, zero_stage=1, devices_per_node=8, zero_impl="fsdp")
    with pytest.raises(ValueError, match="ZeRO-Offload is DeepSpeed's"):
        Plan(dp=8, zero_stage=3, zero_offload=True, devices_per_node=8, zero_impl="fsdp")
    with pytest.raises(ValueError, match="DeepSpeed runs ZeRO-2/3 with pure data parallelism"):
        Plan(dp=4, pp=2, zero_stage=3, devices_per_node=8, zero_impl="deepspeed")
    with pytest.raises(ValueError, match="zero_impl needs zero_stage >= 1"):
        Plan(dp=8, devices_per_node=8, zero_impl="deepspeed")
    p = parse_plan("dp=8,zero=3,mb=2,zero_impl=fsdp")
    assert p.zero_impl == "fsdp" and "zero_impl=fsdp" in p.to_string() and parse_plan(p.to_string()) == p


def test_suggest_gives_zero3_across_nodes_to_fsdp_where_the_trainer_runs_it():
    """The enumeration carries the hand-over's runtime (schemas.plan.handover_zero_impl): FSDP2 for pure
    data-parallel ZeRO-3 across GPU nodes, and inside a node for a model above DeepSpeed's live-parameter cap (1.5B,
    which DeepSpeed gathers Linear by Linear); DeepSpeed inside a node below it (760M), with offload or hpZ, and for
    LoRA (adapters' gradients only)."""
    cl = apply_what_if(load_preset("dgx-a100-8x-4nodes-ib-hdr"), "gpus=2x8")
    for model, finetune, across_want, inside_want in (("1.5B", "full", "fsdp", "fsdp"),
                                                      ("gpt3-760m", "full", "fsdp", None),
                                                      ("1.5B", "lora", None, None)):
        wl = make_workload(model, global_batch=64, finetune=finetune)
        z3 = [row_plan(r) for r in enumerate_rows(cl, wl) if r[3] == 3 and r[1] == r[2] == 1]
        plain = [p for p in z3 if not p.zero_offload and p.zero_hpz_partition_size == 1]
        across = {p.zero_impl for p in plain if p.nodes > 1}
        inside = {p.zero_impl for p in plain if p.nodes == 1}
        assert across == {across_want} and inside == {inside_want}, (model, finetune)
        assert all(p.zero_impl is None for p in z3 if p.zero_offload or p.zero_hpz_partition_size > 1)


@pytest.mark.parametrize("name, modules", [("1.5B", 6), ("llama-7b", 7), ("mixtral-8x7b", 4 + 1 + 8 * 3)])
def test_deepspeed_gathers_each_linear_above_its_live_parameter_cap(name, modules):
    """GPT-2: Q, K, V, O and 2 MLP Linears; Llama: + a third (gated) MLP Linear; Mixtral: the router and 8 experts of
    3. Above DeepSpeed's 1e9-element live-parameter cap each costs a collective (one ring latency and call more per
    Linear than FSDP's one per block); norms stay resident (stage3_param_persistence_threshold). The bytes differ by
    the backward gathers DeepSpeed's reuse distance saves: the forward's last 1e9 elements, the LM head's and the
    layers after it, stay gathered into the backward (FSDP re-gathers every layer)."""
    from gpuadvisor.schemas.plan import DEEPSPEED_MAX_LIVE_PARAMETERS, DEEPSPEED_MAX_REUSE_DISTANCE
    wl = make_workload(name, seq_len=1024, global_batch=8)
    assert layer_shape(wl.model).gathered_modules() == modules
    assert wl.model.params > DEEPSPEED_MAX_LIVE_PARAMETERS
    ctx = _ctx(name, 2, 16 * 4)
    plans = {impl: Plan(dp=16, zero_stage=3, micro_batch_size=1, num_micro_batches=4, nodes=2, devices_per_node=8,
                        zero_impl=impl) for impl in ("deepspeed", "fsdp")}
    ev = {impl: evaluate(p, ctx) for impl, p in plans.items()}
    kept = min(ctx.L, (DEEPSPEED_MAX_REUSE_DISTANCE - ctx.p_head) / ctx.p_layer)
    saved = 4 * kept * ctx.w_layer_bytes * 15 / 16  # 4 micro-batches, a ring of 16
    assert 0 < kept < ctx.L
    assert sum(ev["fsdp"].link_bytes.values()) - sum(ev["deepspeed"].link_bytes.values()) == pytest.approx(saved)
    assert ctx.ds_gathers(DEEPSPEED_MAX_LIVE_PARAMETERS) == modules
    assert ev["deepspeed"].step_s > ev["fsdp"].step_s
    under = make_context(apply_what_if(load_preset("dgx-a100-8x-4nodes-ib-hdr"), "gpus=2x8"),
                         make_workload("gpt3-760m", seq_len=1024, global_batch=8))
    assert under.ds_gathers(DEEPSPEED_MAX_LIVE_PARAMETERS) == 1.0


def test_deepspeed_zero2_all_reduces_every_micro_step_where_fsdp_reduce_scatters():
    """DeepSpeed's stage 2 all-reduces each gradient bucket and keeps its partition (use_multi_rank_bucket_allreduce,
    default true): per rank 2(n-1)/n of the gradients per micro-step against a reduce-scatter's (n-1)/n; both
    all-gather the updated parameters once per step."""
    ctx = _ctx("1.5B", 2, 64)
    sent = {}
    for impl in ("deepspeed", "fsdp"):
        plan = Plan(dp=16, zero_stage=2, micro_batch_size=1, num_micro_batches=4, nodes=2, devices_per_node=8,
                    zero_impl=impl)
        e = evaluate(plan, ctx)
        sent[impl] = sum(e.link_bytes.values())
        assert e.feasible
    assert sent["deepspeed"] / sent["fsdp"] == pytest.approx((2 * 4 + 1) / (4 + 1), rel=1e-6)


def test_a_plans_live_parameter_cap_below_the_model_gathers_linear_by_linear():
    """Plan.zero_max_live_parameters (stage3_max_live_parameters): GPT-3 760M is under DeepSpeed's 1e9 default and
    gathers a layer in one collective; with a 1e8 cap it is above it and takes one per Linear (6), each one more
    ring latency and call: slower, the same bytes."""
    ctx = _ctx("gpt3-760m", 2, 16 * 4)
    assert ctx.ds_gathers([1e9, 1e8]).tolist() == [1.0, 6.0]
    base = Plan(dp=16, zero_stage=3, micro_batch_size=1, num_micro_batches=4, nodes=2, devices_per_node=8,
                zero_impl="deepspeed")
    capped = base.model_copy(update={"zero_max_live_parameters": 100_000_000})
    a, b = evaluate(base, ctx), evaluate(capped, ctx)
    assert b.step_s > a.step_s
    assert sum(b.link_bytes.values()) == pytest.approx(sum(a.link_bytes.values()))
    assert parse_plan("dp=16,zero=3,max_live=100000000,nodes=2,gpn=8").zero_max_live_parameters == 100_000_000
