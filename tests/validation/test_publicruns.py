"""The public measured runs: loader, mapping to the cost model's inputs, metrics, and the accuracy benchmark."""
import dataclasses
import importlib.util
import json
import math
from pathlib import Path

import pytest

from gpuadvisor.publicruns import (LIMITS, Unsupported, kendall_tau, load_runs, mape, megatron_flops_per_token,
                                   regret, to_inputs)
from gpuadvisor.publicruns.evaluate import (Outcome, evaluate_runs, group_scores, loso_mape, megatron_tflops_check,
                                            memory_check, scaling_scores, summarize)
from gpuadvisor.workload.shapes import layer_shape

ROOT = Path(__file__).resolve().parents[2]

# Row counts stated in knowledge/measurements/public/README.md.
README_COUNTS = {"llmfoundry_mpt": 216, "torchtitan": 55, "megatron_lm": 20, "megatron_bridge_perf": 293,
                 "deepspeed_fsdp": 142, "single_node_gpt2": 7, "consumer_gpus": 2}


@pytest.fixture(scope="module")
def runs():
    return load_runs()


def _run(runs, ref):
    return next(r for r in runs if r.ref == ref)


def _find(runs, **fields):
    return next(r for r in runs if all(getattr(r, k) == v for k, v in fields.items()))


# ---------------------------------------------------------------- loader


def test_every_file_parses_with_the_readme_row_counts(runs):
    counts = {}
    for r in runs:
        counts[r.family] = counts.get(r.family, 0) + 1
    assert counts == README_COUNTS


def test_fields_are_typed(runs):
    first = _run(runs, "llmfoundry_mpt:1")
    assert (first.model_name, first.gpus, first.nodes, first.layers, first.hidden) == ("MPT-70b", 512, 64, 80, 8192)
    assert first.fsdp_mode == "FULL_SHARD" and first.tokens_per_s_per_gpu == 1007.0
    assert first.iter_time_s == pytest.approx(16.2685)
    nvfp4 = _find(runs, source_id="torchtitan_nvfp4_doc")
    assert nvfp4.mem_gib == pytest.approx(110.95)  # cell '110.95 (60.2%)'
    assert all(r.gpus is None or isinstance(r.gpus, int) for r in runs)


def test_measured_time_is_derived_from_throughput_when_missing(runs):
    r = _run(runs, "llmfoundry_mpt:1")
    bare = dataclasses.replace(r, iter_time_s=None)
    assert bare.measured_iter_time_s == pytest.approx(r.global_batch * r.seq_len / (r.tokens_per_s_per_gpu * 512))


def test_deepspeed_azure_time_comes_from_the_posts_flop_formula(runs):
    """TFLOPs/GPU x GPUs x seconds = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (the post's own definition)."""
    from gpuadvisor.publicruns.metrics import full_recompute_flops_per_iteration

    r = _find(runs, source_id="deepspeed_azure_2022", model_name="GPT 530B", gpus=512, micro_batch=1)
    assert (r.iter_time_s, r.tokens_per_s_per_gpu, r.vocab) == (None, None, None)
    # 530B: 105 layers, h 20480, seq 1024, batch 512; 64.3 TFLOPs/GPU on 512 GPUs
    flops = 96 * 512 * 1024 * 105 * 20480 ** 2 * (1 + 1024 / (6 * 20480) + 50257 / (16 * 105 * 20480))
    assert full_recompute_flops_per_iteration(512, 1024, 105, 20480, 50257) == pytest.approx(flops)
    assert r.measured_iter_time_s == pytest.approx(flops / (64.3e12 * 512))
    assert r.measured_iter_time_s == pytest.approx(68.0, abs=0.1)
    assert r.measured_tokens_per_s_per_gpu == pytest.approx(1024 / r.measured_iter_time_s)
    # a row whose metric is not that formula gets no time from its TFLOP/s
    zpp = _find(runs, source_id="deepspeed_zeropp_2023")
    assert zpp.tflops_per_gpu and zpp.measured_iter_time_s is None


def test_deepspeed_azure_rows_offload_the_optimizer_only_and_approximate_the_activation_offload(runs):
    r = _find(runs, source_id="deepspeed_azure_2022", model_name="GPT 175B", gpus=256, seq_len=1024, micro_batch=4)
    with pytest.raises(Unsupported) as err:
        to_inputs(r)
    assert err.value.reasons == ("activation checkpoints offloaded to host RAM",)
    inp = to_inputs(r, approximate=["offload-activations"])
    p, m = inp.plan, inp.workload.model
    assert (p.dp, p.zero_stage, p.zero_offload, p.micro_batch_size, p.num_micro_batches) == (256, 3, True, 4, 1)
    # "ZeRO-3 + CPU offload (optimizer states, activations)": the parameter partition stays on the GPUs
    assert not p.offloads_params and p.strategy == "zero3-offload-optim"
    assert p.zero_runtime == "deepspeed"  # DeepSpeed's own ZeRO-3, priced with its per-rank host bookkeeping
    assert (m.d_ff, m.vocab_size, m.mlp, m.n_layers) == (4 * 12288, 50257, "gelu", 96)
    assert any(n.startswith("MLP width not stated") for n in inp.assumptions)
    assert any(n.startswith("approximation offload-activations") for n in inp.assumptions)
    node = inp.cluster.nodes[0]
    assert (node.cpu.cores, len(inp.cluster.nodes), len(node.devices)) == (96, 32, 8)
    assert node.cpu.ram_bytes == 1900 * 2 ** 30
    # 8 HDR rails per node, as the row states
    assert len(node.nics) == 8


def test_torchtitan_pipeline_rows_run_torchtitans_default_micro_batches(runs):
    """pipeline_parallel_microbatches unset = pp x stages per rank (1 for 1F1B, 2 for Interleaved 1F1B)."""
    from gpuadvisor.api import predict

    one_f_one_b, interleaved = _run(runs, "torchtitan:13"), _run(runs, "torchtitan:14")
    assert one_f_one_b.micro_batch is None and "PP schedule 1F1B" in one_f_one_b.other_opts
    p = to_inputs(one_f_one_b).plan  # no approximation needed any more
    assert (p.dp, p.tp, p.pp, p.zero_stage, p.micro_batch_size, p.num_micro_batches, p.pp_schedule) == (
        8, 8, 8, 3, 4, 8, "1f1b")
    q = to_inputs(interleaved).plan
    assert (q.micro_batch_size, q.num_micro_batches, q.pp_schedule, q.pp_virtual_stages) == (2, 16, "interleaved", 2)
    # FSDP per stage holds the stage's whole weights and gradients (torch pipelining): torchtitan measured
    # 82.5 GiB reserved; the model's 43 GiB is what the tensors need (it read 22 GiB with sharded stages)
    inp = to_inputs(one_f_one_b)
    need = predict(inp.workload, inp.plan, cluster=inp.cluster).memory.total / 2 ** 30
    assert 0.5 * one_f_one_b.mem_gib < need < one_f_one_b.mem_gib


# ---------------------------------------------------------------- mapping


def test_mpt7b_llmfoundry_row_is_a_zero3_fsdp_plan(runs):
    r = _find(runs, family="llmfoundry_mpt", model_name="MPT-7b", gpus=8, gpu="A100 80GB", seq_len=2048)
    inp = to_inputs(r)
    p = inp.plan
    assert (p.dp, p.tp, p.pp, p.zero_stage, p.micro_batch_size) == (8, 1, 1, 3, r.micro_batch)
    assert (p.zero_impl, p.zero_runtime) == ("fsdp", "fsdp")  # PyTorch FSDP's sharding, not DeepSpeed's
    assert p.micro_batch_size * p.num_micro_batches * p.dp == r.global_batch
    assert p.recompute is (r.activation_checkpointing == "True")
    m = inp.workload.model
    assert (m.mlp, m.n_kv_heads, m.tied_embeddings, m.max_seq_len) == ("gelu", 0, True, 2048)
    assert m.params == pytest.approx(r.params, rel=0.02)
    assert inp.cluster.nodes[0].devices[0].spec_key == "a100-sxm-80gb"
    assert inp.workload.training.precision == "bf16"


def test_stacks_without_dropout_store_no_masks_and_their_runs_fit(runs):
    """llm-foundry's MPT, llm.c and nanoGPT train without dropout; Megatron keeps its 0.1 defaults. The MPT-1b run
    at micro-batch 10 on A100 40GB ran: with dropout masks it was predicted 41.1 GiB, over the card."""
    mpt = _run(runs, "llmfoundry_mpt:179")
    assert (mpt.model_name, mpt.micro_batch, mpt.gpu) == ("MPT-1b", 10, "A100 40GB")
    assert to_inputs(mpt).workload.model.dropout is False
    llmc = to_inputs(_find(runs, family="single_node_gpt2", source_id="llmc_scripts")).workload.model
    assert llmc.dropout is False
    assert llmc.vocab_size == 50304  # llm.c's padded_vocab_size: its head's GEMMs run aligned
    megatron = to_inputs(_run(runs, "megatron_lm:1"), approximate=list(LIMITS))
    assert megatron.workload.model.dropout is None and layer_shape(megatron.workload.model).dropout
    (o,) = evaluate_runs([mpt])
    assert o.infeasible_reason is None and o.predicted_mem_gib < o.capacity_gib


def test_torchtitan_kernels_follow_whether_and_when_it_compiled(runs):
    """torchtitan of 2024 without torch.compile runs its own modules op by op, as Hugging Face's (hf); its December
    2024 release compiled the blocks and left the loss eager (fused-layers); 2025's compiles the loss too (fused)."""
    kernels = {ref: to_inputs(_run(runs, ref), approximate=list(LIMITS)).workload.training.kernels
               for ref in ("torchtitan:1", "torchtitan:2", "torchtitan:19")}
    assert kernels == {"torchtitan:1": "hf", "torchtitan:2": "fused-layers", "torchtitan:19": "fused"}
    unstated = _find(runs, source_id="torchtitan_perf_doc_2024", model_name="Llama 2 13B",
                     activation_checkpointing="none")
    assert not unstated.compile  # compiled or not, a 2024 torchtitan's loss ran eager
    assert to_inputs(unstated, approximate=list(LIMITS)).workload.training.kernels == "fused-layers"
    assert to_inputs(_run(runs, "llmfoundry_mpt:179")).workload.training.kernels == "fused"


def test_megatron_readme_pipelines_run_interleaved_with_the_fewest_virtual_stages(runs):
    """The Megatron-LM README overlaps pipeline communication, which Megatron does only in its interleaved schedule:
    under `pp-schedule` each pipeline row gets the fewest virtual stages its layers per stage allow (70B: 84 / 2 =
    42 -> 2; 119B: 92 / 4 = 23 -> 23; 462B: 112 / 16 = 7 -> 7; the strong-scaling 175B: 16 -> 2); without it the
    row is refused; rows without a pipeline, and other sources, keep their schedule."""
    all_but = [a for a in LIMITS if a != "pp-schedule"]
    for ref, v in (("megatron_lm:5", 2), ("megatron_lm:6", 23), ("megatron_lm:9", 7), ("megatron_lm:17", 2)):
        plan = to_inputs(_run(runs, ref), approximate=list(LIMITS)).plan
        assert (plan.pp_schedule, plan.pp_virtual_stages) == ("interleaved", v), ref
        with pytest.raises(Unsupported, match="pipeline schedule not stated"):
            to_inputs(_run(runs, ref), approximate=all_but)
    flat = to_inputs(_run(runs, "megatron_lm:4"), approximate=all_but).plan  # 32B: TP 8, no pipeline
    assert (flat.pp, flat.pp_schedule, flat.pp_virtual_stages) == (1, "1f1b", 1)
    titan = [r for r in runs if r.source_id.startswith("torchtitan") and (r.pp or 1) > 1 and not r.vpp]
    assert titan and all(to_inputs(r, approximate=list(LIMITS)).plan == to_inputs(r, approximate=all_but).plan
                         for r in titan if _maps(r))


def test_deepspeed_zero3_rows_run_deepspeeds_prefetch_bucket(runs):
    """The Azure ZeRO-3 rows state no stage3_prefetch_bucket_size: DeepSpeed's default 5e7 elements, said in the
    row's assumptions; FSDP rows keep the plan's default."""
    azure = to_inputs(_find(runs, source_id="deepspeed_azure_2022", model_name="GPT 530B"), approximate=list(LIMITS))
    assert azure.plan.zero_impl == "deepspeed" and azure.plan.zero_allgather_bucket_size == 50_000_000
    assert any("stage3_prefetch_bucket_size" in n for n in azure.assumptions)
    mpt = to_inputs(_find(runs, family="llmfoundry_mpt", fsdp_mode="FULL_SHARD"))
    assert mpt.plan.zero_impl == "fsdp" and mpt.plan.zero_allgather_bucket_size == 500_000_000


def _maps(run) -> bool:
    try:
        to_inputs(run, approximate=list(LIMITS))
    except Unsupported:
        return False
    return True


def test_shard_grad_op_is_zero2_and_roce_nodes_get_their_rails(runs):
    r = _find(runs, family="llmfoundry_mpt", fsdp_mode="SHARD_GRAD_OP")
    inp = to_inputs(r)
    assert inp.plan.zero_stage == 2 and inp.plan.nodes == r.nodes and inp.plan.zero_impl == "fsdp"
    # '1600 Gbps RoCE' per node: 4 rails of 400 Gb/s on links.yaml's roce-400g class
    assert inp.cluster.network is not None and inp.cluster.network.link_speed_gbit_per_s == 400
    nics = inp.cluster.nodes[0].nics
    assert len(nics) == 4 and {n.kind for n in nics} == {"roce"}
    assert any("1600 Gb/s" in a for a in inp.assumptions)
    assert inp.cluster.network.protocol == "roce"


def test_unstated_network_is_the_generations_dgx_fabric_only_as_an_approximation(runs):
    """torchtitan's performance doc gives 8 nodes of A100 80GB and no network: refused strictly; under
    `network-unstated` the DGX A100 SuperPOD fabric, 8 rails of 200 Gb/s HDR InfiniBand, one per GPU."""
    r = _find(runs, source_id="torchtitan_perf_doc_2024", model_name="Llama 2 13B", activation_checkpointing="none")
    with pytest.raises(Unsupported, match="inter-node network not stated"):
        to_inputs(r)
    inp = to_inputs(r, approximate=["network-unstated"])
    assert inp.plan.nodes == 8 and inp.plan.zero_stage == 3
    nics = inp.cluster.nodes[0].nics
    assert len(nics) == 8 and {n.kind for n in nics} == {"infiniband"} and {n.speed_gbit_per_s for n in nics} == {200}
    assert any("approximation network-unstated" in a for a in inp.assumptions)
    assert any("DGX-A100 compute fabric" in a for a in inp.assumptions)


def test_per_op_selective_recompute_is_a_plan_mode_and_a_selective_fraction_an_approximation(runs):
    """torchtitan's per-op SAC maps strictly to Plan.recompute_ops; its layer-level mode to every other block; an
    unstated selective fraction (fms-fsdp) from the row's HFU/MFU (= 1 + fraction/3) only as an approximation."""
    op = _find(runs, source_id="torchtitan_perf_doc_2024", model_name="Llama 2 13B",
               activation_checkpointing="selective (op)")
    layer = _find(runs, source_id="torchtitan_perf_doc_2024", model_name="Llama 2 13B",
                  activation_checkpointing="selective (layer)")
    a, b = to_inputs(op, approximate=["network-unstated"]), to_inputs(layer, approximate=["network-unstated"])
    assert a.plan.recompute_ops and not a.plan.recompute and not any("selective-recompute" in n for n in a.assumptions)
    assert b.plan.recompute and b.plan.recompute_interval == 2 and not b.plan.recompute_ops
    # fms-fsdp: 13B on A100 at HFU 69 / MFU 61 checkpoints 0.39 of its blocks (every 3rd); 70B at 74 / 55 all of
    # them (its scripts/70b.sh: fsdp_activation_checkpointing with selective_checkpointing=1)
    fms = _find(runs, source_id="fms_fsdp_readme", activation_checkpointing="selective", gpu="A100 80GB",
                mfu_pct=61.0)
    with pytest.raises(Unsupported, match="selective recompute"):
        to_inputs(fms)
    fms13 = to_inputs(fms, approximate=list(LIMITS))
    assert fms13.plan.recompute and fms13.plan.recompute_interval == 3
    assert any("HFU 69 / MFU 61" in n for n in fms13.assumptions)
    fms70 = to_inputs(_find(runs, source_id="fms_fsdp_readme", activation_checkpointing="selective",
                            gpu="A100 80GB", mfu_pct=55.0, params=68976648192), approximate=list(LIMITS))
    assert fms70.plan.recompute and fms70.plan.recompute_interval == 1
    # a torchtitan row that says only "selective" ran its train config's per-op mode (llama3_8b.toml 'op')
    titan = _find(runs, source_id="torchtitan_llama3_h100_202412", activation_checkpointing="selective")
    t = to_inputs(titan)
    assert t.plan.recompute_ops and any("llama3_8b.toml" in n for n in t.assumptions)


def test_torchtitan_llama3_8b_is_swiglu_with_8_kv_heads(runs):
    r = _run(runs, "torchtitan:1")
    inp = to_inputs(r)
    m = inp.workload.model
    assert (m.mlp, m.n_kv_heads, m.n_heads, m.tied_embeddings) == ("swiglu", 8, 32, False)
    assert m.params == pytest.approx(r.params, rel=0.01)
    assert inp.plan.zero_stage == 3 and inp.plan.recompute_ops  # per-op SAC, its train config's mode
    assert inp.cluster.nodes[0].devices[0].memory_bytes == 96 * 1024**3  # the row's 96 GB, not the catalog's 80


def test_rows_beyond_the_model_name_every_blocker(runs):
    fp8 = _find(runs, source_id="torchtitan_llama3_h100_202412", cp=2)
    p = to_inputs(fp8).plan  # FP8 and context parallelism are priced now (Plan.cp)
    assert (p.dp, p.cp, p.world_size) == (4, 2, 8)
    nvfp4 = next(r for r in runs if "nvfp4" in r.precision.lower())
    with pytest.raises(Unsupported) as exc:
        to_inputs(nvfp4, approximate=list(LIMITS))
    assert "fp4/fp6 precision" in exc.value.reasons
    sm100 = _find(runs, gpu="NVIDIA Blackwell SM100+ (model not stated)")
    with pytest.raises(Unsupported, match="GPU NVIDIA Blackwell SM100\\+ not in knowledge/gpus.yaml"):
        to_inputs(sm100)
    # GB200 is a catalog GPU, but the racks' rows do not say how many GPUs share a node
    gb200 = _find(runs, gpu="GB200", source_id="megatron_bridge_perf_summary")
    with pytest.raises(Unsupported, match="GPUs per node not stated"):
        to_inputs(gb200)


def test_megatron_weak_scaling_needs_stated_approximations(runs):
    r = _find(runs, source_id="megatron_h100_weak_scaling_table", model_name="GPT 70B")
    with pytest.raises(Unsupported) as exc:
        to_inputs(r)
    assert {"micro-batch not stated", "activation checkpointing not stated"} <= set(exc.value.reasons)
    with pytest.raises(Unsupported, match="pipeline schedule not stated"):
        to_inputs(r, approximate=["micro-batch", "recompute-unstated"])
    inp = to_inputs(r, approximate=["micro-batch", "recompute-unstated", "pp-schedule"])
    p = inp.plan
    # the distributed optimizer (ZeRO-1) with TP8 x PP2 is a plan of its own now, not an approximation
    assert (p.dp, p.tp, p.pp, p.micro_batch_size, p.num_micro_batches) == (48, 8, 2, 1, 8)
    assert (p.pp_schedule, p.pp_virtual_stages) == ("interleaved", 2)
    assert p.zero_stage == 1
    assert p.sequence_parallel and inp.cluster.network.link_speed_gbit_per_s == 400
    with pytest.raises(ValueError, match="unknown approximation"):
        to_inputs(r, approximate=["everything"])


def test_every_limit_gates_some_row_and_its_approximation_lifts_it(runs):
    """LIMITS is the data the lead edits: each entry must block at least one row that it alone lifts."""
    everything = list(LIMITS)
    liftable = []
    for r in runs:
        try:
            to_inputs(r, approximate=everything)
        except Unsupported:
            continue
        liftable.append(r)
    for name in LIMITS:
        others = [n for n in everything if n != name]
        blocked = []
        for r in liftable:
            try:
                to_inputs(r, approximate=others)
            except Unsupported as exc:
                blocked.append(exc.reasons)
        assert blocked, f"no row needs the approximation '{name}'"


# ---------------------------------------------------------------- metrics


def test_mape():
    assert mape([1.0, 2.0], [1.1, 1.8]) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        mape([], [])


def test_kendall_tau_b_with_ties():
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # 5 concordant pairs, one pair tied in x only: 5 / sqrt(6 * 5)
    assert kendall_tau([1, 2, 3, 3], [1, 2, 3, 4]) == pytest.approx(5 / math.sqrt(30))
    assert kendall_tau([1, 1, 1], [1, 2, 3]) is None


def test_regret_takes_the_measured_time_of_the_predicted_best():
    assert regret([1.0, 1.2, 1.5], [3.0, 1.0, 2.0]) == pytest.approx(0.2)
    assert regret([1.0, 1.2], [0.5, 0.9]) == 0.0


def test_megatron_flop_count_reproduces_the_published_tflops(runs):
    r = _find(runs, source_id="megatron_h100_weak_scaling_table", model_name="GPT 1.7B")
    fpt = megatron_flops_per_token(r.layers, r.hidden, r.heads, r.kv_heads, r.ffn_hidden, r.vocab, r.seq_len)
    assert fpt * r.tokens_per_s_per_gpu / 1e12 == pytest.approx(r.tflops_per_gpu, rel=0.005)


def _outcomes(runs, ratios_by_source):
    base = _run(runs, "llmfoundry_mpt:1")
    out = []
    for sid, ratios in ratios_by_source.items():
        for i, ratio in enumerate(ratios):
            run = dataclasses.replace(base, source_id=sid, row=i + 1, iter_time_s=1.0 + i)
            out.append(Outcome(run, predicted_s=ratio * (1.0 + i)))
    return out


def test_groups_loso_and_oom_ranking(runs):
    outs = _outcomes(runs, {"a": [2.0, 2.0, 2.0], "b": [2.0, 2.0, 2.0, 2.0]})
    loso = loso_mape(outs)
    assert loso["a"] == pytest.approx(0.0) and loso["b"] == pytest.approx(0.0)
    s = summarize(outs)
    assert s["mape_pct"] == pytest.approx(100.0) and s["used"] == 7
    # one group (same model/GPU/batch/seq): measured 1..3 s for "a"; an OOM prediction ranks last
    group = [o for o in outs if o.run.source_id == "a"]
    group[0] = dataclasses.replace(group[0], predicted_s=math.inf, infeasible_reason="out of device memory")
    tau, reg = group_scores(group)
    assert tau == pytest.approx(-1 / 3) and reg == pytest.approx(1.0)


def test_scaling_scores_compare_per_gpu_throughput_across_gpu_counts(runs):
    base = _run(runs, "llmfoundry_mpt:1")
    tokens = base.global_batch * base.seq_len
    group = []
    for gpus, measured, predicted in ((8, 100.0, 100.0), (16, 90.0, 95.0), (32, 80.0, 90.0)):
        run = dataclasses.replace(base, gpus=gpus, iter_time_s=tokens / (measured * gpus))
        group.append(Outcome(run, predicted_s=tokens / (predicted * gpus)))
    tau, retention = scaling_scores(group)
    assert tau == pytest.approx(1.0) and retention == pytest.approx((90 / 100) / (80 / 100))


def test_rtx4090_gpt2_runs_are_priced_on_the_geforce_curve(runs):
    """The two public RTX 4090 runs (llm.c's PyTorch GPT-2 124M on 2 GPUs, nanoGPT on one): within 15 % of their
    step times on the geforce_ada curve (the unsourced 0.45 curve before put both 1.5x too slow), and the 2-GPU run's
    18.44 GiB of max_memory_allocated within 5 %."""
    ddp, single = _run(runs, "consumer_gpus:1"), _run(runs, "consumer_gpus:2")
    assert (ddp.gpu, ddp.gpus, ddp.micro_batch, ddp.grad_accum) == ("RTX 4090", 2, 32, 4)
    assert single.measured_iter_time_s == pytest.approx(61440 / 105853, rel=1e-3)
    plan = to_inputs(ddp).plan
    assert (plan.dp, plan.micro_batch_size, plan.num_micro_batches, plan.zero_stage) == (2, 32, 4, 0)
    ratios = {o.run.ref: o.ratio for o in evaluate_runs([ddp, single])}
    assert 0.9 < ratios["consumer_gpus:1"] < 1.15 and 0.9 < ratios["consumer_gpus:2"] < 1.2, ratios
    (mem,) = memory_check(evaluate_runs([ddp]))
    assert mem["measured_gib"] == pytest.approx(18.44) and mem["fits"] and 0.95 < mem["ratio"] < 1.05


def test_memory_check_compares_the_stated_peaks(runs):
    """Every predicted row that states its memory is compared; the 8B at 32k tokens with full recompute (torchtitan
    Dec 2024: compiled blocks, eager loss) and at 8k with per-op checkpointing are within 5 % of what they measured,
    and skipped rows are not listed."""
    rows = [r for r in runs if r.source_id == "torchtitan_llama3_h100_202412"]
    # a row that cannot be mapped (its degrees do not multiply to its GPUs) is skipped, not listed
    bad = dataclasses.replace(_run(runs, "torchtitan:5"), row=99, gpus=7)
    check = {c["ref"]: c for c in memory_check(evaluate_runs(rows + [bad]))}
    assert "torchtitan:99" not in check
    cp = check["torchtitan:5"]  # context parallelism (CP 2 at 64k): priced, within 5 %
    assert cp["fits"] and 0.95 < cp["ratio"] < 1.05
    eight = check["torchtitan:4"]
    assert eight["measured_gib"] == pytest.approx(83.9) and eight["fits"] and not eight["approximated"]
    assert eight["ratio"] == pytest.approx(eight["predicted_gib"] / 83.9) and 0.95 < eight["ratio"] < 1.05
    # per-op selective checkpointing (Plan.recompute_ops) at micro-batch 2: within 5 % of 82.4 GiB, eager
    op = check["torchtitan:1"]
    assert not op["approximated"] and 0.95 < op["ratio"] < 1.05


def test_megatron_check_reports_every_weak_scaling_row(runs):
    rows = [r for r in runs if r.source_id == "megatron_h100_weak_scaling_table"]
    outs = [Outcome(r, predicted_s=r.iter_time_s) for r in rows]
    check = megatron_tflops_check(outs)
    assert len(check) == 9 and all(c["flop_count_consistent"] for c in check)
    assert all(c["within"] and c["ratio"] == pytest.approx(1.0, rel=0.01) for c in check)


# ---------------------------------------------------------------- benchmark


def test_benchmark_runs_end_to_end_on_one_source(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("calibration_accuracy",
                                                  ROOT / "benchmarks" / "calibration_accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out_json = tmp_path / "calib.json"
    assert mod.main(["--source", "llmc_scripts", "--json", str(out_json), "--worst", "3", "--loso"]) == 0
    text = capsys.readouterr().out
    assert "llmc_scripts" in text and "Worst 3 rows" in text
    doc = json.loads(out_json.read_text())
    s = doc["sources"]["llmc_scripts"]
    # llm.c's run_gpt3_125M.sh "~150ms/iter" would be 137 % of an A100's peak: refused as implausible
    assert s["rows"] == 5 and s["used"] == 4 and s["mape_pct"] > 0
    assert all(r["predicted_s"] > 0 for r in doc["rows"] if r["used"])
    assert [r["ref"] for r in doc["rows"] if not r["used"]] == ["single_node_gpt2:5"]


def test_implausible_measured_rate_is_refused_with_its_figures():
    from gpuadvisor.publicruns.mapping import Unsupported

    runs = {r.ref: r for r in load_runs()}
    with pytest.raises(Unsupported, match=r"measured rate implausible \(42\d model TFLOP/s per GPU > 312 peak\)"):
        to_inputs(runs["single_node_gpt2:5"])
    # the same script family's GPT-2 124M row (0.3 s for 0.5M tokens on 8 A100s: 41 % of peak) is kept
    assert to_inputs(runs["single_node_gpt2:1"]).plan.dp == 8


def test_cluster_from_dict_builds_and_names_bad_fields():
    from gpuadvisor.errors import UserError
    from gpuadvisor.hardware.cluster_file import cluster_from_dict

    c = cluster_from_dict({"nodes": [{"count": 2, "gpus": "8x H100 SXM", "topology": "NV18"}], "network": "ib-ndr"})
    assert c.num_devices == 16 and c.network.link_speed_gbit_per_s == 400
    with pytest.raises(UserError, match=r"nodes\[0\]\.gpus: unknown GPU 'A7000'"):
        cluster_from_dict({"nodes": [{"gpus": "8x A7000"}]}, name="x")


def test_fp8_rows_map_to_fp8_training_and_finer_recipes_are_an_approximation(runs):
    mpt = next(r for r in runs if r.source_id == "llmfoundry_mpt_benchmarks" and "fp8" in r.precision.lower())
    assert to_inputs(mpt).workload.training.precision == "fp8"
    rowwise = next(r for r in runs if "rowwise" in r.precision)
    with pytest.raises(Unsupported, match="finer than per-tensor"):
        to_inputs(rowwise, approximate=[a for a in LIMITS if a != "fp8-recipe"])
    inp = to_inputs(rowwise, approximate=list(LIMITS))
    assert inp.workload.training.precision == "fp8"
    assert any("approximation fp8-recipe" in a for a in inp.assumptions)
    # MX block scaling is the Blackwell tensor cores' own FP8: priced without an approximation there
    mx = next(r for r in runs if r.precision.startswith("MXFP8") and r.gpu == "B200" and r.gpus_per_node)
    try:
        inp = to_inputs(mx, approximate=[a for a in LIMITS if a != "fp8-recipe"])
    except Unsupported as exc:
        assert not any("per-tensor" in r for r in exc.reasons), exc.reasons
    else:
        assert inp.workload.training.precision == "fp8"


def test_lora_phase_rows_are_refused_not_priced_as_full_training(runs):
    lora = next(r for r in runs if "phase=LoRA" in r.other_opts)
    with pytest.raises(Unsupported, match="LoRA fine-tuning"):
        to_inputs(lora, approximate=list(LIMITS))


def test_nemo_llama3_recipes_overlap_tp_communication_and_qwen3_on_h100_does_not(runs):
    """Megatron-Bridge's Llama 3 recipes set CommOverlapConfig(tp_comm_overlap=True) (and the Megatron-LM Llama 3
    example follows NeMo's performance scripts); its Qwen3 235B H100 config sets it False. The rows do not say so."""
    llama = _run(runs, "megatron_bridge_perf:261")
    assert llama.model_name == "LLAMA3_70B" and "overlap" not in f"{llama.other_opts} {llama.notes}".lower()
    inp = to_inputs(llama, approximate=list(LIMITS))
    assert inp.plan.tp == 4 and inp.plan.tp_comm_overlap
    assert any("CommOverlapConfig(tp_comm_overlap=True)" in a for a in inp.assumptions)
    assert to_inputs(_run(runs, "megatron_lm:19"), approximate=list(LIMITS)).plan.tp_comm_overlap
    qwen = to_inputs(_run(runs, "megatron_bridge_perf:265"), approximate=list(LIMITS)).plan
    assert qwen.tp == 2 and qwen.sequence_parallel and not qwen.tp_comm_overlap
