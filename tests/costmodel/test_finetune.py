"""LoRA / QLoRA in the cost model: adapter counts, NF4 storage, memory against peft's measured table, compute,
traffic and the plans a fine-tuning workload gets."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.candidates import enumerate_rows
from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import FineTune, ModelSpec, Plan, TrainingSettings, Workload
from gpuadvisor.workload.catalog import lookup
from gpuadvisor.workload.finetune import (adapter_params, frozen_model_bytes, linear_weight_params,
                                          nf4_bytes_per_param)
from gpuadvisor.workload.shapes import layer_shape

LLAMA2_7B = lookup("llama-7b").spec  # Llama-2-7B shape (the preset's source says which)


def _plan(**kw) -> Plan:
    kw.setdefault("devices_per_node", kw.get("dp", 1))
    kw.setdefault("micro_batch_size", 1)
    return Plan(**kw)


def test_adapter_counts_match_what_peft_prints():
    # peft print_trainable_parameters() for Llama-2-7b-hf: r=8 on q_proj,v_proj -> 4,194,304 (peft's default
    # targets for Llama); r=16 on all seven linear layers (QLoRA's recipe) -> 39,976,960
    assert adapter_params(LLAMA2_7B, FineTune(method="lora", lora_rank=8, target_modules=("q", "v"))) == 4_194_304
    assert adapter_params(LLAMA2_7B, FineTune(method="qlora", lora_rank=16)) == 39_976_960
    assert adapter_params(LLAMA2_7B, FineTune()) == 0  # full fine-tuning has no adapters


def test_moe_adapters_count_every_expert_and_gqa_narrows_k_v():
    mix = lookup("mixtral-8x7b").spec
    sh = layer_shape(mix)
    one = FineTune(method="lora", lora_rank=1, target_modules=("down",))
    # one rank on each expert's down projection: 8 experts x (14336 + 4096) per layer
    assert adapter_params(mix, one) == mix.n_layers * 8 * (sh.expert_d_ff + sh.d_model)
    kv = FineTune(method="lora", lora_rank=1, target_modules=("k",))
    assert adapter_params(mix, kv) == mix.n_layers * (4096 + 8 * 128)  # 8 KV heads of 128


def test_nf4_storage_is_the_papers_bits_per_parameter():
    # QLoRA §3: block constants cost 32/64 = 0.5 bit/param, 0.127 bit with double quantisation
    assert nf4_bytes_per_param(False) * 8 == pytest.approx(4.5)
    assert nf4_bytes_per_param(True) * 8 == pytest.approx(4.127, abs=1e-3)
    ft = FineTune(method="qlora")
    base = frozen_model_bytes(LLAMA2_7B, ft, 2.0)
    lin = LLAMA2_7B.n_layers * linear_weight_params(layer_shape(LLAMA2_7B))
    # the linear matrices at 4.127 bits, everything else (embeddings, head, norms) 16-bit
    assert base == pytest.approx(lin * 4.127 / 8 + (LLAMA2_7B.params - lin) * 2, rel=1e-4)
    assert 3.7e9 < base < 4.0e9  # vs 13.5 GB in bf16 (embedding and head stay 16-bit: 0.52 GB of it)


def test_lora_memory_matches_peft_readme_measurement():
    """peft README, "High performance on consumer hardware": bigscience/bloomz-7b1, PEFT-LoRA with plain PyTorch,
    32 GB GPU on one A100 80GB (examples/causal_language_modeling: fp32 model, r=8 on query_key_value,
    batch 8, max_length 64)."""
    bloomz = ModelSpec(name="bloomz-7b1", n_layers=30, d_model=4096, n_heads=32, d_ff=16384, vocab_size=250880,
                       max_seq_len=0, tied_embeddings=True, mlp="gelu",
                       source="bigscience/bloomz-7b1 config.json (ALiBi: no position table)")
    assert bloomz.params == pytest.approx(7_069_016_064, rel=1e-5)
    ft = FineTune(method="lora", lora_rank=8, target_modules=("q", "k", "v"))
    wl = Workload(model=bloomz, training=TrainingSettings(seq_len=64, global_batch=8, precision="fp32"), finetune=ft)
    e = evaluate(_plan(micro_batch_size=8), Context(load_preset("dgx-a100-8x"), wl))
    # the example measures tensors (its TorchTracemalloc reads torch.cuda.max_memory_allocated): the model's memory
    # less its framework reserve (CUDA context, allocator fragmentation), which no allocation counter sees
    assert e.mem.total - e.mem.framework == pytest.approx(32e9, rel=0.10)
    full = evaluate(_plan(micro_batch_size=8), Context(load_preset("dgx-a100-8x"), wl.model_copy(
        update={"finetune": FineTune()})))
    assert full.mem.total > 100e9  # "OOM GPU" in the same table: 16 bytes/param of fp32 Adam states


@pytest.fixture(scope="module")
def a100():
    return load_preset("dgx-a100-8x")


def _ctx(cluster, method: str, **ft) -> Context:
    wl = Workload(model=LLAMA2_7B, training=TrainingSettings(seq_len=2048, global_batch=16),
                  finetune=FineTune(method=method, **ft))
    return Context(cluster, wl)


def test_frozen_base_skips_weight_gradients_and_states(a100):
    plan = _plan(dp=2, micro_batch_size=1, num_micro_batches=8)
    lora, qlora = (evaluate(plan, _ctx(a100, m)) for m in ("lora", "qlora"))
    full = evaluate(_plan(dp=8, zero_stage=3, micro_batch_size=1, num_micro_batches=2), _ctx(a100, "full"))
    assert not evaluate(plan, _ctx(a100, "full")).feasible  # 16 bytes/param of states do not fit 40 GB
    # compute of one micro-batch: 4N instead of 6N for the linears (attention's score matmuls keep their cost)
    assert 0.62 < (lora.compute_s / 8) / (full.compute_s / 2) < 0.72
    # QLoRA adds the dequantisation of every NF4 Linear in forward and backward
    assert qlora.compute_s > lora.compute_s
    # gradients/optimizer: the fp32 adapters only (40.0M x 4 and x 8 bytes)
    assert lora.mem.gradients == pytest.approx(39_976_960 * 4)
    assert lora.mem.optimizer == pytest.approx(39_976_960 * 8)
    assert qlora.mem.weights < lora.mem.weights / 3.3  # 4.13 of 16 bits for the Linears; embeddings stay 16-bit
    # DDP all-reduces the adapter gradients alone: 2 (n-1)/n x 4 bytes each
    assert lora.link_bytes["nvlink"] == pytest.approx(2 * 0.5 * 39_976_960 * 4)


def test_zero3_with_lora_gathers_the_frozen_base_but_reduces_only_adapters(a100):
    plan = _plan(dp=8, zero_stage=3, micro_batch_size=1, num_micro_batches=2)
    lora, qlora, full = (evaluate(plan, _ctx(a100, m)) for m in ("lora", "qlora", "full"))
    # per micro-batch each layer's weights are gathered twice; full training also reduce-scatters all gradients
    assert full.link_bytes["nvlink"] / lora.link_bytes["nvlink"] == pytest.approx(1.5, rel=0.05)
    assert lora.link_bytes["nvlink"] / qlora.link_bytes["nvlink"] == pytest.approx(3.3, rel=0.1)


def test_fewer_targets_store_fewer_activations(a100):
    plan = _plan(micro_batch_size=2)
    all_linear = evaluate(plan, _ctx(a100, "lora"))
    qv = evaluate(plan, _ctx(a100, "lora", target_modules=("q", "v")))
    full = evaluate(plan, _ctx(a100, "full"))
    assert all_linear.mem.activations == pytest.approx(full.mem.activations)
    # a frozen MLP keeps neither its input nor the down projection's input
    assert qv.mem.activations < 0.9 * all_linear.mem.activations


def test_adapters_are_enumerated_data_parallel_only():
    cl = load_preset("dgx-a100-8x")
    wl = Workload(model=LLAMA2_7B, training=TrainingSettings(seq_len=2048, global_batch=16),
                  finetune=FineTune(method="lora"))
    rows = enumerate_rows(cl, wl)
    assert rows and all(r[1] == 1 and r[2] == 1 for r in rows)
    assert {r[3] for r in rows} == {0, 1, 2, 3}
    full_rows = enumerate_rows(cl, wl.model_copy(update={"finetune": FineTune()}))
    assert any(r[1] > 1 for r in full_rows)


def test_a_70b_qlora_fits_two_24gb_cards_only_sharded_and_lora_does_not():
    """Answer.AI (2024-03-06, "You can now train a 70b language model at home"): FSDP + QLoRA trains a 70B model
    on two 24 GB RTX 3090/4090s, with gradient checkpointing and CPU offloading; 16-bit LoRA cannot (140 GB)."""
    def top(method: str):
        wl = api.make_workload("llama-70b", seq_len=2048, global_batch=16).model_copy(
            update={"finetune": FineTune(method=method)})
        return api.suggest(wl, preset="workstation-2x4090", top=3).ranking
    q = top("qlora")
    assert q.top, q.infeasible_reasons
    best = q.top[0].plan
    assert best.zero_stage == 3 and best.dp == 2 and best.recompute
    assert not top("lora").top
    wl7 = api.make_workload("llama-7b", seq_len=2048, global_batch=16)
    # full 7B: 108 GB of optimizer states and fp32 gradients in host RAM and 13.5 GB of 16-bit gradient buffers
    # beside them (ZeRO-3's partition; ZeRO-2's accumulation, which the micro-batches that fit need): 113 GiB, over
    # the preset's 109 usable ...
    full7 = api.suggest(wl7, preset="workstation-2x4090").ranking
    assert not full7.top and "113 GiB of host RAM" in full7.fits_nowhere
    # ... and with 144 GiB of RAM the 16-bit parameters stay on the cards (ZeRO-2 offload, 13.5 GB each) or sharded
    # over them (ZeRO-3 with the optimizer alone offloaded): never streamed
    box = load_preset("workstation-2x4090")
    box = box.model_copy(update={"nodes": [n.model_copy(update={"cpu": n.cpu.model_copy(
        update={"ram_bytes": 144 * 2 ** 30})}) for n in box.nodes]})
    full7 = api.suggest(wl7, cluster=box).ranking
    assert full7.top and full7.top[0].plan.zero_offload and not full7.top[0].plan.offloads_params
    assert {e.plan.strategy for e in full7.top} >= {"zero2-offload", "zero3-offload-optim"}
    assert not api.suggest(api.make_workload("llama-3.1-8b", seq_len=2048, global_batch=16),
                           preset="workstation-2x4090").ranking.top  # 8B: 120 GiB of them, 109 GiB usable
    lora7 = api.suggest(wl7.model_copy(update={"finetune": FineTune(method="lora")}), preset="workstation-2x4090")
    assert lora7.ranking.top and lora7.ranking.top[0].plan.zero_stage in (0, 1, 2)
